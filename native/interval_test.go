package native

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/bailinghub/knowledge-sidecar/corefacts"
	"github.com/bailinghub/knowledge-sidecar/internal/testkit"
)

// switchProber answers every probe with the Core's current answer, which a
// test changes to upgrade (or roll back) the Core, and counts the probes.
type switchProber struct {
	mu     sync.Mutex
	status int
	body   []byte
	calls  int
}

func (p *switchProber) set(status int, body []byte) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.status, p.body = status, body
}

func (p *switchProber) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.calls
}

func (p *switchProber) ProbeCapabilities(context.Context, string, corefacts.RouteKey) (int, []byte, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.calls++
	return p.status, p.body, nil
}

// TestProbeIntervalBoundsFlip: probe_interval bounds how soon a Core
// upgraded to a native version (or rolled back) is seen. With the injected
// clock (Options.Now), the verdict held is answered without a probe until
// the interval from its probe's start has passed, however the Core changed
// meanwhile; the first request after it probes again and follows the new
// verdict. The same in both directions.
func TestProbeIntervalBoundsFlip(t *testing.T) {
	const interval = 90 * time.Second
	clock := testkit.NewClock(time.Date(2026, 12, 6, 5, 0, 0, 0, time.UTC))
	p := &switchProber{status: 404, body: legacyBody}
	var states []State
	d, err := New(Options{Mode: "auto", Interval: interval, Prober: p, Now: clock.Now,
		OnState: func(s State) { states = append(states, s) }})
	if err != nil {
		t.Fatal(err)
	}
	route := testkit.RouteKey("orders")
	ask := func(step string, wantNative bool, wantProbes int) {
		t.Helper()
		if got := d.Native(t.Context(), "Bearer x", route); got != wantNative {
			t.Errorf("%s: native %v; want %v", step, got, wantNative)
		}
		if got := p.count(); got != wantProbes {
			t.Errorf("%s: probes %d; want %d", step, got, wantProbes)
		}
	}
	ask("start, legacy Core", false, 1)

	p.set(200, nativeBody) // Core upgraded to a native version
	clock.Advance(interval - time.Second)
	ask("upgraded, within the interval", false, 1)
	clock.Advance(time.Second)
	ask("upgraded, interval over", true, 2)
	ask("native verdict held", true, 2)

	p.set(404, legacyBody) // rolled back
	clock.Advance(interval - time.Nanosecond)
	ask("rolled back, within the interval", true, 2)
	clock.Advance(time.Nanosecond)
	ask("rolled back, interval over", false, 3)

	want := []State{StateUnknown, StateLegacy, StateNative, StateLegacy}
	if len(states) < len(want) || states[0] != want[0] {
		t.Fatalf("states published %v; want changes %v", states, want)
	}
	var changes []State
	for _, s := range states {
		if len(changes) == 0 || changes[len(changes)-1] != s {
			changes = append(changes, s)
		}
	}
	if len(changes) != len(want) {
		t.Fatalf("state changes %v; want %v", changes, want)
	}
	for i := range want {
		if changes[i] != want[i] {
			t.Fatalf("state changes %v; want %v", changes, want)
		}
	}
}
