package test

// End-to-end tests of same-run hints (SPEC §7 "Same-run hints"): an
// on_demand turn's knowledge_delivery.hints built from what Core retrieved
// for the turn, against the fake Core and the real MariaDB catalog.

import (
	"bytes"
	"encoding/json"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/bailinghub/knowledge-sidecar/hostclient"
	"github.com/bailinghub/knowledge-sidecar/internal/fakecore"
	"github.com/bailinghub/knowledge-sidecar/internal/testkit"
	"github.com/bailinghub/knowledge-sidecar/internal/testkit/testdb"
)

// decodeTurnHints decodes a delivery block's hints strictly: an array of at
// most 3 search-shaped hints (exactly six fields) with v2 refs, within 4096
// bytes.
func decodeTurnHints(t testing.TB, raw json.RawMessage) []hostclient.Hint {
	t.Helper()
	if len(raw) > 4096 {
		t.Errorf("hints: %d bytes; want ≤ 4096", len(raw))
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	var hints []hostclient.Hint
	if err := dec.Decode(&hints); err != nil || hints == nil {
		t.Fatalf("hints %s: want a JSON array of hints (%v)", raw, err)
	}
	if len(hints) > 3 {
		t.Errorf("hints: got %d; want at most 3", len(hints))
	}
	var generic []map[string]json.RawMessage
	_ = json.Unmarshal(raw, &generic)
	for i, h := range hints {
		if len(generic[i]) != 6 || !strings.HasPrefix(h.Ref, "kr2.") || len(h.Revision) != 64 || h.ExpiresAt == "" {
			t.Errorf("hint %d %s: want exactly ref (kr2.), title, summary, revision, score, expires_at", i, raw)
		}
	}
	return hints
}

func hintTitlesOf(hs []hostclient.Hint) string {
	var s []string
	for _, h := range hs {
		s = append(s, h.Title)
	}
	return strings.Join(s, "|")
}

// coreRefTitles is the distinct document titles of Core's
// context.knowledge_refs, best score first.
func coreRefTitles(t testing.TB, ctx map[string]json.RawMessage) string {
	t.Helper()
	var refs []struct {
		DocID int64   `json:"doc_id"`
		Title string  `json:"title"`
		Score float64 `json:"score"`
	}
	if raw, ok := ctx["knowledge_refs"]; ok {
		if err := json.Unmarshal(raw, &refs); err != nil {
			t.Fatalf("Core's knowledge_refs %s: %v", raw, err)
		}
	}
	sort.SliceStable(refs, func(i, j int) bool { return refs[i].Score > refs[j].Score })
	seen := map[int64]bool{}
	var s []string
	for _, r := range refs {
		if !seen[r.DocID] {
			seen[r.DocID] = true
			s = append(s, r.Title)
		}
	}
	return strings.Join(s, "|")
}

// deliveryOf returns a turn answer's knowledge_delivery block.
func deliveryOf(t testing.TB, body []byte) deliveryJSON {
	t.Helper()
	var v struct {
		D *deliveryJSON `json:"knowledge_delivery"`
	}
	if err := json.Unmarshal(body, &v); err != nil || v.D == nil {
		t.Fatalf("answer %s has no knowledge_delivery (%v)", body, err)
	}
	return *v.D
}

// maskHintRefs replaces the ref and expires_at of every same-run hint of a
// turn answer (minted afresh on each replay) with placeholders; every other
// byte is kept.
func maskHintRefs(t testing.TB, body []byte) []byte {
	t.Helper()
	var top map[string]json.RawMessage
	if err := json.Unmarshal(body, &top); err != nil {
		t.Fatalf("answer %s is not a JSON object: %v", body, err)
	}
	kd, ok := top["knowledge_delivery"]
	if !ok {
		return body
	}
	var block map[string]json.RawMessage
	var hints []map[string]json.RawMessage
	if json.Unmarshal(kd, &block) != nil || json.Unmarshal(block["hints"], &hints) != nil {
		t.Fatalf("knowledge_delivery %s: want an object with a hints array", kd)
	}
	var b bytes.Buffer
	for i, h := range hints {
		h["ref"], h["expires_at"] = json.RawMessage(`"<ref>"`), json.RawMessage(`"<expires_at>"`)
		one, _ := json.Marshal(h)
		if i > 0 {
			b.WriteByte(',')
		}
		b.Write(one)
	}
	masked := append([]byte{'['}, append(b.Bytes(), ']')...)
	return bytes.Replace(body, block["hints"], masked, 1)
}

// runIDOf returns a turn answer's run_id.
func runIDOf(t testing.TB, body []byte) string {
	t.Helper()
	var v struct {
		RunID string `json:"run_id"`
	}
	if json.Unmarshal(body, &v) != nil || v.RunID == "" {
		t.Fatalf("no run_id in %s", body)
	}
	return v.RunID
}

// TestTurnHints: an on_demand turn on kb-multi whose Core answer holds
// several chunks of one document and chunks of several documents, some of
// which are not ready, in a disabled KB or in a KB outside the route.
func TestTurnHints(t *testing.T) {
	w := NewWorld(t, WorldOptions{})
	var mu sync.Mutex
	now := time.Now().UTC().Truncate(time.Second)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	side := w.StartSidecar(t, FeatureOptions{Now: clock})
	c := newClient(t)
	route := testdb.RouteMulti

	big := fakecore.Chunks(testdb.BigDocContent())
	w.Core.SetTurnKnowledge(route, []fakecore.TurnKnowledge{
		{DocID: testdb.DocOtherKB, Title: "Other KB", Content: "x", Score: 0.99},       // KB not in the route
		{DocID: testdb.DocEmbedding, Title: "Embedding", Content: "x", Score: 0.97},    // not ready
		{DocID: testdb.DocDisabledKB, Title: "Disabled KB", Content: "x", Score: 0.95}, // KB disabled
		{DocID: testdb.DocBig, Title: testdb.DocBigTitle, Content: big[1], Score: 0.7}, // two chunks of one document
		{DocID: testdb.DocMultiByte, Title: testdb.DocMultiByteTitle, Content: testdb.DocMultiByteContent, Score: 0.9},
		{DocID: testdb.DocBig, Title: testdb.DocBigTitle, Content: big[0], Score: 0.75},
		{DocID: testdb.DocRefund, Title: testdb.DocRefundTitle, Content: testdb.DocRefundContent, Score: 0.82},
		{DocID: testdb.DocMissing, Title: "Gone", Content: "x", Score: 0.96}, // no such document
	})
	wantTitles := testdb.DocMultiByteTitle + "|" + testdb.DocRefundTitle + "|" + testdb.DocBigTitle

	ti := newTurn("hints")
	first := send(t, c, "POST", turnsURL(side, route), w.TokenA, ti.body(`"on_demand"`), nil)
	if first.Status != 200 {
		t.Fatalf("turn: got %d %s; want 200", first.Status, first.Body)
	}
	run := runIDOf(t, first.Body)
	hints := decodeTurnHints(t, deliveryOf(t, first.Body).Hints)
	if got := hintTitlesOf(hints); got != wantTitles {
		t.Fatalf("hint titles: got %q; want %q (grouped by document, best score first, excluded documents left out)", got, wantTitles)
	}
	for i, want := range []float64{0.9, 0.82, 0.75} {
		if hints[i].Score != want {
			t.Errorf("hint %d score: got %v; want the document's best %v", i, hints[i].Score, want)
		}
	}
	if want := now.Add(300 * time.Second).Format(time.RFC3339); hints[0].ExpiresAt != want {
		t.Errorf("expires_at: got %s; want %s", hints[0].ExpiresAt, want)
	}
	if !strings.HasPrefix(hints[2].Summary, strings.Repeat(testdb.BigDocUnit, 2)) {
		t.Errorf("summary of the big manual: got %.60q; want an excerpt of its best chunk", hints[2].Summary)
	}
	if got := testkit.Metric(t, side.Registry, "knowledge_sidecar_turn_hints_total", map[string]string{"outcome": "minted"}); got != 1 {
		t.Errorf("turn_hints_total{outcome=minted}: got %v; want 1", got)
	}

	readURL := side.WS(route) + "/knowledge/read"
	t.Run("read with the run", func(t *testing.T) {
		code, _, body := Call(t, c, "POST", readURL, w.TokenA, map[string]any{"ref": hints[1].Ref, "run_id": run})
		var rd struct {
			Title   string `json:"title"`
			Content string `json:"content"`
		}
		if code != 200 || json.Unmarshal(body, &rd) != nil || rd.Title != testdb.DocRefundTitle || rd.Content != testdb.DocRefundContent {
			t.Fatalf("got %d %s; want 200 with the refund document", code, body)
		}
	})
	t.Run("read without the run", func(t *testing.T) {
		code, _, body := Call(t, c, "POST", readURL, w.TokenA, map[string]any{"ref": hints[1].Ref})
		if code != 400 || !bytes.Contains(body, []byte(`"error":"knowledge_reference_invalid"`)) {
			t.Fatalf("got %d %s; want 400 knowledge_reference_invalid", code, body)
		}
	})

	t.Run("replay mints fresh refs for the same documents", func(t *testing.T) {
		advance(90 * time.Second)
		calls := w.Core.Calls(turnsPath(route))
		again := send(t, c, "POST", turnsURL(side, route), w.TokenA, ti.body(`"on_demand"`), nil)
		if again.Status != 200 || runIDOf(t, again.Body) != run {
			t.Fatalf("replay: got %d %s; want 200 with run %s", again.Status, again.Body, run)
		}
		if w.Core.Calls(turnsPath(route)) != calls+1 {
			t.Errorf("replay: Core calls got %d; want one more than %d", w.Core.Calls(turnsPath(route)), calls)
		}
		replayed := decodeTurnHints(t, deliveryOf(t, again.Body).Hints)
		if got := hintTitlesOf(replayed); got != wantTitles {
			t.Errorf("replay titles: got %q; want %q", got, wantTitles)
		}
		if want := now.Add(300 * time.Second).Format(time.RFC3339); replayed[0].ExpiresAt != want {
			t.Errorf("replay expires_at: got %s; want a fresh %s", replayed[0].ExpiresAt, want)
		}
		if replayed[0].Ref == hints[0].Ref {
			t.Errorf("replay ref: got the first answer's; want a fresh one")
		}
		code, _, body := Call(t, c, "POST", readURL, w.TokenA, map[string]any{"ref": replayed[0].Ref, "run_id": run})
		if code != 200 {
			t.Errorf("reading a replayed hint: got %d %s; want 200", code, body)
		}
	})

	t.Run("inline keeps hints empty", func(t *testing.T) {
		r := send(t, c, "POST", turnsURL(side, route), w.TokenA, newTurn("hints-inline").body(`"inline"`), nil)
		if d := deliveryOf(t, r.Body); r.Status != 200 || string(d.Hints) != "[]" {
			t.Fatalf("inline: got %d hints %s; want 200 and []", r.Status, d.Hints)
		}
	})

	t.Run("turn_hints off, then on again (reload)", func(t *testing.T) {
		side.Server.SetTurnHints(false)
		r := send(t, c, "POST", turnsURL(side, route), w.TokenA, newTurn("hints-off").body(`"on_demand"`), nil)
		if d := deliveryOf(t, r.Body); r.Status != 200 || string(d.Hints) != "[]" {
			t.Errorf("turn_hints off: got %d hints %s; want 200 and []", r.Status, d.Hints)
		}
		if got := testkit.Metric(t, side.Registry, "knowledge_sidecar_turn_hints_total", map[string]string{"outcome": "off"}); got != 1 {
			t.Errorf("turn_hints_total{outcome=off}: got %v; want 1", got)
		}
		side.Server.SetTurnHints(true)
		r = send(t, c, "POST", turnsURL(side, route), w.TokenA, newTurn("hints-on").body(`"on_demand"`), nil)
		if got := hintTitlesOf(decodeTurnHints(t, deliveryOf(t, r.Body).Hints)); got != wantTitles {
			t.Errorf("turn_hints on again: got titles %q; want %q", got, wantTitles)
		}
	})

	t.Run("document edited after Core's retrieval", func(t *testing.T) {
		// Core's index still quotes the old text (CORE_FACTS Addendum 2).
		w.DB.Exec(t, "UPDATE bz_kb_docs SET content = ?, content_hash = NULL, updated_at = UTC_TIMESTAMP() WHERE doc_id = ?",
			"Refunds are no longer accepted.", testdb.DocRefund)
		r := send(t, c, "POST", turnsURL(side, route), w.TokenA, newTurn("hints-stale").body(`"on_demand"`), nil)
		if r.Status != 200 {
			t.Fatalf("got %d %s; want 200", r.Status, r.Body)
		}
		want := testdb.DocMultiByteTitle + "|" + testdb.DocBigTitle
		if got := hintTitlesOf(decodeTurnHints(t, deliveryOf(t, r.Body).Hints)); got != want {
			t.Errorf("titles: got %q; want %q (the stale chunk's document left out)", got, want)
		}
	})
}

// TestTurnHintsCatalogDown: with the catalog unreachable after the route was
// seen, or its document table unreadable, an on_demand turn still succeeds
// with "hints": [] (best effort), counted as failed.
func TestTurnHintsCatalogDown(t *testing.T) {
	w := NewWorld(t, WorldOptions{})
	fwd := newTCPForwarder(t, w.DB.ReadOnlyDSN)
	side := w.StartSidecar(t, FeatureOptions{CatalogDSN: fwd.dsn})
	c := newClient(t)
	route := testdb.RouteMulti
	failed := func() float64 {
		return testkit.Metric(t, side.Registry, "knowledge_sidecar_turn_hints_total", map[string]string{"outcome": "failed"})
	}

	// Healthy first: the route is seen (its last-known configuration lets
	// the turn carry a scope revision while the catalog is down).
	r := send(t, c, "POST", turnsURL(side, route), w.TokenA, newTurn("down-before").body(`"on_demand"`), nil)
	if got := hintTitlesOf(decodeTurnHints(t, deliveryOf(t, r.Body).Hints)); r.Status != 200 || got != testdb.DocRefundTitle {
		t.Fatalf("healthy: got %d hints %q; want 200 and %q", r.Status, got, testdb.DocRefundTitle)
	}

	t.Run("documents unreadable", func(t *testing.T) {
		cfg, err := mysql.ParseDSN(w.DB.ReadOnlyDSN)
		if err != nil {
			t.Fatal(err)
		}
		account := "'" + cfg.User + "'@'%'"
		w.DB.Exec(t, "REVOKE SELECT (doc_id, kb_id, title, content, content_hash, status, updated_at) ON `"+
			w.DB.Name+"`.bz_kb_docs FROM "+account)
		t.Cleanup(func() {
			w.DB.Exec(t, "GRANT SELECT (doc_id, kb_id, title, content, content_hash, status, updated_at) ON `"+
				w.DB.Name+"`.bz_kb_docs TO "+account)
		})
		before := failed()
		r := send(t, c, "POST", turnsURL(side, route), w.TokenA, newTurn("docs-down").body(`"on_demand"`), nil)
		if d := deliveryOf(t, r.Body); r.Status != 200 || string(d.Hints) != "[]" {
			t.Fatalf("got %d hints %s; want 200 and []", r.Status, d.Hints)
		}
		if got := failed() - before; got != 1 {
			t.Errorf("turn_hints_total{outcome=failed}: got +%v; want +1", got)
		}
	})

	t.Run("catalog unreachable", func(t *testing.T) {
		fwd.shut()
		before := failed()
		r := send(t, c, "POST", turnsURL(side, route), w.TokenA, newTurn("down-after").body(`"on_demand"`), nil)
		if r.Status != 200 {
			t.Fatalf("got %d %s; want 200", r.Status, r.Body)
		}
		d := deliveryOf(t, r.Body)
		if string(d.Hints) != "[]" || d.Status != "unavailable" {
			t.Errorf("delivery: got status %q hints %s; want unavailable and []", d.Status, d.Hints)
		}
		if got := failed() - before; got != 1 {
			t.Errorf("turn_hints_total{outcome=failed}: got +%v; want +1", got)
		}
	})
}

// TestTurnHintsMakeNoRetrievalCall: same-run hints are built from what Core
// already retrieved for the turn (SPEC §7: "No extra retrieval call to
// Core"): on_demand turns with hints, their replay and an inline turn make
// no /kb/search call. During an embeddings outage Core's turn retrieval
// finds nothing (its searchMulti swallows the failure): the turn still
// succeeds with "hints": [], its status follows the catalog and breaker state
// as before the outage, and the sidecar still does not search.
func TestTurnHintsMakeNoRetrievalCall(t *testing.T) {
	w := NewWorld(t, WorldOptions{})
	side := w.StartSidecar(t, FeatureOptions{})
	c := newClient(t)
	route := testdb.RouteMulti
	searches := w.Core.Calls("/kb/search")

	ti := newTurn("no-search")
	first := send(t, c, "POST", turnsURL(side, route), w.TokenA, ti.body(`"on_demand"`), nil)
	if first.Status != 200 {
		t.Fatalf("turn: got %d %s; want 200", first.Status, first.Body)
	}
	d := deliveryOf(t, first.Body)
	if got := hintTitlesOf(decodeTurnHints(t, d.Hints)); got != testdb.DocRefundTitle {
		t.Fatalf("hints: got %q; want %q (the hints path ran)", got, testdb.DocRefundTitle)
	}
	if replay := send(t, c, "POST", turnsURL(side, route), w.TokenA, ti.body(`"on_demand"`), nil); replay.Status != 200 {
		t.Fatalf("replay: got %d %s; want 200", replay.Status, replay.Body)
	}
	mustTurn(t, c, side, route, w.TokenA, newTurn("no-search-inline").body(`"inline"`), "inline")
	if got := w.Core.Calls("/kb/search") - searches; got != 0 {
		t.Fatalf("/kb/search calls during turns: got %d; want 0", got)
	}

	w.Core.SetEmbeddingsOutage(true)
	r := send(t, c, "POST", turnsURL(side, route), w.TokenA, newTurn("no-search-outage").body(`"on_demand"`), nil)
	if r.Status != 200 {
		t.Fatalf("turn during the outage: got %d %s; want 200", r.Status, r.Body)
	}
	during := deliveryOf(t, r.Body)
	if string(during.Hints) != "[]" || during.Status != d.Status || during.ScopeRevision != d.ScopeRevision {
		t.Errorf("delivery during the outage: status %q hints %s; want %q (catalog and breaker state, as before) and []", during.Status, during.Hints, d.Status)
	}
	if got := w.Core.Calls("/kb/search") - searches; got != 0 {
		t.Errorf("/kb/search calls: got %d; want 0", got)
	}
}
