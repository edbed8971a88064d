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

// The constructors below name a metric knowledge_sidecar_<name>: name
// carries any subsystem ("knowledge_requests_total"). Registration is the
// caller's (Register, TryRegister, or a registry's MustRegister).

// Counter is the counter knowledge_sidecar_<name>.
func Counter(name, help string) prometheus.Counter {
	return prometheus.NewCounter(prometheus.CounterOpts{Namespace: Namespace, Name: name, Help: help})
}

// Gauge is the gauge knowledge_sidecar_<name>.
func Gauge(name, help string) prometheus.Gauge {
	return prometheus.NewGauge(prometheus.GaugeOpts{Namespace: Namespace, Name: name, Help: help})
}

// CounterVec is the counter knowledge_sidecar_<name> by labels.
func CounterVec(name, help string, labels ...string) *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: name, Help: help}, labels)
}

// GaugeVec is the gauge knowledge_sidecar_<name> by labels.
func GaugeVec(name, help string, labels ...string) *prometheus.GaugeVec {
	return prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: Namespace, Name: name, Help: help}, labels)
}

// HistogramVec is the histogram knowledge_sidecar_<name> by labels, with
// buckets (seconds, for a duration).
func HistogramVec(name, help string, buckets []float64, labels ...string) *prometheus.HistogramVec {
	return prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: Namespace, Name: name, Help: help, Buckets: buckets}, labels)
}

// ClosedCounter is a one-label counter whose series of each value in values
// exist from the start at 0, so that a panel or an alert reads 0, not "no
// data", before the first event.
func ClosedCounter(name, help, label string, values []string) *prometheus.CounterVec {
	v := CounterVec(name, help, label)
	for _, l := range values {
		v.WithLabelValues(l)
	}
	return v
}
