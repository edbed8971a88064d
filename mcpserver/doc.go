// Package mcpserver exposes bailing.agent-knowledge.v1 to any MCP host as two
// tools built on the official MCP Go SDK: knowledge_search and
// knowledge_read, or, in the openai profile, search and fetch. The tools
// call the protocol's endpoints through a Backend (hostclient over HTTP for
// the stdio command, the sidecar's service in process for the remote
// endpoint): one request per call, or for knowledge_read with near and for
// fetch the pages of one read chain. Results are written for the model: one
// short text item and the protocol's answer plus a note as structured
// content. A failure becomes a tool result with isError set, without
// structured content, whose text starts with the error code and tells the
// model what to do next; a tool call is never answered with a JSON-RPC error.
package mcpserver
