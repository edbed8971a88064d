package native

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/bailinghub/knowledge-sidecar/corefacts"
)

// State is the Core's protocol state as detection last decided it (the
// label values of core_protocol_state).
type State string

const (
	StateUnknown State = "unknown"
	StateLegacy  State = "legacy"
	StateNative  State = "native"
)

// States is the closed set of States.
var States = []State{StateUnknown, StateLegacy, StateNative}

// Prober sends Core a capabilities request for route with a caller's
// Authorization header and returns Core's answer as it came (status and
// body, at most BodyLimit bytes); err when no answer could be had.
// coreclient.Client is the production one; Classify judges the answer.
type Prober interface {
	ProbeCapabilities(ctx context.Context, authorization string, route corefacts.RouteKey) (status int, body []byte, err error)
}

// The detection modes (native_detection, SPEC §8.2), the one place they are
// spelled; ModeAuto is the default.
const (
	ModeAuto   = "auto"   // probe Core's capabilities and follow the verdict
	ModeNever  = "never"  // the Core is legacy: serve the protocol
	ModeAlways = "always" // the Core is native: pass everything through
)

// Modes lists the valid detection modes.
var Modes = []string{ModeAuto, ModeNever, ModeAlways}

// Options configure a Detector.
type Options struct {
	// Mode is one of Modes; "" is ModeAuto,
	// which needs a Prober.
	Mode     string
	Interval time.Duration // how long a verdict is held
	Prober   Prober
	Now      func() time.Time // nil → time.Now
	// OnState, when set, is called with the state at construction and on
	// every change (under the detector's lock: it must only record it).
	OnState func(State)
}

// Detector remembers whether the Core serves the knowledge protocol itself.
// In auto mode a verdict is held for one probe interval. While none is held
// (start-up, or the interval ran out), the next knowledge or turn request of
// a rolled-out workspace probes Core's capabilities first: a capabilities
// request is itself forwarded as the probe (Claim, then Answer or Fail); a
// search, read or turn sends a probe with its own bearer (Native) and is
// then handled by the verdict. Legacy and Native answers (Classify) are
// verdicts; anything else (401/403/5xx, a native Core's own 404 gate code,
// a transport error) decides nothing: a search, read or turn is handled as
// for a legacy Core, and the next request probes again. Concurrent requests
// share one probe.
type Detector struct {
	mode     string
	interval time.Duration
	prober   Prober
	now      func() time.Time
	onState  func(State)

	mu       sync.Mutex
	state    State
	due      time.Time // the verdict held expires; the next request probes
	inflight *Probe    // the probe being sent, shared by concurrent requests
}

// Probe is one probe in flight; done is closed once kind and err are set.
type Probe struct {
	done  chan struct{}
	start time.Time
	kind  Kind
	err   error
}

// New returns a Detector for o.Mode.
func New(o Options) (*Detector, error) {
	if o.Now == nil {
		o.Now = time.Now
	}
	d := &Detector{mode: o.Mode, interval: o.Interval, prober: o.Prober, now: o.Now, onState: o.OnState, state: StateUnknown}
	switch o.Mode {
	case "", ModeAuto:
		d.mode = ModeAuto
		if o.Prober == nil {
			return nil, fmt.Errorf("native: detection %s needs a prober", ModeAuto)
		}
	case ModeNever:
		d.state = StateLegacy
	case ModeAlways:
		d.state = StateNative
	default:
		return nil, fmt.Errorf("native: detection %q: want one of %s", o.Mode, strings.Join(Modes, ", "))
	}
	d.publish()
	return d, nil
}

// IsNative reports the state as it stands, without probing.
func (d *Detector) IsNative() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.state == StateNative
}

// Native says whether a knowledge or turn request on route (a rolled-out
// workspace) goes to a native Core. With a verdict held it answers at once;
// otherwise it probes with the request's own Authorization header, or waits
// for the probe another request is sending, and answers by the verdict. A
// probe that decides nothing (401/403/5xx, Core unreachable, a header or
// route the prober refuses to send, the caller gone) answers false: the
// request is handled as for a legacy Core and the next one probes again.
func (d *Detector) Native(ctx context.Context, authorization string, route corefacts.RouteKey) bool {
	if d.mode != ModeAuto || route.IsZero() {
		// A route outside Core's pattern is never probed (Core answers it
		// 404 whatever its version): the state as it stands.
		return d.IsNative()
	}
	now := d.now()
	d.mu.Lock()
	if now.Before(d.due) {
		native := d.state == StateNative
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
		return call.err == nil && call.kind == Native
	case <-ctx.Done():
		return false // the caller left; whatever it is answered is not read
	}
}

// Claim registers a probe the caller sends itself (a capabilities request
// forwarded to Core) when one is due: auto mode, no verdict held and none in
// flight. The caller must settle the probe it gets (Answer or Fail; a
// second settle is a no-op); while it is in flight other requests wait for
// its verdict.
func (d *Detector) Claim() (*Probe, bool) {
	if d.mode != ModeAuto {
		return nil, false
	}
	now := d.now()
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.inflight != nil || now.Before(d.due) {
		return nil, false
	}
	call := &Probe{done: make(chan struct{}), start: now}
	d.inflight = call
	return call, true
}

// Answer settles a claimed probe with Core's answer and returns what it
// says (Classify).
func (d *Detector) Answer(p *Probe, status int, body []byte) Kind {
	kind := Classify(status, body)
	d.settle(p, kind, nil)
	return kind
}

// Fail settles a claimed probe that got no readable answer: it decides
// nothing.
func (d *Detector) Fail(p *Probe, err error) { d.settle(p, Relay, err) }

// startLocked sends a probe in the background and registers it as the one
// in flight; called with mu held. The probe is not cancelled by its caller
// leaving, since others may be waiting for it: the prober's per-call
// deadline bounds it.
func (d *Detector) startLocked(ctx context.Context, start time.Time, authorization string, route corefacts.RouteKey) *Probe {
	call := &Probe{done: make(chan struct{}), start: start}
	d.inflight = call
	ctx = context.WithoutCancel(ctx)
	go func() {
		status, body, err := d.prober.ProbeCapabilities(ctx, authorization, route)
		if err != nil {
			d.Fail(call, err)
			return
		}
		d.Answer(call, status, body)
	}()
	return call
}

// settle ends a probe in flight: a legacy or native verdict is held for the
// interval from the probe's start, anything else decides nothing; then the
// requests waiting for it are released. A probe is settled once.
func (d *Detector) settle(call *Probe, kind Kind, err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.inflight != call {
		return // settled already
	}
	if err == nil && (kind == Legacy || kind == Native) {
		d.state, d.due = StateLegacy, call.start.Add(d.interval)
		if kind == Native {
			d.state = StateNative
		}
		d.publish()
	}
	call.kind, call.err = kind, err
	d.inflight = nil
	close(call.done)
}

// publish reports the state; called with mu held or before sharing.
func (d *Detector) publish() {
	if d.onState != nil {
		d.onState(d.state)
	}
}
