package test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/bailinghub/knowledge-sidecar/breaker"
	"github.com/bailinghub/knowledge-sidecar/internal/fakecore"
	"github.com/bailinghub/knowledge-sidecar/internal/testkit"
	"github.com/bailinghub/knowledge-sidecar/internal/testkit/testdb"
)

// Fidelity to the real Core (CORE_FACTS Addendum 2): hits cut the way Core's
// chunker cuts them survive the re-check, Core is searched with the KB id as
// stored, and Core's rate limit on the sidecar's credential is a failing KB,
// never an "ok" without hits and never an open breaker.

// addKnowledge puts a KB, a route over routeKBs and its documents into the
// database and the fake Core, as Core's admin API would, and declares the
// route allowed. kb is the id as stored.
func addKnowledge(t *testing.T, kw *kworld, route, routeKBs, kb string, docs map[int64][2]string) {
	t.Helper()
	kw.DB.Exec(t, `INSERT INTO bz_kb_bases (kb_id, enabled, updated_at) VALUES (?, 1, UTC_TIMESTAMP())`, kb)
	kw.DB.Exec(t, `INSERT INTO bz_routes (route_key, enabled, knowledge, updated_at) VALUES (?, 1, ?, UTC_TIMESTAMP())`,
		route, `{"kb_ids":`+routeKBs+`,"min_score":0.3}`)
	for id, d := range docs {
		kw.DB.Exec(t, `INSERT INTO bz_kb_docs (doc_id, kb_id, title, content, status, created_at, updated_at)
			VALUES (?, ?, ?, ?, 'ready', UTC_TIMESTAMP(), UTC_TIMESTAMP())`, id, kb, d[0], d[1])
		kw.Core.AddDoc(kb, id, d[0], d[1])
		kw.addPrivate(d[1])
	}
	kw.Core.SetRoute(route, fakecore.GateAllowed)
}

// TestFidelityChunksCutLikeCore: the best hit is a chunk Core cut inside an
// emoji (it starts or ends with U+FFFD), or a paragraph that began with a
// BOM (Core's trim removed it): the document is returned, and its summary
// shows no U+FFFD half.
func TestFidelityChunksCutLikeCore(t *testing.T) {
	kw := newKWorld(t, fakecore.Options{SystemInfo: true})
	// One paragraph without split points ('.' and ',' are not): 699 UTF-16
	// units, then 😀 across the 700-unit hard cut, then the rest.
	head := "Zebra crossings, " + strings.Repeat("stripes and more stripes, ", 26)
	head += strings.Repeat("x", 699-len(head))
	emojiDoc := head + "😀 quokka habitat notes, " + strings.Repeat("marsupial facts and figures, ", 10) + "end."
	bomDoc := "\ufeffWombat burrows are deep.\n\n\ufeffPlatypus eggs hatch in ten days.\ufeff\n\nEchidna spines."
	addKnowledge(t, kw, "fid-cut", `["fid-cut-kb"]`, "fid-cut-kb", map[int64][2]string{
		901: {"Emoji cut", emojiDoc},
		902: {"BOM paragraphs", bomDoc},
	})
	chunks := fakecore.Chunks(emojiDoc)
	if len(chunks) != 2 || !strings.HasSuffix(chunks[0], "\ufffd") || !strings.HasPrefix(chunks[1], "\ufffd") {
		t.Fatalf("fixture: got chunks %q; want two, cut inside the emoji", chunks)
	}
	sc := kw.start(t, kopts{})
	cases := []struct{ query, title, inSummary string }{
		{"quokka marsupial habitat", "Emoji cut", "quokka habitat"},          // chunk starting with U+FFFD
		{"zebra crossings stripes", "Emoji cut", "Zebra crossings"},          // chunk ending with U+FFFD
		{"platypus eggs wombat burrows", "BOM paragraphs", "Wombat burrows"}, // paragraphs that began with U+FEFF
	}
	for _, tc := range cases {
		r, a := kw.search(t, sc, "fid-cut", kw.TokenStar, map[string]any{"query": tc.query})
		if r.Status != 200 || a.Status != "ok" {
			t.Fatalf("%q: got %d %q; want 200 ok (%s)", tc.query, r.Status, a.Status, r.Body)
		}
		if len(a.Hints) == 0 || a.Hints[0].Title != tc.title {
			t.Errorf("%q: got hints %+v; want %q first", tc.query, a.Hints, tc.title)
			continue
		}
		s := a.Hints[0].Summary
		if strings.ContainsRune(s, utf8.RuneError) || !strings.Contains(s, tc.inSummary) {
			t.Errorf("%q: summary %q; want it to quote %q and show no U+FFFD half", tc.query, s, tc.inSummary)
		}
	}
}

