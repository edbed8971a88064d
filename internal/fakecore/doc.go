// Package fakecore is a fake BailingHub Core (0.5–0.9) for end-to-end tests
// and the demo command. [Core] is an http.Handler (mount it on an
// httptest.Server) that answers the way /work/shared/core/CORE_FACTS.md
// describes; it is a test double, not an implementation, and its retrieval is
// lexical instead of embeddings.
//
// Surfaces:
//
//   - GET /agent-auth/v1/session: `Authorization: Bearer bha_…` of a session
//     added with [Core.AddSession] (tokens from [Token]) → 200 with Core's
//     fields; anything else → 401 {"error":"unauthorized"}.
//   - Agent Auth's sign-in flow (CORE_FACTS Addendum 4, agentauth.go):
//     POST /agent-auth/v1/authorizations with exactly Core's fields and rules
//     (loopback 127.0.0.1/[::1] callbacks with a port, never localhost; state
//     8–512; S256 only; routes within the client's allowlist, else
//     invalid_client; 10 a minute per client and first X-Forwarded-For
//     address), the business side (GET …/{id}, POST …/approve and …/deny with
//     the Client Token; 409 processed, 410 expired), POST /agent-auth/v1/token
//     (2-minute single-use codes, PKCE checked, refresh rotation that ends
//     the previous access token at once, a replayed refresh token revoking
//     the session, Options.AccessTTL) and POST /agent-auth/v1/revoke. Clients
//     come from [Core.AddAuthClient]; [Consent] is the business system's
//     consent page (approve / deny) that a client's agent_authorize_url
//     names; [Core.ExpireAccessTokens] expires the issued access tokens.
//   - /agent-api/*: authenticates first (401 even for unknown paths), then
//     matches; an unknown path or method → 404 {"error":"not_found"}.
//     system-info (Options.SystemInfo) and the native knowledge endpoints
//     (Options.Native) answer the route gate ([Core.SetRoute]) with Core's
//     {"error","message"} bodies; turns follow CORE_FACTS §3: 512 KiB limit,
//     declared fields (knowledge_delivery is undeclared unless Native,
//     task_binding unless TaskControl), exact messages, idempotency on both
//     unique keys with frozen answers and 409 turn_conflict, inline knowledge
//     fixed by [Core.SetTurnKnowledge] or retrieved from the turn's input with
//     the search ranking ([Core.SetTurnRetrieval]; [Score] ignores common
//     English and Chinese stop-words), optional gzip (Options.GzipTurns).
//   - POST /kb/search: only Options.ServiceToken (Bearer or ?token=); Core's
//     parsing quirks (kb_ids wins, query trimmed like JavaScript and cut to
//     2000, top_k and min_score through `Number(x ?? d) || d`, 0 → 0.35),
//     unknown ids dropped from kb_ids, ids matched case-insensitively and
//     echoed as sent, 400 知识库不可用：<ids> when none exists, 500
//     internal_error with x-request-id on invalid JSON, a negative min_score
//     keeping the whole top k, a disabled KB and an embeddings outage
//     ([Core.SetEmbeddingsOutage], per KB or all) silently without hits (200,
//     the id still listed), 429 超出限速（N/分钟） past Options.RateLimitPerMin
//     ([Core.SetRateLimit]). Documents ([Core.AddDoc], [Core.UpdateDoc],
//     [Core.RemoveDoc]) take the stored content (after Core's ingest
//     sanitization) and are cut with [Chunks] exactly as Core 0.3.4 cuts them
//     (UTF-16 units, U+FFFD for a split surrogate pair, JavaScript trim;
//     proven against testdata/chunk-vectors.json); updates and removals can
//     keep stale chunks in the index until [Core.Reindex], like Core's cache,
//     and a search by a spelling other than the stored one sees a snapshot
//     of the index that writes do not refresh.
//   - Anything else → 404 {"error":"not found"} (legacy spelling).
//
// Every JSON answer carries `content-type: application/json; charset=utf-8`
// and `cache-control: no-store`.
//
// Fault injection: [Core.SetFault] with a path prefix ("" = all) adds
// latency, hangs until the request ends, resets the connection, or answers a
// status. Observation: [Core.Calls] counts requests by path prefix (faulted
// ones included), [Core.LastRequest] returns the last request's headers and
// body, [Core.RunsCreated] / [Core.Runs] expose the runs turns created.
//
// Invented details (Core's shape is not documented): the rate limit's
// one-minute window (started by the first call), the system-info 200
// body, the native search/read stub answers, renderer/page_context messages,
// the memory.recent item shape, and the separator of ids in 知识库不可用.
package fakecore
