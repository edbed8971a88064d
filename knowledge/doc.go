// Package knowledge implements the optional on-demand knowledge protocol
// bailing.agent-knowledge.v1 for Agent Sessions: the capabilities, search and
// read endpoints, the signed references and cursors they hand out, and the
// byte budgets that bound every response body. For an intercepted turn,
// Delivery decides the status and scope revision of its delivery block
// before it is forwarded, and TurnHintsFor builds the same-run hints of an
// on_demand turn (SPEC §7) from what Core retrieved for the turn, through
// the search pipeline (catalog checks, re-check, summary, refs bound to the
// turn's run, budget) without calling Core.
//
// The package takes plain Go values and returns the exact response body bytes
// or an *Error; it never imports an HTTP server framework, so the proxy layer
// only has to copy bytes and status codes. Everything it needs from the
// legacy Core is expressed by the three small interfaces in ports.go
// (Identity, Retriever and Catalog), written in package corefacts' values and
// implemented by packages coreclient (Core's HTTP API) and catalog (its SQL view).
//
// Search asks Core for each knowledge base's unfiltered top k and applies
// the route's threshold itself, as Core's filter would
// (core.ScoreThreshold): a knowledge base that holds a ready document
// (Catalog.ReadyKBs, asked only for the ones that answered nothing) and
// answers no hit at all has failed silently — an embeddings outage — and
// makes the status partial or unavailable, never "ok" without hints.
//
// Every request is checked in the same order as Core checks its own Agent API:
//
//	identity (401/503) → per-session rate limit (429) → body size and shape
//	(413/400) → managed task (409/400/503, Core ≥ 0.8) → route syntax and gate
//	(404/403) → ref/cursor authenticity (400) → expiry (410) → binding (400) →
//	run (404/409) → scope (409) → document (409/503)
//
// The managed-task step (task.go) applies Core's task rules through the Tasks
// interface, which the catalog's schema gate implements; without task tables
// it is a no-op.
//
// References ("kr2." prefix) and cursors ("kc2." prefix) are compact binary
// claims encrypted and authenticated with XChaCha20-Poly1305 under
// per-purpose keys the Keyring derives from each secret (HKDF); only the
// prefix and the key id are readable. Nothing is stored on the server, and
// replicas sharing the keys accept each other's references. Version 1 tokens
// ("kr1."/"kc1.") are refused as invalid.
//
// Response bodies are serialized by this package's own JSON writer
// (AppendJSONString) so their size on the wire is known exactly before they
// are written: search bodies are at most 4096 bytes and read bodies at most
// the caller's max_bytes.
package knowledge
