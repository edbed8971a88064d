package test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/bailinghub/knowledge-sidecar/config"
	"github.com/bailinghub/knowledge-sidecar/hostclient/hostclienttest"
	"github.com/bailinghub/knowledge-sidecar/internal/fakecore"
	"github.com/bailinghub/knowledge-sidecar/internal/testkit"
	"github.com/bailinghub/knowledge-sidecar/internal/testkit/testdb"
	"github.com/bailinghub/knowledge-sidecar/sidecar"
)

// traced is a sidecar built by sidecar.Build (as serve builds it) in front
// of the world, with every span recorded.
type traced struct {
	URL   string
	rec   *tracetest.SpanRecorder
	ended chan sdktrace.ReadOnlySpan // every SERVER span, when it ends
	app   *sidecar.App
	logs  *testkit.Buffer
	redis string
}

func (tc *traced) WS(route string) string { return tc.URL + "/agent-api/v1/workspaces/" + route }

func startTraced(t *testing.T, w *World, sampler sdktrace.Sampler) *traced {
	t.Helper()
	return startTracedWith(t, w, sampler, nil)
}

// startTracedWith is startTraced with tweak applied to the configuration
// before the sidecar is built.
func startTracedWith(t *testing.T, w *World, sampler sdktrace.Sampler, tweak func(*config.Config)) *traced {
	t.Helper()
	rec := tracetest.NewSpanRecorder()
	ended := make(chan sdktrace.ReadOnlySpan, 256)
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec), sdktrace.WithSpanProcessor(serverEnds{ended}), sdktrace.WithSampler(sampler))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	cfg := w.Config()
	cfg.Ledger.Backend = "redis"
	cfg.Ledger.RedisURL = redisTestURL()
	cfg.Log.Access = true
	cfg.Tracing.Enabled = true
	// The tests call from 127.0.0.1 as a trusted ingress would: its
	// traceparent counts (tracing.trust_inbound: trusted_proxies).
	cfg.Proxy.TrustedProxies = []string{"127.0.0.1/32"}
	if tweak != nil {
		tweak(&cfg)
	}
	logs := &testkit.Buffer{}
	log := slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	app, url := serveBuilt(t, cfg, sidecar.Deps{Logger: log, TracerProvider: tp})
	return &traced{URL: url, rec: rec, ended: ended, app: app, logs: logs, redis: cfg.Ledger.RedisURL}
}

// serverEnds passes on every SERVER span as it ends: the edge ends it after
// the metrics and the access log, which may be after the client has the
// whole answer, so a test waits for it before looking at any of them.
type serverEnds struct{ ch chan sdktrace.ReadOnlySpan }

func (p serverEnds) OnStart(context.Context, sdktrace.ReadWriteSpan) {}
func (p serverEnds) OnEnd(s sdktrace.ReadOnlySpan) {
	if s.SpanKind() == trace.SpanKindServer {
		p.ch <- s
	}
}
func (serverEnds) Shutdown(context.Context) error   { return nil }
func (serverEnds) ForceFlush(context.Context) error { return nil }

// awaitServer waits for the next SERVER span to end.
func (tc *traced) awaitServer(t *testing.T) sdktrace.ReadOnlySpan {
	t.Helper()
	return waitFor(t, tc.ended, "the request's server span")
}

// callH is Call with extra request headers.
func callH(t *testing.T, method, url, token string, body []byte, h map[string]string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range h {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	_, _ = b.ReadFrom(resp.Body)
	return resp.StatusCode, b.Bytes()
}

// spansOf are the ended spans of one trace.
func spansOf(rec *tracetest.SpanRecorder, id trace.TraceID) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		if s.SpanContext().TraceID() == id {
			out = append(out, s)
		}
	}
	return out
}

func serverSpan(t *testing.T, rec *tracetest.SpanRecorder, name string) sdktrace.ReadOnlySpan {
	t.Helper()
	var found sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		if s.SpanKind() == trace.SpanKindServer && s.Name() == name {
			found = s
		}
	}
	if found == nil {
		t.Fatalf("no server span %q among %s", name, spanNames(rec.Ended()))
	}
	return found
}