// TestFidelityStoredKBSpelling: the route spells the KB "FID-KB", the
// database stores "fid-kb". Core's index cache is keyed by the spelling sent
// and a write refreshes only the stored one, so the sidecar must send the
// stored spelling or it searches a stale index and drops the fresh document.
func TestFidelityStoredKBSpelling(t *testing.T) {
	kw := newKWorld(t, fakecore.Options{SystemInfo: true})
	addKnowledge(t, kw, "fid-spell", `["FID-KB"]`, "fid-kb", map[int64][2]string{
		911: {"Lemurs", "Lemurs live in Madagascar."},
	})
	sc := kw.start(t, kopts{})
	m := kw.rec.mark()
	if _, a := kw.search(t, sc, "fid-spell", kw.TokenStar, map[string]any{"query": "lemurs madagascar"}); len(a.Hints) != 1 {
		t.Fatalf("before the edit: got %+v; want the lemur document", a)
	}
	for _, c := range kw.rec.since(m, "/kb/search") {
		var b struct {
			KBIDs []string `json:"kb_ids"`
		}
		if err := json.Unmarshal(c.Body, &b); err != nil || len(b.KBIDs) != 1 || b.KBIDs[0] != "fid-kb" {
			t.Errorf("/kb/search body %s; want kb_ids [\"fid-kb\"], the stored spelling", c.Body)
		}
	}
	const edited = "Lemurs and tapirs live in Madagascar zoos."
	kw.DB.Exec(t, `UPDATE bz_kb_docs SET content = ?, updated_at = DATE_ADD(updated_at, INTERVAL 1 SECOND) WHERE doc_id = 911`, edited)
	kw.Core.UpdateDoc("fid-kb", 911, "Lemurs", edited, false)
	kw.addPrivate(edited)
	r, a := kw.search(t, sc, "fid-spell", kw.TokenStar, map[string]any{"query": "tapirs zoos"})
	if r.Status != 200 || a.Status != "ok" || len(a.Hints) != 1 || !strings.Contains(a.Hints[0].Summary, "tapirs") {
		t.Errorf("after the edit: got %d %s; want the edited document (Core's fresh index)", r.Status, r.Body)
	}
}

