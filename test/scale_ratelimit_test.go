package test

import (
	"context"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bailinghub/knowledge-sidecar/internal/testkit"
	"github.com/bailinghub/knowledge-sidecar/internal/testkit/testdb"
	"github.com/bailinghub/knowledge-sidecar/sharedredis"
	"github.com/bailinghub/knowledge-sidecar/sidecar"
)

// sharedLimiter returns the shared rate limit on c under prefix (a replica's
// view of the shared buckets); c nil: a client of its own on
// KS_TEST_REDIS_URL, closed at cleanup.
func sharedLimiter(t *testing.T, c *sharedredis.Client, prefix string) *sharedredis.Limiter {
	t.Helper()
	if c == nil {
		var err error
		if c, err = sharedredis.New(sharedredis.Options{URL: redisTestURL()}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
	}
	rl, err := c.Limiter(prefix)
	if err != nil {
		t.Fatal(err)
	}
	return rl
}

// capabilities asks for the route's capabilities as session A.
func capabilities(t *testing.T, c *http.Client, sc *Sidecar, token string) (int, http.Header) {
	t.Helper()
	code, h, _ := Call(t, c, "GET", sc.WS(testdb.RouteMulti)+"/knowledge/capabilities", token, nil)
	if code != 200 && code != 429 {
		t.Fatalf("capabilities: %d; want 200 or 429", code)
	}
	if code == 429 {
		if s, err := strconv.Atoi(h.Get("Retry-After")); err != nil || s < 1 {
			t.Fatalf("429 with Retry-After %q; want whole seconds ≥ 1", h.Get("Retry-After"))
		}
	}
	return code, h
}

// TestScaleSharedRateLimit: two sidecar replicas share one GCRA bucket per
// session on the real Redis (SPEC §2: N replicas allow the configured rate,
// not N times it): 40 requests of one session alternating between them are
// accepted at most burst + rps × elapsed times. With a bucket per replica
// they would accept 2 × burst at least.
func TestScaleSharedRateLimit(t *testing.T) {
	prefix := testdb.RedisPrefix(t)
	la, lb := sharedRedisLedger(t, prefix), sharedRedisLedger(t, prefix)
	rl := sharedLimiter(t, nil, testdb.RedisPrefix(t))
	rlB := sharedLimiter(t, nil, rl.KeyPrefix())
	w := NewWorld(t, WorldOptions{})
	const rps, burst = 1.0, 5
	// sidecar.Deps hook: shared rate limiters and ledgers under a per-test key prefix
	a := w.StartSidecar(t, FeatureOptions{Ledger: la, SharedLimiter: rl, RateLimit: rps, RateBurst: burst})
	b := w.StartSidecar(t, FeatureOptions{Ledger: lb, SharedLimiter: rlB, RateLimit: rps, RateBurst: burst})
	c := newClient(t)

	start := time.Now()
	accepted := 0
	for i := 0; i < 40; i++ {
		sc := a
		if i%2 == 1 {
			sc = b
		}
		if code, _ := capabilities(t, c, sc, w.TokenA); code == 200 {
			accepted++
		}
	}
	elapsed := time.Since(start)
	limit := burst + int(rps*elapsed.Seconds()) + 1 // +1: a token refilling as the test began
	if accepted < burst || accepted > limit {
		t.Errorf("accepted %d of 40 in %v across two replicas; want %d..%d (burst + rps × elapsed)", accepted, elapsed, burst, limit)
	}
	if 2*burst <= limit {
		t.Logf("the run took %v: too slow to tell a shared bucket from two local ones", elapsed)
	}
	// Another session has its own bucket.
	if code, _ := capabilities(t, c, b, w.TokenB); code != 200 {
		t.Errorf("session B: %d; want 200", code)
	}
}

// TestScaleRateLimitFallback: Redis goes away under a running replica (a
// TCP relay the test closes): the per-session limit goes on with the local
// bucket (never no limit: at most burst + rps × elapsed accepted), every
// such decision counts in rate_limit_fallback_total (zero before), and the
// outage is logged once, without an address.
func TestScaleRateLimitFallback(t *testing.T) {
	relay, l, rc := redisRelay(t)
	rl := sharedLimiter(t, rc, testdb.RedisPrefix(t))
	w := NewWorld(t, WorldOptions{})
	var logs testkit.Buffer
	log := slog.New(slog.NewJSONHandler(&logs, nil))
	const rps, burst = 1.0, 3
	// sidecar.Deps hook: a shared rate limiter behind a relay the test cuts
	sc := w.StartSidecar(t, FeatureOptions{Ledger: l, SharedLimiter: rl, RateLimit: rps, RateBurst: burst, Logger: log})
	reg := sc.Registry
	c := newClient(t)
	const fallback = "knowledge_sidecar_rate_limit_fallback_total"
	if got := testkit.Metric(t, reg, fallback, nil); got != 0 {
		t.Fatalf("%s at start: %v; want 0", fallback, got)
	}
	// Through Redis: the shared bucket decides, nothing falls back.
	if code, _ := capabilities(t, c, sc, w.TokenA); code != 200 {
		t.Fatalf("first request: %d", code)
	}
	if got := testkit.Metric(t, reg, fallback, nil); got != 0 {
		t.Fatalf("%s with Redis up: %v; want 0", fallback, got)
	}

	relay.shut()
	start := time.Now()
	accepted := 0
	const n = 12
	for i := 0; i < n; i++ {
		if code, _ := capabilities(t, c, sc, w.TokenA); code == 200 {
			accepted++
		}
	}
	elapsed := time.Since(start)
	if limit := burst + int(rps*elapsed.Seconds()) + 1; accepted > limit || accepted < 1 {
		t.Errorf("with Redis gone: accepted %d of %d in %v; want 1..%d (the local bucket, never no limit)", accepted, n, elapsed, limit)
	}
	if got := testkit.Metric(t, reg, fallback, nil); got != n {
		t.Errorf("%s = %v; want %d (every decision while Redis is gone)", fallback, got, n)
	}
	out := logs.String()
	if k := strings.Count(out, "the shared bucket cannot be reached"); k != 1 {
		t.Errorf("outage logged %d times; want once:\n%s", k, out)
	}
	if strings.Contains(out, relay.ln.Addr().String()) || strings.Contains(out, "127.0.0.1:6379") {
		t.Errorf("the log names a Redis address:\n%s", out)
	}

}

// TestScaleBuildSharesRateLimit: replicas built as `serve` builds them,
// with only a ledger Redis URL set, share the per-session rate limit by
// default (rate_limit.backend defaults to redis): 30 requests alternating
// between two replicas are accepted at most burst + rps × elapsed times.
func TestScaleBuildSharesRateLimit(t *testing.T) {
	sharedRedisLedger(t, testdb.RedisPrefix(t)) // Redis reachable, or skip/fail
	w := NewWorld(t, WorldOptions{})
	// The built replicas use the default key prefix: leave the sessions'
	// buckets empty for later tests (they share this Redis).
	rl := sharedLimiter(t, nil, "")
	reset := func() {
		for _, s := range []string{testdb.SessionA, testdb.SessionB} {
			if err := rl.Reset(context.Background(), s); err != nil {
				t.Errorf("reset the bucket: %v", err)
			}
		}
	}
	reset()
	t.Cleanup(reset)
	cfg := w.Config()
	cfg.Ledger.RedisURL = redisTestURL()
	cfg.RateLimit.RPS, cfg.RateLimit.Burst = 1, 4
	if err := cfg.Validate(sidecar.ExtraChecks...); err != nil {
		t.Fatal(err)
	}
	if got := cfg.RateLimitBackend(); got != "redis" {
		t.Fatalf("rate limit backend with a Redis URL: %q; want redis", got)
	}
	var urls []string
	var apps []*sidecar.App
	for range 2 {
		app, url := serveBuilt(t, cfg, sidecar.Deps{})
		urls, apps = append(urls, url), append(apps, app)
	}
	c := newClient(t)
	start := time.Now()
	accepted := 0
	for i := range 30 {
		code, _, _ := Call(t, c, "GET", urls[i%2]+"/agent-api/v1/workspaces/"+testdb.RouteMulti+"/knowledge/capabilities", w.TokenA, nil)
		switch code {
		case 200:
			accepted++
		case 429:
		default:
			t.Fatalf("request %d: %d", i, code)
		}
	}
	limit := cfg.RateLimit.Burst + int(cfg.RateLimit.RPS*time.Since(start).Seconds()) + 1
	if accepted < 1 || accepted > limit {
		t.Errorf("accepted %d of 30 across two built replicas; want 1..%d", accepted, limit)
	}
	for i, app := range apps {
		if got := testkit.Metric(t, app.Server.Registry(), "knowledge_sidecar_rate_limit_fallback_total", nil); got != 0 {
			t.Errorf("replica %d fell back %v times with Redis up", i, got)
		}
	}
}
