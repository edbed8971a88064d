package native

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/bailinghub/knowledge-sidecar/internal/prom"
)

// StateMetric registers core_protocol_state with reg (nil: none) and
// returns the Options.OnState that keeps it: 1 for the current state, 0
// for the others.
func StateMetric(reg prometheus.Registerer) func(State) {
	g := prom.GaugeVec("core_protocol_state",
		"1 for the current native-detection state of the Core (unknown, legacy, native).", "state")
	if reg != nil {
		reg.MustRegister(g)
	}
	return func(state State) {
		for _, st := range States {
			v := 0.0
			if st == state {
				v = 1
			}
			g.WithLabelValues(string(st)).Set(v)
		}
	}
}
