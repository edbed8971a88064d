package catalog_test

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bailinghub/knowledge-sidecar/breaker"
	"github.com/bailinghub/knowledge-sidecar/catalog"
	"github.com/bailinghub/knowledge-sidecar/internal/testkit"
)

func TestMetricsRegistration(t *testing.T) {
	reg := prometheus.NewRegistry()
	m1 := catalog.NewMetrics(reg)
	m2 := catalog.NewMetrics(reg) // same registry: reuses the collectors
	m1.Observe("route", "ok", 2*time.Millisecond, "")
	m2.Observe("route", "ok", 3*time.Millisecond, "")
	if got := testkit.Metric(t, reg, "knowledge_sidecar_catalog_queries_total", map[string]string{"query": "route", "outcome": "ok"}); got != 2 {
		t.Errorf("catalog queries got %v; want 2", got)
	}
	if got := testkit.Metric(t, reg, "knowledge_sidecar_catalog_query_duration_seconds", map[string]string{"query": "route"}); got != 2 {
		t.Errorf("catalog duration samples got %v; want 2", got)
	}

	var nilMetrics *catalog.Metrics
	nilMetrics.Observe("route", "ok", time.Millisecond, "") // must not panic
	catalog.NewMetrics(nil).Observe("route", "ok", time.Millisecond, "")
	_ = breaker.New(breaker.FamilyCatalog, breaker.Settings{}, nil)
}

func TestMetricNamesFollowConventions(t *testing.T) {
	reg := prometheus.NewRegistry()
	catalog.NewMetrics(reg).Observe("q", "ok", time.Millisecond, "")
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
