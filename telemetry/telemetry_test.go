package telemetry

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"
)

// clearEnv unsets the OTEL_* variables the tests set, whatever the shell has.
func clearEnv(t *testing.T) {
	for _, k := range []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_PROTOCOL",
		"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_HEADERS", "OTEL_SERVICE_NAME", "OTEL_RESOURCE_ATTRIBUTES",
		"OTEL_TRACES_SAMPLER", "OTEL_TRACES_SAMPLER_ARG", "OTEL_SDK_DISABLED", "OTEL_BSP_MAX_QUEUE_SIZE", "OTEL_EXPORTER_OTLP_TIMEOUT"} {
		t.Setenv(k, "")
	}
}

type collector struct {
	mu   sync.Mutex
	reqs []*collectortrace.ExportTraceServiceRequest
	hdrs []http.Header
}

func (c *collector) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	var req collectortrace.ExportTraceServiceRequest
	if r.URL.Path != "/v1/traces" || r.Header.Get("Content-Type") != "application/x-protobuf" || proto.Unmarshal(body, &req) != nil {
		http.Error(w, "bad export", http.StatusBadRequest)
		return
	}
	c.mu.Lock()
	c.reqs = append(c.reqs, &req)
	c.hdrs = append(c.hdrs, r.Header.Clone())
	c.mu.Unlock()
	w.Header().Set("Content-Type", "application/x-protobuf")
	out, _ := proto.Marshal(&collectortrace.ExportTraceServiceResponse{})
	_, _ = w.Write(out)
}

// TestExportOTLPHTTP: spans go over OTLP/HTTP protobuf to the endpoint of
// OTEL_EXPORTER_OTLP_ENDPOINT with OTEL_EXPORTER_OTLP_HEADERS, service.name
// knowledge-sidecar by default, flushed by Shutdown and counted.
func TestExportOTLPHTTP(t *testing.T) {
	clearEnv(t)
	col := &collector{}
	srv := httptest.NewServer(col)
	defer srv.Close()
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", srv.URL)
	t.Setenv("OTEL_EXPORTER_OTLP_HEADERS", "x-tenant=blue")
	m := NewMetrics(nil)
	tr, err := Setup(context.Background(), Options{Version: "1.2.3", Metrics: m})
	if err != nil || tr == nil {
		t.Fatalf("setup: %v %v", tr, err)
	}
	_, span := Tracer(tr.Provider).Start(context.Background(), "POST /kb/search", trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(attribute.String("http.request.method", "POST")))
	span.End()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := tr.Shutdown(ctx); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	col.mu.Lock()
	defer col.mu.Unlock()
	if len(col.reqs) != 1 {
		t.Fatalf("collector got %d exports; want 1", len(col.reqs))
	}
	if got := col.hdrs[0].Get("X-Tenant"); got != "blue" {
		t.Errorf("OTEL_EXPORTER_OTLP_HEADERS not sent: %q", got)
	}
	rs := col.reqs[0].GetResourceSpans()
	if len(rs) != 1 || len(rs[0].GetScopeSpans()) != 1 || len(rs[0].GetScopeSpans()[0].GetSpans()) != 1 {
		t.Fatalf("export shape: %v", col.reqs[0])
	}
	res := map[string]string{}
	for _, kv := range rs[0].GetResource().GetAttributes() {
		res[kv.GetKey()] = kv.GetValue().GetStringValue()
	}
	if res["service.name"] != ServiceName || res["service.version"] != "1.2.3" {
		t.Errorf("resource %v; want service.name %s, version 1.2.3", res, ServiceName)
	}
	ss := rs[0].GetScopeSpans()[0]
	sp := ss.GetSpans()[0]
	if ss.GetScope().GetName() != ScopeName || sp.GetName() != "POST /kb/search" || sp.GetKind().String() != "SPAN_KIND_CLIENT" {
		t.Errorf("span: scope %q name %q kind %s", ss.GetScope().GetName(), sp.GetName(), sp.GetKind())
	}
	if got := testutil.ToFloat64(m.Exported); got != 1 {
		t.Errorf("exported counter %v; want 1", got)
	}
}

// TestServiceNameFromEnv: OTEL_SERVICE_NAME wins over the default.
func TestServiceNameFromEnv(t *testing.T) {
	clearEnv(t)
	t.Setenv("OTEL_SERVICE_NAME", "ks-eu-1")
	rec := &memExporter{}
	tr, err := Setup(context.Background(), Options{Exporter: rec})
	if err != nil {
		t.Fatal(err)
	}
	_, span := Tracer(tr.Provider).Start(context.Background(), "x")
	span.End()
	_ = tr.Shutdown(context.Background())
	if len(rec.names) != 1 || rec.service != "ks-eu-1" {
		t.Errorf("got spans %v service %q; want 1 span of ks-eu-1", rec.names, rec.service)
	}
}

