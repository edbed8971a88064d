package proxy

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/bailinghub/knowledge-sidecar/config"
	"github.com/bailinghub/knowledge-sidecar/coreclient"
	"github.com/bailinghub/knowledge-sidecar/corefacts"
)

// Core protocol states of native detection (SPEC §8.2).
const (
	stateUnknown = "unknown"
	stateLegacy  = "legacy"
	stateNative  = "native"
)

// nativeDetector remembers whether the Core serves the knowledge protocol
// itself. In auto mode a verdict is held for one probe interval. While
// none is held (start-up, or the interval ran out), the next knowledge or
// turn request of a rolled-out workspace probes Core's capabilities first:
// a capabilities request is itself forwarded as the probe (and Core's
// answer relayed when it is not "legacy"; 503 knowledge_unavailable when
// Core could not be reached); a search, read or turn sends a probe with its
// own bearer and is then handled by the verdict. 404 not_found, 405 and 501
// mean legacy (the sidecar serves the protocol), a capabilities document
// means native (everything passes through), and anything else (401/403/5xx,
// a native Core's own 404 gate code, a transport error) decides nothing: a
// search, read or turn is handled as for a legacy Core, and the next request
// probes again. Concurrent requests share one probe.
type nativeDetector struct {
	mode     string // a config.Native* mode
	interval time.Duration
	prober   Prober
	now      func() time.Time
	m        *metrics

	mu       sync.Mutex
	state    string
	due      time.Time  // the verdict held expires; the next request probes
	inflight *probeCall // the probe being sent, shared by concurrent requests
}

// probeCall is one probe in flight; done is closed once kind and err are
// set.
type probeCall struct {
	done  chan struct{}
	start time.Time
	kind  coreclient.ProbeKind
	err   error
}

func newNativeDetector(mode string, interval time.Duration, p Prober, now func() time.Time, m *metrics) (*nativeDetector, error) {
	d := &nativeDetector{mode: mode, interval: interval, prober: p, now: now, m: m, state: stateUnknown}
	switch mode {
	case "", config.NativeAuto:
		d.mode = config.NativeAuto
		if p == nil {
			return nil, fmt.Errorf("proxy: native detection %s needs a prober", config.NativeAuto)
		}
	case config.NativeNever:
		d.state = stateLegacy
	case config.NativeAlways:
		d.state = stateNative
	default:
		return nil, fmt.Errorf("proxy: native detection %q: want one of %s", mode, strings.Join(config.NativeDetectionModes, ", "))
	}
	d.publish()
	return d, nil
}

func (d *nativeDetector) isNative() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.state == stateNative
}

// native says whether a knowledge or turn request on route (a rolled-out
// workspace) goes to a native Core. With a verdict held it answers at once;
// otherwise it probes with the request's own Authorization header, or waits
// for the probe another request is sending, and answers by the verdict. A
// probe that decides nothing (401/403/5xx, Core unreachable, a header or
// route the prober refuses to send, the caller gone) answers false: the
// request is handled as for a legacy Core and the next one probes again.
func (d *nativeDetector) native(ctx context.Context, authorization, route string) bool {
	if d.mode != config.NativeAuto || !corefacts.ValidRouteKey(route) {
		// A route outside Core's pattern is never probed (Core answers it
		// 404 whatever its version): the state as it stands.
		return d.isNative()
	}
	now := d.now()
	d.mu.Lock()
	if now.Before(d.due) {
		native := d.state == stateNative
		d.mu.Unlock()
		return native
	}
	call := d.inflight
	if call == nil {
		call = d.startLocked(ctx, now, authorization, route)
	}
	d.mu.Unlock()
	select {
	case <-call.done:
		return call.err == nil && call.kind == coreclient.ProbeNative
	case <-ctx.Done():
		return false // the caller left; whatever it is answered is not read
	}
}

// claim registers a probe the caller sends itself (a capabilities request
// forwarded to Core, capsProbe) when one is due: auto mode, no verdict held
// and none in flight. The caller must settle the call it gets; while it is
// in flight other requests wait for its verdict.
func (d *nativeDetector) claim() (*probeCall, bool) {
	if d.mode != config.NativeAuto {
		return nil, false
	}
	now := d.now()
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.inflight != nil || now.Before(d.due) {
		return nil, false
	}
	call := &probeCall{done: make(chan struct{}), start: now}
	d.inflight = call
	return call, true
}

// startLocked sends a probe in the background and registers it as the one
// in flight; called with mu held. The probe is not cancelled by its caller
// leaving, since others may be waiting for it: Core's per-call deadline
// bounds it.
func (d *nativeDetector) startLocked(ctx context.Context, start time.Time, authorization, route string) *probeCall {
	call := &probeCall{done: make(chan struct{}), start: start}
	d.inflight = call
	ctx = context.WithoutCancel(ctx)
	go func() {
		kind, err := d.prober.ProbeCapabilities(ctx, authorization, route)
		d.settle(call, kind, err)
	}()
	return call
}

// settle ends a probe in flight: a legacy or native verdict is held for the
// interval from the probe's start, anything else decides nothing; then the
// requests waiting for it are released. A call is settled once.
func (d *nativeDetector) settle(call *probeCall, kind coreclient.ProbeKind, err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.inflight != call {
		return // settled already
	}
	if err == nil && (kind == coreclient.ProbeLegacy || kind == coreclient.ProbeNative) {
		d.state, d.due = stateLegacy, call.start.Add(d.interval)
		if kind == coreclient.ProbeNative {
			d.state = stateNative
		}
		d.publish()
	}
	call.kind, call.err = kind, err
	d.inflight = nil
	close(call.done)
}

// publish sets the state gauge; called with mu held or before sharing.
func (d *nativeDetector) publish() {
	for _, s := range []string{stateUnknown, stateLegacy, stateNative} {
		v := 0.0
		if s == d.state {
			v = 1
		}
		d.m.native.WithLabelValues(s).Set(v)
	}
}
