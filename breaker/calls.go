package breaker

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bailinghub/knowledge-sidecar/telemetry"
)

// CallMetrics are the metrics of an adapter behind breakers (the Core client,
// the catalog): its calls, counted and timed by telemetry.Calls, and the
// gauges of its breakers. All methods are safe on a nil *CallMetrics (they
// do nothing), so callers may pass nil to run without metrics.
type CallMetrics struct {
	breakers *Metrics
	calls    telemetry.Calls
}

// NewCallMetrics builds the calls' collectors of o and the breaker gauges
// and registers them on reg. A nil reg gives working but unregistered
// collectors; registering twice on the same registry reuses the collectors
// already there. A conflicting definition on reg is a programming error: it
// panics.
func NewCallMetrics(reg prometheus.Registerer, o telemetry.CallsOpts) *CallMetrics {
	calls, err := telemetry.NewCalls(reg, o)
	if err != nil {
		panic(err)
	}
	return &CallMetrics{breakers: NewMetrics(reg), calls: calls}
}

// Observe records one call (telemetry.Calls.Observe): key and outcome come
// from the adapter's closed sets; d < 0 means no call was made; traceID,
// when not empty, is the duration's exemplar.
func (m *CallMetrics) Observe(key, outcome string, d time.Duration, traceID string) {
	if m == nil {
		return
	}
	m.calls.Observe(key, outcome, d, traceID)
}

// Breakers are the breaker gauges for New (nil without metrics).
func (m *CallMetrics) Breakers() *Metrics {
	if m == nil {
		return nil
	}
	return m.breakers
}
