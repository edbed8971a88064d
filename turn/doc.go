// Package turn is the turn protocol of SPEC §7: parsing a turn request's
// delivery mode and idempotency ids, stripping the field, rewriting Core's
// answer and building the knowledge_delivery block, and every decision
// around them, behind one type (intercept.go): an Interceptor (one per
// sidecar: the ledger, the in-flight set of on_demand attempts, the hints
// switch) admits a Turn per request, in four calls that take plain values —
// Admit (the bearer and route segment), Plan (the body bytes), Answer (Core's
// status and a reader of its answer), Done (the edge's error) — and return a
// Plan (read the body, pass as sent, refuse with an edge-ready error, forward
// this body) and Core's answer rewritten. It binds the mode in the ledger,
// maps the ledger's errors to the edge's answers (409 turn_conflict) and
// releases the binding when Core refused or never received the attempt.
// ReadReply scans Core's answer once: Items and RunID read what Core
// retrieved for the turn (the input of knowledge's same-run hints), and
// Rewrite splices the answer with the block of the route's delivery status
// (knowledge.Delivery, decided before the turn was forwarded). It knows no
// HTTP server, echo or ReverseProxy: the proxy package reads the body,
// forwards it and calls the Turn from its hooks; what an operator counts
// goes to the edge's Recorder.
//
// Both directions splice byte ranges instead of re-marshaling, so memory,
// tool schemas and every other field keep their exact bytes: request.go
// (the request: mode, ids, the field stripped) and answer.go (Core's answer:
// scanned once, read, rewritten) over internal/jsonscan (scan.go).
package turn
