package catalog_test

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/bailinghub/knowledge-sidecar/breaker"
	"github.com/bailinghub/knowledge-sidecar/catalog"
)

func TestMetricsRegistration(t *testing.T) {
	reg := prometheus.NewRegistry()
	m1 := catalog.NewMetrics(reg)
	m2 := catalog.NewMetrics(reg) // same registry: reuses the collectors
	m1.Observe("route", "ok", 2*time.Millisecond)
	m2.Observe("route", "ok", 3*time.Millisecond)
	if got := metricValue(t, reg, "knowledge_sidecar_catalog_queries_total", map[string]string{"query": "route", "outcome": "ok"}); got != 2 {
		t.Errorf("catalog queries got %v; want 2", got)
	}
	if got := metricValue(t, reg, "knowledge_sidecar_catalog_query_duration_seconds", map[string]string{"query": "route"}); got != 2 {
		t.Errorf("catalog duration samples got %v; want 2", got)
	}

	var nilMetrics *catalog.Metrics
	nilMetrics.Observe("route", "ok", time.Millisecond) // must not panic
	catalog.NewMetrics(nil).Observe("route", "ok", time.Millisecond)
	_ = breaker.New(breaker.FamilyCatalog, breaker.Settings{}, nil)
}

func TestMetricNamesFollowConventions(t *testing.T) {
	reg := prometheus.NewRegistry()
	catalog.NewMetrics(reg).Observe("q", "ok", time.Millisecond)
	_ = breaker.New(breaker.FamilyCatalog, breaker.Settings{}, breaker.NewMetrics(reg))
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if name := mf.GetName(); !strings.HasPrefix(name, "knowledge_sidecar_") {
			t.Errorf("metric %s: want namespace knowledge_sidecar", name)
		}
	}
}

// metricValue (until the shared test kit lands) returns a counter's or gauge's value, or a histogram's sample
// count, for the series with exactly these labels (0 when absent).
// (prometheus/testutil would be nicer, but its godebug dependency is not in go.sum.)
func metricValue(t *testing.T, g prometheus.Gatherer, name string, labels map[string]string) float64 {
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

func sameLabels(got []*dto.LabelPair, want map[string]string) bool {
	if len(got) != len(want) {
		return false
	}
	for _, l := range got {
		if want[l.GetName()] != l.GetValue() {
			return false
		}
	}
	return true
}
