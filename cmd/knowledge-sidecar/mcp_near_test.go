package main

import (
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/bailinghub/knowledge-sidecar/mcpserver"
)

// validOutput checks a result's structured content against the output
// schema its tool declares, as a host does.
func validOutput(t *testing.T, profile, tool string, res *mcp.CallToolResult) map[string]any {
	t.Helper()
	if res.IsError {
		t.Fatalf("%s: isError %s", tool, text(res))
	}
	if len(res.Content) != 1 {
		t.Errorf("%s: %d content items; want 1", tool, len(res.Content))
	}
	for _, def := range mcpserver.ToolsFor(profile) {
		if def.Name != tool {
			continue
		}
		var s jsonschema.Schema
		if err := json.Unmarshal(def.OutputSchema, &s); err != nil {
			t.Fatal(err)
		}
		rs, err := s.Resolve(nil)
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := json.Marshal(res.StructuredContent)
		var v map[string]any
		if err := json.Unmarshal(raw, &v); err != nil {
			t.Fatalf("%s: structured content %s: %v", tool, raw, err)
		}
		if err := rs.Validate(v); err != nil {
			t.Errorf("%s: structured content does not match the output schema: %v", tool, err)
		}
		return v
	}
	t.Fatalf("profile %q has no tool %s", profile, tool)
	return nil
}

// TestMCPReadNear: near finds a passage about 74 KB into the demo's
// operations handbook (140 KB, longer than a read chain) by paging through
// the real chain of the real sidecar, and returns its page trimmed so the
// passage starts within the first 2 KiB, a window of at most 8 KiB, with
// the cursor that continues exactly where the window ends; a miss past the
// chain budget is short and offers no further page.
func TestMCPReadNear(t *testing.T) {
	d := startSamples(t, nil)
	p := startMCP(t, "--url", d.base, "--route", demoRoute, "--token-file", writeTokenFile(t, d.token))
	whole := d.content["Operations handbook"]
	// In the document the heading and the first step are apart ("\n\n");
	// a summary has white space collapsed.
	passage := "Section 75: procedure 75 Step 1 of procedure 75 describes how the support team"
	at := strings.Index(whole, "## Section 75:") + len("## ")
	if at < 72<<10 || !strings.HasPrefix(strings.Join(strings.Fields(whole[at:at+200]), " "), passage) {
		t.Fatalf("precondition: the passage is not where the test expects it (%d)", at)
	}
	var out struct {
		Hints []mcpHint `json:"hints"`
	}
	structured(t, p.call(t, "knowledge_search", map[string]any{"query": "operations handbook procedure", "limit": 1}), &out)
	if len(out.Hints) != 1 || out.Hints[0].Title != "Operations handbook" {
		t.Fatalf("search: %+v; want the operations handbook", out.Hints)
	}
	ref := out.Hints[0].Ref

	res := p.call(t, "knowledge_read", map[string]any{"ref": ref, "near": passage})
	v := validOutput(t, mcpserver.ProfileKnowledge, "knowledge_read", res)
	content, _ := v["content"].(string)
	if i := strings.Index(content, "Section 75: procedure 75"); i < 0 || i >= 2048 {
		t.Errorf("structured content: the passage starts at %d; want within the first 2048 bytes", i)
	}
	start := strings.Index(whole, content)
	if start < 0 || start > at {
		t.Fatalf("structured content (%d bytes) is not the document's text before and after the passage", len(content))
	}
	page := text(res)
	if _, after, ok := strings.Cut(page, "\n\n"); !ok || !strings.Contains(after[:min(len(after), 2048)], "Section 75: procedure 75") {
		t.Errorf("text: the passage is not within the first 2 KiB of the page text:\n%.300s", page)
	}
	note, _ := v["note"].(string)
	if !strings.Contains(page, "bytes of the document before this point left out]") || !strings.Contains(page, note) || len(content) > mcpserver.NearWindowBytes {
		t.Errorf("note %q, %d bytes; want a window of at most %d bytes, the text saying what was left out and holding the note", note, len(content), mcpserver.NearWindowBytes)
	}
	// The next call the note spells out continues right after the page.
	cursor, _ := v["next_cursor"].(string)
	if cursor == "" || !strings.Contains(note, `{"ref":"`+ref+`","cursor":"`+cursor+`"}`) {
		t.Fatalf("note %q; want the next call with the ref and the cursor", note)
	}
	next := validOutput(t, mcpserver.ProfileKnowledge, "knowledge_read", p.call(t, "knowledge_read", map[string]any{"ref": ref, "cursor": cursor}))
	if more, _ := next["content"].(string); more == "" || !strings.HasPrefix(whole[start:], content+more) {
		t.Error("the page after the near window does not continue the document exactly where the window ends")
	}

	t.Run("not found", func(t *testing.T) {
		res := p.call(t, "knowledge_read", map[string]any{"ref": ref, "near": "a sentence the handbook does not contain"})
		v := validOutput(t, mcpserver.ProfileKnowledge, "knowledge_read", res)
		content, _ := v["content"].(string)
		note, _ := v["note"].(string)
		if content != "" || v["next_cursor"] != nil || !strings.Contains(note, "Not found") || !strings.Contains(note, "unreachable through this ref") || len(text(res)) > 6144 {
			t.Errorf("note %q, %d bytes of content, next_cursor %v; want a short answer without text or cursor saying the rest is unreachable", note, len(content), v["next_cursor"])
		}
	})
	t.Run("copied imperfectly", func(t *testing.T) {
		// Lower case, Markdown marks, two of 15 words changed.
		res := p.call(t, "knowledge_read", map[string]any{"ref": ref, "near": "section 75: **Procedure 75** step 1 of procedure 75 explains how the support crew verifies"})
		v := validOutput(t, mcpserver.ProfileKnowledge, "knowledge_read", res)
		content, _ := v["content"].(string)
		if i := strings.Index(content, "Section 75: procedure 75"); i < 0 || i >= 2048 || len(content) > mcpserver.NearWindowBytes ||
			!strings.Contains(whole, content) || !strings.Contains(text(res), "closest passage") {
			t.Errorf("passage at %d of a %d-byte window: %.300q; want the closest passage within the first 2 KiB of a window of the document", i, len(content), text(res))
		}
	})
	t.Run("near with cursor", func(t *testing.T) {
		res := p.call(t, "knowledge_read", map[string]any{"ref": ref, "near": passage, "cursor": cursor})
		if got := text(res); !res.IsError || !strings.HasPrefix(got, "invalid_request: near and cursor") || res.StructuredContent != nil {
			t.Errorf("got isError %v %q; want an invalid_request tool error without structured content", res.IsError, got)
		}
	})
	p.stopClean(t)
	if s := p.stderr.String(); strings.Contains(s, "procedure 75") || strings.Contains(s, ref) {
		t.Errorf("stderr shows document text or a ref: %q", s)
	}
}