// TestFidelityCoreRateLimit: Core's 429 on /kb/search (the sidecar's client
// is out of rate_limit_per_min) makes that KB fail: partial or unavailable,
// never ok; it does not open the retrieval breaker and is counted as
// core_requests_total{op="kb_search",outcome="rate_limited"}.
func TestFidelityCoreRateLimit(t *testing.T) {
	kw := newKWorld(t, fakecore.Options{SystemInfo: true})
	sc := kw.start(t, kopts{FeatureOptions: FeatureOptions{Retrieval: breaker.Settings{Failures: 1}}})
	reg := sc.Registry
	// A route over two KBs: with 3 calls a minute the first search is ok,
	// the second gets one 429 (partial), the next ones two (unavailable).
	kw.DB.Exec(t, `INSERT INTO bz_routes (route_key, enabled, knowledge, updated_at) VALUES ('fid-limit', 1, ?, UTC_TIMESTAMP())`,
		`{"kb_ids":["`+testdb.KBFAQ+`","`+testdb.KBManuals+`"],"min_score":0.3}`)
	kw.Core.SetRoute("fid-limit", fakecore.GateAllowed)
	kw.Core.SetRateLimit(3)
	want := []string{"ok", "partial", "unavailable", "unavailable"}
	for i, status := range want {
		before := kw.Core.Calls("/kb/search")
		r, a := kw.search(t, sc, "fid-limit", kw.TokenStar, map[string]any{"query": "refunds delivery"})
		if r.Status != 200 || a.Status != status {
			t.Errorf("search %d: got %d %q; want 200 %q (%s)", i+1, r.Status, a.Status, status, r.Body)
		}
		if i == 0 && len(a.Hints) == 0 {
			t.Errorf("search 1: got no hints; want the refund document (%s)", r.Body)
		}
		if status == "unavailable" && len(a.Hints) != 0 {
			t.Errorf("search %d: got hints %+v; want none", i+1, a.Hints)
		}
		if got := kw.Core.Calls("/kb/search") - before; got != 2 {
			t.Errorf("search %d: %d /kb/search calls; want 2 (a 429 never opens the breaker)", i+1, got)
		}
	}
	if got := testkit.Metric(t, reg, "knowledge_sidecar_core_requests_total", map[string]string{"op": "kb_search", "outcome": "rate_limited"}); got != 5 {
		t.Errorf("core_requests_total{kb_search,rate_limited} got %v; want 5", got)
	}
	if got := testkit.Metric(t, reg, "knowledge_sidecar_core_breaker_state", map[string]string{"family": "retrieval"}); got != 0 {
		t.Errorf("retrieval breaker state got %v; want 0 (closed)", got)
	}
	r := kw.call(t, "GET", sc.WS("fid-limit")+"/knowledge/capabilities", kw.TokenStar, nil)
	var caps struct {
		Enabled bool `json:"enabled"`
	}
	if err := json.Unmarshal(r.Body, &caps); err != nil || !caps.Enabled {
		t.Errorf("capabilities after 429s: got %s; want enabled true", r.Body)
	}
}

