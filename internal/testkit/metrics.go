package testkit

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
)

// Metric returns the value of the series name{labels} in g — a counter's or
// gauge's value, a histogram's sample count — or 0 when the series is
// absent. The labels must be exactly the series' labels.
//
// Tests that hold the collector itself use testutil.ToFloat64 instead;
// testutil has no reader of one series of a Gatherer (its GatherAndCompare
// compares whole families, which WaitGatherAndCompare wraps).
func Metric(t testing.TB, g prometheus.Gatherer, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if !sameLabels(m.GetLabel(), labels) {
				continue
			}
			switch {
			case m.Counter != nil:
				return m.GetCounter().GetValue()
			case m.Gauge != nil:
				return m.GetGauge().GetValue()
			case m.Histogram != nil:
				return float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return 0
}

// MetricSum is the sum of the counters of name in g whose labels include
// match (nil: every series of name); 0 when there is none.
func MetricSum(t testing.TB, g prometheus.Gatherer, name string, match map[string]string) float64 {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	var n float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if hasLabels(m.GetLabel(), match) {
				n += m.GetCounter().GetValue()
			}
		}
	}
	return n
}

// hasLabels reports whether got includes every label of want.
func hasLabels(got []*dto.LabelPair, want map[string]string) bool {
	n := 0
	for _, l := range got {
		if v, ok := want[l.GetName()]; ok && v == l.GetValue() {
			n++
		}
	}
	return n == len(want)
}

func sameLabels(got []*dto.LabelPair, want map[string]string) bool {
	if len(got) != len(want) {
		return false
	}
	for _, l := range got {
		if v, ok := want[l.GetName()]; !ok || v != l.GetValue() {
			return false
		}
	}
	return true
}

// WaitMetric waits (bounded) until the series name{labels} has the value
// want, and reports the last value otherwise. The edge records a request
// after its handler returns, which can be just after the client has read
// the whole answer: there is no event to wait on.
func WaitMetric(t testing.TB, g prometheus.Gatherer, name string, labels map[string]string, want float64) {
	t.Helper()
	var got float64
	if !Poll(10*time.Second, func() bool { got = Metric(t, g, name, labels); return got == want }) {
		t.Errorf("%s%v: got %v; want %v", name, labels, got, want)
	}
}

// WaitGatherAndCompare polls testutil.GatherAndCompare until it matches or
// the bound passes, and reports the last difference.
func WaitGatherAndCompare(t testing.TB, g prometheus.Gatherer, want string, names ...string) {
	t.Helper()
	var err error
	if !Poll(10*time.Second, func() bool {
		err = testutil.GatherAndCompare(g, strings.NewReader(want), names...)
		return err == nil
	}) {
		t.Error(err)
	}
}
