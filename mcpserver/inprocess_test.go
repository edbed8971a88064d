package mcpserver

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/bailinghub/knowledge-sidecar/mcpserver/mcpservertest"
	"github.com/bailinghub/knowledge-sidecar/protocol"
)

// fakeKnowledge answers Search and Read in process with fixed values.
type fakeKnowledge struct {
	answer []byte
	err    error
}

func (f fakeKnowledge) Search(context.Context, []byte) ([]byte, error) { return f.answer, f.err }
func (f fakeKnowledge) Read(context.Context, []byte) ([]byte, error)   { return f.answer, f.err }

// refusalErr is an error in its wire form, as knowledge.Error is.
type refusalErr protocol.Refusal

func (e refusalErr) Error() string             { return string(e.Code) }
func (e refusalErr) Refusal() protocol.Refusal { return protocol.Refusal(e) }

const readAnswerJSON = `{"schema_version":"` + protocol.ReadSchema + `","route":"demo","run_id":null,"knowledge_scope_revision":"s",` +
	`"ref":"kr2.doc","revision":"r","title":"Refunds","content":"Refunds take 5 days.","trust":"` + protocol.Trust + `",` +
	`"next_cursor":null,"truncated":false,"budget_exhausted":false,"total_content_bytes":20,"read_chain_max_bytes":131072}`

// TestInProcessRefusal: a Knowledge's refusal (the value knowledge.Error's
// Refusal returns) is the tool error naming its code, with its Retry-After;
// any other error is knowledge_unavailable, never its text; an answer is
// rendered as over HTTP.
func TestInProcessRefusal(t *testing.T) {
	cases := []struct {
		name        string
		k           fakeKnowledge
		isError     bool
		prefix, has string
	}{
		{"answer", fakeKnowledge{answer: []byte(readAnswerJSON)}, false, "Document: Refunds", "Refunds take 5 days."},
		{"429", fakeKnowledge{err: refusalErr{Status: 429, Code: protocol.CodeRateLimited, Message: "Too many.", RetryAfter: 7}}, true, "rate_limited: Too many. ", "Wait 7 seconds"},
		{"410 wrapped", fakeKnowledge{err: errorsJoin(refusalErr{Status: 410, Code: protocol.CodeReferenceExpired, Message: "Expired."})}, true, "knowledge_reference_expired: Expired. ", "Search again"},
		{"any other error", fakeKnowledge{err: errors.New("dial tcp 10.0.0.7:3306: refused")}, true, "knowledge_unavailable: ", "temporarily unavailable"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cs := connect(t, Options{Knowledge: tc.k})
			res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: protocol.ReadTool, Arguments: map[string]any{"ref": "kr2.doc"}})
			if err != nil {
				t.Fatal(err)
			}
			txt := res.Content[0].(*mcp.TextContent).Text
			if res.IsError != tc.isError || !strings.HasPrefix(txt, tc.prefix) || !strings.Contains(txt, tc.has) || strings.Contains(txt, "10.0.0.7") {
				t.Errorf("got isError %v %q; want %v starting %q containing %q", res.IsError, txt, tc.isError, tc.prefix, tc.has)
			}
		})
	}
}

func errorsJoin(err error) error { return errors.Join(errors.New("context"), err) }

// TestNewWantsOneBackend: exactly one of Backend and Knowledge.
func TestNewWantsOneBackend(t *testing.T) {
	if _, err := New(Options{}); err == nil {
		t.Error("New without a backend: no error")
	}
	if _, err := New(Options{Knowledge: fakeKnowledge{}, Backend: &chain{}}); err == nil {
		t.Error("New with both: no error")
	}
}

// BenchmarkInProcessRead is one knowledge_read tool call served in process
// over the SDK's in-memory transport (the encode/decode steps it takes are
// counted in inprocess.go).
func BenchmarkInProcessRead(b *testing.B) {
	srv, err := New(Options{Knowledge: fakeKnowledge{answer: []byte(readAnswerJSON)}, Version: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	cs := mcpservertest.Connect(b, srv)
	params := &mcp.CallToolParams{Name: protocol.ReadTool, Arguments: map[string]any{"ref": "kr2.doc"}}
	b.ReportAllocs()
	for b.Loop() {
		if res, err := cs.CallTool(context.Background(), params); err != nil || res.IsError {
			b.Fatal(err, res)
		}
	}
}
