package ledger

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bailinghub/knowledge-sidecar/internal/testkit"
)

// flaky is a Ledger whose Release fails while down is set, as Redis does
// when it hangs.
type flaky struct {
	Ledger
	down     atomic.Bool
	releases atomic.Int64 // calls of Release
	// While holding is set, every Release reports on entered and waits
	// for hold to close before it answers (a hung backend).
	holding       atomic.Bool
	hold, entered chan struct{}
}

func (f *flaky) Release(ctx context.Context, k Key, mode string, r Reservation) error {
	f.releases.Add(1)
	if f.holding.Load() {
		f.entered <- struct{}{}
		<-f.hold
	}
	if f.down.Load() {
		return ErrUnavailable
	}
	return f.Ledger.Release(ctx, k, mode, r)
}

func newFlaky(t *testing.T, clock func() time.Time) (*flaky, *Retrying, *prometheus.Registry) {
	t.Helper()
	f := &flaky{Ledger: NewMemory(1000, time.Hour, clock)}
	r := NewRetrying(f, time.Hour, clock)
	reg := prometheus.NewRegistry()
	r.Register(reg)
	t.Cleanup(func() { r.Close() })
	return f, r, reg
}

// owe reserves k on_demand, takes the backend down and fails its release:
// r now owes the release.
func owe(t *testing.T, f *flaky, r *Retrying, k Key) {
	t.Helper()
	res, err := r.Reserve(context.Background(), k, "on_demand")
	if err != nil {
		t.Fatal(err)
	}
	f.down.Store(true)
	if err := r.Release(context.Background(), k, "on_demand", res); err == nil {
		t.Fatal("release while the backend is down: no error")
	}
}

// TestRetryingCorrectedRetryNeverConflicts: a refused attempt whose release
// failed leaves a record; the corrected retry in the other mode makes the
// owed release first and is reserved — or, while the backend still fails,
// gets ErrUnavailable (503), never ErrConflict (409).
func TestRetryingCorrectedRetryNeverConflicts(t *testing.T) {
	ctx := context.Background()
	for _, corrected := range []Key{key("t1", "m1"), key("t1", "other-message"), key("other-turn", "m1")} {
		f, r, _ := newFlaky(t, time.Now)
		k := key("t1", "m1")
		owe(t, f, r, k)
		if _, err := r.Reserve(ctx, corrected, "inline"); !errors.Is(err, ErrUnavailable) || errors.Is(err, ErrConflict) {
			t.Fatalf("corrected retry %+v while the release still fails: got %v; want ErrUnavailable", corrected, err)
		}
		f.down.Store(false)
		if _, err := r.Reserve(ctx, corrected, "inline"); err != nil {
			t.Fatalf("corrected retry %+v once the backend is back: got %v; want it reserved", corrected, err)
		}
		// The loop may have made the release and not yet counted it done.
		testkit.Eventually(t, 10*time.Second, "no release owed", func() bool { return r.Pending() == 0 })
	}
}

// TestRetryingCorrectedRetryWaitsForTheLoop: a corrected retry that comes
// while the retry loop is making the owed release (taken out of the
// pending list, not yet answered) waits for it instead of answering
// ErrConflict.
func TestRetryingCorrectedRetryWaitsForTheLoop(t *testing.T) {
	ctx := context.Background()
	f, r, _ := newFlaky(t, time.Now)
	f.hold, f.entered = make(chan struct{}), make(chan struct{}, 1)
	var once sync.Once
	release := func() { once.Do(func() { close(f.hold) }) }
	t.Cleanup(release) // before the ledger closes, which waits for the loop
	k := key("t1", "m1")
	owe(t, f, r, k)
	f.holding.Store(true)
	<-f.entered // the loop's retry is in flight
	f.down.Store(false)
	got := make(chan error, 1)
	go func() {
		_, err := r.Reserve(ctx, k, "inline")
		got <- err
	}()
	select {
	case err := <-got:
		t.Fatalf("corrected retry while the loop releases: got %v at once; want it to wait for the release", err)
	case <-time.After(50 * time.Millisecond):
	}
	release()
	if err := <-got; err != nil {
		t.Fatalf("corrected retry once the loop's release went through: got %v; want it reserved", err)
	}
}

// TestRetryingRetriesInBackground: a failed release is made by the retry
// loop once the backend answers again, so another replica (here the
// backend itself, reserved directly) sees no conflict either.
func TestRetryingRetriesInBackground(t *testing.T) {
	ctx := context.Background()
	f, r, reg := newFlaky(t, time.Now)
	k := key("t1", "m1")
	owe(t, f, r, k)
	testkit.Eventually(t, 10*time.Second, "the retry loop trying again", func() bool { return f.releases.Load() >= 3 })
	f.down.Store(false)
	testkit.Eventually(t, 10*time.Second, "the retried release", func() bool { return r.Pending() == 0 })
	if _, err := f.Ledger.Reserve(ctx, k, "inline"); err != nil {
		t.Fatalf("another replica's corrected retry after the retried release: got %v; want it reserved", err)
	}
	if got := testkit.Metric(t, reg, "knowledge_sidecar_ledger_release_retries_total", map[string]string{"result": "released"}); got != 1 {
		t.Errorf("ledger_release_retries_total{result=released}: got %v; want 1", got)
	}
	if got := testkit.Metric(t, reg, "knowledge_sidecar_ledger_pending_releases", nil); got != 0 {
		t.Errorf("ledger_pending_releases: got %v; want 0", got)
	}
}

// TestRetryingGivesUpAtExpiry: a release still failing when its record's
// ttl has passed is given up (the record is gone by then), counted as
// expired; a conflict with a record this process owes nothing is still a
// conflict.
func TestRetryingGivesUpAtExpiry(t *testing.T) {
	ctx := context.Background()
	clock := testkit.NewClock(time.Unix(1_700_000_000, 0))
	f, r, reg := newFlaky(t, clock.Now)
	k := key("t1", "m1")
	owe(t, f, r, k)
	clock.Advance(time.Hour)
	if _, err := r.Reserve(ctx, key("t2", "m2"), "on_demand"); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 10*time.Second, "the expired release given up", func() bool { return r.Pending() == 0 })
	if got := testkit.Metric(t, reg, "knowledge_sidecar_ledger_release_retries_total", map[string]string{"result": "expired"}); got != 1 {
		t.Errorf("ledger_release_retries_total{result=expired}: got %v; want 1", got)
	}
	if _, err := r.Reserve(ctx, key("t2", "m2"), "inline"); !errors.Is(err, ErrConflict) {
		t.Errorf("a mode switch on a turn owed no release: got %v; want ErrConflict", err)
	}
}

// TestRetryingIdle: no goroutine runs while every release succeeds, and
// Close returns.
func TestRetryingIdle(t *testing.T) {
	_, r, _ := newFlaky(t, time.Now)
	ctx := context.Background()
	res, _ := r.Reserve(ctx, key("t1", "m1"), "inline")
	if err := r.Release(ctx, key("t1", "m1"), "inline", res); err != nil {
		t.Fatal(err)
	}
	if r.started {
		t.Error("the retry loop started with nothing to retry")
	}
}
