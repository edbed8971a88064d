// Package toolloop is a complete, minimal agent-host tool loop for
// bailing.agent-knowledge.v1, for host authors who wire the two knowledge
// tools themselves instead of using the MCP server: negotiate, give the model
// knowledge_search and knowledge_read, run the tool calls it asks for over
// HTTP, and feed the results (or the errors, as data) back until it answers.
//
// Model is the only part to replace: wrap your provider's chat API in it.
// ScriptedModel stands in for a model so that the loop runs end to end
// against `knowledge-sidecar demo` (see cmd/toolloop).
package toolloop
