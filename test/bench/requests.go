package main

// The requests the sections send to check a target and to set up the
// search and read loads.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"
)

func check(ep *endpoint, rq reqSpec) error {
	resp, err := ep.client.Get(ep.base + rq.path)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("probe answered %d", resp.StatusCode)
	}
	return nil
}

// catalogDSN is the read-only DSN of the bench's catalog database ("" with
// the in-memory catalog).
var catalogDSN string

// searchBody is the search load's request; with --managed it carries the
// managed task's run (runID), which reads carry too.
var (
	searchBody = []byte(`{"query":` + strconv.Quote(searchQuery) + `,"limit":3}`)
	runID      string
)

// kbPath is the knowledge endpoints' path prefix on the bench's KB route.
const kbPath = "/agent-api/v1/workspaces/" + routeKB + "/knowledge/"

// readSpec is a read of the first hint of a fresh search through ep (refs
// live 5 minutes: take one just before the read load), 32 KiB pages.
func readSpec(ep *endpoint, auth http.Header) (reqSpec, error) {
	ref, err := searchRef(ep, auth)
	if err != nil {
		return reqSpec{}, err
	}
	rb := map[string]any{"ref": ref, "max_bytes": 32768}
	if runID != "" {
		rb["run_id"] = runID
	}
	body, _ := json.Marshal(rb)
	return reqSpec{method: http.MethodPost, path: kbPath + "read", body: body, header: auth}, nil
}

// searchRef searches once through the sidecar and returns the first hint's
// ref, for the read load.
func searchRef(ep *endpoint, h http.Header) (string, error) {
	req, _ := http.NewRequest(http.MethodPost, ep.base+kbPath+"search", bytes.NewReader(searchBody))
	req.Header = h.Clone()
	resp, err := ep.client.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	var body struct {
		Hints []struct {
			Ref string `json:"ref"`
		} `json:"hints"`
	}
	if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&body) != nil || len(body.Hints) == 0 {
		return "", fmt.Errorf("search through the sidecar answered %d without hints", resp.StatusCode)
	}
	return body.Hints[0].Ref, nil
}

// turnBodies makes turn requests with unique ids, as a host sends them.
type turnBodies struct{ prefix string }

func newTurnBodies() *turnBodies {
	return &turnBodies{prefix: strconv.FormatInt(time.Now().UnixNano(), 36)}
}

func (t *turnBodies) next(seq uint64) []byte {
	id := t.prefix + "-" + strconv.FormatUint(seq, 36)
	return []byte(`{"client_conversation_id":"c-` + id + `","client_turn_id":"t-` + id + `","user_message_id":"m-` + id +
		`","user_input":"Can I get a refund after the window closed?","knowledge_delivery":"on_demand","page_context":{"url":"/orders"},"renderers":["markdown"]}`)
}

// validSearch accepts a search answer with status ok and at least one hint
// (the bench world's query always finds some).
func validSearch(body []byte) error {
	var v struct {
		Status string            `json:"status"`
		Hints  []json.RawMessage `json:"hints"`
	}
	if err := json.Unmarshal(body, &v); err != nil {
		return fmt.Errorf("search answer: %w", err)
	}
	if v.Status != "ok" || len(v.Hints) == 0 {
		return fmt.Errorf("search answer: status %q with %d hints", v.Status, len(v.Hints))
	}
	return nil
}

// MCP revisions of the remote endpoint's loads (SPEC §10): one stateless
// POST per tools/call, no initialize, as a stateless host sends it. An
// initialize-era revision names itself in the MCP-Protocol-Version header
// only (the SDK's stateless handler supplies the session's initialize);
// 2026-07-28 also wants the Mcp-Method and Mcp-Name headers and the
// per-request _meta the SDK's own client sends (protocol version, client
// info, client capabilities).
const (
	mcpRevisionInit = "2025-06-18"
	mcpRevisionNew  = "2026-07-28"
)

// mcpSearch is the search load as a tools/call of knowledge_search on the
// remote MCP endpoint: the same arguments as the REST body (searchBody).
func mcpSearch(auth http.Header, revision string) reqSpec {
	h := auth.Clone()
	h.Set("Content-Type", "application/json")
	h.Set("Accept", "application/json, text/event-stream")
	h.Set("MCP-Protocol-Version", revision)
	params := map[string]any{"name": "knowledge_search", "arguments": json.RawMessage(searchBody)}
	if revision >= mcpRevisionNew {
		h.Set("Mcp-Method", "tools/call")
		h.Set("Mcp-Name", "knowledge_search")
		params["_meta"] = map[string]any{
			"io.modelcontextprotocol/protocolVersion":    revision,
			"io.modelcontextprotocol/clientInfo":         map[string]string{"name": "ks-bench", "version": "1"},
			"io.modelcontextprotocol/clientCapabilities": map[string]any{"roots": map[string]bool{"listChanged": true}},
		}
	}
	body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params})
	return reqSpec{method: http.MethodPost, path: "/agent-api/v1/workspaces/" + routeKB + "/knowledge/mcp", body: body, header: h, valid: validMCPSearch}
}

// validMCPSearch accepts a JSON-RPC answer that is a successful tool result
// (no JSON-RPC error, isError false) whose structuredContent is a search
// answer with status ok and at least one hint.
func validMCPSearch(body []byte) error {
	var v struct {
		Result *struct {
			IsError           bool `json:"isError"`
			StructuredContent *struct {
				Status string            `json:"status"`
				Hints  []json.RawMessage `json:"hints"`
			} `json:"structuredContent"`
		} `json:"result"`
		Error *struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if err := json.Unmarshal(body, &v); err != nil {
		return fmt.Errorf("MCP answer: %w", err)
	}
	switch r := v.Result; {
	case v.Error != nil:
		return fmt.Errorf("MCP answer: JSON-RPC error %d %s", v.Error.Code, v.Error.Message)
	case r == nil:
		return fmt.Errorf("MCP answer without a result")
	case r.IsError:
		return fmt.Errorf("MCP answer: tool result with isError")
	case r.StructuredContent == nil:
		return fmt.Errorf("MCP answer: tool result without structuredContent")
	case r.StructuredContent.Status != "ok" || len(r.StructuredContent.Hints) == 0:
		return fmt.Errorf("MCP answer: status %q with %d hints", r.StructuredContent.Status, len(r.StructuredContent.Hints))
	}
	return nil
}
