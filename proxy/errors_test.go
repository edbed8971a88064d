package proxy

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/bailinghub/knowledge-sidecar/knowledge"
	"github.com/bailinghub/knowledge-sidecar/protocol"
)

// TestWriteErr: every kind of error becomes one answer, from one place:
// status, code, a plain message, and the headers the kind needs.
func TestWriteErr(t *testing.T) {
	s := &Server{log: discardLogger()}
	cases := []struct {
		name    string
		err     error
		status  int
		code    string
		headers map[string]string
	}{
		{"edge", errNonCanonicalPath, 400, "invalid_request", map[string]string{"Connection": "close"}},
		{"405 names the method", errMethodNotAllowed("POST"), 405, "method_not_allowed", map[string]string{"Allow": "POST"}},
		{"upstream timeout", errUpstreamTimeout, 504, "upstream_timeout", nil},
		{"upstream", errUpstream, 502, "upstream_unavailable", nil},
		{"knowledge error", &knowledge.Error{Status: 404, Code: protocol.CodeRunNotFound, Message: "The run was not found."}, 404, "run_not_found", nil},
		{"429 with Retry-After", &knowledge.Error{Status: 429, Code: protocol.CodeRateLimited, Message: "Too many.", RetryAfter: 1500 * time.Millisecond}, 429, "rate_limited", map[string]string{"Retry-After": "2"}},
		{"echo's own", echo.ErrNotFound, 502, "upstream_unavailable", nil},
		{"anything else: knowledge unavailable", errors.New("dial tcp 10.0.0.7:6379: connection refused"), 503, "knowledge_unavailable", nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			s.writeErr(rec, httptest.NewRequest("GET", "/x", nil), tc.err)
			var eb protocol.Refusal
			if err := json.Unmarshal(rec.Body.Bytes(), &eb); err != nil {
				t.Fatalf("body %q: %v", rec.Body, err)
			}
			if rec.Code != tc.status || string(eb.Code) != tc.code || eb.Message == "" {
				t.Errorf("got %d %s; want %d %s with a message", rec.Code, rec.Body, tc.status, tc.code)
			}
			if strings.Contains(rec.Body.String(), "10.0.0.7") {
				t.Errorf("the answer leaks the cause: %s", rec.Body)
			}
			h := rec.Header()
			if h.Get("Cache-Control") != "no-store" || h.Get("Content-Type") != "application/json; charset=utf-8" {
				t.Errorf("headers: %v", h)
			}
			for k, v := range tc.headers {
				if got := h.Get(k); got != v {
					t.Errorf("%s: got %q; want %q", k, got, v)
				}
			}
		})
	}
}

func TestWriteErrBodyFailureWins(t *testing.T) {
	s := &Server{log: discardLogger()}
	st := &reqState{}
	st.bodyTimeout.Store(true)
	r := httptest.NewRequest("POST", "/x", strings.NewReader("{"))
	r = r.WithContext(contextWithState(r, st))
	rec := httptest.NewRecorder()
	s.writeErr(rec, r, errBodyUnreadable)
	if rec.Code != http.StatusRequestTimeout || rec.Header().Get("Connection") != "close" {
		t.Errorf("got %d %v; want 408 with Connection: close", rec.Code, rec.Header())
	}
}

func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

func contextWithState(r *http.Request, st *reqState) context.Context {
	return context.WithValue(r.Context(), ctxKey{}, st)
}
