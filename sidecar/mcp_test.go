package sidecar

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/bailinghub/knowledge-sidecar/config"
	"github.com/bailinghub/knowledge-sidecar/corefacts"
	"github.com/bailinghub/knowledge-sidecar/hostclient"
	"github.com/bailinghub/knowledge-sidecar/protocol"
	"github.com/bailinghub/knowledge-sidecar/proxy"
	"github.com/bailinghub/knowledge-sidecar/telemetry"
)

// fakeNative answers every call with ans or err and records what it got.
type fakeNative struct {
	ans            *hostclient.Response
	err            error
	authz, route   string
	endpoint, body string
}

func (f *fakeNative) call(_ context.Context, call *proxy.MCPCall, endpoint string, body []byte) (*hostclient.Response, error) {
	f.authz, f.route, f.endpoint, f.body = call.Authorization, call.Route.String(), endpoint, string(body)
	return f.ans, f.err
}

// nativeAnswer is Core's answer with status, Retry-After and body.
func nativeAnswer(status int, retryAfter, body string) *hostclient.Response {
	h := http.Header{}
	if retryAfter != "" {
		h.Set("Retry-After", retryAfter)
	}
	return &hostclient.Response{Status: status, Header: h, Body: []byte(body)}
}

// TestMCPNativeAnswers: a tool's request after a flip goes to the native
// Core as the MCP request's caller, and Core's answer comes back as the
// tools read it: a 200's body as is; a protocol refusal with its code,
// message and Retry-After; a non-protocol answer or no answer as
// knowledge_unavailable, naming nothing of Core (its host, its body).
func TestMCPNativeAnswers(t *testing.T) {
	route, _ := corefacts.ParseRouteKey("kb-multi")
	ctx := proxy.WithMCPCall(context.Background(), &proxy.MCPCall{Authorization: "Bearer tok", Route: route, Native: true})
	for _, tc := range []struct {
		name       string
		ans        *hostclient.Response
		err        error
		wantBody   string
		wantCode   protocol.ErrorCode
		wantMsg    string
		wantRetry  int
		wantStatus int
	}{
		{name: "answer", ans: nativeAnswer(200, "", `{"hints":[]}`), wantBody: `{"hints":[]}`},
		{name: "refusal", ans: nativeAnswer(429, "7", `{"error":"rate_limited","message":"Slow down."}`),
			wantCode: protocol.CodeRateLimited, wantMsg: "Slow down.", wantRetry: 7, wantStatus: 429},
		{name: "no protocol body", ans: nativeAnswer(502, "", "<html>core.internal:8443 bad gateway</html>"),
			wantCode: protocol.CodeUnavailable, wantStatus: 503},
		{name: "no answer", err: errors.New("knowledge service unreachable: POST core.internal:8443: connection refused"),
			wantCode: protocol.CodeUnavailable, wantStatus: 503},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fn := &fakeNative{ans: tc.ans, err: tc.err}
			m := &mcpBackend{native: fn.call, log: slog.New(slog.DiscardHandler)}
			out, err := m.Search(ctx, []byte(`{"query":"q"}`))
			if fn.authz != "Bearer tok" || fn.route != "kb-multi" || fn.endpoint != "search" || fn.body != `{"query":"q"}` {
				t.Errorf("Core got %q %q %q %q; want the caller's request", fn.authz, fn.route, fn.endpoint, fn.body)
			}
			if tc.wantCode == "" {
				if err != nil || string(out) != tc.wantBody {
					t.Fatalf("got %q, %v; want %s", out, err, tc.wantBody)
				}
				return
			}
			var r interface{ Refusal() protocol.Refusal }
			if !errors.As(err, &r) {
				t.Fatalf("got %q, %v; want a refusal", out, err)
			}
			got := r.Refusal()
			if got.Code != tc.wantCode || got.Status != tc.wantStatus || got.RetryAfter != tc.wantRetry ||
				(tc.wantMsg != "" && got.Message != tc.wantMsg) {
				t.Errorf("refusal %+v; want %s %d, retry %d, %q", got, tc.wantCode, tc.wantStatus, tc.wantRetry, tc.wantMsg)
			}
			if strings.Contains(got.Message, "core.internal") {
				t.Errorf("the refusal names Core: %q", got.Message)
			}
		})
	}
}

// TestNativeMCPCarriesTraceContext: a tool's request to a native Core goes
// to the route's knowledge endpoint with the caller's bearer and the MCP
// request's trace context (traceparent), so Core's spans join the trace;
// with tracing on it is a CLIENT span of its own (SPEC §9: every Core call),
// and Core's traceparent names that span.
func TestNativeMCPCarriesTraceContext(t *testing.T) {
	var got http.Header
	var path string
	core := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got, path = r.Header.Clone(), r.URL.Path
		_, _ = w.Write([]byte(`{"hints":[]}`))
	}))
	defer core.Close()
	cfg := config.Defaults()
	cfg.Core.URL = core.URL
	sc := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6, 0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e, 0x47, 0x36},
		SpanID:  trace.SpanID{0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7}, TraceFlags: trace.FlagsSampled,
	})
	route, _ := corefacts.ParseRouteKey("kb-multi")
	ask := func(t *testing.T, native nativeCaller) {
		t.Helper()
		if native == nil {
			t.Fatal("no native client for an http core.url")
		}
		ctx := trace.ContextWithSpanContext(context.Background(), sc)
		res, err := native(ctx, &proxy.MCPCall{Authorization: "Bearer tok", Route: route}, nativeSearch, []byte(`{"query":"q"}`))
		if err != nil || res.Status != 200 {
			t.Fatalf("got %v, %v; want Core's 200", res, err)
		}
		if got.Get("Authorization") != "Bearer tok" || path != "/agent-api/v1/workspaces/kb-multi/knowledge/search" {
			t.Errorf("Core got %s with %q; want the route's search with the caller's bearer", path, got.Get("Authorization"))
		}
	}
	t.Run("tracing off", func(t *testing.T) {
		ask(t, newNativeMCP(cfg, nil, nil))
		if want := "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"; got.Get("Traceparent") != want {
			t.Errorf("traceparent %q; want %q", got.Get("Traceparent"), want)
		}
	})
	t.Run("tracing on", func(t *testing.T) {
		rec := tracetest.NewSpanRecorder()
		tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
		ask(t, newNativeMCP(cfg, nil, telemetry.Tracer(tp)))
		spans := rec.Ended()
		if len(spans) != 1 {
			t.Fatalf("%d spans ended; want the call's CLIENT span", len(spans))
		}
		s := spans[0]
		if s.SpanKind() != trace.SpanKindClient || s.Parent().SpanID() != sc.SpanID() || s.Name() != "POST /agent-api/v1/workspaces/{route}/knowledge/search" {
			t.Errorf("span %q kind %v parent %v; want the CLIENT span POST …/{route}/knowledge/search under the MCP request's", s.Name(), s.SpanKind(), s.Parent().SpanID())
		}
		attrs := map[string]string{}
		for _, a := range s.Attributes() {
			attrs[string(a.Key)] = a.Value.String()
		}
		if attrs["knowledge_sidecar.peer"] != "core" || attrs["http.response.status_code"] != "200" {
			t.Errorf("attributes %v; want peer core and Core's status 200", attrs)
		}
		want := "00-4bf92f3577b34da6a3ce929d0e0e4736-" + s.SpanContext().SpanID().String() + "-01"
		if got.Get("Traceparent") != want {
			t.Errorf("traceparent %q; want %q (the CLIENT span)", got.Get("Traceparent"), want)
		}
	})
}
