package sharedredis

import (
	"context"

	"github.com/redis/go-redis/v9"
)

// go-redis writes its own diagnostics (a failed dial, the primary Sentinel
// chose) through one process-wide logger, as plain text to stderr with the
// servers' addresses in them. The Redis URL is a secret of the deployment,
// and the sidecar's logs are JSON lines; so the library's own lines are
// dropped (as soon as this package is linked in). Its failures reach
// operators as the ledger's and the rate limit's errors, metrics
// (ledger_errors_total, rate_limit_fallback_total) and the sidecar's own
// log lines.
func init() { redis.SetLogger(silentRedisLog{}) }

type silentRedisLog struct{}

func (silentRedisLog) Printf(context.Context, string, ...any) {}

// QuietLogs silences go-redis's process-wide logger, which prints server
// addresses; the users of the client report their own failures, without
// them. (The package's init already did; QuietLogs undoes a later
// redis.SetLogger by someone else.)
func QuietLogs() { redis.SetLogger(silentRedisLog{}) }