// TestMCPOpenAIProfile: --profile openai serves search and fetch in
// OpenAI's shapes; fetch reads the chain to its end or to its budget.
func TestMCPOpenAIProfile(t *testing.T) {
	d := startSamples(t, nil)
	p := startMCP(t, "--url", d.base, "--route", demoRoute, "--token-file", writeTokenFile(t, d.token), "--profile", "openai")
	list, err := p.session.ListTools(t.Context(), nil)
	if err != nil || len(list.Tools) != 2 || list.Tools[0].Name+","+list.Tools[1].Name != "fetch,search" && list.Tools[0].Name+","+list.Tools[1].Name != "search,fetch" {
		t.Fatalf("tools %v (%v); want search and fetch", list, err)
	}
	for _, tool := range list.Tools {
		a := tool.Annotations
		if a == nil || !a.ReadOnlyHint || !a.IdempotentHint || a.DestructiveHint == nil || *a.DestructiveHint || a.OpenWorldHint == nil || *a.OpenWorldHint || tool.Title == "" {
			t.Errorf("%s: annotations %+v title %q; want read-only, idempotent, not destructive, closed world, titled", tool.Name, a, tool.Title)
		}
	}
	fetch := func(query, title string) (map[string]any, string) {
		t.Helper()
		res := p.call(t, "search", map[string]any{"query": query})
		v := validOutput(t, mcpserver.ProfileOpenAI, "search", res)
		var shown map[string]any
		if err := json.Unmarshal([]byte(text(res)), &shown); err != nil || !jsonEqual(shown, v) {
			t.Errorf("search: the text is not the JSON of the result: %.200s", text(res))
		}
		results, _ := v["results"].([]any)
		for _, r := range results {
			r := r.(map[string]any)
			if r["title"] == title {
				res := p.call(t, "fetch", map[string]any{"id": r["id"]})
				doc := validOutput(t, mcpserver.ProfileOpenAI, "fetch", res)
				var shown map[string]any
				if err := json.Unmarshal([]byte(text(res)), &shown); err != nil || !jsonEqual(shown, doc) {
					t.Errorf("fetch: the text is not the JSON of the result")
				}
				if doc["url"] != r["url"] || doc["id"] != r["id"] || !strings.HasPrefix(r["url"].(string), "bailing-knowledge:revision:") {
					t.Errorf("fetch: id %v url %v; want the search result's", doc["id"], doc["url"])
				}
				return doc, d.content[title]
			}
		}
		t.Fatalf("search %q: %v; want %q among the results", query, v, title)
		return nil, ""
	}
	doc, whole := fetch("operations handbook procedure", "Operations handbook")
	got, _ := doc["text"].(string)
	meta, _ := doc["metadata"].(map[string]any)
	if len(got) > 128<<10 || len(got) < 120<<10 || !strings.HasPrefix(whole, got) || meta["incomplete"] != true {
		t.Errorf("handbook: %d bytes, a prefix %v, metadata %v; want the chain's 128 KiB and incomplete", len(got), strings.HasPrefix(whole, got), meta)
	}
	doc, whole = fetch("What happens if the refund window is set to 0?", "Refund policy")
	if doc["text"] != whole || doc["metadata"].(map[string]any)["incomplete"] != false {
		t.Errorf("refund policy: %v; want the whole document, complete", doc)
	}
	res := p.call(t, "fetch", map[string]any{"id": "kr2.forged"})
	if got := text(res); !res.IsError || !strings.HasPrefix(got, "knowledge_reference_invalid: ") || res.StructuredContent != nil {
		t.Errorf("forged id: isError %v %q; want knowledge_reference_invalid without structured content", res.IsError, got)
	}
	p.stopClean(t)
}

