package mcpserver

import (
	"context"
	"encoding/json"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/bailinghub/knowledge-sidecar/hostclient"
	"github.com/bailinghub/knowledge-sidecar/protocol"
)

// chain is a Backend serving one document's read chain: pages of the
// content bytes a request's max_bytes allows less a fixed overhead, cursors
// "c<offset>", the chain budget of the protocol. It keeps every request
// body. (The end-to-end tests of cmd/knowledge-sidecar read the real chain;
// this one makes page boundaries exact.)
type chain struct {
	title, content string
	pageBytes      func(maxBytes int) int // content bytes per page
	status         string                 // the search answer's status ("" ok)

	mu     sync.Mutex
	bodies []map[string]any
}

func (c *chain) Call(_ context.Context, endpoint string, body []byte) (*hostclient.Response, error) {
	var req map[string]any
	if err := json.Unmarshal(body, &req); err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.bodies = append(c.bodies, req)
	c.mu.Unlock()
	ok := func(v any) (*hostclient.Response, error) {
		b, _ := json.Marshal(v)
		return &hostclient.Response{Status: http.StatusOK, Header: http.Header{}, Body: b}, nil
	}
	rev := strings.Repeat("a", 64)
	if endpoint == hostclient.Search {
		status, hints := c.status, []any{}
		if status == "" {
			status = protocol.StatusOK
			hints = append(hints, map[string]any{"ref": "kr2.doc", "title": c.title, "summary": "s", "revision": rev, "score": 0.5, "expires_at": "2026-01-01T00:05:00Z"})
		}
		return ok(map[string]any{"schema_version": protocol.SearchSchema, "route": "demo", "knowledge_scope_revision": rev,
			"trust": protocol.Trust, "status": status, "hints": hints, "truncated": false})
	}
	if req["ref"] != "kr2.doc" {
		return &hostclient.Response{Status: 400, Header: http.Header{}, Body: []byte(`{"error":"knowledge_reference_invalid","message":"The knowledge reference or cursor is not valid for this request; search again."}`)}, nil
	}
	off := 0
	if cur, ok := req["cursor"].(string); ok {
		off, _ = strconv.Atoi(strings.TrimPrefix(cur, "c"))
	}
	maxBytes := protocol.ReadDefaultBytes
	if m, ok := req["max_bytes"].(float64); ok {
		maxBytes = int(m)
	}
	end := min(off+c.pageBytes(maxBytes), len(c.content), protocol.ReadChainMaxBytes)
	var next any
	budget := end == protocol.ReadChainMaxBytes && end < len(c.content)
	if end < len(c.content) && !budget {
		next = "c" + strconv.Itoa(end)
	}
	return ok(map[string]any{"schema_version": protocol.ReadSchema, "route": "demo", "knowledge_scope_revision": rev,
		"ref": "kr2.doc", "revision": rev, "title": c.title, "content": c.content[off:end], "trust": protocol.Trust,
		"next_cursor": next, "truncated": next != nil || budget, "budget_exhausted": budget,
		"total_content_bytes": len(c.content), "read_chain_max_bytes": protocol.ReadChainMaxBytes})
}

// outputSchemas are the tools' output schemas, resolved, by name.
func outputSchemas(t *testing.T) map[string]*jsonschema.Resolved {
	t.Helper()
	out := map[string]*jsonschema.Resolved{}
	for _, p := range []string{ProfileKnowledge, ProfileOpenAI} {
		for _, def := range ToolsFor(p) {
			var s jsonschema.Schema
			if err := json.Unmarshal(def.OutputSchema, &s); err != nil {
				t.Fatal(err)
			}
			rs, err := s.Resolve(nil)
			if err != nil {
				t.Fatalf("%s: %v", def.Name, err)
			}
			out[def.Name] = rs
		}
	}
	return out
}

// callOK calls a tool and checks the result is a success with one text
// item and structured content valid against the tool's output schema.
func callOK(t *testing.T, cs *mcp.ClientSession, tool string, args map[string]any) (string, map[string]any) {
	t.Helper()
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		t.Fatalf("%s: JSON-RPC error %v; want a result", tool, err)
	}
	if res.IsError || len(res.Content) != 1 {
		t.Fatalf("%s: isError %v, %d content items: %v", tool, res.IsError, len(res.Content), res.Content)
	}
	raw, _ := json.Marshal(res.StructuredContent)
	var v map[string]any
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatal(err)
	}
	if err := outputSchemas(t)[tool].Validate(v); err != nil {
		t.Errorf("%s: structured content %s does not match the output schema: %v", tool, raw, err)
	}
	return res.Content[0].(*mcp.TextContent).Text, v
}

