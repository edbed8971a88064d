package telemetry

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// Namespace is the namespace of every metric the sidecar exports.
const Namespace = "knowledge_sidecar"

// Register registers c on reg, or returns the equal collector already
// registered there, so that two components (the Core client and the catalog
// sharing the breaker gauges) may each ask for the same collectors. A
// conflicting definition is a programming error: it panics.
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
