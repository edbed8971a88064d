package proxy

import (
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
)

// recordingTransport records each request's method and path, then sends it.
type recordingTransport struct {
	mu   sync.Mutex
	seen []string
}

func (t *recordingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	t.mu.Lock()
	t.seen = append(t.seen, r.Method+" "+r.URL.Path)
	t.mu.Unlock()
	return http.DefaultTransport.RoundTrip(r)
}

// TestMCPWithoutHandlerIsCores: features built with no MCP handler leave
// the remote MCP endpoint to Core — a POST and another method on a
// rolled-out workspace pass through rather than being answered (or
// refused with 405) by the edge.
func TestMCPWithoutHandlerIsCores(t *testing.T) {
	rt := &recordingTransport{}
	w := newBenchWorldWith(t, rt)
	w.server.feat.mcp = nil // features built with no MCP handler
	h := w.server.Handler()
	path := "/agent-api/v1/workspaces/" + benchRouteOn + "/knowledge/mcp"
	for _, method := range []string{http.MethodPost, http.MethodGet} {
		r := httptest.NewRequest(method, path, strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"ping"}`))
		r.Header.Set("Authorization", "Bearer "+w.token)
		r.Header.Set("Content-Type", "application/json")
		h.ServeHTTP(httptest.NewRecorder(), r)
		rt.mu.Lock()
		passed := slices.Contains(rt.seen, method+" "+path)
		rt.mu.Unlock()
		if !passed {
			t.Errorf("%s %s did not reach Core; Core saw %q", method, path, rt.seen)
		}
	}
}
