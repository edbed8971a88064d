package test

import (
	"bytes"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bailinghub/knowledge-sidecar/internal/testkit"
	"github.com/bailinghub/knowledge-sidecar/internal/testkit/testdb"
)

// TestTurnCountedOnce: every intercepted turn is counted in turns_total
// exactly once, in the series of how it ended — a body over Core's limit
// (passed to Core before the field could be told) included — and a mode
// switch refused by the ledger also counts one ledger conflict.
func TestTurnCountedOnce(t *testing.T) {
	w := NewWorld(t, WorldOptions{})
	side := w.StartSidecar(t, FeatureOptions{})
	c := newClient(t)
	route := testdb.RouteMulti
	bound := newTurn("count-bound")
	oversize := append([]byte(`{"user_input":"`), bytes.Repeat([]byte("x"), 600<<10)...)
	oversize = append(oversize, `"}`...)

	before := turnSeries(t, side.Registry)
	conflicts := testkit.Metric(t, side.Registry, "knowledge_sidecar_ledger_conflicts_total", nil)
	for _, tc := range []struct {
		name   string
		route  string
		token  string
		body   []byte
		hdr    map[string]string
		status int
		series string // mode/outcome
	}{
		{"over Core's limit", route, w.TokenA, oversize, nil, http.StatusRequestEntityTooLarge, "unknown/passed"},
		{"401 with the field goes to Core, unread", route, "bha_not-a-session", newTurn("count-401").body(`"on_demand"`), nil, http.StatusUnauthorized, "unknown/passed"},
		{"401 without the field goes to Core, unread", route, "bha_not-a-session", newTurn("count-401-old").body(""), nil, http.StatusUnauthorized, "unknown/passed"},
		{"compressed body: no field Core could see", route, w.TokenA, gzipBytes(t, newTurn("count-gz").body(`"inline"`)), map[string]string{"Content-Encoding": "gzip"}, http.StatusBadRequest, "absent/passed"},
		{"plain body labelled br: intercepted", route, w.TokenA, newTurn("count-br").body(`"inline"`), map[string]string{"Content-Encoding": "br"}, http.StatusOK, "inline/rewritten"},
		{"invalid field", route, w.TokenA, newTurn("count-invalid").body(`"sometimes"`), nil, http.StatusBadRequest, "invalid/rejected"},
		{"old client without ids", route, w.TokenA, []byte(`{"user_input":"hi"}`), nil, http.StatusBadRequest, "absent/passed"},
		{"old client bound inline", route, w.TokenA, newTurn("count-old").body(""), nil, http.StatusOK, "absent/passed"},
		{"inline", route, w.TokenA, bound.body(`"inline"`), nil, http.StatusOK, "inline/rewritten"},
		{"mode switch", route, w.TokenA, bound.body(`"on_demand"`), nil, http.StatusConflict, "on_demand/conflict"},
		{"on_demand", route, w.TokenA, newTurn("count-od").body(`"on_demand"`), nil, http.StatusOK, "on_demand/rewritten"},
		{"unknown route: forwarded, Core's 404", "ghost-route", w.TokenA, newTurn("count-ghost").body(`"inline"`), nil, http.StatusNotFound, "inline/core_4xx"},
	} {
		r := send(t, c, "POST", turnsURL(side, tc.route), tc.token, tc.body, tc.hdr)
		if r.Status != tc.status {
			t.Fatalf("%s: got %d %s; want %d", tc.name, r.Status, r.Body, tc.status)
		}
		// A turn is counted when its handling ends, just after its answer.
		want := maps1(before, tc.series)
		var got map[string]float64
		if !testkit.Poll(10*time.Second, func() bool {
			got = turnSeries(t, side.Registry)
			return fmt.Sprint(got) == fmt.Sprint(want)
		}) {
			t.Fatalf("%s: turns_total moved by %s; want +1 %s", tc.name, diffSeries(before, got), tc.series)
		}
		before = got
	}
	if got := testkit.Metric(t, side.Registry, "knowledge_sidecar_ledger_conflicts_total", nil) - conflicts; got != 1 {
		t.Errorf("ledger_conflicts_total: got +%v; want +1", got)
	}
}

// turnSeries is every turns_total series, "mode/outcome" → value.
func turnSeries(t testing.TB, reg prometheus.Gatherer) map[string]float64 {
	t.Helper()
	return counterSeries(t, reg, "knowledge_sidecar_turns_total", func(l map[string]string) string { return l["mode"] + "/" + l["outcome"] })
}

// maps1 is series with one more in key.
func maps1(series map[string]float64, key string) map[string]float64 {
	out := make(map[string]float64, len(series)+1)
	for k, v := range series {
		out[k] = v
	}
	out[key]++
	return out
}

func diffSeries(before, after map[string]float64) string {
	var d []string
	for k, v := range after {
		if v != before[k] {
			d = append(d, fmt.Sprintf("%s %+v", k, v-before[k]))
		}
	}
	for k := range before {
		if _, ok := after[k]; !ok {
			d = append(d, k+" gone")
		}
	}
	sort.Strings(d)
	if len(d) == 0 {
		return "nothing"
	}
	return strings.Join(d, ", ")
}
