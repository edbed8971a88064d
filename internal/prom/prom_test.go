package prom_test

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/bailinghub/knowledge-sidecar/internal/prom"
)

// An identical collector registered twice is the first one (two components
// share it); a conflicting definition is an error, and Register panics on it.
func TestTryRegister(t *testing.T) {
	reg := prometheus.NewRegistry()
	opts := prometheus.CounterOpts{Namespace: prom.Namespace, Name: "x_total", Help: "x"}
	first := prom.Register(reg, prometheus.NewCounter(opts))
	second, err := prom.TryRegister(reg, prometheus.NewCounter(opts))
	if err != nil || second != first {
		t.Fatalf("an identical collector: %v, same=%v; want the first one, no error", err, second == first)
	}
	opts.Help = "another help"
	if _, err := prom.TryRegister(reg, prometheus.NewCounter(opts)); err == nil {
		t.Fatal("a conflicting definition registered without an error")
	}
	defer func() {
		if recover() == nil {
			t.Error("Register did not panic on a conflicting definition")
		}
	}()
	prom.Register(reg, prometheus.NewCounter(opts))
}

// Every value of the closed set is a series at 0 before the first event,
// in the sidecar's namespace.
func TestClosedCounterZeroSeries(t *testing.T) {
	v := prom.ClosedCounter("s_events_total", "Events.", "kind", []string{"a", "b"})
	want := `# HELP knowledge_sidecar_s_events_total Events.
# TYPE knowledge_sidecar_s_events_total counter
knowledge_sidecar_s_events_total{kind="a"} 0
knowledge_sidecar_s_events_total{kind="b"} 0
`
	if err := testutil.CollectAndCompare(v, strings.NewReader(want)); err != nil {
		t.Fatal(err)
	}
}
