package main

import (
	"strconv"
	"strings"
	"testing"

	"github.com/bailinghub/knowledge-sidecar/mcpserver"
)

// TestMCPReadLocation: every knowledge_read result of the stdio server that
// shows text says where it is, in its text and in the structured note —
// "[bytes A–B of T]" with T the document's total_content_bytes — through
// the official SDK against the real sidecar, on the demo's 140 KB handbook:
// the first page, the page a cursor of this server continues to, a near
// hit ~74 KB in (a near miss shows no text and says which bytes it
// searched); a cursor this server did not return gives the page's size and
// the total. Both servers speak for one Agent Session, whose knowledge
// requests share the demo's rate limit (burst 20, 10/s): each check reads
// the text and the structured note of one result, so the test makes 15
// requests (two capabilities probes, the search, twelve reads of which the
// near walks take nine) and needs no refill, however fast it runs.
func TestMCPReadLocation(t *testing.T) {
	d := startSamples(t, nil)
	args := []string{"--url", d.base, "--route", demoRoute, "--token-file", writeTokenFile(t, d.token)}
	p := startMCP(t, args...)
	whole := d.content["Operations handbook"]
	total := len(whole)
	var out struct {
		Hints []mcpHint `json:"hints"`
	}
	structured(t, p.call(t, "knowledge_search", map[string]any{"query": "operations handbook procedure", "limit": 1}), &out)
	if len(out.Hints) != 1 || out.Hints[0].Title != "Operations handbook" || total <= 64<<10 {
		t.Fatalf("search: %+v (%d bytes); want the operations handbook, over 64 KiB", out.Hints, total)
	}
	ref := out.Hints[0].Ref
	thousands := func(n int) string {
		s := strconv.Itoa(n)
		for i := len(s) - 3; i > 0; i -= 3 {
			s = s[:i] + "," + s[i:]
		}
		return s
	}
	// read checks one result: its content is whole[at:], and the note (in
	// the text too) starts with where it is.
	read := func(name string, p *mcpProc, args map[string]any, known bool) (content, cursor string) {
		t.Helper()
		res := p.call(t, "knowledge_read", args)
		v := validOutput(t, mcpserver.ProfileKnowledge, "knowledge_read", res)
		content, _ = v["content"].(string)
		cursor, _ = v["next_cursor"].(string)
		note, _ := v["note"].(string)
		at := strings.Index(whole, content)
		if content == "" || at < 0 {
			t.Fatalf("%s: %d bytes that are not the document's text", name, len(content))
		}
		want := "[" + thousands(len(content)) + " bytes of " + thousands(total) + "] "
		if known {
			want = "[bytes " + thousands(at) + "–" + thousands(at+len(content)) + " of " + thousands(total) + "] "
		}
		if !strings.HasPrefix(note, want) || !strings.Contains(text(res), "\n---\n"+want) {
			t.Errorf("%s: note %.120q; want it to start with %q, in the text too", name, note, want)
		}
		if tb, _ := v["total_content_bytes"].(float64); int(tb) != total {
			t.Errorf("%s: total_content_bytes %v; want %d", name, v["total_content_bytes"], total)
		}
		return content, cursor
	}
	_, cursor := read("first page", p, map[string]any{"ref": ref, "max_bytes": 8192}, true)
	read("next page", p, map[string]any{"ref": ref, "cursor": cursor, "max_bytes": 8192}, true)
	read("near hit", p, map[string]any{"ref": ref, "near": "Section 75: procedure 75 Step 1 of procedure 75 describes how the support team"}, true)
	if note := text(p.call(t, "knowledge_read", map[string]any{"ref": ref, "near": "a sentence the handbook does not contain"})); !strings.Contains(note, "\n---\n[searched bytes 0–") {
		t.Errorf("near miss: %.200q; want it to say which bytes were searched", note)
	}

	// Another server process never saw the cursor: the size and the total.
	other := startMCP(t, args...)
	read("a cursor of another server", other, map[string]any{"ref": ref, "cursor": cursor, "max_bytes": 8192}, false)
	for _, q := range []*mcpProc{p, other} {
		if code := q.stop(t); code != 0 {
			t.Errorf("exit code %d; want 0", code)
		}
	}
}
