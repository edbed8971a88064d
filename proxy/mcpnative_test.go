package proxy

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/bailinghub/knowledge-sidecar/corefacts"
	"github.com/bailinghub/knowledge-sidecar/protocol"
)

// fakeNative answers every call with ans or err and records what it got.
type fakeNative struct {
	ans            NativeAnswer
	err            error
	authz, route   string
	endpoint, body string
}

func (f *fakeNative) Call(_ context.Context, authz string, route corefacts.RouteKey, endpoint string, body []byte) (NativeAnswer, error) {
	f.authz, f.route, f.endpoint, f.body = authz, route.String(), endpoint, string(body)
	return f.ans, f.err
}

// TestMCPNativeAnswers: a tool's request after a flip goes to the native
// Core as the MCP request's caller, and Core's answer comes back as the
// tools read it: a 200's body as is; a protocol refusal with its code,
// message and Retry-After; a non-protocol answer or no answer as
// knowledge_unavailable, naming nothing of Core (its host, its body).
func TestMCPNativeAnswers(t *testing.T) {
	route, _ := corefacts.ParseRouteKey("kb-multi")
	call := &mcpCall{authorization: "Bearer tok", route: route, native: true}
	ctx := context.WithValue(context.Background(), mcpCallKey{}, call)
	for _, tc := range []struct {
		name       string
		ans        NativeAnswer
		err        error
		wantBody   string
		wantCode   protocol.ErrorCode
		wantMsg    string
		wantRetry  int
		wantStatus int
	}{
		{name: "answer", ans: NativeAnswer{Status: 200, Body: []byte(`{"hints":[]}`)}, wantBody: `{"hints":[]}`},
		{name: "refusal", ans: NativeAnswer{Status: 429, RetryAfter: "7",
			Body: []byte(`{"error":"rate_limited","message":"Slow down."}`)},
			wantCode: protocol.CodeRateLimited, wantMsg: "Slow down.", wantRetry: 7, wantStatus: 429},
		{name: "no protocol body", ans: NativeAnswer{Status: 502, Body: []byte("<html>core.internal:8443 bad gateway</html>")},
			wantCode: protocol.CodeUnavailable, wantStatus: 503},
		{name: "no answer", err: errors.New("knowledge service unreachable: POST core.internal:8443: connection refused"),
			wantCode: protocol.CodeUnavailable, wantStatus: 503},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fn := &fakeNative{ans: tc.ans, err: tc.err}
			s := &Server{log: slog.New(slog.DiscardHandler), feat: &features{mcpOpts: MCPOptions{Native: fn}}}
			out, err := mcpKnowledge{s}.Search(ctx, []byte(`{"query":"q"}`))
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
