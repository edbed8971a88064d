// Package coreclient is the adapter of Core's HTTP API: identity, the route
// gate, retrieval (/kb/search) and the capabilities and operator probes,
// behind circuit breakers (package breaker). It speaks in the values and
// errors of package corefacts and knows nothing about the knowledge protocol;
// package knowledge consumes it through the small interfaces declared in
// knowledge/ports.go. The read-only SQL view of Core's database is package
// catalog.
//
// # HTTP client
//
// [Client] implements knowledge.Identity and knowledge.Retriever:
//
//   - [Client.Session] forwards the caller's Authorization header verbatim to
//     GET /agent-auth/v1/session (identity breaker).
//   - [Client.SystemInfo] asks GET /agent-api/v1/workspaces/:route/system-info
//     with the caller's header (identity breaker). An older Core answers 404
//     not_found; that is [corefacts.ErrEndpointAbsent] and is remembered for
//     Options.ProbeInterval.
//   - [Client.SearchKB] calls POST /kb/search for one knowledge base with the
//     sidecar's own service token (retrieval breaker), always with min_score
//     -1 (Core's filter off: the unfiltered top k). Core's filter is modelled
//     by [corefacts.ScoreThreshold] (the route's normalized min_score, 0 staying 0) and
//     [corefacts.KeepsScore], which the caller applies. The answer's key is kb_ids, a KB Core does not list is [corefacts.ErrKBMissing], and
//     Core's 429 (its rate limit on our client) is [corefacts.ErrRateLimited]. Callers
//     pass the KB id as stored (catalog.SQLCatalog.KBs): Core's index cache is keyed
//     by the spelling sent.
//   - [Client.ProbeCapabilities] sends a capabilities probe and returns
//     Core's answer as it came (status, body); package native judges whether
//     it is a native Core, a legacy one or neither. No breaker.
//
// Every call runs under context.WithTimeout(ctx, Options.Timeout). Errors are
// "coreclient: <op>: …" wrapping one of the sentinels of package corefacts (plus
// context.Canceled or context.DeadlineExceeded when the caller gave up or the
// call timed out) or a *CoreError to relay; they never contain the URL, host,
// a credential or Core's body text (except a *CoreError's Agent API message,
// which Core writes for the caller).
//
// # Breakers
//
// The identity and retrieval breakers are package breaker's: only
// corefacts.ErrUnavailable (5xx, transport errors, timeouts, unusable
// answers, our own credential refused) counts as a failure; a caller's
// cancellation is excluded; every other answer, Core's rate limit
// (corefacts.ErrRateLimited) included, means Core is up. While open, a call
// returns corefacts.ErrBreakerOpen without reaching Core.
//
// # Metrics
//
// [NewMetrics] registers the collectors (with the breaker gauges) on a caller-supplied registerer (nil:
// unregistered). Labels come from closed sets only; see [Metrics].
package coreclient