func spanNames(ss []sdktrace.ReadOnlySpan) string {
	var n []string
	for _, s := range ss {
		n = append(n, fmt.Sprintf("%s(%s)", s.Name(), s.SpanKind()))
	}
	return strings.Join(n, ", ")
}

const (
	searchSpan = "POST /agent-api/v1/workspaces/{route}/knowledge/search"
	readSpan   = "POST /agent-api/v1/workspaces/{route}/knowledge/read"
	turnsSpan  = "POST /agent-api/v1/workspaces/{route}/turns"
)

// TestTraceSearchTree: a search on a route of two enabled KBs is one SERVER
// span with CLIENT children for identity, the catalog and each /kb/search;
// Core gets the trace context of the call's own span.
func TestTraceSearchTree(t *testing.T) {
	w := NewWorld(t, WorldOptions{Core: fakecore.Options{SystemInfo: true}})
	tc := startTraced(t, w, sdktrace.ParentBased(sdktrace.AlwaysSample()))
	const parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	code, body := callH(t, "POST", tc.WS(testdb.RouteMulti)+"/knowledge/search", w.TokenA,
		[]byte(`{"query":"refunds accepted within days of delivery","limit":3}`), map[string]string{"traceparent": parent})
	if code != 200 {
		t.Fatalf("search: %d %s", code, body)
	}
	tc.awaitServer(t)
	srv := serverSpan(t, tc.rec, searchSpan)
	if got := srv.SpanContext().TraceID().String(); got != "4bf92f3577b34da6a3ce929d0e0e4736" {
		t.Fatalf("server span trace %s: the caller's traceparent was not honoured", got)
	}
	if got := srv.Parent().SpanID().String(); got != "00f067aa0ba902b7" || !srv.Parent().IsRemote() {
		t.Errorf("server span parent %s (remote %v); want the caller's span", got, srv.Parent().IsRemote())
	}
	attrs := map[string]string{}
	for _, a := range srv.Attributes() {
		attrs[string(a.Key)] = a.Value.String()
	}
	if attrs["http.route"] != "/agent-api/v1/workspaces/{route}/knowledge/search" || attrs["http.response.status_code"] != "200" || attrs["http.request.method"] != "POST" {
		t.Errorf("server span attributes %v", attrs)
	}
	counts := map[string]int{}
	byID := map[trace.SpanID]sdktrace.ReadOnlySpan{}
	for _, s := range spansOf(tc.rec, srv.SpanContext().TraceID()) {
		byID[s.SpanContext().SpanID()] = s
	}
	for _, s := range byID {
		if s.SpanKind() != trace.SpanKindClient {
			continue
		}
		// Every client span descends from the server span.
		p := s
		for p.Parent().SpanID() != srv.SpanContext().SpanID() {
			next, ok := byID[p.Parent().SpanID()]
			if !ok {
				t.Fatalf("client span %s is not under the server span", s.Name())
			}
			p = next
		}
		switch {
		case s.Name() == "GET /agent-auth/v1/session":
			counts["identity"]++
		case strings.HasPrefix(s.Name(), "catalog "):
			counts["catalog"]++
			if !hasAttr(s, "db.system.name", "mysql") {
				t.Errorf("catalog span %s lacks db.system.name mysql", s.Name())
			}
		case s.Name() == "POST /kb/search":
			counts["kb_search"]++
		}
	}
	if counts["identity"] < 1 || counts["catalog"] < 1 || counts["kb_search"] != 2 {
		t.Errorf("client spans %v among %s; want identity ≥ 1, catalog ≥ 1, kb_search = 2", counts, spanNames(rec(tc)))
	}
	// Propagation: Core saw this trace, from one of the sidecar's spans.
	last, ok := w.Core.LastRequest("/kb/search")
	if !ok {
		t.Fatal("Core got no /kb/search")
	}
	tp := last.Header.Get("Traceparent")
	if !strings.HasPrefix(tp, "00-4bf92f3577b34da6a3ce929d0e0e4736-") || strings.Contains(tp, "00f067aa0ba902b7") {
		t.Errorf("Core's traceparent %q; want the trace with a sidecar span as parent", tp)
	}
	if id, ok := w.Core.LastRequest("/agent-auth/v1/session"); !ok || !strings.HasPrefix(id.Header.Get("Traceparent"), "00-4bf92f3577b34da6a3ce929d0e0e4736-") {
		t.Errorf("identity call carried no traceparent of the trace")
	}
	// Both request-duration histograms link to the trace by an exemplar.
	mfs, err := tc.app.Server.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	found := map[string]bool{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			for _, b := range m.GetHistogram().GetBucket() {
				for _, l := range b.GetExemplar().GetLabel() {
					if l.GetName() == "trace_id" && l.GetValue() == "4bf92f3577b34da6a3ce929d0e0e4736" {
						found[mf.GetName()] = true
					}
				}
			}
		}
	}
	for _, name := range []string{"knowledge_sidecar_http_request_duration_seconds", "knowledge_sidecar_core_request_duration_seconds"} {
		if !found[name] {
			t.Errorf("%s has no exemplar of the trace", name)
		}
	}
	// The access log line of the sampled request names the trace.
	if !strings.Contains(strings.Join(tc.logs.Lines(), "\n"), `"trace_id":"4bf92f3577b34da6a3ce929d0e0e4736"`) {
		t.Errorf("no log line carries the trace id:\n%s", strings.Join(tc.logs.Lines(), "\n"))
	}
}

