// Package sharedredis is the Redis the sidecar's replicas share: one client
// built from ledger.redis_url and its settings, and the per-session rate
// limit the replicas draw from together on it.
//
// New reads the URL per mode with go-redis's own parsers (ModeSingle:
// redis://, rediss://, unix://; ModeCluster: seed nodes as addr= options;
// ModeSentinel: the sentinels and master_name), gives rediss:// an explicit
// TLS configuration in every mode (TLS 1.2 at least, an optional CA file),
// and builds a client with fail-fast settings (short timeouts, one dial
// attempt and one retry). Errors never quote the URL: it is a secret and may
// carry a password; a failed command's error names its kind from a closed
// set (Reason), never the server's address. go-redis's own process-wide
// logger, which prints addresses, is silenced.
//
// Topology reports which nodes serve the client, for the operator's probe.
// Limiter is the shared per-session rate limit (GCRA through redis_rate,
// one key per session, a hash tag of its own); it implements
// knowledge.SharedLimiter. The turn ledger's Redis backend (package ledger)
// takes a Client too.
package sharedredis
