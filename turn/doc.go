// Package turn is the turn protocol of SPEC §7 as plain functions: parsing a
// turn request's delivery mode and idempotency ids, stripping the field,
// rewriting Core's answer and building the knowledge_delivery block, and the
// decisions around them (what to bind in the ledger, when to release it,
// which status and revision the block carries). ParseAnswer scans Core's
// answer once: Items reads what Core retrieved for the turn (the input of
// same-run hints, a Hinter) and Rewrite splices the answer. It knows no HTTP server,
// echo or ReverseProxy: the proxy package calls it from its hooks.
//
// Both directions splice byte ranges instead of re-marshaling (json.go), so
// memory, tool schemas and every other field keep their exact bytes.
package turn
