package proxy

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/bailinghub/knowledge-sidecar/coreclient"
)

// gatedProber answers every probe with kind once gate is closed, counting
// the probes sent.
type gatedProber struct {
	gate  chan struct{}
	kind  coreclient.ProbeKind
	calls atomic.Int32
}

func (p *gatedProber) ProbeCapabilities(ctx context.Context, _, _ string) (coreclient.ProbeKind, error) {
	p.calls.Add(1)
	<-p.gate
	return p.kind, nil
}

// TestNativeFirstRequestsShareOneProbe: concurrent first requests with no
// verdict held wait for one probe and are all handled by its verdict; a
// probe that decides nothing leaves them legacy and the next request probes
// again. A waiter whose caller leaves stops waiting.
func TestNativeFirstRequestsShareOneProbe(t *testing.T) {
	for _, tc := range []struct {
		kind       coreclient.ProbeKind
		wantNative bool
		wantProbes int32 // after one more request
	}{
		{coreclient.ProbeNative, true, 1},
		{coreclient.ProbeLegacy, false, 1},
		{coreclient.ProbeRelay, false, 2},
	} {
		t.Run(tc.kind.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p := &gatedProber{gate: make(chan struct{}), kind: tc.kind}
				d, err := newNativeDetector("auto", time.Minute, p, time.Now, newMetrics(nil, "test"))
				if err != nil {
					t.Fatal(err)
				}
				const n = 5
				got := make([]bool, n)
				var wg sync.WaitGroup
				for i := range n {
					wg.Go(func() { got[i] = d.native(t.Context(), "Bearer x", "orders") })
				}
				// A caller that leaves while the probe is in flight.
				gone, cancel := context.WithCancel(t.Context())
				left := make(chan bool)
				go func() { left <- d.native(gone, "Bearer y", "orders") }()
				synctest.Wait() // every request is blocked on the one probe
				if c := p.calls.Load(); c != 1 {
					t.Fatalf("probes in flight: got %d; want 1", c)
				}
				cancel()
				if <-left {
					t.Errorf("a caller that left was handled as native")
				}
				close(p.gate)
				wg.Wait()
				for i, v := range got {
					if v != tc.wantNative {
						t.Errorf("request %d: native %v; want %v", i, v, tc.wantNative)
					}
				}
				d.native(t.Context(), "Bearer x", "orders")
				if c := p.calls.Load(); c != tc.wantProbes {
					t.Errorf("probes after one more request: got %d; want %d", c, tc.wantProbes)
				}
			})
		})
	}
}

// TestNativeVerdictExpires: after the interval the next request probes
// again; one that decides nothing is handled as legacy even though the
// expired verdict was native.
func TestNativeVerdictExpires(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := &gatedProber{gate: make(chan struct{}), kind: coreclient.ProbeNative}
		close(p.gate)
		d, err := newNativeDetector("auto", time.Minute, p, time.Now, newMetrics(nil, "test"))
		if err != nil {
			t.Fatal(err)
		}
		if !d.native(t.Context(), "Bearer x", "orders") || p.calls.Load() != 1 {
			t.Fatalf("first request: want native after one probe")
		}
		time.Sleep(59 * time.Second) // fake time inside the bubble
		if !d.native(t.Context(), "Bearer x", "orders") || p.calls.Load() != 1 {
			t.Fatalf("within the interval: want native without a probe")
		}
		time.Sleep(2 * time.Second)
		p.kind = coreclient.ProbeRelay
		if d.native(t.Context(), "Bearer x", "orders") {
			t.Errorf("expired verdict, undecided probe: handled as native; want legacy")
		}
		if p.calls.Load() != 2 {
			t.Errorf("probes: got %d; want 2", p.calls.Load())
		}
		d.native(t.Context(), "Bearer x", "Bad_Route")
		if p.calls.Load() != 2 {
			t.Errorf("a malformed route was probed")
		}
	})
}