type memExporter struct {
	mu      sync.Mutex
	names   []string
	service string
}

func (e *memExporter) ExportSpans(_ context.Context, spans []sdktrace.ReadOnlySpan) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, s := range spans {
		e.names = append(e.names, s.Name())
		for _, kv := range s.Resource().Attributes() {
			if kv.Key == "service.name" {
				e.service = kv.Value.AsString()
			}
		}
	}
	return nil
}

func (e *memExporter) Shutdown(context.Context) error { return nil }

// TestSampler: OTEL_TRACES_SAMPLER is honoured (always_off records
// nothing); unset, a root span is sampled and a parent's decision is kept.
func TestSampler(t *testing.T) {
	clearEnv(t)
	t.Setenv("OTEL_TRACES_SAMPLER", "always_off")
	tr, err := Setup(context.Background(), Options{Exporter: &memExporter{}})
	if err != nil {
		t.Fatal(err)
	}
	if _, span := Tracer(tr.Provider).Start(context.Background(), "x"); span.IsRecording() {
		t.Error("always_off: span records")
	}
	_ = tr.Shutdown(context.Background())

	t.Setenv("OTEL_TRACES_SAMPLER", "")
	tr, err = Setup(context.Background(), Options{Exporter: &memExporter{}})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Shutdown(context.Background())
	if _, span := Tracer(tr.Provider).Start(context.Background(), "x"); !span.IsRecording() {
		t.Error("default sampler: a root span does not record")
	}
	tid, _ := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
	sid, _ := trace.SpanIDFromHex("00f067aa0ba902b7")
	parent := trace.ContextWithRemoteSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, Remote: true}))
	if _, span := Tracer(tr.Provider).Start(parent, "x"); span.IsRecording() {
		t.Error("default sampler: the child of an unsampled parent records")
	}
}

// TestUnreachableCollector: with no collector, ending spans never waits and
// every span is counted as dropped, by the export failure or the full queue.
func TestUnreachableCollector(t *testing.T) {
	clearEnv(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://"+addr)
	t.Setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "200")
	m := NewMetrics(nil)
	tr, err := Setup(context.Background(), Options{Metrics: m, QueueSize: 4})
	if err != nil {
		t.Fatal(err)
	}
	for range 20 {
		_, span := Tracer(tr.Provider).Start(context.Background(), "x")
		span.End()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	_ = tr.Shutdown(ctx)
	if got := testutil.ToFloat64(m.Dropped); got != 20 {
		t.Errorf("dropped %v; want 20", got)
	}
	if got := testutil.ToFloat64(m.Exported); got != 0 {
		t.Errorf("exported %v; want 0", got)
	}
}

// TestDisabledAndBadProtocol: OTEL_SDK_DISABLED=true turns tracing off; an
// unknown protocol is an error naming the variable.
func TestDisabledAndBadProtocol(t *testing.T) {
	clearEnv(t)
	t.Setenv("OTEL_SDK_DISABLED", "true")
	if tr, err := Setup(context.Background(), Options{}); tr != nil || err != nil {
		t.Errorf("OTEL_SDK_DISABLED: got %v %v; want nil, nil", tr, err)
	}
	t.Setenv("OTEL_SDK_DISABLED", "")
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json")
	if _, err := Setup(context.Background(), Options{}); err == nil || !strings.Contains(err.Error(), "OTEL_EXPORTER_OTLP_PROTOCOL") {
		t.Errorf("http/json: got %v; want an error naming OTEL_EXPORTER_OTLP_PROTOCOL", err)
	}
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
	tr, err := Setup(context.Background(), Options{})
	if err != nil || tr == nil {
		t.Fatalf("grpc: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = tr.Shutdown(ctx)
}

// TestLogHandler: a record logged with a sampled span's context gets
// trace_id and span_id; one without, nothing.
func TestLogHandler(t *testing.T) {
	clearEnv(t)
	tr, err := Setup(context.Background(), Options{Exporter: &memExporter{}})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Shutdown(context.Background())
	var buf bytes.Buffer
	log := slog.New(LogHandler(slog.NewJSONHandler(&buf, nil)))
	ctx, span := Tracer(tr.Provider).Start(context.Background(), "x")
	log.InfoContext(ctx, "request")
	log.InfoContext(context.Background(), "other")
	span.End()
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	want := `"trace_id":"` + span.SpanContext().TraceID().String() + `","span_id":"` + span.SpanContext().SpanID().String() + `"`
	if len(lines) != 2 || !strings.Contains(lines[0], want) || strings.Contains(lines[1], "trace_id") {
		t.Errorf("log lines:\n%s\nwant the first with %s", buf.String(), want)
	}
}
