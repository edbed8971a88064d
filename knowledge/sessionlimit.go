package knowledge

import (
	"context"
	"log/slog"
	"sync"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"

	"github.com/bailinghub/knowledge-sidecar/internal/prom"
)

// SharedLimiter is a per-session rate limit that several replicas draw from
// together (rate_limit.backend: redis). Implementations live outside this
// package (package sharedredis has the Redis one), so knowledge knows no Redis
// types.
type SharedLimiter interface {
	// Allow takes one token from the session's bucket of rps tokens per
	// second and burst tokens at most. When none is left, ok is false and
	// retryAfter says when one is back. err != nil means the backend could
	// not answer: the caller then decides with its local bucket.
	Allow(ctx context.Context, sessionID string, rps float64, burst int) (ok bool, retryAfter time.Duration, err error)
}

// sharedRetryDelay is how long a replica whose shared bucket failed decides
// with its local bucket before asking the shared one again, so an outage
// costs one timeout per replica and second, not one per request.
const sharedRetryDelay = time.Second

// limiter is the Service's per-session rate limit: the shared bucket when
// one is configured and answering, else the local token buckets.
type limiter struct {
	rate  rate.Limit
	burst int
	now   func() time.Time
	log   *slog.Logger

	mu    sync.Mutex
	local *lru.Cache[string, *rate.Limiter]

	shared   SharedLimiter
	fallback prometheus.Counter // nil without a registry
	// down is true while the shared bucket is failing (logged once per
	// transition); retryAt is when to ask it again.
	down    bool
	retryAt time.Time
}

func newLimiter(rps rate.Limit, burst int, now func() time.Time, shared SharedLimiter, log *slog.Logger, reg prometheus.Registerer) (*limiter, error) {
	l := &limiter{rate: rps, burst: burst, now: now, shared: shared, log: log}
	var err error
	if l.local, err = lru.New[string, *rate.Limiter](limiterCacheSize); err != nil {
		return nil, err
	}
	if reg != nil {
		c := prom.Counter("rate_limit_fallback_total",
			"Rate-limit decisions taken by the replica's local bucket because the shared (Redis) bucket could not be reached.")
		if l.fallback, err = prom.TryRegister(reg, c); err != nil {
			return nil, err
		}
	}
	return l, nil
}

// allow takes one token from the session's bucket. When none is left,
// retryAfter is how long until one is back.
func (l *limiter) allow(ctx context.Context, sessionID string) (ok bool, retryAfter time.Duration) {
	if l.shared != nil && l.sharedUsable() {
		ok, retry, err := l.shared.Allow(ctx, sessionID, float64(l.rate), l.burst)
		if err == nil {
			l.sharedUp()
			return ok, retry
		}
		l.sharedFailed(err)
	}
	if l.shared != nil && l.fallback != nil {
		l.fallback.Inc()
	}
	return l.allowLocal(sessionID)
}

func (l *limiter) sharedUsable() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return !l.down || !l.now().Before(l.retryAt)
}

func (l *limiter) sharedUp() {
	l.mu.Lock()
	was := l.down
	l.down = false
	l.mu.Unlock()
	if was {
		l.log.Info("rate limit: the shared bucket answers again; replicas share the per-session limit")
	}
}

func (l *limiter) sharedFailed(err error) {
	l.mu.Lock()
	was := l.down
	l.down, l.retryAt = true, l.now().Add(sharedRetryDelay)
	l.mu.Unlock()
	if !was {
		// err names no address (the implementations' contract).
		l.log.Warn("rate limit: the shared bucket cannot be reached; this replica limits with its local bucket until it is back",
			slog.Any("error", err))
	}
}

func (l *limiter) allowLocal(sessionID string) (ok bool, retryAfter time.Duration) {
	l.mu.Lock()
	lim, found := l.local.Get(sessionID)
	if !found {
		lim = rate.NewLimiter(l.rate, l.burst)
		l.local.Add(sessionID, lim)
	}
	l.mu.Unlock()
	now := l.now()
	if lim.AllowN(now, 1) {
		return true, 0
	}
	missing := 1 - lim.TokensAt(now)
	return false, time.Duration(missing / float64(l.rate) * float64(time.Second))
}