func rec(tc *traced) []sdktrace.ReadOnlySpan { return tc.rec.Ended() }

func hasAttr(s sdktrace.ReadOnlySpan, k, v string) bool {
	for _, a := range s.Attributes() {
		if string(a.Key) == k && a.Value.String() == v {
			return true
		}
	}
	return false
}

// TestTraceUntrustedCallerCannotSample: as serve builds it, with
// proxy.trusted_proxies not naming the caller and a sampler that samples no
// new trace, the caller's sampled traceparent records no span (SPEC §9),
// and Core gets the sidecar's own unsampled trace, without the caller's
// tracestate; tracing.trust_inbound: all makes the same request join the
// caller's trace.
func TestTraceUntrustedCallerCannotSample(t *testing.T) {
	w := NewWorld(t, WorldOptions{Core: fakecore.Options{SystemInfo: true}})
	const parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	for _, trust := range []string{"trusted_proxies", "all"} {
		t.Run(trust, func(t *testing.T) {
			tc := startTracedWith(t, w, sdktrace.ParentBased(sdktrace.NeverSample()), func(c *config.Config) {
				c.Proxy.TrustedProxies = []string{"10.0.0.0/8"}
				c.Tracing.TrustInbound = trust
			})
			for range 20 {
				callH(t, "GET", tc.URL+"/agent-auth/v1/session", w.TokenA, nil, map[string]string{"traceparent": parent, "tracestate": "vendor=caller"})
			}
			last, ok := w.Core.LastRequest("/agent-auth/v1/session")
			if !ok {
				t.Fatal("Core got nothing")
			}
			tp, ts := last.Header.Get("Traceparent"), last.Header.Get("Tracestate")
			joined := strings.HasPrefix(tp, "00-0af7651916cd43dd8448eb211c80319c-")
			if trust == "all" {
				if !joined || ts != "vendor=caller" {
					t.Errorf("Core's trace context %q, %q; want the caller's trace and tracestate", tp, ts)
				}
				tc.awaitServer(t)
				return
			}
			if joined || !strings.HasSuffix(tp, "-00") || ts != "" {
				t.Errorf("Core's trace context %q, %q; want the sidecar's own unsampled trace, no tracestate", tp, ts)
			}
			if n := len(tc.rec.Ended()); n != 0 {
				t.Errorf("spans %s; want none", spanNames(tc.rec.Ended()))
			}
		})
	}
}

