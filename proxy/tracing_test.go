package proxy

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

func TestServerSpanName(t *testing.T) {
	for _, c := range []struct{ method, path, want string }{
		{"POST", pathSearch, "POST /agent-api/v1/workspaces/{route}/knowledge/search"},
		{"GET", pathCapabilities, "GET /agent-api/v1/workspaces/{route}/knowledge/capabilities"},
		{"POST", pathTurns, "POST /agent-api/v1/workspaces/{route}/turns"},
		{"GET", pathTurns, "GET"}, // another method on a turns path passes through
		{"GET", "/*", "GET"},
		{"BREW", "/*", "HTTP"},
	} {
		if got, _ := serverSpanName(c.method, c.path); got != c.want {
			t.Errorf("%s %s: got %q; want %q", c.method, c.path, got, c.want)
		}
	}
}

// tracedServer is a pass-through edge in front of up with tp.
func tracedServer(t testing.TB, up string, tp trace.TracerProvider) *Server {
	u, _ := url.Parse(up)
	s, err := New(Options{CoreURL: u, TracerProvider: tp})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestExemplarsOpenMetrics: a sampled request's duration observation
// carries its trace id as an exemplar, served when /metrics is asked for
// OpenMetrics; Core got the client span's traceparent.
func TestExemplarsOpenMetrics(t *testing.T) {
	var seen string
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen = r.Header.Get("Traceparent")
		_, _ = io.WriteString(w, "ok")
	}))
	defer up.Close()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	s := tracedServer(t, up.URL, tp)
	rw := httptest.NewRecorder()
	s.Handler().ServeHTTP(rw, httptest.NewRequest("GET", "/anything?token=x", nil))
	if rw.Code != 200 {
		t.Fatalf("got %d", rw.Code)
	}
	spans := rec.Ended()
	if len(spans) != 2 {
		t.Fatalf("spans %d; want server and client", len(spans))
	}
	var server, client sdktrace.ReadOnlySpan
	for _, sp := range spans {
		if sp.SpanKind() == trace.SpanKindServer {
			server = sp
		} else {
			client = sp
		}
	}
	if server == nil || client == nil || client.Parent().SpanID() != server.SpanContext().SpanID() {
		t.Fatalf("want a client span under the server span: %v", spans)
	}
	if want := "00-" + client.SpanContext().TraceID().String() + "-" + client.SpanContext().SpanID().String() + "-01"; seen != want {
		t.Errorf("Core got traceparent %q; want %q", seen, want)
	}
	req := httptest.NewRequest("GET", "/metrics", nil)
	req.Header.Set("Accept", "application/openmetrics-text; version=1.0.0")
	mw := httptest.NewRecorder()
	s.AdminHandler().ServeHTTP(mw, req)
	if !strings.HasPrefix(mw.Header().Get("Content-Type"), "application/openmetrics-text") {
		t.Fatalf("/metrics content type %q; want OpenMetrics", mw.Header().Get("Content-Type"))
	}
	want := `trace_id="` + server.SpanContext().TraceID().String() + `"`
	if !strings.Contains(mw.Body.String(), want) {
		t.Errorf("no exemplar %s on the duration histogram", want)
	}
}

// BenchmarkPassthroughTracing: the pass-through request of
// BenchmarkPassthrough with tracing off, on but nothing sampled (the
// caller's traceparent says not sampled), and on with every request
// sampled into a batch processor whose exporter discards.
func BenchmarkPassthroughTracing(b *testing.B) {
	w := newBenchWorld(b)
	never := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.NeverSample())))
	always := sdktrace.NewTracerProvider(sdktrace.WithBatcher(discardExporter{}))
	b.Cleanup(func() { _ = never.Shutdown(context.Background()); _ = always.Shutdown(context.Background()) })
	const n = 1 << 10
	for _, c := range []struct {
		name string
		s    *Server
	}{{"off", tracedServer(b, w.upstream.URL, nil)}, {"unsampled", tracedServer(b, w.upstream.URL, never)}, {"sampled", tracedServer(b, w.upstream.URL, always)}} {
		b.Run(fmt.Sprintf("%s/%dKiB", c.name, n>>10), func(b *testing.B) {
			h := c.s.Handler()
			rw := &benchWriter{h: http.Header{}}
			b.ReportAllocs()
			for b.Loop() {
				req := httptest.NewRequest(http.MethodGet, "/json/"+strconv.Itoa(n), nil)
				req.RemoteAddr = "127.0.0.1:40000"
				req.Header.Set("Traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00")
				if c.name == "sampled" {
					req.Header.Del("Traceparent")
				}
				rw.reset()
				h.ServeHTTP(rw, req)
				if rw.code != http.StatusOK || rw.n != n {
					b.Fatalf("got %d with %d bytes", rw.code, rw.n)
				}
			}
		})
	}
}

type discardExporter struct{}

func (discardExporter) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discardExporter) Shutdown(context.Context) error                             { return nil }

// TestTracingOffUntouched: with tracing off the edge neither reads nor
// writes trace headers: a caller's traceparent reaches Core as sent, and
// none is added to a request without one.
func TestTracingOffUntouched(t *testing.T) {
	var seen []string
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen = append(seen, r.Header.Get("Traceparent"))
	}))
	defer up.Close()
	s := tracedServer(t, up.URL, nil)
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	req := httptest.NewRequest("GET", "/x", nil)
	req.Header.Set("Traceparent", tp)
	s.Handler().ServeHTTP(httptest.NewRecorder(), req)
	s.Handler().ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/x", nil))
	if len(seen) != 2 || seen[0] != tp || seen[1] != "" {
		t.Errorf("Core saw traceparents %q; want the caller's, then none", seen)
	}
}
