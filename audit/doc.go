// Package audit is the disclosure audit (SPEC §11): one JSON event per
// answer of the knowledge endpoints that discloses (or refused to disclose)
// document material — search, read, an on_demand turn's hints, MCP tool
// calls — naming who saw which documents, never the query, a ref, a cursor,
// a title, a summary or any document text.
//
// Log implements knowledge.Auditor: the service hands it a
// knowledge.Disclosure before the answer is sent, and Log writes the event
// to its sink (a JSON Lines file, reopened by Reopen for logrotate, or
// standard output) and, optionally, to an OpenTelemetry logger (OTLP).
// With the refuse policy a write that fails makes Disclose return an error,
// and the answer becomes 503 knowledge_unavailable.
package audit
