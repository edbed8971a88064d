package telemetry

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bailinghub/knowledge-sidecar/internal/prom"
)

// Calls are the two series an upstream or an endpoint keeps about its
// calls: a counter by key and outcome, and a histogram of durations by key
// (catalog queries, Core requests, knowledge endpoint requests).
type Calls struct {
	Total    *prometheus.CounterVec   // {key, outcome}
	Duration *prometheus.HistogramVec // {key}
}

// CallsOpts name the two series of Calls and their closed label sets.
type CallsOpts struct {
	Subsystem                  string
	TotalName, TotalHelp       string // the counter, e.g. "requests_total"
	DurationName, DurationHelp string // the histogram, e.g. "request_duration_seconds"
	KeyLabel, OutcomeLabel     string
	Buckets                    []float64
	// Keys and Outcomes are the closed label sets: every series of
	// Keys × Outcomes is created at 0, so alert expressions and panels read
	// 0 rather than "no data" before the first call.
	Keys, Outcomes []string
}

// NewCalls builds the two collectors in Namespace and registers them on reg
// (nil: unregistered), reusing equal collectors already registered there
// (see prom.TryRegister).
func NewCalls(reg prometheus.Registerer, o CallsOpts) (Calls, error) {
	c := Calls{
		Total:    prom.CounterVec(prometheus.BuildFQName("", o.Subsystem, o.TotalName), o.TotalHelp, o.KeyLabel, o.OutcomeLabel),
		Duration: prom.HistogramVec(prometheus.BuildFQName("", o.Subsystem, o.DurationName), o.DurationHelp, o.Buckets, o.KeyLabel),
	}
	if reg != nil {
		var err error
		if c.Total, err = prom.TryRegister(reg, c.Total); err != nil {
			return c, err
		}
		if c.Duration, err = prom.TryRegister(reg, c.Duration); err != nil {
			return c, err
		}
	}
	for _, k := range o.Keys {
		c.Duration.WithLabelValues(k)
		for _, out := range o.Outcomes {
			c.Total.WithLabelValues(k, out)
		}
	}
	return c, nil
}

// Observe counts one call of key with outcome and records its duration d,
// with traceID as the duration's exemplar when not empty (a sampled call).
// d < 0 records no duration (the call was refused before it was made).
func (c Calls) Observe(key, outcome string, d time.Duration, traceID string) {
	c.Total.WithLabelValues(key, outcome).Inc()
	switch {
	case d < 0:
	case traceID != "":
		c.Duration.WithLabelValues(key).(prometheus.ExemplarObserver).ObserveWithExemplar(d.Seconds(), prometheus.Labels{"trace_id": traceID})
	default:
		c.Duration.WithLabelValues(key).Observe(d.Seconds())
	}
}
