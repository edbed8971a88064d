package mcpserver

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/bailinghub/knowledge-sidecar/hostclient"
	"github.com/bailinghub/knowledge-sidecar/protocol"
)

// searchAnswer is a protocol search answer with status and n hints.
func searchAnswer(status string, n int) string {
	hints := make([]map[string]any, 0, n)
	for i := range n {
		hints = append(hints, map[string]any{"ref": fmt.Sprintf("kr1.ref-%d", i), "title": fmt.Sprintf("Doc %d", i), "summary": "s",
			"revision": strings.Repeat("a", 64), "score": 0.5, "expires_at": "2026-01-01T00:05:00Z"})
	}
	b, _ := json.Marshal(map[string]any{"schema_version": "bailing.agent-knowledge-search.v1", "route": "demo",
		"knowledge_scope_revision": strings.Repeat("b", 64), "trust": "reference_only", "status": status, "hints": hints, "truncated": false})
	return string(b)
}

// session connects the SDK's client to the server over in-memory
// transports; the knowledge service answers search with body.
func session(t *testing.T, search string) *mcp.ClientSession {
	t.Helper()
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json; charset=utf-8")
		switch {
		case strings.HasSuffix(r.URL.Path, "/knowledge/search"):
			_, _ = w.Write([]byte(search))
		case strings.HasSuffix(r.URL.Path, "/knowledge/read"):
			_, _ = w.Write([]byte(`{"schema_version":"bailing.agent-knowledge-read.v1","content":"x"}`))
		default:
			w.WriteHeader(http.StatusNotFound)
		}
	}))
	t.Cleanup(api.Close)
	c, err := hostclient.New(api.URL, "demo", "bha_t", nil)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := New(Options{Backend: c, Version: "test"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	st, ct := mcp.NewInMemoryTransports()
	ss, err := srv.Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test-host", Version: "1"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cs.Close(); _ = ss.Wait() })
	return cs
}

// TestSearchGuidance: a search result carries, beside its JSON, a sentence
// saying what its status means; only ok with no hints says nothing matched,
// and no other status reads as "there is nothing".
func TestSearchGuidance(t *testing.T) {
	cases := []struct {
		name   string
		status string
		hints  int
		want   string // the second text item; "" for none
	}{
		{"ok with hints", "ok", 2, ""},
		{"ok empty", "ok", 0, GuidanceOKEmpty},
		{"partial with a hint", "partial", 1, GuidancePartial},
		{"partial empty", "partial", 0, GuidancePartial},
		{"unavailable", "unavailable", 0, GuidanceUnavailable},
		{"disabled", "disabled", 0, GuidanceDisabled},
		{"a status from a later version", "degraded", 0, guidanceUnknown},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			body := searchAnswer(tc.status, tc.hints)
			cs := session(t, body)
			res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: protocol.SearchTool, Arguments: map[string]any{"query": "refund"}})
			if err != nil {
				t.Fatal(err)
			}
			if res.IsError || len(res.Content) == 0 {
				t.Fatalf("isError %v with %d content items; want a result", res.IsError, len(res.Content))
			}
			var first, structured any
			raw, _ := json.Marshal(res.StructuredContent)
			if json.Unmarshal([]byte(res.Content[0].(*mcp.TextContent).Text), &first) != nil || json.Unmarshal(raw, &structured) != nil {
				t.Fatalf("the first text item is not the JSON answer: %v", res.Content[0])
			}
			if a, b := fmt.Sprint(first), fmt.Sprint(structured); a != b {
				t.Errorf("text %s differs from structured content %s", a, b)
			}
			var second string
			switch len(res.Content) {
			case 1:
			case 2:
				second = res.Content[1].(*mcp.TextContent).Text
			default:
				t.Fatalf("%d content items; want the JSON and at most one sentence", len(res.Content))
			}
			if second != tc.want {
				t.Errorf("guidance %q; want %q", second, tc.want)
			}
		})
	}
	// The sentences themselves: every status but ok denies "nothing".
	for status, g := range map[string]string{"partial": GuidancePartial, "unavailable": GuidanceUnavailable, "disabled": GuidanceDisabled, "unknown": guidanceUnknown} {
		if !strings.Contains(g, "does not mean there is no relevant information") && !strings.Contains(g, "is not evidence that there is no relevant information") {
			t.Errorf("%s: %q does not say it is not evidence of absence", status, g)
		}
		if strings.Contains(strings.ToLower(g), "no hit above") {
			t.Errorf("%s: %q reads like the ok sentence", status, g)
		}
	}
	if !strings.Contains(GuidanceOKEmpty, "No hit above the workspace's threshold") {
		t.Errorf("ok empty: %q; want it to say no hit passed the threshold", GuidanceOKEmpty)
	}
}

// TestReadHasNoGuidance: only search results carry the sentence.
func TestReadHasNoGuidance(t *testing.T) {
	cs := session(t, searchAnswer("unavailable", 0))
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: protocol.ReadTool, Arguments: map[string]any{"ref": "kr1.x"}})
	if err != nil {
		t.Fatal(err)
	}
	if res.IsError || len(res.Content) != 1 {
		t.Errorf("read: isError %v, %d content items; want the JSON only", res.IsError, len(res.Content))
	}
}

// TestHostsDocQuotesGuidance: docs/hosts.md shows the sentences as served.
func TestHostsDocQuotesGuidance(t *testing.T) {
	raw, err := os.ReadFile("../docs/hosts.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range []string{GuidanceOKEmpty, GuidancePartial, GuidanceUnavailable, GuidanceDisabled} {
		if !strings.Contains(string(raw), g) {
			t.Errorf("docs/hosts.md does not quote %q (mcpserver/guidance.go)", g)
		}
	}
}
