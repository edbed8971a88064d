// Package turn is the turn protocol of SPEC §7 as plain functions: parsing a
// turn request's delivery mode and idempotency ids, stripping the field,
// rewriting Core's answer and building the knowledge_delivery block, and the
// decisions around them (how to handle a request, when to release the
// ledger). ReadReply scans Core's answer once: Items and RunID read what Core
// retrieved for the turn (the input of knowledge's same-run hints), and
// Rewrite splices the answer with the block of the route's delivery status
// (knowledge.Delivery, decided before the turn was forwarded). It knows no
// HTTP server, echo or ReverseProxy: the proxy package calls it from its
// hooks.
//
// Both directions splice byte ranges instead of re-marshaling, so memory,
// tool schemas and every other field keep their exact bytes: request.go
// (the request: mode, ids, the field stripped) and answer.go (Core's answer:
// scanned once, read, rewritten) over the scanner of scan.go.
package turn