// TestFidelityEmbeddingsOutage: Core answers an embeddings outage with 200
// and no hits (CORE_FACTS §5.2, Addendum 2). The sidecar asks Core for the
// unfiltered top k (min_score -1), so a KB holding a ready document that
// answers nothing at all has failed: partial when one of two KBs is down,
// unavailable when both are — never "ok" without hints. A healthy Core with
// nothing above the route's threshold stays ok with no hints and costs no
// extra catalog query; KBs without a ready document that answer nothing are
// not failures.
func TestFidelityEmbeddingsOutage(t *testing.T) {
	kw := newKWorld(t, fakecore.Options{SystemInfo: true})
	sc := kw.start(t, kopts{FeatureOptions: FeatureOptions{}})
	reg := sc.Registry
	kw.DB.Exec(t, `INSERT INTO bz_routes (route_key, enabled, knowledge, updated_at) VALUES ('fid-outage', 1, ?, UTC_TIMESTAMP())`,
		`{"kb_ids":["`+testdb.KBFAQ+`","`+testdb.KBManuals+`"],"min_score":0.3}`)
	kw.Core.SetRoute("fid-outage", fakecore.GateAllowed)
	// fid-pending-kb: one document still embedding (Core has no chunk of
	// it yet); fid-blank-kb: no document at all.
	kw.DB.Exec(t, `INSERT INTO bz_kb_bases (kb_id, enabled, updated_at) VALUES ('fid-pending-kb', 1, UTC_TIMESTAMP()), ('fid-blank-kb', 1, UTC_TIMESTAMP())`)
	kw.DB.Exec(t, `INSERT INTO bz_kb_docs (doc_id, kb_id, title, content, status, created_at, updated_at)
		VALUES (931, 'fid-pending-kb', 'Pending', 'Refund delivery notes being embedded.', 'embedding', UTC_TIMESTAMP(), UTC_TIMESTAMP())`)
	kw.addPrivate("Refund delivery notes being embedded.")
	kw.Core.AddKB("fid-pending-kb")
	kw.Core.AddKB("fid-blank-kb")
	kw.DB.Exec(t, `INSERT INTO bz_routes (route_key, enabled, knowledge, updated_at) VALUES ('fid-quiet', 1, ?, UTC_TIMESTAMP())`,
		`{"kb_ids":["`+testdb.KBFAQ+`","fid-pending-kb","fid-blank-kb"],"min_score":0.3}`)
	kw.Core.SetRoute("fid-quiet", fakecore.GateAllowed)

	readyQueries := func() float64 {
		return testkit.Metric(t, reg, "knowledge_sidecar_catalog_queries_total", map[string]string{"query": "kb_ready", "outcome": "ok"})
	}
	emptyFailures := func() float64 {
		return testkit.Metric(t, reg, "knowledge_sidecar_knowledge_search_kb_calls_total", map[string]string{"result": "empty_failure"})
	}
	type want struct {
		status, titles       string
		readyAsked, failures float64
	}
	check := func(what, route, query string, w want) {
		t.Helper()
		asked, failed := readyQueries(), emptyFailures()
		m := kw.rec.mark()
		r, a := kw.search(t, sc, route, kw.TokenStar, map[string]any{"query": query})
		var titles []string
		for _, h := range a.Hints {
			titles = append(titles, h.Title)
		}
		if r.Status != 200 || a.Status != w.status || strings.Join(titles, "|") != w.titles {
			t.Errorf("%s: got %d %q %q; want 200 %q %q (%s)", what, r.Status, a.Status, strings.Join(titles, "|"), w.status, w.titles, r.Body)
		}
		if got := readyQueries() - asked; got != w.readyAsked {
			t.Errorf("%s: %v kb_ready catalog queries; want %v", what, got, w.readyAsked)
		}
		if got := emptyFailures() - failed; got != w.failures {
			t.Errorf("%s: search_kb_calls_total{result=empty_failure} +%v; want +%v", what, got, w.failures)
		}
		for _, c := range kw.rec.since(m, "/kb/search") {
			var b struct {
				MinScore *float64 `json:"min_score"`
			}
			if json.Unmarshal(c.Body, &b) != nil || b.MinScore == nil || *b.MinScore != -1 {
				t.Errorf("%s: /kb/search body %s; want min_score -1", what, c.Body)
			}
		}
	}

	check("healthy", "fid-outage", "refunds delivery", want{"ok", testdb.DocRefundTitle, 0, 0})
	// Core answers hits (below 0.3): no hint, ok, and no question asked.
	check("healthy, nothing above the threshold", "fid-outage", "zeppelin quasar", want{"ok", "", 0, 0})

	kw.Core.SetEmbeddingsOutage(true, testdb.KBFAQ)
	check("one of two KBs down", "fid-outage", "refunds delivery", want{"partial", "", 1, 1})
	kw.Core.SetEmbeddingsOutage(true)
	check("both KBs down", "fid-outage", "refunds delivery", want{"unavailable", "", 1, 2})
	check("both KBs down, a query that would match nothing", "fid-outage", "zeppelin quasar", want{"unavailable", "", 1, 2})
	kw.Core.SetEmbeddingsOutage(false)
	check("outage over", "fid-outage", "refunds delivery", want{"ok", testdb.DocRefundTitle, 0, 0})

	// KBs without a ready document answer nothing: not failures.
	check("KBs without a ready document", "fid-quiet", "refunds delivery", want{"ok", testdb.DocRefundTitle, 1, 0})
	// The pending document becomes ready but Core's index has no chunk of
	// it: that KB now fails (a ready document always gives a hit unfiltered).
	kw.DB.Exec(t, `UPDATE bz_kb_docs SET status = 'ready' WHERE doc_id = 931`)
	check("a ready document Core cannot find", "fid-quiet", "refunds delivery", want{"partial", testdb.DocRefundTitle, 1, 1})
}

