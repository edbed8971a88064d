package coreclient_test

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bailinghub/knowledge-sidecar/coreclient"
)

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
