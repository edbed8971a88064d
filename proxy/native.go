package proxy

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/bailinghub/knowledge-sidecar/coreclient"
)

// Core protocol states of native detection (SPEC §8.2).
const (
	stateUnknown = "unknown"
	stateLegacy  = "legacy"
	stateNative  = "native"
)

// nativeDetector remembers whether the Core serves the knowledge protocol
// itself. In "auto" mode the first capabilities request of each probe
// interval is forwarded to Core: 404/405/501 mean legacy (the sidecar serves
// the protocol), a capabilities document means native (everything passes
// through until the next probe), and anything else (401/403/5xx) is relayed
// to the caller and decides nothing. Until a probe decides, the sidecar
// behaves as for a legacy Core.
type nativeDetector struct {
	mode     string // auto | never | always
	interval time.Duration
	prober   Prober
	now      func() time.Time
	m        *metrics

	mu      sync.Mutex
	state   string
	due     time.Time // next probe not before
	probing bool
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

// maybeProbe forwards this capabilities request to Core when a probe is due.
// handled reports that the caller must relay probe instead of deciding
// itself; probe is nil when Core could not be reached (err says why), and
// the caller answers 502/504. A legacy verdict is not handled, so the
// sidecar serves the request. A request the prober refuses to send (a route
// outside Core's workspace pattern, an unusable Authorization header) is not
// handled either and decides nothing: the sidecar answers it as it answers
// any knowledge request (404 route_unavailable, 401).
func (d *nativeDetector) maybeProbe(ctx context.Context, authorization, route string) (probe *coreclient.Probe, handled bool, err error) {
	if d.mode != "auto" {
		return nil, false, nil
	}
	now := d.now()
	d.mu.Lock()
	if d.probing || now.Before(d.due) {
		d.mu.Unlock()
		return nil, false, nil
	}
	d.probing = true
	d.mu.Unlock()

	p, err := d.prober.ProbeCapabilities(ctx, authorization, route)

	d.mu.Lock()
	defer d.mu.Unlock()
	d.probing = false
	if err != nil {
		if errors.Is(err, coreclient.ErrUnavailable) {
			return nil, true, err // Core unreachable (or the caller left): nothing learned
		}
		return nil, false, nil // not sent: nothing learned
	}
	switch p.Kind {
	case coreclient.ProbeLegacy:
		d.state, d.due = stateLegacy, now.Add(d.interval)
		d.publish()
		return nil, false, nil
	case coreclient.ProbeNative:
		d.state, d.due = stateNative, now.Add(d.interval)
		d.publish()
		return p, true, nil
	default:
		return p, true, nil
	}
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
