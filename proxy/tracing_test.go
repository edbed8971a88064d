package proxy

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
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
	req.Host = "localhost:9090"
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

// TestTracingOffUntouched: with tracing off the edge writes no trace
// headers of its own: a trusted peer's traceparent and tracestate reach Core
// as sent, and none is added to a request without one. An untrusted peer's
// are dropped with its client-address headers (SPEC §9: trusted like
// X-Forwarded-*), and a tracestate whose traceparent is invalid is dropped
// whoever sent it (W3C Trace Context §3.3).
func TestTracingOffUntouched(t *testing.T) {
	const (
		tp      = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
		state   = "vendor=opaque"
		trusted = "10.1.2.3:5000"
		other   = "192.0.2.1:5000"
	)
	for _, c := range []struct {
		name               string
		trust              TraceTrust
		remote             string
		parent             []string
		wantParent, wantTS string
	}{
		{"trusted proxy", TraceTrustProxies, trusted, []string{tp}, tp, state},
		{"trusted proxy, no trace context", TraceTrustProxies, trusted, nil, "", ""},
		{"untrusted peer", TraceTrustProxies, other, []string{tp}, "", ""},
		{"untrusted peer, trust_inbound all", TraceTrustAll, other, []string{tp}, tp, state},
		{"trusted proxy, trust_inbound none", TraceTrustNone, trusted, []string{tp}, "", ""},
		{"invalid traceparent", TraceTrustProxies, trusted, []string{"00-00000000000000000000000000000000-00f067aa0ba902b7-01"}, "00-00000000000000000000000000000000-00f067aa0ba902b7-01", ""},
		{"garbled traceparent", TraceTrustAll, other, []string{"not a traceparent"}, "not a traceparent", ""},
		{"no traceparent", TraceTrustProxies, trusted, nil, "", ""},
		{"two traceparents", TraceTrustProxies, trusted, []string{tp, tp}, tp, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			seen := make(chan http.Header, 1)
			up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { seen <- r.Header.Clone() }))
			defer up.Close()
			s := tracedServerWith(t, up.URL, nil, func(o *Options) { o.TraceTrustInbound = c.trust })
			req := httptest.NewRequest("GET", "/x", nil)
			req.RemoteAddr = c.remote
			if c.parent != nil {
				req.Header["Traceparent"] = c.parent
			}
			if c.name != "trusted proxy, no trace context" {
				req.Header.Set("Tracestate", state)
			}
			s.Handler().ServeHTTP(httptest.NewRecorder(), req)
			h := <-seen
			if got := h.Get("Traceparent"); got != c.wantParent {
				t.Errorf("Core's traceparent: got %q; want %q", got, c.wantParent)
			}
			if got := h.Get("Tracestate"); got != c.wantTS {
				t.Errorf("Core's tracestate: got %q; want %q", got, c.wantTS)
			}
		})
	}
}

// tracedServerWith is tracedServer trusting 10.0.0.0/8, with tweak applied
// to its options.
func tracedServerWith(t testing.TB, up string, tp trace.TracerProvider, tweak func(*Options)) *Server {
	u, _ := url.Parse(up)
	o := Options{CoreURL: u, TracerProvider: tp, TrustedProxies: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}}
	tweak(&o)
	s, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestInboundTraceTrust: with a sampler that samples no new trace, a
