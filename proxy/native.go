package proxy

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

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
// itself. In "auto" mode a verdict is held for one probe interval. While
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
	mode     string // auto | never | always
	interval time.Duration
	prober   Prober
	now      func() time.Time
	m        *metrics

	mu       sync.Mutex
	state    string
	due      time.Time  // the verdict held expires; the next request probes
	inflight *probeCall // the probe being sent, shared by concurrent requests
}

// probeCall is one probe in flight; done is closed once probe and err are
// set.
type probeCall struct {
	done  chan struct{}
	probe *coreclient.Probe
	err   error
}

func newNativeDetector(mode string, interval time.Duration, p Prober, now func() time.Time, m *metrics) (*nativeDetector, error) {
	switch mode {
	case "", "auto":
		mode = "auto"
		if p == nil {
			return nil, fmt.Errorf("proxy: native detection auto needs a prober")
		}
	case "never", "always":
	default:
		return nil, fmt.Errorf("proxy: native detection %q: want auto, never or always", mode)
	}
	d := &nativeDetector{mode: mode, interval: interval, prober: p, now: now, m: m, state: stateUnknown}
	switch mode {
	case "never":
		d.state = stateLegacy
	case "always":
		d.state = stateNative
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
	if d.mode != "auto" || !corefacts.ValidRouteKey(route) {
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
		return call.err == nil && call.probe.Kind == coreclient.ProbeNative
	case <-ctx.Done():
		return false // the caller left; whatever it is answered is not read
	}
}

// maybeProbe forwards this capabilities request to Core when a probe is due.
// handled reports that the caller must relay probe instead of deciding
// itself; probe is nil when Core could not be reached or the caller left
// (err says why), and the caller answers 503 knowledge_unavailable. A legacy verdict is not handled, so the sidecar
// serves the request. A request the prober refuses to send (a route outside
// Core's workspace pattern, an unusable Authorization header) is not handled
// either and decides nothing: the sidecar answers it as it answers any
// knowledge request (404 route_unavailable, 401). While another request's
// probe is in flight nothing is sent and the request is not handled: the
// caller's decide then waits for that probe's verdict.
func (d *nativeDetector) maybeProbe(ctx context.Context, authorization, route string) (probe *coreclient.Probe, handled bool, err error) {
	if d.mode != "auto" {
		return nil, false, nil
	}
	now := d.now()
	d.mu.Lock()
	if d.inflight != nil || now.Before(d.due) {
		d.mu.Unlock()
		return nil, false, nil
	}
	call := d.startLocked(ctx, now, authorization, route)
	d.mu.Unlock()

	select {
	case <-call.done:
	case <-ctx.Done():
		return nil, true, fmt.Errorf("%w: %w", corefacts.ErrUnavailable, ctx.Err()) // the caller left
	}
	p, err := call.probe, call.err
	if err != nil {
		if errors.Is(err, corefacts.ErrUnavailable) {
			return nil, true, err // Core unreachable: nothing learned
		}
		return nil, false, nil // not sent: nothing learned
	}
	if p.Kind == coreclient.ProbeLegacy {
		return nil, false, nil
	}
	return p, true, nil
}

// startLocked sends a probe in the background and registers it as the one
// in flight; called with mu held. The probe is not cancelled by its caller
// leaving, since others may be waiting for it: Core's per-call deadline
// bounds it. Its verdict (legacy or native) is held for the interval from
// start; then the requests waiting for it are released.
func (d *nativeDetector) startLocked(ctx context.Context, start time.Time, authorization, route string) *probeCall {
	call := &probeCall{done: make(chan struct{})}
	d.inflight = call
	ctx = context.WithoutCancel(ctx)
	go func() {
		p, err := d.prober.ProbeCapabilities(ctx, authorization, route)
		d.mu.Lock()
		defer d.mu.Unlock()
		if err == nil {
			switch p.Kind {
			case coreclient.ProbeLegacy:
				d.state, d.due = stateLegacy, start.Add(d.interval)
				d.publish()
			case coreclient.ProbeNative:
				d.state, d.due = stateNative, start.Add(d.interval)
				d.publish()
			}
		}
		call.probe, call.err = p, err
		d.inflight = nil
		close(call.done)
	}()
	return call
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
