package mcpserver

import (
	"context"
	"encoding/json"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/bailinghub/knowledge-sidecar/protocol"
)

// The byte budget of MCP answers in flight (SPEC §10, like turn bodies in
// §8.3): a tool call holds, while it is built and until its answer is
// written, what it keeps in memory — each page it read (the answer's JSON
// and its decoded copy) while it keeps it, and the result with its two
// encodings (the result's JSON and the JSON-RPC message around it). Past
// the budget, or past the caller's share of it, the call is a tool error
// overloaded that tells the model to retry; nothing waits.

// Budget is what the answer budget is taken from: Acquire takes n bytes
// for the caller of ctx (its MCP request) or reports false when the budget
// or the caller's share has no room; Release gives n back.
type Budget interface {
	Acquire(ctx context.Context, n int64) bool
	Release(ctx context.Context, n int64)
}

// CodeOverloaded is the tool error of a call refused by the answer budget.
const CodeOverloaded protocol.ErrorCode = "overloaded"

// pageCopies is how many bytes a page read costs per byte of its answer:
// the answer's JSON and the decoded page.
const pageCopies = 2

type leaseKey struct{}

// lease is what one MCP request holds of the budget (nil: no budget).
type lease struct {
	b    Budget
	ctx  context.Context
	mu   sync.Mutex
	held int64
}

func leaseOf(ctx context.Context) *lease {
	l, _ := ctx.Value(leaseKey{}).(*lease)
	return l
}

// take adds n to what the request holds; false when the budget refuses.
func (l *lease) take(n int64) bool {
	if l == nil || n <= 0 {
		return true
	}
	if !l.b.Acquire(l.ctx, n) {
		return false
	}
	l.mu.Lock()
	l.held += n
	l.mu.Unlock()
	return true
}

// give returns n of what the request holds (a page it no longer keeps).
func (l *lease) give(n int64) {
	if l == nil || n <= 0 {
		return
	}
	l.mu.Lock()
	n = min(n, l.held)
	l.held -= n
	l.mu.Unlock()
	l.b.Release(l.ctx, n)
}

// end returns everything the request holds: its answer is written.
func (l *lease) end() {
	if l == nil {
		return
	}
	l.mu.Lock()
	n := l.held
	l.held = 0
	l.mu.Unlock()
	if n > 0 {
		l.b.Release(l.ctx, n)
	}
}

// overloaded is the tool error of a call the answer budget refused.
func overloaded() *mcp.CallToolResult {
	return toolError(CodeOverloaded, "the sidecar is answering as much as its memory allows right now", "1")
}

// resultSize is what a result costs until its answer is written: the
// result itself, and twice its JSON (the result's, then the JSON-RPC
// message's), a text counted as encoded (escapes included).
func resultSize(res *mcp.CallToolResult) int64 {
	var n, enc int64
	if sc, ok := res.StructuredContent.(json.RawMessage); ok {
		n, enc = int64(len(sc)), int64(len(sc))
	}
	for _, c := range res.Content {
		if t, ok := c.(*mcp.TextContent); ok {
			n += int64(len(t.Text))
			enc += encodedLen(t.Text)
		}
	}
	return n + 2*enc
}

// encodedLen is the length of s as a JSON string: \u00XX for control
// characters and <, >, & (escaped as HTML-safe JSON), \" and \\.
func encodedLen(s string) int64 {
	n := int64(len(s)) + 2
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c < 0x20 || c == '<' || c == '>' || c == '&':
			n += 5
		case c == '"' || c == '\\':
			n++
		}
	}
	return n
}