// TestFidelityRouteMinScore: the route's threshold is read from the stored
// JSON as Core's routeKnowledgeConfig reads it (numValue(min_score, 0.35, 0,
// 1)): 0, null, "", false and "0" stay 0, so a hit scoring 0.267 is returned
// — Core's own turn retrieval keeps it — while a missing or non-numeric
// min_score is 0.35 and true is 1. Core is asked with min_score -1 every
// time (its /kb/search body would read 0 as 0.35).
func TestFidelityRouteMinScore(t *testing.T) {
	kw := newKWorld(t, fakecore.Options{SystemInfo: true})
	const kb = "fid-min-kb"
	kw.DB.Exec(t, `INSERT INTO bz_kb_bases (kb_id, enabled, updated_at) VALUES (?, 1, UTC_TIMESTAMP())`, kb)
	const content = "Alpha bravo charlie delta: the phonetic alphabet."
	kw.DB.Exec(t, `INSERT INTO bz_kb_docs (doc_id, kb_id, title, content, status, created_at, updated_at)
		VALUES (921, ?, 'Phonetic', ?, 'ready', UTC_TIMESTAMP(), UTC_TIMESTAMP())`, kb, content)
	kw.Core.AddDoc(kb, 921, "Phonetic", content)
	kw.addPrivate(content)
	// 4 of the query's 15 distinct tokens occur in the document: 0.267.
	const query = "alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike november oscar"
	if got := fakecore.Score(query, content); got != 0.267 {
		t.Fatalf("fixture: score got %v; want 0.267", got)
	}
	cases := []struct {
		name, minScore string // minScore "" = no min_score key
		kept           bool
	}{
		{"zero", `0`, true},
		{"null", `null`, true},
		{"empty string", `""`, true},
		{"false", `false`, true},
		{"zero string", `"0"`, true},
		{"spaced string", `" 0.2 "`, true},
		{"below the score", `0.26`, true},
		{"missing", ``, false},
		{"non-numeric", `"high"`, false},
		{"true", `true`, false},
		{"hex string", `"0x10"`, false},
		{"default", `0.35`, false},
	}
	for i, tc := range cases {
		route := fmt.Sprintf("fid-min-%d", i)
		knowledge := `{"kb_ids":["` + kb + `"]}`
		if tc.minScore != "" {
			knowledge = `{"kb_ids":["` + kb + `"],"min_score":` + tc.minScore + `}`
		}
		kw.DB.Exec(t, `INSERT INTO bz_routes (route_key, enabled, knowledge, updated_at) VALUES (?, 1, ?, UTC_TIMESTAMP())`, route, knowledge)
		kw.Core.SetRoute(route, fakecore.GateAllowed)
	}
	sc := kw.start(t, kopts{})
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			route := fmt.Sprintf("fid-min-%d", i)
			m := kw.rec.mark()
			r, a := kw.search(t, sc, route, kw.TokenStar, map[string]any{"query": query})
			if r.Status != 200 || a.Status != "ok" {
				t.Fatalf("min_score %s: got %d %q; want 200 ok (%s)", tc.minScore, r.Status, a.Status, r.Body)
			}
			var scores []float64
			for _, h := range a.Hints {
				scores = append(scores, h.Score)
			}
			want := []float64(nil)
			if tc.kept {
				want = []float64{0.267}
			}
			if fmt.Sprint(scores) != fmt.Sprint(want) {
				t.Errorf("min_score %s: got hint scores %v; want %v", tc.minScore, scores, want)
			}
			for _, c := range kw.rec.since(m, "/kb/search") {
				var b struct {
					MinScore *float64 `json:"min_score"`
				}
				if json.Unmarshal(c.Body, &b) != nil || b.MinScore == nil || *b.MinScore != -1 {
					t.Errorf("min_score %s: /kb/search body %s; want min_score -1", tc.minScore, c.Body)
				}
			}
		})
	}
}
