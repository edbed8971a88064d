package sharedredis

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"math"
	"strings"
	"time"

	"github.com/go-redis/redis_rate/v10"
)

// DefaultRateKeyPrefix starts every rate-limit key (redis_rate puts its own
// "rate:" in front).
const DefaultRateKeyPrefix = "ks:ratelimit:v1:"

// Limiter is the per-session rate limit shared by every replica on the
// shared Redis (rate_limit.backend: redis): GCRA through redis_rate, one
// key per session. It implements knowledge.SharedLimiter.
type Limiter struct {
	lim    *redis_rate.Limiter
	c      *Client
	prefix string
}

// Limiter returns the shared rate limit on c (the same mode, TLS and
// timeouts as the ledger on it). prefix "" → DefaultRateKeyPrefix; it
// must not contain '{' or '}'.
func (c *Client) Limiter(prefix string) (*Limiter, error) {
	if prefix == "" {
		prefix = DefaultRateKeyPrefix
	}
	if strings.ContainsAny(prefix, "{}") {
		return nil, errors.New("sharedredis: rate limit key prefix must not contain '{' or '}'")
	}
	return &Limiter{lim: redis_rate.NewLimiter(c.rdb), c: c, prefix: prefix}, nil
}

// Limit is the redis_rate limit of rps tokens per second and a bucket of
// burst: one token every 1/rps seconds (GCRA's emission interval), burst at
// once, as golang.org/x/time/rate's token bucket.
func Limit(rps float64, burst int) redis_rate.Limit {
	period := time.Duration(math.Round(float64(time.Second) / rps))
	return redis_rate.Limit{Rate: 1, Burst: burst, Period: max(period, time.Microsecond)}
}

// Allow takes one token from the session's bucket. retryAfter is redis_rate's
// answer (when the next token is back). Errors name no address.
func (l *Limiter) Allow(ctx context.Context, sessionID string, rps float64, burst int) (bool, time.Duration, error) {
	if rps <= 0 || burst <= 0 {
		return false, 0, errors.New("sharedredis: rate limit: rps and burst must be positive")
	}
	opCtx, cancel := context.WithTimeout(ctx, l.c.opTimeout)
	defer cancel()
	res, err := l.lim.Allow(opCtx, l.key(sessionID), Limit(rps, burst))
	if err != nil {
		return false, 0, l.c.fail(ctx, "rate limit", err)
	}
	if res.Allowed > 0 {
		return true, 0, nil
	}
	return false, max(res.RetryAfter, 0), nil
}

// KeyPrefix is the prefix of the limiter's keys (after redis_rate's "rate:").
func (l *Limiter) KeyPrefix() string { return l.prefix }

// Reset empties the session's shared bucket (its next requests get the
// whole burst again): for operators and for tests that share one Redis.
func (l *Limiter) Reset(ctx context.Context, sessionID string) error {
	opCtx, cancel := context.WithTimeout(ctx, l.c.opTimeout)
	defer cancel()
	if err := l.lim.Reset(opCtx, l.key(sessionID)); err != nil {
		return l.c.fail(ctx, "rate limit reset", err)
	}
	return nil
}

// key is the session's bucket key (redis_rate adds "rate:" in front): a
// hash tag of the session's hash, so sessions spread over a cluster's
// primaries and the raw id is never stored.
func (l *Limiter) key(sessionID string) string {
	h := sessionHash(sessionID)
	return l.prefix + "{" + hex.EncodeToString(h[:8]) + "}"
}

// sessionHash is SHA-256 over the length-prefixed encoding of the domain,
// the kind "rate" and the session id: the encoding the turn ledger uses for
// its own keys (the domain is the ledger's, kept when the limiter moved here
// so existing buckets keep their keys; changing it orphans every bucket, so
// bump DefaultRateKeyPrefix with it).
func sessionHash(sessionID string) [sha256.Size]byte {
	h := sha256.New()
	for _, s := range []string{"knowledge-sidecar/turn-mode-ledger/v1", "rate", sessionID} {
		var n [8]byte
		binary.BigEndian.PutUint64(n[:], uint64(len(s)))
		h.Write(n[:])
		h.Write([]byte(s))
	}
	var out [sha256.Size]byte
	h.Sum(out[:0])
	return out
}
