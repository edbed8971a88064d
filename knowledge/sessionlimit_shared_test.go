package knowledge

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"golang.org/x/time/rate"
)

// fakeShared is a SharedLimiter whose answers the test sets.
type fakeShared struct {
	mu    sync.Mutex
	err   error
	ok    bool
	retry time.Duration
	calls int
	rps   float64
	burst int
}

func (f *fakeShared) Allow(_ context.Context, _ string, rps float64, burst int) (bool, time.Duration, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	f.rps, f.burst = rps, burst
	return f.ok, f.retry, f.err
}

func (f *fakeShared) set(ok bool, retry time.Duration, err error) {
	f.mu.Lock()
	f.ok, f.retry, f.err = ok, retry, err
	f.mu.Unlock()
}

// TestSharedLimiterDecidesAndFallsBack: with a shared bucket configured its
// answer decides (same rps and burst, its Retry-After); when it fails the
// local bucket decides (never no limit), each such decision is counted in
// rate_limit_fallback_total (zero at start), the outage is logged once and
// the recovery once, and the shared bucket is asked again after
// sharedRetryDelay.
func TestSharedLimiterDecidesAndFallsBack(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	clock := func() time.Time { return now }
	var logs bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&logs, nil))
	reg := prometheus.NewRegistry()
	sh := &fakeShared{ok: true}
	l, err := newLimiter(rate.Limit(2), 3, clock, sh, log, reg)
	if err != nil {
		t.Fatal(err)
	}
	if got := testutil.ToFloat64(l.fallback); got != 0 {
		t.Fatalf("fallback at start: %v", got)
	}
	if n, err := testutil.GatherAndCount(reg, "knowledge_sidecar_rate_limit_fallback_total"); err != nil || n != 1 {
		t.Fatalf("fallback series at start: %d %v; want 1", n, err)
	}

	// The shared answer decides, with the service's rps and burst.
	ctx := context.Background()
	for i := 0; i < 10; i++ { // more than the local burst: the shared bucket admits
		if ok, _ := l.allow(ctx, "s1"); !ok {
			t.Fatalf("request %d refused while the shared bucket admits", i+1)
		}
	}
	if sh.rps != 2 || sh.burst != 3 {
		t.Errorf("shared bucket asked with rps %v burst %d; want 2 and 3", sh.rps, sh.burst)
	}
	sh.set(false, 2500*time.Millisecond, nil)
	if ok, retry := l.allow(ctx, "s1"); ok || retry != 2500*time.Millisecond {
		t.Errorf("shared refusal: ok=%v retry=%v; want refused after 2.5s", ok, retry)
	}

	// Outage: the local bucket (burst 3) decides; the shared one is not
	// asked again before sharedRetryDelay.
	sh.set(false, 0, errors.New("redis: rate limit: connection failed: redis unavailable"))
	calls := sh.calls
	admitted := 0
	for i := 0; i < 10; i++ {
		if ok, _ := l.allow(ctx, "s1"); ok {
			admitted++
		}
	}
	if admitted != 3 {
		t.Errorf("local fallback admitted %d of 10 at once; want the burst, 3", admitted)
	}
	if sh.calls != calls+1 {
		t.Errorf("shared bucket asked %d times during the outage window; want 1", sh.calls-calls)
	}
	if got := testutil.ToFloat64(l.fallback); got != 10 {
		t.Errorf("rate_limit_fallback_total = %v; want 10", got)
	}
	now = now.Add(sharedRetryDelay)
	l.allow(ctx, "s1") // asks again, still down: no second log line
	if sh.calls != calls+2 {
		t.Errorf("shared bucket not asked again after %v", sharedRetryDelay)
	}
	if n := strings.Count(logs.String(), "cannot be reached"); n != 1 {
		t.Errorf("outage logged %d times; want once:\n%s", n, logs.String())
	}

	// Recovery: asked again after the delay, logged once.
	sh.set(true, 0, nil)
	now = now.Add(sharedRetryDelay)
	for i := 0; i < 5; i++ {
		if ok, _ := l.allow(ctx, "s1"); !ok {
			t.Fatal("refused after the shared bucket recovered")
		}
	}
	if n := strings.Count(logs.String(), "answers again"); n != 1 {
		t.Errorf("recovery logged %d times; want once:\n%s", n, logs.String())
	}
	if got := testutil.ToFloat64(l.fallback); got != 11 {
		t.Errorf("rate_limit_fallback_total = %v after recovery; want 11", got)
	}
}
