package mcpserver

import (
	"context"
	"encoding/json"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/bailinghub/knowledge-sidecar/hostclient"
	"github.com/bailinghub/knowledge-sidecar/protocol"
)

// The openai profile (SPEC §10): OpenAI's connectors and deep research call
// search(query) and fetch(id) and read content[0].text as the JSON of the
// result object, which is also the structured content.

// DocumentURL is the url of a search result and a fetched document. A
// knowledge document has no public address, so it is a stable URI that
// does not resolve: the scheme "bailing-knowledge" and the document's
// revision (SHA-256 of title and content, already in every hint), the same
// for the same text in search and fetch and never an internal id.
func DocumentURL(revision string) string { return "bailing-knowledge:revision:" + revision }

type openaiResult struct {
	ID    string `json:"id"`
	Title string `json:"title"`
	URL   string `json:"url"`
}

// openaiSearch is search: one search request; its hints become results
// whose id is the ref. A status that says nothing was searched is an error,
// so that an outage never reads as "no results".
func openaiSearch(ctx context.Context, c *caller, args *toolArgs) (*mcp.CallToolResult, error) {
	var a hostclient.SearchAnswer
	_, fail, err := c.call(ctx, hostclient.Search, protocol.SearchSchema, args.request(), &a)
	if fail != nil || err != nil {
		return fail, err
	}
	switch {
	case a.Status == protocol.StatusDisabled:
		return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: "disabled: " + GuidanceDisabled}}}, nil
	case a.Status != protocol.StatusOK && len(a.Hints) == 0:
		return toolError(protocol.CodeUnavailable, "knowledge search answered status "+clip(a.Status, 40)+" with no results", ""), nil
	}
	out := struct {
		Results []openaiResult `json:"results"`
	}{Results: make([]openaiResult, 0, len(a.Hints))}
	for _, h := range a.Hints {
		out.Results = append(out.Results, openaiResult{ID: h.Ref, Title: h.Title, URL: DocumentURL(h.Revision)})
	}
	return jsonResult(out), nil
}

// openaiFetch is fetch: the id's read chain to its end or to the chain
// budget, in pages of the largest size.
func openaiFetch(ctx context.Context, c *caller, args *toolArgs) (*mcp.CallToolResult, error) {
	id := args.ID // required by the schema
	var (
		text strings.Builder
		last hostclient.ReadAnswer
	)
	refused := false
	fail, err := walkChain(ctx, c, protoRequest{Ref: id, MaxBytes: protocol.ReadMaxBytes}, false, func(_ []byte, a *hostclient.ReadAnswer) bool {
		if text.Len() == 0 {
			// The text grows once, to the most the chain can hold.
			text.Grow(int(min(max(a.TotalContentBytes, 0), protocol.ReadChainMaxBytes)))
		}
		if !leaseOf(ctx).take(int64(len(a.Content))) {
			refused = true
			return true
		}
		text.WriteString(a.Content)
		last = *a
		return false
	})
	if fail != nil || err != nil {
		return fail, err
	}
	if refused {
		return overloaded(), nil
	}
	type metadata struct {
		Incomplete        bool   `json:"incomplete"`
		Revision          string `json:"revision"`
		TotalContentBytes int64  `json:"total_content_bytes"`
		Trust             string `json:"trust"`
	}
	return jsonResult(struct {
		ID       string   `json:"id"`
		Title    string   `json:"title"`
		Text     string   `json:"text"`
		URL      string   `json:"url"`
		Metadata metadata `json:"metadata"`
	}{id, last.Title, text.String(), DocumentURL(last.Revision), metadata{
		// The walk stops at the end, the budget, or maxChainPages.
		Incomplete: last.BudgetExhausted || last.NextCursor != nil,
		Revision:   last.Revision, TotalContentBytes: last.TotalContentBytes, Trust: protocol.Trust,
	}}), nil
}

// jsonResult is v as the text of the one content item and as structured content.
func jsonResult(v any) *mcp.CallToolResult {
	b, err := json.Marshal(v)
	if err != nil {
		return toolError(protocol.CodeUnavailable, "the result could not be encoded", "")
	}
	return success(string(b), b)
}