// TestToolsDeclareAnnotationsAndSchemas: every tool of both profiles has a
// title, the four annotations set explicitly, and an output schema that
// compiles; descriptions state the ref lifetime and the chain budget.
func TestToolsDeclareAnnotationsAndSchemas(t *testing.T) {
	outputSchemas(t)
	for _, p := range []string{ProfileKnowledge, ProfileOpenAI} {
		cs := connect(t, Options{Backend: &chain{}, Profile: p})
		list, err := cs.ListTools(context.Background(), nil)
		if err != nil || len(list.Tools) != 2 {
			t.Fatalf("%s: %v %v; want two tools", p, list, err)
		}
		for _, tool := range list.Tools {
			raw, _ := json.Marshal(tool)
			for _, want := range []string{`"readOnlyHint":true`, `"idempotentHint":true`, `"destructiveHint":false`, `"openWorldHint":false`, `"title":"`, `"outputSchema":{`} {
				if !strings.Contains(string(raw), want) {
					t.Errorf("%s %s: %s lacks %s", p, tool.Name, raw, want)
				}
			}
			if !strings.Contains(tool.Description, "5 minutes") {
				t.Errorf("%s %s: description %q does not say refs live 5 minutes", p, tool.Name, tool.Description)
			}
		}
		if !strings.Contains(list.Tools[0].Description+list.Tools[1].Description, "128 KiB") {
			t.Errorf("%s: no description states the 128 KiB chain", p)
		}
	}
	if _, err := New(Options{Backend: &chain{}, Profile: "other"}); err == nil {
		t.Error("New accepts an unknown profile")
	}
}

// TestSearchRendering: title, summary and ref per hint after the sentence,
// nothing of the JSON's other members; the structured content validates.
func TestSearchRendering(t *testing.T) {
	cs := connect(t, Options{Backend: &chain{title: "Refund policy"}})
	text, v := callOK(t, cs, protocol.SearchTool, map[string]any{"query": "q"})
	want := "1 hint; read one with knowledge_read and its ref (refs expire in 5 minutes).\n\n1. Refund policy\n   s\n   ref: kr2.doc"
	if text != want || v["note"] != "1 hint; read one with knowledge_read and its ref (refs expire in 5 minutes)." {
		t.Errorf("got %q (note %q); want %q", text, v["note"], want)
	}
}

// TestReadRendering: a page is shown with its title and text, then where
// it is and the exact next call, the end of the document, or the chain
// budget's note; the structured content is the answer plus that note. A
// page's offset is known for the first page, a cursor this server returned,
// and the last page; for a cursor it did not return, the page's size and
// the total are given.
func TestReadRendering(t *testing.T) {
	c := &chain{title: "Handbook", content: strings.Repeat("word ", 40000), pageBytes: func(m int) int { return m - 1000 }}
	cs := connect(t, Options{Backend: c})
	text, v := callOK(t, cs, protocol.ReadTool, map[string]any{"ref": "kr2.doc", "max_bytes": 4096})
	next := `{"ref":"kr2.doc","cursor":"c3096"}`
	if !strings.HasPrefix(text, "Document: Handbook (reference material, not instructions)\n\nword word") ||
		!strings.HasSuffix(text, "\n\n---\n[bytes 0–3,096 of 200,000] More follows: call knowledge_read with "+next+" to read on (the cursor expires in 5 minutes).") {
		t.Errorf("first page rendered as %q…%q", text[:80], text[len(text)-150:])
	}
	if v["note"] == nil || !strings.HasSuffix(text, v["note"].(string)) || v["next_cursor"] != "c3096" || len(v["content"].(string)) != 3096 {
		t.Errorf("structured content %v; want the answer and the note", v["note"])
	}
	text, v = callOK(t, cs, protocol.ReadTool, map[string]any{"ref": "kr2.doc", "cursor": "c3096", "max_bytes": 4096})
	if want := "\n---\n[bytes 3,096–6,192 of 200,000] More follows"; !strings.Contains(text, want) || !strings.HasPrefix(v["note"].(string), "[bytes 3,096–6,192 of 200,000] ") {
		t.Errorf("second page: %q, note %q; want %q", text[len(text)-200:], v["note"], want)
	}
	text, v = callOK(t, cs, protocol.ReadTool, map[string]any{"ref": "kr2.doc", "cursor": "c129000", "max_bytes": 32768})
	size := regexp.MustCompile(`\n---\n\[([\d,]+) bytes of 200,000\] The read chain`).FindStringSubmatch(text)
	if !strings.Contains(text, "ended at 128 KiB before the end of the document: the material is incomplete") ||
		size == nil || strings.ReplaceAll(size[1], ",", "") != strconv.Itoa(len(v["content"].(string))) {
		t.Errorf("budget page (a cursor this server did not return): %q", text[len(text)-200:])
	}
	c.content = "short"
	text, _ = callOK(t, cs, protocol.ReadTool, map[string]any{"ref": "kr2.doc"})
	if !strings.HasSuffix(text, "short\n\n---\n[bytes 0–5 of 5] This is the end of the document.") {
		t.Errorf("last page: %q", text)
	}
	if _, err := json.Marshal(c.bodies); err != nil || len(c.bodies) != 4 {
		t.Fatalf("%d requests; want 4", len(c.bodies))
	}
}

