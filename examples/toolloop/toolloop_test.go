package toolloop

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/bailinghub/knowledge-sidecar/mcpserver"
	"github.com/bailinghub/knowledge-sidecar/protocol"
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

// TestNegotiateNeedsSupportedTrue: a capabilities answer is the protocol only
// with the v1 schema and supported: true; supported false (or missing) is
// "unsupported" (keep Core's inline knowledge), and 401 stays an error.
func TestNegotiateNeedsSupportedTrue(t *testing.T) {
	const v1 = `"schema_version":"bailing.agent-knowledge-capabilities.v1","protocol":"bailing.agent-knowledge.v1"`
	cases := []struct {
		name    string
		status  int
		body    string
		want    error // ErrUnsupported, or nil for "no error" / "another error"
		wantErr bool
	}{
		{"supported", 200, `{` + v1 + `,"supported":true,"enabled":true}`, nil, false},
		{"supported but not enabled", 200, `{` + v1 + `,"supported":true,"enabled":false}`, nil, false},
		{"supported false", 200, `{` + v1 + `,"supported":false,"enabled":true}`, ErrUnsupported, true},
		{"supported missing", 200, `{` + v1 + `,"enabled":true}`, ErrUnsupported, true},
		{"another protocol", 200, `{"schema_version":"other"}`, ErrUnsupported, true},
		{"404", 404, `{"error":"not_found"}`, ErrUnsupported, true},
		{"401 is an error", 401, `{"error":"unauthorized"}`, nil, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(tc.status)
				_, _ = w.Write([]byte(tc.body))
			}))
			defer srv.Close()
			err := (&Host{BaseURL: srv.URL, Route: "demo", Token: "bha_t"}).Negotiate(context.Background())
			switch {
			case !tc.wantErr && err != nil:
				t.Errorf("got %v; want nil", err)
			case tc.wantErr && err == nil:
				t.Errorf("got nil; want an error")
			case tc.want != nil && !errors.Is(err, tc.want):
				t.Errorf("got %v; want %v", err, tc.want)
			case tc.want == nil && errors.Is(err, ErrUnsupported):
				t.Errorf("got %v; want an error that is not ErrUnsupported", err)
			}
		})
	}
}

// TestCacheDropsOnScopeChange: hints and refs cached for one scope are
// dropped when the turn, the account, the authorization or the workspace
// changes, and kept while it does not.
func TestCacheDropsOnScopeChange(t *testing.T) {
	base := Scope{Turn: "run-1", Account: "alice", Authorization: AuthorizationDigest("bha_1"), Route: "orders"}
	cases := []struct {
		name    string
		next    func(Scope) Scope
		dropped bool
	}{
		{"same scope", func(s Scope) Scope { return s }, false},
		{"turn", func(s Scope) Scope { s.Turn = "run-2"; return s }, true},
		{"account", func(s Scope) Scope { s.Account = "bob"; return s }, true},
		{"authorization", func(s Scope) Scope { s.Authorization = AuthorizationDigest("bha_2"); return s }, true},
		{"route", func(s Scope) Scope { s.Route = "billing"; return s }, true},
		{"declaration", func(s Scope) Scope { s.Declaration = DeclarationDigest([]byte(`{"enabled":false}`)); return s }, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var c Cache
			c.Enter(base)
			if !c.Store(base, []Hint{{Ref: "kr1.a", Title: "Refund policy"}}) {
				t.Fatal("Store in the current scope: got false; want true")
			}
			next := tc.next(base)
			if got := c.Enter(next); got != tc.dropped {
				t.Errorf("Enter: dropped %v; want %v", got, tc.dropped)
			}
			if got, want := c.Allows(next, "kr1.a"), !tc.dropped; got != want {
				t.Errorf("Allows(kr1.a) after the change: got %v; want %v", got, want)
			}
			if got := len(c.Hints(base)); tc.dropped && got != 0 {
				t.Errorf("hints of the old scope: got %d; want 0", got)
			}
		})
	}
}

