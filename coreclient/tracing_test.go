package coreclient_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/bailinghub/knowledge-sidecar/breaker"
	"github.com/bailinghub/knowledge-sidecar/coreclient"
	"github.com/bailinghub/knowledge-sidecar/internal/testkit"
)

// TestCoreCallSpans: a Core call under a request's span is a CLIENT span
// named by method and path template (the route as {route}), with an error
// status for a 4xx and the trace context sent to Core; a call the breaker
// refuses is an event on the request's span, not a span.
func TestCoreCallSpans(t *testing.T) {
	var seen []string
	core := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen = append(seen, r.Header.Get("Traceparent"))
		http.Error(w, `{"error":"unauthorized"}`, http.StatusUnauthorized)
	}))
	defer core.Close()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	c, err := coreclient.NewClient(coreclient.Options{BaseURL: core.URL, ServiceToken: "svc", TracerProvider: tp,
		Identity: breaker.Settings{Failures: 1}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, parent := tp.Tracer("test").Start(context.Background(), "request")
	_ = c.SystemInfo(ctx, aliceAuth, testkit.RouteKey("kb-secret-route"))
	// 401 is no breaker failure; a 503 is.
	core.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "down", http.StatusServiceUnavailable)
	})
	_, _ = c.Session(ctx, aliceAuth)
	_, err = c.Session(ctx, aliceAuth) // refused by the open breaker
	if err == nil {
		t.Fatal("want the breaker's refusal")
	}
	parent.End()
	var names []string
	for _, s := range rec.Ended() {
		names = append(names, s.Name())
		if s.Name() == "request" {
			if len(s.Events()) != 1 || s.Events()[0].Name != "breaker_open" {
				t.Errorf("request span events %v; want one breaker_open", s.Events())
			}
			continue
		}
		if s.Parent().SpanID() != parent.SpanContext().SpanID() || s.Status().Code != codes.Error {
			t.Errorf("span %s: parent %s status %v; want a child with error status", s.Name(), s.Parent().SpanID(), s.Status())
		}
	}
	want := "GET /agent-api/v1/workspaces/{route}/system-info,GET /agent-auth/v1/session,request"
	if got := strings.Join(names, ","); got != want {
		t.Errorf("spans %s; want %s", got, want)
	}
	if len(seen) == 0 || !strings.HasPrefix(seen[0], "00-"+parent.SpanContext().TraceID().String()+"-") {
		t.Errorf("Core got traceparent %q; want the request's trace", seen)
	}
}
