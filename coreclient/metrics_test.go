package coreclient_test

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/bailinghub/knowledge-sidecar/coreclient"
)

// metricValue returns a counter's or gauge's value, or a histogram's sample
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

func TestMetricNamesFollowConventions(t *testing.T) {
	reg := prometheus.NewRegistry()
	if _, err := coreclient.NewClient(coreclient.Options{BaseURL: "http://127.0.0.1:1", ServiceToken: "t", Metrics: coreclient.NewMetrics(reg)}); err != nil {
		t.Fatal(err)
	}
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
