package test

import (
	"encoding/json"
	"testing"

	"github.com/bailinghub/knowledge-sidecar/hostclient"
	"github.com/bailinghub/knowledge-sidecar/internal/fakecore"
	"github.com/bailinghub/knowledge-sidecar/internal/testkit/testdb"
	"github.com/bailinghub/knowledge-sidecar/sidecar"
)

// TestBuiltSidecarStatements: the sidecar as `serve` builds it (the SQL
// catalog behind its schema gate) reads a route with the rows a request
// needs next in one statement. Once a search has seen the route's KB list,
// a search costs two catalog statements (the route with its KB rows, then
// the hits' documents) and a read one (the route with its KB row and the
// document). A wrapper that hides the catalog's RouteBundle costs a search
// one statement more and a read two. A Core without system-info adds the
// catalog's route gate (SPEC §2): its client and route statements.
func TestBuiltSidecarStatements(t *testing.T) {
	for _, tc := range []struct {
		name         string
		systemInfo   bool
		search, read float64
	}{
		{"system-info", true, 2, 1},
		{"catalog gate", false, 4, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			testBuiltSidecarStatements(t, tc.systemInfo, tc.search, tc.read)
		})
	}
}

func testBuiltSidecarStatements(t *testing.T, systemInfo bool, wantSearch, wantRead float64) {
	w := NewWorld(t, WorldOptions{Core: fakecore.Options{SystemInfo: systemInfo}})
	cfg := w.Config()
	cfg.RateLimit.RPS, cfg.RateLimit.Burst = 1000, 1000
	if err := cfg.Validate(sidecar.ExtraChecks...); err != nil {
		t.Fatal(err)
	}
	app, url := serveBuilt(t, cfg, sidecar.Deps{})
	c := newClient(t)
	ws := url + "/agent-api/v1/workspaces/" + testdb.RouteMulti

	// statements sums knowledge_sidecar_catalog_queries_total over every
	// query name and outcome.
	statements := func() map[string]float64 {
		return counterSeries(t, app.Server.Registry(), "knowledge_sidecar_catalog_queries_total", func(l map[string]string) string { return l["query"] })
	}
	// since is the statements run after before, by query name, with their sum.
	since := func(before map[string]float64) (float64, map[string]float64) {
		d, sum := map[string]float64{}, 0.0
		for q, v := range statements() {
			if v -= before[q]; v != 0 {
				d[q], sum = v, sum+v
			}
		}
		return sum, d
	}
	search := func() hostclient.SearchAnswer {
		t.Helper()
		r := send(t, c, "POST", ws+"/knowledge/search", w.TokenA, []byte(`{"query": "`+refundQuery+`"}`), nil)
		var a hostclient.SearchAnswer
		if r.Status != 200 || json.Unmarshal(r.Body, &a) != nil || len(a.Hints) == 0 {
			t.Fatalf("search: got %d %s; want 200 with hints", r.Status, clip(string(r.Body)))
		}
		return a
	}

	search() // the first search of the route reads it alone: its KB list is not known yet
	before := statements()
	a := search()
	if got, by := since(before); got != wantSearch {
		t.Errorf("catalog statements of a search: %v %v; want %v (route with its KB rows, the hits' documents)", got, by, wantSearch)
	}
	body, _ := json.Marshal(map[string]any{"ref": a.Hints[0].Ref})
	// The first read of the document may fill the body cache (doc_body);
	// the second reads the route, the KB row and the document in one.
	for i, want := range []float64{-1, wantRead} {
		before = statements()
		r := send(t, c, "POST", ws+"/knowledge/read", w.TokenA, body, nil)
		if r.Status != 200 {
			t.Fatalf("read %d: got %d %s; want 200", i, r.Status, clip(string(r.Body)))
		}
		if got, by := since(before); want >= 0 && got != want {
			t.Errorf("catalog statements of a read: %v %v; want %v (route with the KB row and the document)", got, by, want)
		}
	}
}
