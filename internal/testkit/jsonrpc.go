package testkit

import "encoding/json"

// RPCAnswer is a JSON-RPC 2.0 answer as a test reads it (an MCP server's,
// on stdio or over HTTP): the id and the result undecoded, or the error.
type RPCAnswer struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Result  json.RawMessage `json:"result"`
	Error   *RPCError       `json:"error"`
}

// RPCError is a JSON-RPC 2.0 error object.
type RPCError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

// ToolCallAnswer is a JSON-RPC answer to an MCP tools/call: whether the
// tool failed and the text of its content.
type ToolCallAnswer struct {
	ID     json.RawMessage `json:"id"`
	Result struct {
		IsError bool `json:"isError"`
		Content []struct {
			Text string `json:"text"`
		} `json:"content"`
	} `json:"result"`
}
