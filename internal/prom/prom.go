// Package prom holds what every package's Prometheus metrics share: the
// namespace, registration that tolerates an identical collector already
// registered, and the one-label counter whose closed set of values exists
// from the start. A leaf (the Prometheus client only), so the deciding
// packages (knowledge, turn) use it as freely as the adapters.
package prom

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// Namespace is the namespace of every metric the sidecar exports.
const Namespace = "knowledge_sidecar"

// Register registers c on reg, or returns the equal collector already
// registered there, so that two components (the Core client and the catalog
// sharing the breaker gauges, two knowledge services on one registry) may
// each ask for the same collectors. A conflicting definition is a
// programming error: it panics.
func Register[C prometheus.Collector](reg prometheus.Registerer, c C) C {
	c, err := TryRegister(reg, c)
	if err != nil {
		panic(err)
	}
	return c
}

// TryRegister is Register returning a conflicting definition as an error.
func TryRegister[C prometheus.Collector](reg prometheus.Registerer, c C) (C, error) {
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(C); ok {
				return existing, nil
			}
		}
		return c, err
	}
	return c, nil
}

// CounterVec is a one-label counter (namespace Namespace) whose series of
// each value in values exist from the start at 0, so that a panel or an
// alert reads 0, not "no data", before the first event.
func CounterVec(o prometheus.CounterOpts, label string, values []string) *prometheus.CounterVec {
	o.Namespace = Namespace
	v := prometheus.NewCounterVec(o, []string{label})
	for _, l := range values {
		v.WithLabelValues(l)
	}
	return v
}
