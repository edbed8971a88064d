package breaker_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bailinghub/knowledge-sidecar/breaker"
	"github.com/bailinghub/knowledge-sidecar/corefacts"
	"github.com/bailinghub/knowledge-sidecar/internal/testkit"
)

var (
	fail    = func(context.Context) error { return corefacts.ErrUnavailable }
	succeed = func(context.Context) error { return nil }
)

// counting wraps fn and counts its calls.
func counting(n *atomic.Int32, fn func(context.Context) error) func(context.Context) error {
	return func(ctx context.Context) error { n.Add(1); return fn(ctx) }
}

func newTestBreaker(s breaker.Settings) (*breaker.Breaker, *prometheus.Registry) {
	reg := prometheus.NewRegistry()
	return breaker.New(breaker.FamilyRetrieval, s, breaker.NewMetrics(reg)), reg
}

func stateGauge(t *testing.T, reg *prometheus.Registry) float64 {
	t.Helper()
	return testkit.Metric(t, reg, "knowledge_sidecar_core_breaker_state", map[string]string{"family": "retrieval"})
}

func TestBreakerOpensAfterFailuresAndRefusesWithoutCalling(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, reg := newTestBreaker(breaker.Settings{Failures: 3})
		ctx := context.Background()
		for i := range 3 {
			if b.Open() {
				t.Fatalf("open after %d failures; want closed until 3", i)
			}
			if err := b.Do(ctx, fail); !errors.Is(err, corefacts.ErrUnavailable) || errors.Is(err, corefacts.ErrBreakerOpen) {
				t.Fatalf("failure %d: got %v; want fn's ErrUnavailable", i, err)
			}
		}
		if !b.Open() {
			t.Fatal("open got false after 3 failures; want true")
		}
		var calls atomic.Int32
		for range 5 {
			if err := b.Do(ctx, counting(&calls, succeed)); !errors.Is(err, corefacts.ErrBreakerOpen) {
				t.Errorf("while open: got %v; want ErrBreakerOpen", err)
			}
		}
		if got := calls.Load(); got != 0 {
			t.Errorf("fn calls while open got %d; want 0", got)
		}
		if got := stateGauge(t, reg); got != 2 {
			t.Errorf("state gauge got %v; want 2 (open)", got)
		}
		if got := testkit.Metric(t, reg, "knowledge_sidecar_core_breaker_transitions_total", map[string]string{"family": "retrieval", "to": "open"}); got != 1 {
			t.Errorf("transitions to open got %v; want 1", got)
		}
	})
}

func TestBreakerClientErrorsAndCancellationNeverTrip(t *testing.T) {
	tests := []struct {
		name   string
		ctx    func() context.Context
		err    error
		expect error
	}{
		{"unauthorized", context.Background, corefacts.ErrUnauthorized, corefacts.ErrUnauthorized},
		{"core error", context.Background, &corefacts.CoreError{Status: 403, Code: "route_not_allowed"}, nil},
		{"not found", context.Background, corefacts.ErrNotFound, corefacts.ErrNotFound},
		{"endpoint absent", context.Background, corefacts.ErrEndpointAbsent, corefacts.ErrEndpointAbsent},
		{"caller cancelled", func() context.Context {
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			return ctx
		}, corefacts.ErrUnavailable, corefacts.ErrUnavailable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b, _ := newTestBreaker(breaker.Settings{Failures: 2})
				for range 10 {
					err := b.Do(tt.ctx(), func(context.Context) error { return tt.err })
					if tt.expect != nil && !errors.Is(err, tt.expect) {
						t.Fatalf("got %v; want %v", err, tt.expect)
					}
				}
				if b.Open() {
					t.Errorf("open got true after 10 × %v; want closed", tt.err)
				}
			})
		})
	}
}

func TestBreakerCancellationDoesNotResetFailures(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, _ := newTestBreaker(breaker.Settings{Failures: 3})
		cancelled, cancel := context.WithCancel(context.Background())
		cancel()
		_ = b.Do(context.Background(), fail)
		_ = b.Do(context.Background(), fail)
		_ = b.Do(cancelled, succeed) // excluded: neither success nor failure
		_ = b.Do(context.Background(), fail)
		if !b.Open() {
			t.Error("open got false; want true (3 failures around an excluded call)")
		}
	})
}

