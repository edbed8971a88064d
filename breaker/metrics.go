package breaker

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/bailinghub/knowledge-sidecar/internal/prom"
)

// Metrics holds the breaker collectors. All methods are safe on a nil
// *Metrics (they do nothing).
//
// Series (namespace knowledge_sidecar; the family label is closed:
// identity, retrieval, catalog):
//
//	core_breaker_state{family}                    gauge: 0 closed, 1 half-open, 2 open
//	core_breaker_transitions_total{family,to}     counter; to ∈ closed, half_open, open
type Metrics struct {
	state       *prometheus.GaugeVec
	transitions *prometheus.CounterVec
}

// breakerTargets are the "to" label values, each series created with 0 when
// a breaker is built.
var breakerTargets = []breakerState{stateClosed, stateHalfOpen, stateOpen}

// NewMetrics builds the collectors and registers them on reg. A nil reg
// gives working but unregistered collectors; registering twice on the same
// registry reuses the collectors already there (the Core client and the
// catalog each ask for them).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		state: prom.GaugeVec("core_breaker_state",
			"Circuit breaker state per operation family: 0 closed, 1 half-open, 2 open.", "family"),
		transitions: prom.CounterVec("core_breaker_transitions_total",
			"Circuit breaker state changes per operation family and target state.", "family", "to"),
	}
	if reg != nil {
		m.state = prom.Register(reg, m.state)
		m.transitions = prom.Register(reg, m.transitions)
	}
	return m
}

// breakerInit sets the state gauge of a new breaker to closed.
func (m *Metrics) breakerInit(family string) {
	if m == nil {
		return
	}
	m.state.WithLabelValues(family).Set(0)
	for _, to := range breakerTargets {
		m.transitions.WithLabelValues(family, to.label())
	}
}

// breakerChanged records a state change. It runs under the breaker's lock,
// so it only touches collectors.
func (m *Metrics) breakerChanged(family string, to breakerState) {
	if m == nil {
		return
	}
	m.state.WithLabelValues(family).Set(float64(to))
	m.transitions.WithLabelValues(family, to.label()).Inc()
}
