package test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/bailinghub/knowledge-sidecar/config"
	"github.com/bailinghub/knowledge-sidecar/internal/fakecore"
	"github.com/bailinghub/knowledge-sidecar/internal/testkit/testdb"
)

// TestMCPRemoteSpans: a remote MCP request has its own SERVER span named
// "{mcp.method.name} {tool}" with the GenAI/MCP attributes (SPEC §10). Its
// parent is the params._meta trace context when the peer is trusted for
// trace context (the HTTP request's span is then a link), and the HTTP
// request's span otherwise; a tool error is error.type tool_error.
func TestMCPRemoteSpans(t *testing.T) {
	w := NewWorld(t, WorldOptions{Core: fakecore.Options{SystemInfo: true}})
	const metaTrace = "0af7651916cd43dd8448eb211c80319c"
	meta := `"_meta":{"traceparent":"00-` + metaTrace + `-b7ad6b7169203331-01"}`
	call := func(id int, args string) []byte {
		return []byte(fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"knowledge_read","arguments":%s,%s}}`, id, args, meta))
	}
	headers := map[string]string{"Accept": "application/json, text/event-stream", "MCP-Protocol-Version": "2025-06-18"}
	for _, trust := range []string{"trusted_proxies", "none"} {
		t.Run(trust, func(t *testing.T) {
			tc := startTracedWith(t, w, sdktrace.AlwaysSample(), func(c *config.Config) { c.Tracing.TrustInbound = trust })
			code, body := callH(t, http.MethodPost, tc.WS(testdb.RouteMulti)+"/knowledge/mcp", w.TokenA, call(7, `{"ref":"kr2.forged"}`), headers)
			if code != http.StatusOK || !strings.Contains(string(body), `"isError":true`) {
				t.Fatalf("tools/call with a forged ref: %d %s; want 200 with a tool error", code, body)
			}
			mcpSpan, httpSpan := tc.awaitServer(t), tc.awaitServer(t)
			if mcpSpan.Name() != "tools/call knowledge_read" || !strings.HasPrefix(httpSpan.Name(), "POST ") {
				t.Fatalf("spans %q then %q; want the MCP span inside the HTTP request's", mcpSpan.Name(), httpSpan.Name())
			}
			attrs := map[string]string{}
			for _, a := range mcpSpan.Attributes() {
				attrs[string(a.Key)] = a.Value.String()
			}
			for k, v := range map[string]string{"mcp.method.name": "tools/call", "gen_ai.tool.name": "knowledge_read",
				"gen_ai.operation.name": "execute_tool", "mcp.protocol.version": "2025-06-18", "jsonrpc.request.id": "7",
				"error.type": "tool_error"} {
				if attrs[k] != v {
					t.Errorf("%s = %q; want %q", k, attrs[k], v)
				}
			}
			parent := mcpSpan.Parent()
			if trust == "none" {
				if parent.SpanID() != httpSpan.SpanContext().SpanID() {
					t.Errorf("untrusted: parent %v; want the HTTP request's span", parent.SpanID())
				}
				return
			}
			if parent.TraceID().String() != metaTrace || !parent.IsRemote() {
				t.Errorf("trusted: parent %v; want params._meta's traceparent", parent)
			}
			if links := mcpSpan.Links(); len(links) != 1 || links[0].SpanContext.SpanID() != httpSpan.SpanContext().SpanID() {
				t.Errorf("trusted: links %v; want the HTTP request's span", links)
			}
		})
	}
}
