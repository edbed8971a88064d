// Package breaker is the circuit breaker in front of every adapter that
// talks to Core (its HTTP API, its database): sony/gobreaker/v2 with the
// sidecar's classification of errors (core.corefacts.ErrUnavailable counts, a caller's
// cancellation is excluded, every other answer means Core is up) and the
// breaker gauges.
package breaker

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sony/gobreaker/v2"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/bailinghub/knowledge-sidecar/corefacts"
)

// Breaker families (metric label values).
const (
	FamilyIdentity  = "identity"
	FamilyRetrieval = "retrieval"
	FamilyCatalog   = "catalog"
)

// Settings are the thresholds of one breaker (one per operation family).
// A zero field takes its default.
type Settings struct {
	Failures    uint32        // consecutive failures that open the breaker (default 5)
	Window      time.Duration // closed-state counts reset every Window (default 30s; gobreaker Interval)
	OpenTimeout time.Duration // open → half-open after this (default 10s)
	HalfOpenMax uint32        // probes admitted while half-open (default 1)
}

// DefaultSettings returns the defaults every breaker has: 5 failures, a 30s
// window, a 10s open timeout and one half-open probe. They are the one
// source of the breakers' settings' defaults (config's Defaults maps them
// onto each breaker section).
func DefaultSettings() Settings {
	return Settings{Failures: 5, Window: 30 * time.Second, OpenTimeout: 10 * time.Second, HalfOpenMax: 1}
}

func (s Settings) withDefaults() Settings {
	d := DefaultSettings()
	if s.Failures == 0 {
		s.Failures = d.Failures
	}
	if s.Window <= 0 {
		s.Window = d.Window
	}
	if s.OpenTimeout <= 0 {
		s.OpenTimeout = d.OpenTimeout
	}
	if s.HalfOpenMax == 0 {
		s.HalfOpenMax = d.HalfOpenMax
	}
	return s
}

// breakerState mirrors the gauge values: 0 closed, 1 half-open, 2 open.
type breakerState int

const (
	stateClosed   breakerState = 0
	stateHalfOpen breakerState = 1
	stateOpen     breakerState = 2
)

func (s breakerState) label() string {
	switch s {
	case stateHalfOpen:
		return "half_open"
	case stateOpen:
		return "open"
	default:
		return "closed"
	}
}

func fromGobreaker(s gobreaker.State) breakerState {
	switch s {
	case gobreaker.StateHalfOpen:
		return stateHalfOpen
	case gobreaker.StateOpen:
		return stateOpen
	default:
		return stateClosed
	}
}

// errExcluded is reported to gobreaker for calls that count neither as a
// success nor as a failure (the caller gave up).
var errExcluded = errors.New("excluded")

// errFailed is reported to gobreaker for calls that count as failures.
var errFailed = errors.New("failed")

// Breaker wraps gobreaker/v2 for one family ("identity", "retrieval", "catalog").
//
// Classification of fn's error, decided here rather than by gobreaker:
//   - failure: errors.Is(err, corefacts.ErrUnavailable) while the ctx given to Do is not done;
//   - excluded: the ctx given to Do is done (the caller cancelled or its deadline passed),
//     or corefacts.ErrRequestRefused (Core refused a request the caller shaped: a
//     caller must not move a breaker others depend on, either way);
//   - success: nil and every other error (corefacts.ErrUnauthorized, *corefacts.CoreError, corefacts.ErrNotFound,
//     corefacts.ErrEndpointAbsent, …): Core answered, so it is up.
//
// Timeouts that fn applies itself (a child context) are failures, because the
// caller's ctx is still live.
type Breaker struct {
	family string
	cb     *gobreaker.TwoStepCircuitBreaker[struct{}]
}

// New builds the breaker of one family; m may be nil.
func New(family string, s Settings, m *Metrics) *Breaker {
	s = s.withDefaults()
	failures := s.Failures
	m.breakerInit(family)
	cb := gobreaker.NewTwoStepCircuitBreaker[struct{}](gobreaker.Settings{
		Name:        family,
		MaxRequests: s.HalfOpenMax,
		Interval:    s.Window,
		Timeout:     s.OpenTimeout,
		ReadyToTrip: func(c gobreaker.Counts) bool { return c.ConsecutiveFailures >= failures },
		// Runs under gobreaker's lock: only touch collectors.
		OnStateChange: func(_ string, _, to gobreaker.State) { m.breakerChanged(family, fromGobreaker(to)) },
		IsSuccessful:  func(err error) bool { return err == nil },
		IsExcluded:    func(err error) bool { return err == errExcluded },
	})
	return &Breaker{family: family, cb: cb}
}

// Do runs fn unless the breaker is open or its half-open probes are all in
// flight; then it returns an error wrapping corefacts.ErrBreakerOpen without calling fn.
// fn's own error is returned unchanged.
func (b *Breaker) Do(ctx context.Context, fn func(context.Context) error) (err error) {
	done, allowErr := b.cb.Allow()
	if allowErr != nil {
		return fmt.Errorf("breaker %s: %w", b.family, corefacts.ErrBreakerOpen)
	}
	reported := false
	defer func() {
		if !reported { // fn panicked
			done(errFailed)
		}
	}()
	err = fn(ctx)
	reported = true
	switch {
	case ctx.Err() != nil, errors.Is(err, corefacts.ErrRequestRefused):
		done(errExcluded)
	case errors.Is(err, corefacts.ErrUnavailable):
		done(errFailed)
	default:
		done(nil)
	}
	return err
}

// Open reports whether the breaker is open (not half-open, not closed).
func (b *Breaker) Open() bool { return b.cb.State() == gobreaker.StateOpen }

// Family is the breaker's family (its metric label).
func (b *Breaker) Family() string { return b.family }

// MarkRefused marks, on the caller's span, a call the breaker refused (no
// request was sent, so there is no client span of its own).
func MarkRefused(ctx context.Context, b *Breaker) {
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	family := ""
	if b != nil {
		family = b.family
	}
	span.AddEvent("breaker_open", trace.WithAttributes(attribute.String("knowledge_sidecar.breaker", family)))
}
