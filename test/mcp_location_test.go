package test

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/bailinghub/knowledge-sidecar/internal/fakecore"
	"github.com/bailinghub/knowledge-sidecar/internal/testkit/testdb"
	"github.com/bailinghub/knowledge-sidecar/protocol"
)

// TestMCPRemoteReadLocation: through the official SDK against the remote
// MCP endpoint, each knowledge_read page of the 480,000-byte document says
// which bytes it holds, "[bytes A–B of 480,000]", in its text and its note —
// the first page, and the next one by the cursor the endpoint returned.
func TestMCPRemoteReadLocation(t *testing.T) {
	kw := newKWorld(t, fakecore.Options{SystemInfo: true})
	sc := kw.start(t, kopts{})
	content := testdb.BigDocContent()
	_, h := kw.mustSearch(t, sc, testdb.RouteMulti, kw.TokenA, map[string]any{"query": testdb.BigDocUnit, "limit": 1}, testdb.DocBigTitle)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	cs := connectRemote(t, ctx, sc.WS(testdb.RouteMulti)+"/knowledge/mcp", kw.TokenA)
	thousands := func(n int) string {
		s := strconv.Itoa(n)
		for i := len(s) - 3; i > 0; i -= 3 {
			s = s[:i] + "," + s[i:]
		}
		return s
	}
	at := 0
	args := map[string]any{"ref": h.Ref, "max_bytes": 8192}
	for page := 1; page <= 2; page++ {
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: protocol.ReadTool, Arguments: args})
		if err != nil || res.IsError {
			t.Fatalf("page %d: %v %+v", page, err, res)
		}
		var p struct {
			Content    string  `json:"content"`
			NextCursor *string `json:"next_cursor"`
			Note       string  `json:"note"`
			Total      int     `json:"total_content_bytes"`
		}
		raw, _ := json.Marshal(res.StructuredContent)
		if err := json.Unmarshal(raw, &p); err != nil || p.NextCursor == nil || p.Content != content[at:at+len(p.Content)] || p.Total != len(content) {
			t.Fatalf("page %d: %.200s", page, raw)
		}
		want := "[bytes " + thousands(at) + "–" + thousands(at+len(p.Content)) + " of " + thousands(len(content)) + "] "
		text := res.Content[0].(*mcp.TextContent).Text
		if !strings.HasPrefix(p.Note, want) || !strings.Contains(text, "\n---\n"+want) {
			t.Errorf("page %d: note %.100q; want it to start with %q, in the text too", page, p.Note, want)
		}
		at += len(p.Content)
		args = map[string]any{"ref": h.Ref, "cursor": *p.NextCursor, "max_bytes": 8192}
	}
}