// TestDeclarationChangeDropsCache: the host negotiates again on a trigger;
// when the Core behind the route was upgraded to a native version meanwhile
// (its capabilities declare another scope revision), the next Answer drops
// the hints cached under the old declaration; an identical declaration (in
// another key order) keeps them.
func TestDeclarationChangeDropsCache(t *testing.T) {
	legacyCaps := `{"schema_version":"` + protocol.CapabilitiesSchema + `","protocol":"bailing.agent-knowledge.v1","supported":true,` +
		`"route":"demo","enabled":true,"knowledge_scope_revision":"` + strings.Repeat("a", 64) + `","delivery_modes":["inline","on_demand"],"limits":{"read_max_bytes":32768}}`
	reordered := `{"limits":{"read_max_bytes":32768},"supported":true,"schema_version":"` + protocol.CapabilitiesSchema +
		`","protocol":"bailing.agent-knowledge.v1","route":"demo","enabled":true,"knowledge_scope_revision":"` + strings.Repeat("a", 64) +
		`","delivery_modes":["inline","on_demand"],"x_extra":1}`
	nativeCaps := strings.Replace(legacyCaps, strings.Repeat("a", 64), strings.Repeat("f", 64), 1)
	var caps atomic.Value
	caps.Store(legacyCaps)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte(caps.Load().(string)))
	}))
	defer srv.Close()
	h := &Host{BaseURL: srv.URL, Route: "demo", Token: "bha_t", RunID: "run-1", Cache: &Cache{}}
	hint := []Hint{{Ref: "kr2.k.a", Title: "Refund policy"}}
	for _, step := range []struct {
		name, caps string
		dropped    bool
	}{
		{"same declaration, another key order", reordered, false},
		{"Core upgraded to a native version", nativeCaps, true},
	} {
		if err := h.Negotiate(context.Background()); err != nil {
			t.Fatal(err)
		}
		h.Cache.Enter(h.Scope())
		if !h.Cache.Store(h.Scope(), hint) {
			t.Fatal("Store in the current scope: got false; want true")
		}
		caps.Store(step.caps)
		if err := h.Negotiate(context.Background()); err != nil {
			t.Fatal(err)
		}
		if got := h.Cache.Enter(h.Scope()); got != step.dropped {
			t.Errorf("%s: dropped %v; want %v", step.name, got, step.dropped)
		}
		if got := h.Cache.Allows(h.Scope(), hint[0].Ref); got == step.dropped {
			t.Errorf("%s: cached ref allowed %v; want %v", step.name, got, !step.dropped)
		}
	}
}

// modelFunc is a Model made of a function.
type modelFunc func(conv []Message) Message

func (f modelFunc) Next(_ context.Context, conv []Message, _ []mcpserver.ToolDef) (Message, error) {
	return f(conv), nil
}

// TestLateAnswerIgnored: the host moves to another turn while a search of
// the old one is in flight; its answer is ignored (not cached, not shown to
// the model), and a ref of the old turn is never sent to read in the new one.
func TestLateAnswerIgnored(t *testing.T) {
	var reads atomic.Int64
	var h *Host
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case strings.HasSuffix(r.URL.Path, "/knowledge/search"):
			// The user moved on to another turn while this search ran.
			h.Cache.Enter(Scope{Turn: "run-2", Authorization: AuthorizationDigest("bha_t"), Route: "demo"})
			_, _ = w.Write([]byte(`{"schema_version":"bailing.agent-knowledge-search.v1","status":"ok","hints":[{"ref":"kr1.old","title":"Refund policy"}]}`))
		case strings.HasSuffix(r.URL.Path, "/knowledge/read"):
			reads.Add(1)
			_, _ = w.Write([]byte(`{"schema_version":"bailing.agent-knowledge-read.v1","title":"Refund policy","content":"x"}`))
		}
	}))
	defer srv.Close()
	h = &Host{BaseURL: srv.URL, Route: "demo", Token: "bha_t", RunID: "run-1", Cache: &Cache{}}
	m := &recorder{}
	if _, err := h.Answer(context.Background(), m, "Can I get a refund?"); err != nil {
		t.Fatal(err)
	}
	var search Message
	for _, msg := range m.conv {
		if msg.ToolCallID == "call-1" {
			search = msg
		}
	}
	if !search.IsError || !strings.HasPrefix(search.Text, "stale_answer:") {
		t.Errorf("late search answer: got %q (error %v); want a stale_answer error", search.Text, search.IsError)
	}
	if got := h.Cache.Hints(h.Cache.Current()); len(got) != 0 {
		t.Errorf("hints cached for the new turn: got %v; want none", got)
	}
	// The new turn's model tries the old turn's ref: refused, never sent.
	h.RunID = "run-2"
	readOld := modelFunc(func(conv []Message) Message {
		last := conv[len(conv)-1]
		if last.Role == "user" {
			return Message{Role: "assistant", ToolCalls: []ToolCall{{ID: "r", Name: protocol.ReadTool, Arguments: json.RawMessage(`{"ref":"kr1.old"}`)}}}
		}
		return Message{Role: "assistant", Text: last.Text}
	})
	answer, err := h.Answer(context.Background(), readOld, "again")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(answer, "knowledge_reference_invalid:") || reads.Load() != 0 {
		t.Errorf("read of an old turn's ref: got %q after %d reads; want knowledge_reference_invalid and no read sent", answer, reads.Load())
	}
}
