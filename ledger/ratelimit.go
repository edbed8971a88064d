package ledger

import (
	"context"
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

// kindRate names the per-session rate-limit key's hash.
const kindRate = "rate"

// RateLimiter is the per-session rate limit shared by every replica on the
// ledger's Redis (rate_limit.backend: redis): GCRA through redis_rate, one
// key per session. It implements knowledge.SharedLimiter.
type RateLimiter struct {
	lim       *redis_rate.Limiter
	r         *Redis
	prefix    string
	opTimeout time.Duration
}

// RateLimiter returns the shared rate limit on r's Redis (and r's client:
// the same mode, TLS and timeouts). prefix "" → DefaultRateKeyPrefix; it
// must not contain '{' or '}'.
func (r *Redis) RateLimiter(prefix string) (*RateLimiter, error) {
	if prefix == "" {
		prefix = DefaultRateKeyPrefix
	}
	if strings.ContainsAny(prefix, "{}") {
		return nil, errors.New("ledger: rate limit key prefix must not contain '{' or '}'")
	}
	return &RateLimiter{lim: redis_rate.NewLimiter(r.client), r: r, prefix: prefix, opTimeout: r.opTimeout}, nil
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
func (l *RateLimiter) Allow(ctx context.Context, sessionID string, rps float64, burst int) (bool, time.Duration, error) {
	if rps <= 0 || burst <= 0 {
		return false, 0, errors.New("ledger: rate limit: rps and burst must be positive")
	}
	opCtx, cancel := context.WithTimeout(ctx, l.opTimeout)
	defer cancel()
	res, err := l.lim.Allow(opCtx, l.key(sessionID), Limit(rps, burst))
	if err != nil {
		return false, 0, l.r.fail(ctx, "rate limit", err)
	}
	if res.Allowed > 0 {
		return true, 0, nil
	}
	return false, max(res.RetryAfter, 0), nil
}

// KeyPrefix is the prefix of the limiter's keys (after redis_rate's "rate:").
func (l *RateLimiter) KeyPrefix() string { return l.prefix }

// Reset empties the session's shared bucket (its next requests get the
// whole burst again): for operators and for tests that share one Redis.
func (l *RateLimiter) Reset(ctx context.Context, sessionID string) error {
	opCtx, cancel := context.WithTimeout(ctx, l.opTimeout)
	defer cancel()
	if err := l.lim.Reset(opCtx, l.key(sessionID)); err != nil {
		return l.r.fail(ctx, "rate limit reset", err)
	}
	return nil
}

// key is the session's bucket key (redis_rate adds "rate:" in front).
func (l *RateLimiter) key(sessionID string) string {
	h := tupleHash(kindRate, sessionID)
	return l.prefix + "{" + hex.EncodeToString(h[:8]) + "}"
}