func TestBreakerHalfOpenAdmitsOnlyMaxProbes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, reg := newTestBreaker(breaker.Settings{Failures: 1, OpenTimeout: 10 * time.Second, HalfOpenMax: 2})
		ctx := context.Background()
		_ = b.Do(ctx, fail)
		time.Sleep(10*time.Second + time.Nanosecond) // virtual time
		if b.Open() {
			t.Fatal("open got true after the open timeout; want half-open")
		}
		if got := stateGauge(t, reg); got != 1 {
			t.Errorf("state gauge got %v; want 1 (half-open)", got)
		}
		release := make(chan struct{})
		var probes atomic.Int32
		results := make(chan error, 2)
		for range 2 {
			go func() {
				results <- b.Do(ctx, counting(&probes, func(context.Context) error { <-release; return nil }))
			}()
		}
		synctest.Wait() // both probes are in flight
		var extra atomic.Int32
		if err := b.Do(ctx, counting(&extra, succeed)); !errors.Is(err, corefacts.ErrBreakerOpen) {
			t.Errorf("third call while 2 probes in flight: got %v; want ErrBreakerOpen", err)
		}
		close(release)
		for range 2 {
			if err := <-results; err != nil {
				t.Errorf("probe got %v; want nil", err)
			}
		}
		if probes.Load() != 2 || extra.Load() != 0 {
			t.Errorf("probe calls got %d, extra %d; want 2 and 0", probes.Load(), extra.Load())
		}
		if b.Open() || stateGauge(t, reg) != 0 {
			t.Errorf("after 2 good probes: open %v, gauge %v; want closed (0)", b.Open(), stateGauge(t, reg))
		}
	})
}

func TestBreakerFailedProbeReopens(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, reg := newTestBreaker(breaker.Settings{Failures: 1, OpenTimeout: 5 * time.Second})
		ctx := context.Background()
		_ = b.Do(ctx, fail)
		time.Sleep(5*time.Second + time.Nanosecond)
		if err := b.Do(ctx, fail); errors.Is(err, corefacts.ErrBreakerOpen) {
			t.Fatalf("half-open probe refused: %v", err)
		}
		if !b.Open() {
			t.Error("open got false after a failed probe; want true")
		}
		if got := testkit.Metric(t, reg, "knowledge_sidecar_core_breaker_transitions_total", map[string]string{"family": "retrieval", "to": "open"}); got != 2 {
			t.Errorf("transitions to open got %v; want 2", got)
		}
		time.Sleep(5*time.Second + time.Nanosecond)
		if err := b.Do(ctx, succeed); err != nil {
			t.Fatalf("recovery probe got %v; want nil", err)
		}
		if b.Open() || stateGauge(t, reg) != 0 {
			t.Error("after a good probe: want closed")
		}
	})
}

func TestBreakerWindowResetsCounts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, _ := newTestBreaker(breaker.Settings{Failures: 3, Window: 30 * time.Second})
		ctx := context.Background()
		_ = b.Do(ctx, fail)
		_ = b.Do(ctx, fail)
		time.Sleep(31 * time.Second)
		_ = b.Do(ctx, fail)
		_ = b.Do(ctx, fail)
		if b.Open() {
			t.Fatal("open got true; want the window to have reset the first two failures")
		}
		_ = b.Do(ctx, fail)
		if !b.Open() {
			t.Error("open got false after 3 failures in one window; want true")
		}
	})
}

func TestBreakerPanicCountsAsFailure(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, _ := newTestBreaker(breaker.Settings{Failures: 1})
		func() {
			defer func() { _ = recover() }()
			_ = b.Do(context.Background(), func(context.Context) error { panic("boom") })
		}()
		if !b.Open() {
			t.Error("open got false after a panicking call; want true")
		}
	})
}

func TestDefaultBreakerSettings(t *testing.T) {
	got := breaker.DefaultSettings()
	want := breaker.Settings{Failures: 5, Window: 30 * time.Second, OpenTimeout: 10 * time.Second, HalfOpenMax: 1}
	if got != want {
		t.Errorf("got %+v; want %+v", got, want)
	}
	// Zero settings take the defaults: 5 failures open it, 4 do not.
	synctest.Test(t, func(t *testing.T) {
		b, _ := newTestBreaker(breaker.Settings{})
		for range 4 {
			_ = b.Do(context.Background(), fail)
		}
		if b.Open() {
			t.Fatal("open after 4 failures; want the default of 5")
		}
		_ = b.Do(context.Background(), fail)
		if !b.Open() {
			t.Error("closed after 5 failures; want open")
		}
	})
}
