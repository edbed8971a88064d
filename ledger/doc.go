// Package ledger records which knowledge delivery mode ("inline" or
// "on_demand") a turn was first sent with, so that a retry of the same turn
// under a different mode is refused before it reaches Core (SPEC §7).
//
// Core identifies a turn by two unique keys (CORE_FACTS §3.4):
// (session_id, route, client_conversation_id, client_turn_id) and
// (session_id, route, user_message_id). A legacy Core does not know the mode,
// so a retry that switched mode would make Core replay the frozen run and the
// sidecar would present it in the other mode. The ledger binds the mode under
// both keys at once:
//
//   - Reserve with the same mode as an earlier record (under either or both
//     keys) succeeds: it is a retry and is forwarded, Core replays the run.
//   - Reserve with a different mode under either key fails with ErrConflict and
//     writes nothing.
//   - A new turn (neither key held a live record) writes both records with
//     the ledger's TTL and reports Created. A successful Reserve always
//     (re)writes both records, so a retry also refreshes them.
//   - Every record counts the attempts that reserved it. Release is called
//     for an attempt Core created no run for (it answered a 4xx, or never
//     received the request) with the Reservation its Reserve returned; it
//     drops that attempt's share, and a record is removed only when the last
//     attempt that joined it is released. So a refused attempt never frees
//     a turn that a concurrent attempt, forwarded meanwhile, may have created
//     the run for (SPEC §7), and a record created anew after an expiry is
//     not released by an attempt of the old one (each record has its own
//     generation).
//
// Ids are opaque to the ledger. Core trims ids before it uses them, so the
// caller must pass ids trimmed exactly as Core trims them (see
// proxy.ParseTurnRequest); otherwise two spellings of one Core turn would get
// two ledger records. Raw ids are never stored: every record key is a SHA-256
// of a length-prefixed, domain-separated encoding of its tuple, and the only
// values stored are the mode, a random record generation and the attempt
// count. No tokens are ever stored.
//
// Two backends satisfy Ledger: Memory (bounded per session and in total,
// with an injected clock, the single-replica default) and Redis (shared by replicas, atomic through
// one Lua script per operation). A backend that cannot be reached yields an
// error matching ErrUnavailable whose message names no address or secret.
//
// The Redis backend runs on a sharedredis.Client (one node, a Redis Cluster
// or a Sentinel-managed primary; the client also carries the replicas'
// shared per-session rate limit); all keys of one script share a hash tag of
// (session, route), so they live in one cluster slot while sessions spread
// over the primaries.
package ledger
