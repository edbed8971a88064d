package test

import (
	"encoding/json"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/bailinghub/knowledge-sidecar/hostclient"
	"github.com/bailinghub/knowledge-sidecar/internal/fakecore"
	"github.com/bailinghub/knowledge-sidecar/internal/testkit/testdb"
	"github.com/bailinghub/knowledge-sidecar/mcpserver"
	"github.com/bailinghub/knowledge-sidecar/mcpserver/mcpservertest"
	"github.com/bailinghub/knowledge-sidecar/protocol"
)

// countingRT counts the requests a host client sends.
type countingRT struct{ n atomic.Int64 }

func (c *countingRT) RoundTrip(r *http.Request) (*http.Response, error) {
	c.n.Add(1)
	return http.DefaultTransport.RoundTrip(r)
}

// TestQueryLimitMCPEqualsHTTP: the query limit has one definition (UTF-16
// code units, SPEC §4). A query the endpoint refuses — 1,001 emoji are 2,002
// units though only 1,001 code points, which a JSON Schema maxLength of 2000
// would let through — is refused by the MCP tool before any request, with
// the endpoint's own code and message; a query the endpoint accepts (1,000
// emoji, 2,000 units) reaches it through the tool.
func TestQueryLimitMCPEqualsHTTP(t *testing.T) {
	kw := newKWorld(t, fakecore.Options{SystemInfo: true})
	sc := kw.start(t, kopts{})
	route := testdb.RouteMulti

	rt := &countingRT{}
	c, err := hostclient.New(sc.URL, route, kw.TokenA, &http.Client{Transport: rt})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := mcpserver.New(mcpserver.Options{Backend: c, Version: "test"})
	if err != nil {
		t.Fatal(err)
	}
	cs := mcpservertest.Connect(t, srv)
	ctx := t.Context()

	cases := []struct {
		name    string
		query   string
		refused bool
	}{
		{"1001 emoji (2002 units)", strings.Repeat("😀", 1001), true},
		{"2001 BMP characters", strings.Repeat("é", 2001), true},
		{"blank after JavaScript trim", " \ufeff\u00a0 ", true},
		{"control character", "refund\u0001policy", true},
		{"1000 emoji (2000 units)", strings.Repeat("😀", 1000), false},
		{"2000 BMP characters", strings.Repeat("é", 2000), false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := kw.call(t, "POST", sc.WS(route)+"/knowledge/search", kw.TokenA, map[string]any{"query": tc.query})
			before := rt.n.Load()
			res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: protocol.SearchTool, Arguments: map[string]any{"query": tc.query}})
			if err != nil {
				t.Fatalf("tool call: %v", err)
			}
			sent := rt.n.Load() - before
			if !tc.refused {
				if r.Status != 200 || res.IsError || sent != 1 {
					t.Errorf("got HTTP %d, tool error %v after %d requests; want 200 and a tool result after 1", r.Status, res.IsError, sent)
				}
				return
			}
			var e struct{ Error, Message string }
			if r.Status != 400 || json.Unmarshal(r.Body, &e) != nil || e.Error != "invalid_request" {
				t.Fatalf("HTTP: got %d %s; want 400 invalid_request", r.Status, r.Body)
			}
			text := ""
			if len(res.Content) > 0 {
				text = res.Content[0].(*mcp.TextContent).Text
			}
			want := "invalid_request: " + strings.TrimSuffix(e.Message, ".") + ". "
			if !res.IsError || !strings.HasPrefix(text, want) {
				t.Errorf("tool: got error %v %q; want an error starting %q (the endpoint's refusal)", res.IsError, text, want)
			}
			if sent != 0 {
				t.Errorf("tool sent %d requests; want 0 (refused before calling)", sent)
			}
		})
	}
}