// caller's sampled traceparent makes spans only when the peer is trusted
// for it (SPEC §9): an untrusted peer's flag cannot override the operator's
// sampler, and Core gets the sidecar's own trace context, not the caller's
// nor its tracestate. A trusted proxy's request joins the caller's trace.
func TestInboundTraceTrust(t *testing.T) {
	const (
		inTrace = "4bf92f3577b34da6a3ce929d0e0e4736"
		inbound = "00-" + inTrace + "-00f067aa0ba902b7-01"
		n       = 50
	)
	for _, c := range []struct {
		name      string
		trust     TraceTrust
		remote    string
		wantSpans int // per request
	}{
		{"untrusted peer", TraceTrustProxies, "192.0.2.1:5000", 0},
		{"untrusted IPv6 peer", TraceTrustProxies, "[2001:db8::1]:5000", 0},
		{"trusted proxy", TraceTrustProxies, "10.9.8.7:5000", 2},
		{"trusted proxy, trust_inbound none", TraceTrustNone, "10.9.8.7:5000", 0},
		{"untrusted peer, trust_inbound all", TraceTrustAll, "192.0.2.1:5000", 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			seen := make(chan http.Header, n)
			up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { seen <- r.Header.Clone() }))
			defer up.Close()
			exp := tracetest.NewInMemoryExporter()
			tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp), sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.NeverSample())))
			defer func() { _ = tp.Shutdown(context.Background()) }()
			s := tracedServerWith(t, up.URL, tp, func(o *Options) { o.TraceTrustInbound = c.trust })
			for range n {
				req := httptest.NewRequest("GET", "/x", nil)
				req.RemoteAddr = c.remote
				req.Header.Set("Traceparent", inbound)
				req.Header.Set("Tracestate", "vendor=caller")
				s.Handler().ServeHTTP(httptest.NewRecorder(), req)
				h := <-seen
				parent := h.Get("Traceparent")
				joined := strings.HasPrefix(parent, "00-"+inTrace+"-")
				if c.wantSpans > 0 {
					if !joined || !strings.HasSuffix(parent, "-01") || h.Get("Tracestate") != "vendor=caller" {
						t.Fatalf("Core's trace context: got %q, %q; want the caller's trace, sampled, with its tracestate", parent, h.Get("Tracestate"))
					}
					continue
				}
				if joined || !strings.HasSuffix(parent, "-00") || len(parent) != 55 {
					t.Fatalf("Core's traceparent: got %q; want the sidecar's own, unsampled trace", parent)
				}
				if v := h.Values("Tracestate"); len(v) != 0 {
					t.Fatalf("Core's tracestate: got %q; want none", v)
				}
			}
			spans := exp.GetSpans()
			if len(spans) != c.wantSpans*n {
				t.Fatalf("exported spans: got %d; want %d", len(spans), c.wantSpans*n)
			}
			for _, sp := range spans {
				if sp.SpanContext.TraceID().String() != inTrace {
					t.Fatalf("span %q in trace %s; want the caller's", sp.Name, sp.SpanContext.TraceID())
				}
			}
		})
	}
}

// TestUntrustedTraceLinked: an untrusted peer's request that the operator's
// sampler records starts its own trace, with the caller's context as a link.
func TestUntrustedTraceLinked(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer up.Close()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	s := tracedServerWith(t, up.URL, tp, func(*Options) {})
	req := httptest.NewRequest("GET", "/x", nil)
	req.RemoteAddr = "192.0.2.1:5000"
	req.Header.Set("Traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00")
	s.Handler().ServeHTTP(httptest.NewRecorder(), req)
	var server *tracetest.SpanStub
	for i, sp := range exp.GetSpans() {
		if sp.SpanKind == trace.SpanKindServer {
			server = &exp.GetSpans()[i]
		}
	}
	if server == nil {
		t.Fatal("no server span: the caller's unsampled flag decided")
	}
	if server.Parent.IsValid() || server.SpanContext.TraceID().String() == "4bf92f3577b34da6a3ce929d0e0e4736" {
		t.Errorf("server span: parent %v, trace %s; want a new root", server.Parent, server.SpanContext.TraceID())
	}
	if len(server.Links) != 1 || server.Links[0].SpanContext.TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" {
		t.Errorf("links: got %v; want the caller's context", server.Links)
	}
}

// TestOrphanTracestateTracingOn: with tracing on, Core gets the sidecar's
// traceparent and only the tracestate of the sidecar's context: a trusted
// proxy's tracestate that came with an invalid traceparent, or that does
// not parse, is not forwarded next to it (SPEC §9, W3C Trace Context §3.3).
func TestOrphanTracestateTracingOn(t *testing.T) {
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00"
	for _, c := range []struct {
		name            string
		parent          []string
		state, wantTS   string
		wantCallerTrace bool
	}{
		{"valid", []string{tp}, "vendor=caller", "vendor=caller", true},
		{"invalid traceparent", []string{"00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01"}, "vendor=caller", "", false},
		{"no traceparent", nil, "vendor=caller", "", false},
		{"two traceparents", []string{tp, tp}, "vendor=caller", "", false},
		{"tracestate that does not parse", []string{tp}, "not a tracestate", "", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			seen := make(chan http.Header, 1)
			up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { seen <- r.Header.Clone() }))
			defer up.Close()
			never := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.NeverSample())))
			s := tracedServerWith(t, up.URL, never, func(*Options) {})
			req := httptest.NewRequest("GET", "/x", nil)
			req.RemoteAddr = "10.0.0.9:5000"
			if c.parent != nil {
				req.Header["Traceparent"] = c.parent
			}
			req.Header.Set("Tracestate", c.state)
			s.Handler().ServeHTTP(httptest.NewRecorder(), req)
			h := <-seen
			if got := h.Values("Tracestate"); strings.Join(got, ",") != c.wantTS {
				t.Errorf("Core's tracestate: got %q; want %q", got, c.wantTS)
			}
			got := h.Values("Traceparent")
			if len(got) != 1 || len(got[0]) != 55 || strings.HasPrefix(got[0], "00-4bf92f3577b34da6a3ce929d0e0e4736-") != c.wantCallerTrace {
				t.Errorf("Core's traceparent: got %q; want one of the sidecar's span (caller's trace: %v)", got, c.wantCallerTrace)
			}
		})
	}
}