// TestHostsDocShowsWhatTheModelSees: the example results of docs/hosts.md
// "What the model sees" are what the server renders against the demo (refs
// and cursors, which differ on every call, written kr2.… and kc2.…).
func TestHostsDocShowsWhatTheModelSees(t *testing.T) {
	raw, err := os.ReadFile("../../docs/hosts.md")
	if err != nil {
		t.Fatal(err)
	}
	examples := map[string]string{}
	for _, m := range regexp.MustCompile("(?s)<!-- example: ([a-z]+) -->\n```text\n(.*?)\n```").FindAllStringSubmatch(string(raw), -1) {
		examples[m[1]] = m[2]
	}
	d := startSamples(t, nil)
	p := startMCP(t, "--url", d.base, "--route", demoRoute, "--token-file", writeTokenFile(t, d.token))
	tokens := regexp.MustCompile(`\b(k[rc]2)\.[A-Za-z0-9_.-]+`)
	shown := func(res *mcp.CallToolResult) string { return tokens.ReplaceAllString(text(res), "$1.…") }
	search := p.call(t, "knowledge_search", map[string]any{"query": "What happens if the refund window is set to 0?", "limit": 2})
	var out struct {
		Hints []mcpHint `json:"hints"`
	}
	structured(t, search, &out)
	if len(out.Hints) == 0 {
		t.Fatal("no hint")
	}
	read := p.call(t, "knowledge_read", map[string]any{"ref": out.Hints[0].Ref, "max_bytes": 4096})
	for name, got := range map[string]string{"search": shown(search), "read": shown(read)} {
		if examples[name] != got {
			t.Errorf("docs/hosts.md example %q:\n%s\nwant what the server renders:\n%s", name, examples[name], got)
		}
	}
	_ = p.stop(t)
}
