package toolloop

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/bailinghub/knowledge-sidecar/mcpserver"
)

// recorder is ScriptedModel keeping the last conversation it was shown.
type recorder struct {
	ScriptedModel
	conv []Message
}

func (r *recorder) Next(ctx context.Context, conv []Message, tools []mcpserver.ToolDef) (Message, error) {
	r.conv = append([]Message(nil), conv...)
	return r.ScriptedModel.Next(ctx, conv, tools)
}

// fakeAPI answers search with status and hints hints, and read with a page.
func fakeAPI(t *testing.T, status string, hints int) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json; charset=utf-8")
		switch {
		case strings.HasSuffix(r.URL.Path, "/knowledge/search"):
			hs := make([]map[string]any, 0, hints)
			for i := range hints {
				hs = append(hs, map[string]any{"ref": fmt.Sprintf("kr1.ref-%d", i), "title": "Refund policy", "summary": "s",
					"revision": strings.Repeat("a", 64), "score": 0.5, "expires_at": "2026-01-01T00:05:00Z"})
			}
			_ = json.NewEncoder(w).Encode(map[string]any{"schema_version": "bailing.agent-knowledge-search.v1", "route": "demo",
				"knowledge_scope_revision": strings.Repeat("b", 64), "trust": "reference_only", "status": status, "hints": hs, "truncated": false})
		case strings.HasSuffix(r.URL.Path, "/knowledge/read"):
			_ = json.NewEncoder(w).Encode(map[string]any{"schema_version": "bailing.agent-knowledge-read.v1", "title": "Refund policy",
				"content": "Refunds are granted within 14 days."})
		default:
			w.WriteHeader(http.StatusNotFound)
		}
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// TestSearchStatusReachesTheModel: the search result the model sees carries
// the sentence for its status, and the example's answer never tells a failed
// search as "the knowledge has nothing".
func TestSearchStatusReachesTheModel(t *testing.T) {
	cases := []struct {
		name, status string
		hints        int
		guidance     string
		answer       string // a substring of the final answer
	}{
		{"ok with hints", "ok", 1, "", `According to "Refund policy"`},
		{"ok empty", "ok", 0, mcpserver.GuidanceOKEmpty, "passed its relevance threshold"},
		{"partial with a hint", "partial", 1, mcpserver.GuidancePartial, "search was incomplete"},
		{"partial empty", "partial", 0, mcpserver.GuidancePartial, "could not consult the workspace knowledge (search status partial)"},
		{"unavailable", "unavailable", 0, mcpserver.GuidanceUnavailable, "could not consult the workspace knowledge (search status unavailable)"},
		{"disabled", "disabled", 0, mcpserver.GuidanceDisabled, "could not consult the workspace knowledge (search status disabled)"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := &Host{BaseURL: fakeAPI(t, tc.status, tc.hints), Route: "demo", Token: "bha_t"}
			m := &recorder{}
			answer, err := h.Answer(context.Background(), m, "Can I get a refund?")
			if err != nil {
				t.Fatal(err)
			}
			var search *Message
			for i := range m.conv {
				if m.conv[i].ToolCallID == "call-1" {
					search = &m.conv[i]
				}
			}
			if search == nil || search.IsError {
				t.Fatalf("no search result in the conversation: %+v", m.conv)
			}
			jsonPart, sentence, _ := strings.Cut(search.Text, "\n\n")
			if !json.Valid([]byte(jsonPart)) || sentence != tc.guidance {
				t.Errorf("search result %q; want the JSON, then %q", search.Text, tc.guidance)
			}
			if !strings.Contains(answer, tc.answer) {
				t.Errorf("answer %q; want it to contain %q", answer, tc.answer)
			}
			if tc.status != "ok" && (strings.Contains(answer, "nothing relevant") || strings.Contains(answer, "has nothing")) {
				t.Errorf("answer %q tells a %s search as absence of knowledge", answer, tc.status)
			}
		})
	}
}

// TestSearchErrorReachesTheModel: a 503 reaches the model as an error with
// the MCP server's advice, and the answer says knowledge was not consulted.
func TestSearchErrorReachesTheModel(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = w.Write([]byte(`{"error":"knowledge_unavailable","message":"Knowledge is temporarily unavailable."}`))
	}))
	defer srv.Close()
	m := &recorder{}
	answer, err := (&Host{BaseURL: srv.URL, Route: "demo", Token: "bha_t"}).Answer(context.Background(), m, "refund?")
	if err != nil {
		t.Fatal(err)
	}
	last := m.conv[len(m.conv)-1]
	if !last.IsError || !strings.HasPrefix(last.Text, "knowledge_unavailable: Knowledge is temporarily unavailable. ") ||
		!strings.Contains(last.Text, mcpserver.Advice("knowledge_unavailable", "")) {
		t.Errorf("tool result %q; want the code, the message and the advice", last.Text)
	}
	if !strings.Contains(answer, "could not consult") {
		t.Errorf("answer %q; want it to say knowledge was not consulted", answer)
	}
}
