package ledger

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bailinghub/knowledge-sidecar/internal/prom"
)

// Retrying is a Ledger whose failed releases are not lost (SPEC §7). A
// Release that fails (the backend hung or down) is kept and retried in the
// background, with backoff, until it succeeds or the record it would drop
// has expired (ttl after the failure, the latest the record can live). And
// a record kept only by a failed release never answers ErrConflict: a
// Reserve that conflicts with a turn this process still owes a release
// first makes that release, then reserves again; if the release still
// fails, the Reserve fails with ErrUnavailable (503), not ErrConflict
// (409). Another replica learns of the release when a retry gets through:
// at most retryMaxBackoff after the backend is back.
type Retrying struct {
	Ledger
	ttl time.Duration
	now func() time.Time

	// flushing is held while owed releases are made (the loop's batch, or
	// the ones a conflicting Reserve makes itself), which are in `flying`
	// meanwhile; flushed counts the batches made. A Reserve that conflicts
	// while its turn's release is in flight, or was made since it started,
	// waits for it and reserves again rather than answer ErrConflict.
	flushing sync.Mutex
	flushed  atomic.Uint64

	mu      sync.Mutex
	pending []pendingRelease // oldest first
	flying  []pendingRelease // the batch being released (flushing)
	started bool             // the retry loop runs
	closed  bool
	wake    chan struct{}
	stop    chan struct{}
	done    chan struct{}

	m retryMetrics
}

type pendingRelease struct {
	k       Key
	mode    string
	r       Reservation
	expires time.Time
}

// The retry loop's backoff, and the bound on releases kept at once (past
// it the oldest is given up, counted as dropped: its record expires on its
// own within ttl).
const (
	retryFirstBackoff = 100 * time.Millisecond
	retryMaxBackoff   = 2 * time.Second
	retryOpTimeout    = 2 * time.Second
	maxPending        = 10000
)

// Results of a retried release, the label values of
// ledger_release_retries_total.
const (
	retryReleased = "released"
	retryExpired  = "expired"
	retryDropped  = "dropped"
)

type retryMetrics struct {
	retries *prometheus.CounterVec // ledger_release_retries_total{result}
	pending prometheus.Gauge       // ledger_pending_releases
}

// NewRetrying wraps l. ttl is the ledger's record lifetime (≤ 0:
// DefaultTTL); now is the clock (nil: time.Now). No goroutine runs until a
// release fails; Close stops it (and closes l).
func NewRetrying(l Ledger, ttl time.Duration, now func() time.Time) *Retrying {
	if ttl <= 0 {
		ttl = DefaultTTL
	}
	if now == nil {
		now = time.Now
	}
	r := &Retrying{Ledger: l, ttl: ttl, now: now, wake: make(chan struct{}, 1),
		stop: make(chan struct{}), done: make(chan struct{})}
	r.m.retries = prom.ClosedCounter("ledger_release_retries_total",
		"Turn-ledger releases that failed and were retried in the background, by how they ended (released, expired: the record's ttl passed first, dropped: too many pending).",
		"result", []string{retryReleased, retryExpired, retryDropped})
	r.m.pending = prom.Gauge("ledger_pending_releases", "Turn-ledger releases that failed and wait to be retried.")
	return r
}

// Register adds the retry metrics to reg.
func (r *Retrying) Register(reg prometheus.Registerer) {
	reg.MustRegister(r.m.retries, r.m.pending)
}

// Release is l's, and on failure keeps the release to retry it. The error
// is still returned, for the caller to count.
func (r *Retrying) Release(ctx context.Context, k Key, mode string, res Reservation) error {
	err := r.Ledger.Release(ctx, k, mode, res)
	if err == nil || errors.Is(err, ErrInvalidKey) {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return err
	}
	if len(r.pending) >= maxPending {
		r.pending = r.pending[1:]
		r.m.retries.WithLabelValues(retryDropped).Inc()
		r.m.pending.Dec()
	}
	r.pending = append(r.pending, pendingRelease{k: k, mode: mode, r: res, expires: r.now().Add(r.ttl)})
	r.m.pending.Inc()
	if !r.started {
		r.started = true
		go r.loop()
	}
	select {
	case r.wake <- struct{}{}:
	default:
	}
	return err
}

