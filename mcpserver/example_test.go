package mcpserver_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/bailinghub/knowledge-sidecar/mcpserver"
)

// refunds stands in for the sidecar's knowledge service: it answers every
// search with one hint and every read with the whole document.
type refunds struct{}

func (refunds) Search(context.Context, []byte) ([]byte, error) {
	return []byte(`{"schema_version":"bailing.agent-knowledge-search.v1","route":"orders",` +
		`"knowledge_scope_revision":"` + strings.Repeat("b", 64) + `","trust":"reference_only","status":"ok",` +
		`"hints":[{"ref":"kr1.refund-policy","title":"Refund policy","summary":"Refunds are paid within 14 days.",` +
		`"revision":"` + strings.Repeat("a", 64) + `","score":0.82,"expires_at":"2026-01-01T00:05:00Z"}],"truncated":false}`), nil
}

func (refunds) Read(context.Context, []byte) ([]byte, error) {
	return []byte(`{"schema_version":"bailing.agent-knowledge-read.v1","route":"orders","run_id":null,` +
		`"knowledge_scope_revision":"` + strings.Repeat("b", 64) + `","ref":"kr1.refund-policy","revision":"` + strings.Repeat("a", 64) + `",` +
		`"title":"Refund policy","content":"Refunds are paid within 14 days.","trust":"reference_only","next_cursor":null,` +
		`"truncated":false,"budget_exhausted":false,"total_content_bytes":33,"read_chain_max_bytes":131072}`), nil
}

// NewHTTP is the remote MCP endpoint (/knowledge/mcp): the edge reads the
// POST's body and hands it to Serve, and any MCP host talks to it with the
// Streamable HTTP transport. Here the official SDK's client lists the tools
// and searches.
func ExampleNewHTTP() {
	h, err := mcpserver.NewHTTP(mcpserver.HTTPOptions{Knowledge: refunds{}, Version: "example"})
	if err != nil {
		fmt.Println(err)
		return
	}
	edge := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(io.LimitReader(r.Body, mcpserver.MaxHTTPBody))
		if r.Method != http.MethodPost || err != nil {
			w.WriteHeader(http.StatusMethodNotAllowed)
			return
		}
		h.Serve(w, r, body)
	}))
	defer edge.Close()

	ctx := context.Background()
	client := mcp.NewClient(&mcp.Implementation{Name: "example-host", Version: "1"}, nil)
	session, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: edge.URL, DisableStandaloneSSE: true}, nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer session.Close()

	tools, err := session.ListTools(ctx, nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, tool := range tools.Tools {
		fmt.Println(tool.Name)
	}
	res, err := session.CallTool(ctx, &mcp.CallToolParams{Name: "knowledge_search", Arguments: map[string]any{"query": "when are refunds paid"}})
	if err != nil {
		fmt.Println(err)
		return
	}
	if res.IsError || len(res.Content) == 0 {
		fmt.Println("tool error")
		return
	}
	first, _, _ := strings.Cut(res.Content[0].(*mcp.TextContent).Text, "\n")
	fmt.Println(first)
	// Output:
	// knowledge_read
	// knowledge_search
	// 1 hint; read one with knowledge_read and its ref (refs expire in 5 minutes).
}
