// Package coreclient is everything that talks to the legacy BailingHub Core:
// an HTTP client for identity, the route gate and retrieval, circuit breakers,
// and (in the catalog files) the read-only SQL view of Core's database.
// It knows nothing about the knowledge protocol; package knowledge consumes
// it through the small interfaces declared in knowledge/ports.go.
//
// # HTTP client
//
// [Client] implements knowledge.Identity and knowledge.Retriever:
//
//   - [Client.Session] forwards the caller's Authorization header verbatim to
//     GET /agent-auth/v1/session (identity breaker).
//   - [Client.SystemInfo] asks GET /agent-api/v1/workspaces/:route/system-info
//     with the caller's header (identity breaker). An older Core answers 404
//     not_found; that is [ErrEndpointAbsent] and is remembered for
//     Options.ProbeInterval.
//   - [Client.SearchKB] calls POST /kb/search for one knowledge base with the
//     sidecar's own service token (retrieval breaker), always with min_score
//     -1 (Core's filter off: the unfiltered top k). Core's filter is modelled
//     by [ScoreThreshold] (its `0 → 0.35` quirk, the route's 0..1 clamp) and
//     [KeepsScore], which the caller applies. The answer's key is kb_ids, a KB Core does not list is [ErrKBMissing], and
//     Core's 429 (its rate limit on our client) is [ErrRateLimited]. Callers
//     pass the KB id as stored ([SQLCatalog.KBs]): Core's index cache is keyed
//     by the spelling sent.
//   - [Client.ProbeCapabilities] sends a capabilities probe to detect a
//     native Core ([ProbeNative]), a legacy one ([ProbeLegacy]) or neither
//     ([ProbeRelay]). No breaker. [ClassifyProbe] is the same verdict for a
//     capabilities answer the edge relays itself.
//
// Every call runs under context.WithTimeout(ctx, Options.Timeout). Errors are
// "coreclient: <op>: …" wrapping one of the sentinels of types.go (plus
// context.Canceled or context.DeadlineExceeded when the caller gave up or the
// call timed out) or a *CoreError to relay; they never contain the URL, host,
// a credential or Core's body text (except a *CoreError's Agent API message,
// which Core writes for the caller).
//
// # Breakers
//
// [Breaker] wraps sony/gobreaker/v2. Only [ErrUnavailable] (5xx, transport
// errors, timeouts, unusable answers, our own credential refused) counts as a
// failure; a caller's cancellation is excluded; every other answer, Core's
// rate limit ([ErrRateLimited]) included, means Core is up and counts as a
// success. While open, Do returns [ErrBreakerOpen] without calling Core.
//
// # Core's rate limit on the sidecar's client
//
// [RateLimitCheck] reads bz_clients.rate_limit_per_min of the sidecar's own
// client and the most KBs one route searches, logs a non-zero limit at warn
// with the search capacity it implies and exports both as gauges. It runs
// after every passing schema check ([SchemaGate.AfterCheck]).
//
// [IsJSSpace] and [JSTrim] are JavaScript's whitespace and trim(), which Core
// applies to queries and chunk text.
//
// # Managed tasks (Core ≥ 0.8)
//
// [SQLCatalog.TaskPresence] probes Core's six task-control tables (absent,
// partial, enforced); [SchemaGate] runs it with the schema check and every
// interval after, exposes the result as [SchemaGate.TaskControlState] and the
// gauge task_control_state, and answers [SchemaGate.TaskSnapshot] from it.
// [SQLCatalog.TaskSnapshot] reads everything the task rules need in one
// statement; [TaskMember.Valid] is Core's member revalidation.
//
// # Metrics
//
// [NewMetrics] registers the collectors on a caller-supplied registerer (nil:
// unregistered). Labels come from closed sets only; see [Metrics].
package coreclient
