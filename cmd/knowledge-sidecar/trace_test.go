package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"
)

// TestServeTracingFlushedAtShutdown: `serve` with tracing.enabled exports
// to the collector of OTEL_EXPORTER_OTLP_ENDPOINT under OTEL_SERVICE_NAME;
// with a batch delay far longer than the test, the request's span reaches
// the collector only because SIGTERM flushes the queue.
func TestServeTracingFlushedAtShutdown(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	var mu sync.Mutex
	var names []string
	var service string
	col := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var req collectortrace.ExportTraceServiceRequest
		if err := proto.Unmarshal(body, &req); err != nil {
			http.Error(w, "bad", http.StatusBadRequest)
			return
		}
		mu.Lock()
		for _, rs := range req.GetResourceSpans() {
			for _, kv := range rs.GetResource().GetAttributes() {
				if kv.GetKey() == "service.name" {
					service = kv.GetValue().GetStringValue()
				}
			}
			for _, ss := range rs.GetScopeSpans() {
				for _, s := range ss.GetSpans() {
					names = append(names, s.GetName())
				}
			}
		}
		mu.Unlock()
		out, _ := proto.Marshal(&collectortrace.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(out)
	}))
	defer col.Close()
	w := newServeWorld(t, "serve-trace", "tracing:\n  enabled: true\n")
	w.env = append(w.env, "OTEL_EXPORTER_OTLP_ENDPOINT="+col.URL, "OTEL_SERVICE_NAME=ks-test",
		"OTEL_BSP_SCHEDULE_DELAY=600000", "OTEL_TRACES_SAMPLER=always_on", "OTEL_SDK_DISABLED=")
	p := w.start(t)
	res, err := http.Get(p.url + "/agent-auth/v1/session")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	mu.Lock()
	before := len(names)
	mu.Unlock()
	p.terminate(t)
	mu.Lock()
	defer mu.Unlock()
	if before != 0 {
		t.Fatalf("spans exported before shutdown (%v): the test cannot tell the flush", names)
	}
	if !strings.Contains(strings.Join(names, ","), "GET") || service != "ks-test" {
		t.Errorf("collector got spans %v of service %q; want the request's GET span of ks-test\n%s", names, service, p.logs())
	}
}