// Reserve is l's; a conflict with a turn this process owes a release
// makes that release first (see Retrying).
func (r *Retrying) Reserve(ctx context.Context, k Key, mode string) (Reservation, error) {
	before := r.flushed.Load()
	res, err := r.Ledger.Reserve(ctx, k, mode)
	if !errors.Is(err, ErrConflict) {
		return res, err
	}
	match := func(p pendingRelease) bool { return sameTurn(p.k, k) }
	if !r.owes(match) && r.flushed.Load() == before {
		return res, err // nothing owed, and nothing released meanwhile
	}
	// Wait for the batch in flight, then make what is still owed.
	if _, ferr := r.release(ctx, match); ferr != nil {
		return Reservation{}, fmt.Errorf("%w: a release owed for this turn failed: %v", ErrUnavailable, ferr)
	}
	return r.Ledger.Reserve(ctx, k, mode)
}

// Close stops the retries (those still pending are given up: their
// records expire within ttl) and closes l.
func (r *Retrying) Close() error {
	r.mu.Lock()
	started := r.started
	if !r.closed {
		r.closed = true
		close(r.stop)
	}
	r.mu.Unlock()
	if started {
		<-r.done
	}
	return r.Ledger.Close()
}

// Pending is how many releases are owed: waiting to be retried, or being
// made.
func (r *Retrying) Pending() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.pending) + len(r.flying)
}

// owes reports whether a release matching match is owed: pending, or in
// the batch being released.
func (r *Retrying) owes(match func(pendingRelease) bool) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.ContainsFunc(r.pending, match) || slices.ContainsFunc(r.flying, match)
}

// release makes the owed releases that match, one batch at a time: in
// flight (owes) from the moment they leave the pending list until they are
// made or back in it. n is how many it tried.
func (r *Retrying) release(ctx context.Context, match func(pendingRelease) bool) (n int, err error) {
	r.flushing.Lock()
	defer r.flushing.Unlock()
	batch := r.take(match)
	if len(batch) == 0 {
		return 0, nil
	}
	err = r.flush(ctx, batch)
	r.flushed.Add(1) // before the batch leaves flying: owes, then flushed, never misses it
	r.mu.Lock()
	r.flying = nil
	r.mu.Unlock()
	return len(batch), err
}

// sameTurn: a and b share either of Core's idempotency keys.
func sameTurn(a, b Key) bool {
	if a.SessionID != b.SessionID || a.Route != b.Route {
		return false
	}
	return a.ConversationID == b.ConversationID && a.TurnID == b.TurnID || a.UserMessageID == b.UserMessageID
}

// take removes and returns the pending releases that match, as the batch
// in flight, and drops the expired ones. Called with flushing held.
func (r *Retrying) take(match func(pendingRelease) bool) []pendingRelease {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.now()
	var out []pendingRelease
	kept := r.pending[:0]
	for _, p := range r.pending {
		switch {
		case !now.Before(p.expires):
			r.m.retries.WithLabelValues(retryExpired).Inc()
			r.m.pending.Dec()
		case match(p):
			out = append(out, p)
			r.m.pending.Dec()
		default:
			kept = append(kept, p)
		}
	}
	clear(r.pending[len(kept):])
	r.pending = kept
	r.flying = out // in flight until release is done with them
	return out
}

// flush makes the releases in ps; those that fail go back to pending.
// The first failure is returned.
func (r *Retrying) flush(ctx context.Context, ps []pendingRelease) error {
	var first error
	for i, p := range ps {
		octx, cancel := context.WithTimeout(context.WithoutCancel(ctx), retryOpTimeout)
		err := r.Ledger.Release(octx, p.k, p.mode, p.r)
		cancel()
		if err == nil || errors.Is(err, ErrInvalidKey) {
			r.m.retries.WithLabelValues(retryReleased).Inc()
			continue
		}
		first = err
		r.mu.Lock()
		r.pending = append(r.pending, ps[i:]...)
		r.m.pending.Add(float64(len(ps) - i))
		r.mu.Unlock()
		break
	}
	return first
}

// loop retries every pending release, backing off while they fail, until
// Close.
func (r *Retrying) loop() {
	defer close(r.done)
	backoff := retryFirstBackoff
	t := time.NewTimer(backoff)
	defer t.Stop()
	for {
		select {
		case <-r.stop:
			return
		case <-r.wake:
		case <-t.C:
		}
		n, ferr := r.release(context.Background(), func(pendingRelease) bool { return true })
		if n == 0 {
			backoff = retryFirstBackoff
			t.Stop()
			continue // until the next failure wakes the loop
		}
		if ferr == nil {
			backoff = retryFirstBackoff
		} else {
			backoff = min(2*backoff, retryMaxBackoff)
		}
		t.Reset(backoff)
	}
}
