package native

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/bailinghub/knowledge-sidecar/corefacts"
	"github.com/bailinghub/knowledge-sidecar/internal/testkit"
	"github.com/bailinghub/knowledge-sidecar/protocol"
)

// gatedProber answers every probe with status and body once gate is
// closed, counting the probes sent.
type gatedProber struct {
	gate   chan struct{}
	status int
	body   []byte
	calls  atomic.Int32
}

func (p *gatedProber) ProbeCapabilities(ctx context.Context, _ string, _ corefacts.RouteKey) (int, []byte, error) {
	p.calls.Add(1)
	<-p.gate
	return p.status, p.body, nil
}

var (
	nativeBody = []byte(`{"schema_version":"` + protocol.CapabilitiesSchema + `"}`)
	legacyBody = []byte(`{"error":"not_found","message":"Not found."}`)
)

// TestFirstRequestsShareOneProbe: concurrent first requests with no
// verdict held wait for one probe and are all handled by its verdict; a
// probe that decides nothing leaves them legacy and the next request probes
// again. A waiter whose caller leaves stops waiting.
func TestFirstRequestsShareOneProbe(t *testing.T) {
	for _, tc := range []struct {
		name       string
		status     int
		body       []byte
		wantNative bool
		wantProbes int32 // after one more request
		wantState  State
	}{
		{"native", 200, nativeBody, true, 1, StateNative},
		{"legacy", 404, legacyBody, false, 1, StateLegacy},
		{"relay", 401, []byte(`{"error":"unauthorized"}`), false, 2, StateUnknown},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p := &gatedProber{gate: make(chan struct{}), status: tc.status, body: tc.body}
				var state State
				d, err := New(Options{Mode: "auto", Interval: time.Minute, Prober: p, OnState: func(s State) { state = s }})
				if err != nil {
					t.Fatal(err)
				}
				const n = 5
				got := make([]bool, n)
				var wg sync.WaitGroup
				for i := range n {
					wg.Go(func() { got[i] = d.Native(t.Context(), "Bearer x", testkit.RouteKey("orders")) })
				}
				// A caller that leaves while the probe is in flight.
				gone, cancel := context.WithCancel(t.Context())
				left := make(chan bool)
				go func() { left <- d.Native(gone, "Bearer y", testkit.RouteKey("orders")) }()
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
				d.Native(t.Context(), "Bearer x", testkit.RouteKey("orders"))
				if c := p.calls.Load(); c != tc.wantProbes {
					t.Errorf("probes after one more request: got %d; want %d", c, tc.wantProbes)
				}
				if state != tc.wantState {
					t.Errorf("state published: got %q; want %q", state, tc.wantState)
				}
			})
		})
	}
}

// TestVerdictExpires: after the interval the next request probes again;
// one that decides nothing is handled as legacy even though the expired
// verdict was native.
func TestVerdictExpires(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := &gatedProber{gate: make(chan struct{}), status: 200, body: nativeBody}
		close(p.gate)
		d, err := New(Options{Mode: "auto", Interval: time.Minute, Prober: p})
		if err != nil {
			t.Fatal(err)
		}
		if !d.Native(t.Context(), "Bearer x", testkit.RouteKey("orders")) || p.calls.Load() != 1 {
			t.Fatalf("first request: want native after one probe")
		}
		time.Sleep(59 * time.Second) // fake time inside the bubble
		if !d.Native(t.Context(), "Bearer x", testkit.RouteKey("orders")) || p.calls.Load() != 1 {
			t.Fatalf("within the interval: want native without a probe")
		}
		time.Sleep(2 * time.Second)
		p.status = 503
		if d.Native(t.Context(), "Bearer x", testkit.RouteKey("orders")) {
			t.Errorf("expired verdict, undecided probe: handled as native; want legacy")
		}
		if p.calls.Load() != 2 {
			t.Errorf("probes: got %d; want 2", p.calls.Load())
		}
		d.Native(t.Context(), "Bearer x", testkit.RouteKey("Bad_Route"))
		if p.calls.Load() != 2 {
			t.Errorf("a malformed route was probed")
		}
	})
}

// TestClaim: a claimed probe holds off other claims and probes until it is
// settled; its answer is the verdict, a failure decides nothing.
func TestClaim(t *testing.T) {
	p := &gatedProber{gate: make(chan struct{})}
	close(p.gate)
	d, err := New(Options{Mode: "auto", Interval: time.Minute, Prober: p})
	if err != nil {
		t.Fatal(err)
	}
	call, ok := d.Claim()
	if !ok {
		t.Fatal("no verdict held: want the probe claimed")
	}
	if _, again := d.Claim(); again {
		t.Error("a second claim while one is in flight; want none")
	}
	d.Fail(call, context.DeadlineExceeded)
	call, ok = d.Claim()
	if !ok {
		t.Fatal("after a failed probe: want the next claim")
	}
	if k := d.Answer(call, 405, nil); k != Legacy {
		t.Errorf("405: got %v; want legacy", k)
	}
	if _, ok := d.Claim(); ok {
		t.Error("verdict held: want no claim")
	}
	if d.IsNative() || p.calls.Load() != 0 {
		t.Errorf("native %v after %d probes; want legacy without a probe", d.IsNative(), p.calls.Load())
	}
}

// TestModes: never and always decide without probing; auto needs a
// prober; other modes are refused.
func TestModes(t *testing.T) {
	for _, tc := range []struct {
		mode    string
		prober  Prober
		native  bool
		wantErr bool
	}{
		{mode: "never", native: false},
		{mode: "always", native: true},
		{mode: "auto", wantErr: true},
		{mode: "", wantErr: true},
		{mode: "sometimes", prober: &gatedProber{}, wantErr: true},
	} {
		d, err := New(Options{Mode: tc.mode, Prober: tc.prober})
		if (err != nil) != tc.wantErr {
			t.Errorf("%q: got error %v; want error %v", tc.mode, err, tc.wantErr)
			continue
		}
		if err != nil {
			continue
		}
		if got := d.Native(context.Background(), "Bearer x", testkit.RouteKey("orders")); got != tc.native {
			t.Errorf("%q: native %v; want %v", tc.mode, got, tc.native)
		}
		if _, ok := d.Claim(); ok {
			t.Errorf("%q: a probe was claimed", tc.mode)
		}
	}
}

// TestClassify: what each capabilities answer says of Core's version
// (SPEC §8.2).
func TestClassify(t *testing.T) {
	for _, tc := range []struct {
		name   string
		status int
		body   string
		want   Kind
	}{
		{"legacy 404", 404, `{"error":"not_found","message":"Not found."}`, Legacy},
		{"404 without a body", 404, ``, Legacy},
		{"404 not json", 404, `<html>`, Legacy},
		{"native gate 404", 404, `{"error":"route_unavailable","message":"The configured route is unavailable."}`, Relay},
		{"405", 405, `{"error":"method_not_allowed"}`, Legacy},
		{"501", 501, `{}`, Legacy},
		{"native", 200, string(nativeBody), Native},
		{"unknown 200", 200, `{"schema_version":"something.else"}`, Relay},
		{"200 not json", 200, `ok`, Relay},
		{"401", 401, `{"error":"unauthorized"}`, Relay},
		{"403", 403, `{"error":"route_not_allowed"}`, Relay},
		{"503", 503, ``, Relay},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Classify(tc.status, []byte(tc.body)); got != tc.want {
				t.Errorf("got %v; want %v", got, tc.want)
			}
		})
	}
}
