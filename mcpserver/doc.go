// Package mcpserver exposes bailing.agent-knowledge.v1 to any MCP host as two
// tools, knowledge_search and knowledge_read, built on the official MCP Go
// SDK. Each call is one HTTP request to the protocol's endpoints (through
// hostclient); a protocol error becomes a tool result with isError set whose
// text starts with the error code and tells the model what to do next. It
// never answers a tool call with a JSON-RPC error.
package mcpserver
