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
	return connect(t, Options{Backend: c})
}

// TestSearchGuidance: a search result starts with a sentence saying what its
// status means, the same sentence as the structured content's note; only ok
// with no hints says nothing matched, and no other status reads as "there
// is nothing".
func TestSearchGuidance(t *testing.T) {
	read := "; read one with knowledge_read and its ref (refs expire in 5 minutes)."
	cases := []struct {
		name   string
		status string
		hints  int
		want   string // the note
	}{
		{"ok with hints", "ok", 2, "2 hints" + read},
		{"ok with a hint", "ok", 1, "1 hint" + read},
		{"ok empty", "ok", 0, GuidanceOKEmpty},
		{"partial with a hint", "partial", 1, GuidancePartial + " 1 hint" + read},
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
			if res.IsError || len(res.Content) != 1 {
				t.Fatalf("isError %v with %d content items; want a result with one", res.IsError, len(res.Content))
			}
			text := res.Content[0].(*mcp.TextContent).Text
			if first, _, _ := strings.Cut(text, "\n"); first != tc.want {
				t.Errorf("first line %q; want %q", first, tc.want)
			}
			var got, want map[string]any
			raw, _ := json.Marshal(res.StructuredContent)
			_ = json.Unmarshal(raw, &got)
			_ = json.Unmarshal([]byte(body), &want)
			if got["note"] != tc.want {
				t.Errorf("note %q; want %q", got["note"], tc.want)
			}
			delete(got, "note")
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("structured content %v; want the answer %v and the note", got, want)
			}
			for i := range tc.hints {
				if !strings.Contains(text, fmt.Sprintf("Doc %d\n   s\n   ref: kr1.ref-%d", i, i)) {
					t.Errorf("text %q does not show hint %d's title, summary and ref", text, i)
				}
			}
			if strings.Contains(text, "expires_at") || strings.Contains(text, strings.Repeat("a", 64)) {
				t.Errorf("text %q shows the raw JSON", text)
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