// TestTracePassthroughUnsampled: with the caller's trace not sampled, no
// span is recorded, yet Core still gets a traceparent of the same trace
// (not sampled), so its logs can be joined. A pass-through SERVER span is
// named by the method only.
func TestTracePassthroughUnsampled(t *testing.T) {
	w := NewWorld(t, WorldOptions{Core: fakecore.Options{SystemInfo: true}})
	tc := startTraced(t, w, sdktrace.ParentBased(sdktrace.AlwaysSample()))
	const parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00"
	callH(t, "GET", tc.URL+"/agent-auth/v1/session?token=secret-query-token", w.TokenA, nil, map[string]string{"traceparent": parent})
	last, ok := w.Core.LastRequest("/agent-auth/v1/session")
	if !ok {
		t.Fatal("Core got nothing")
	}
	tp := last.Header.Get("Traceparent")
	if !strings.HasPrefix(tp, "00-0af7651916cd43dd8448eb211c80319c-") || !strings.HasSuffix(tp, "-00") {
		t.Errorf("Core's traceparent %q; want the caller's trace, not sampled", tp)
	}
	// Sampled now (no parent): the pass-through span is named "GET".
	callH(t, "GET", tc.URL+"/agent-auth/v1/session?token=secret-query-token", w.TokenA, nil, nil)
	s := tc.awaitServer(t)
	if n := len(tc.rec.Ended()); n != 2 || s.Name() != "GET" {
		t.Errorf("spans %s; want only the sampled request's GET server and client spans", spanNames(tc.rec.Ended()))
	}
	for _, a := range s.Attributes() {
		if strings.Contains(a.Value.String(), "session") || strings.Contains(a.Value.String(), "secret-query-token") {
			t.Errorf("pass-through span attribute %s=%s carries the path or query", a.Key, a.Value.String())
		}
	}
	var client int
	for _, c := range spansOf(tc.rec, s.SpanContext().TraceID()) {
		if c.SpanKind() == trace.SpanKindClient && c.Parent().SpanID() == s.SpanContext().SpanID() {
			client++
		}
	}
	if client != 1 {
		t.Errorf("pass-through: %d client spans under the server span; want 1 (the upstream request)", client)
	}
}

// TestTraceLedgerFailOpen: a turn without knowledge_delivery that goes to
// Core unbound because the ledger cannot be reached is marked on its server
// span with a ledger_fail_open event naming the reason.
func TestTraceLedgerFailOpen(t *testing.T) {
	w := NewWorld(t, WorldOptions{})
	refused := strings.TrimPrefix(hostclienttest.RefusedURL(t), "http://")
	tc := startTracedWith(t, w, sdktrace.AlwaysSample(), func(cfg *config.Config) {
		cfg.Ledger.RedisURL = "redis://" + refused + "/0"
	})
	code, body := callH(t, "POST", tc.WS(testdb.RouteMulti)+"/turns", w.TokenA, newTurn("trace-fail-open").body(""), nil)
	if code != 200 {
		t.Fatalf("field-less turn with the ledger down: %d %s; want Core's answer", code, body)
	}
	srv := tc.awaitServer(t)
	if srv.Name() != turnsSpan {
		t.Fatalf("server span %q; want %q", srv.Name(), turnsSpan)
	}
	var reasons []string
	for _, e := range srv.Events() {
		if e.Name != "ledger_fail_open" {
			continue
		}
		for _, a := range e.Attributes {
			if a.Key == "knowledge_sidecar.reason" {
				reasons = append(reasons, a.Value.AsString())
			}
		}
	}
	if len(reasons) != 1 || reasons[0] != "ledger" {
		t.Errorf("ledger_fail_open events with reasons %v; want exactly one, reason ledger", reasons)
	}
}