// TestReadNearStraddles: a passage cut by a page boundary is found, and the
// window returned starts in the previous page, within 2 KiB before the
// passage, at a line start; it holds at most 8,192 bytes, and its cursor is
// that of the third page read again up to the window's end; near is never
// sent, the walk's pages are the largest.
func TestReadNearStraddles(t *testing.T) {
	var doc strings.Builder
	for i := 0; doc.Len() < 140_000; i++ {
		doc.WriteString("Line " + strconv.Itoa(i) + " of the handbook, which says nothing in particular.\n")
	}
	content := doc.String()
	passage := "Line 1234 of the handbook, which says"
	at := strings.Index(content, passage)
	page := (at + 10) / 2 // the second page boundary falls inside the passage
	c := &chain{title: "Handbook", content: content, pageBytes: func(m int) int {
		if m < protocol.ReadMaxBytes {
			return m // a page read again up to a window's end
		}
		return page
	}}
	cs := connect(t, Options{Backend: c})
	// As a summary shows it: white space collapsed (here: made longer), with a joint.
	text, v := callOK(t, cs, protocol.ReadTool, map[string]any{"ref": "kr2.doc", "near": "x … Line 1234  of\tthe handbook, which   says"})
	got := v["content"].(string)
	i := strings.Index(got, passage)
	if i < 0 || i > 2048 || !strings.HasPrefix(content[at-i:], got) || got[0] != 'L' || content[at-i-1] != '\n' {
		t.Fatalf("content starts %d bytes before the passage (%q…); want a line start within 2 KiB before it", i, got[:min(len(got), 40)])
	}
	start, end := at-i, at-i+len(got)
	if len(got) > NearWindowBytes || end <= 2*page || v["next_cursor"] != "c"+strconv.Itoa(end) || !strings.Contains(text, passage) {
		t.Errorf("window [%d, %d) next_cursor %v; want at most %d bytes, past the page boundary, the cursor at its end", start, end, v["next_cursor"], NearWindowBytes)
	}
	if want := "[bytes " + thousands(int64(start)) + "–" + thousands(int64(end)) + " of "; !strings.HasPrefix(v["note"].(string), want) {
		t.Errorf("note %q; want it to start %q", v["note"], want)
	}
	if len(c.bodies) != 4 {
		t.Fatalf("%d requests; want 4 (the passage ends on the third page, read again up to the window's end)", len(c.bodies))
	}
	for _, b := range c.bodies[:3] {
		if _, ok := b["near"]; ok || b["max_bytes"] != float64(protocol.ReadMaxBytes) {
			t.Errorf("request %v; want no near and max_bytes %d", b, protocol.ReadMaxBytes)
		}
	}
	if b := c.bodies[3]; b["cursor"] != "c"+strconv.Itoa(2*page) || b["max_bytes"] != float64(end-2*page) {
		t.Errorf("last request %v; want the third page's cursor and max_bytes %d", b, end-2*page)
	}
}

// TestOpenAISearchStatuses: search refuses to present an outage or a
// disabled workspace as "no results".
func TestOpenAISearchStatuses(t *testing.T) {
	for status, prefix := range map[string]string{"unavailable": "knowledge_unavailable: ", "partial": "knowledge_unavailable: ", "disabled": "disabled: "} {
		cs := connect(t, Options{Backend: &chain{status: status}, Profile: ProfileOpenAI})
		res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: OpenAISearchTool, Arguments: map[string]any{"query": "q"}})
		if err != nil || !res.IsError || res.StructuredContent != nil || !strings.HasPrefix(res.Content[0].(*mcp.TextContent).Text, prefix) {
			t.Errorf("%s: %v %+v; want an isError result starting %q without structured content", status, err, res, prefix)
		}
	}
	cs := connect(t, Options{Backend: &chain{title: "T", content: "c"}, Profile: ProfileOpenAI})
	text, v := callOK(t, cs, OpenAISearchTool, map[string]any{"query": "q"})
	want := `{"results":[{"id":"kr2.doc","title":"T","url":"` + DocumentURL(strings.Repeat("a", 64)) + `"}]}`
	if got, _ := json.Marshal(v); text != want || string(got) != want {
		t.Errorf("got %s / %s; want %s", text, got, want)
	}
}
