package coreclient_test

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bailinghub/knowledge-sidecar/coreclient"
	"github.com/bailinghub/knowledge-sidecar/internal/testkit"
)

func TestMetricsRegistration(t *testing.T) {
	reg := prometheus.NewRegistry()
	m1 := coreclient.NewMetrics(reg)
	m2 := coreclient.NewMetrics(reg) // same registry: reuses the collectors
	m1.ObserveCatalog("route", "ok", 2*time.Millisecond)
	m2.ObserveCatalog("route", "ok", 3*time.Millisecond)
	if got := testkit.Metric(t, reg, "knowledge_sidecar_catalog_queries_total", map[string]string{"query": "route", "outcome": "ok"}); got != 2 {
		t.Errorf("catalog queries got %v; want 2", got)
	}
	if got := testkit.Metric(t, reg, "knowledge_sidecar_catalog_query_duration_seconds", map[string]string{"query": "route"}); got != 2 {
		t.Errorf("catalog duration samples got %v; want 2", got)
	}

	var nilMetrics *coreclient.Metrics
	nilMetrics.ObserveCatalog("route", "ok", time.Millisecond) // must not panic
	coreclient.NewMetrics(nil).ObserveCatalog("route", "ok", time.Millisecond)
	_ = coreclient.NewBreaker(coreclient.FamilyCatalog, coreclient.BreakerSettings{}, nil)
}

func TestMetricNamesFollowConventions(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := coreclient.NewMetrics(reg)
	m.ObserveCatalog("q", "ok", time.Millisecond)
	_ = coreclient.NewBreaker(coreclient.FamilyIdentity, coreclient.BreakerSettings{}, m)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		name := mf.GetName()
		if len(name) < len("knowledge_sidecar_") || name[:len("knowledge_sidecar_")] != "knowledge_sidecar_" {
			t.Errorf("metric %s: want namespace knowledge_sidecar", name)
		}
	}
}
