package knowledge

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/bailinghub/knowledge-sidecar/corefacts"
	"github.com/bailinghub/knowledge-sidecar/hostclient"
	"github.com/bailinghub/knowledge-sidecar/internal/testkit"
	"github.com/bailinghub/knowledge-sidecar/protocol"
)

// countedTurnHints calls TurnHintsFor for session A with run runA and
// counts the catalog's metadata and document reads it made.
func (e *env) countedTurnHints(d Delivery, items []TurnItem) (raw []byte, outcome string, meta, docs int) {
	e.cat.mu.Lock()
	e.cat.metaCalls, e.cat.docCalls = 0, 0
	e.cat.mu.Unlock()
	raw, outcome = e.svc.TurnHintsFor(context.Background(), sessionA, d, runA, items)
	e.cat.mu.Lock()
	defer e.cat.mu.Unlock()
	return raw, outcome, e.cat.metaCalls, e.cat.docCalls
}

// turnHints takes routeKey's Delivery, as a turn is before it is
// forwarded, calls TurnHintsFor for session A with run runA and decodes the
// array strictly (exactly the six fields of a search hint).
func (e *env) turnHints(items []TurnItem) ([]hostclient.Hint, string, []byte) {
	e.t.Helper()
	d, err := e.svc.Delivery(context.Background(), testkit.RouteKey(routeKey))
	if err != nil || d.ScopeRevision != ScopeRevision(routeKey, &defaultKBConfg) {
		e.t.Fatalf("Delivery: %+v, %v", d, err)
	}
	raw, outcome := e.svc.TurnHintsFor(context.Background(), sessionA, d, runA, items)
	if len(raw) > protocol.SearchMaxBytes {
		e.t.Errorf("hints array is %d bytes; want ≤ %d", len(raw), protocol.SearchMaxBytes)
	}
	var generic []map[string]json.RawMessage
	if err := json.Unmarshal(raw, &generic); err != nil {
		e.t.Fatalf("hints %s: not a JSON array: %v", raw, err)
	}
	for _, h := range generic {
		if len(h) != 6 {
			e.t.Errorf("hint %v has %d fields; want exactly ref,title,summary,revision,score,expires_at", h, len(h))
		}
	}
	var hints []hostclient.Hint
	_ = json.Unmarshal(raw, &hints)
	return hints, outcome, raw
}

func hintTitles(hs []hostclient.Hint) string {
	var s []string
	for _, h := range hs {
		s = append(s, h.Title)
	}
	return strings.Join(s, ",")
}

// Chunk texts as Core's chunker cuts the env's documents.
const (
	refundChunk1 = "# 退款规则\n退款窗口设为0时，订单不可退款。"
	refundChunk2 = "[图：流程图]\n超过窗口的退款需要主管审批。"
	shipChunk    = "Shipping takes 3-5 days.\nExpress shipping takes 1 day."
	policyChunk  = "Policy: refunds over 1000 need two approvals."
)

// TestTurnHintsGrouping: several chunks of one document and of several
// documents → one hint per document with its best score, best first, at
// most 3, the summary quoting the document's hit chunks.
func TestTurnHintsGrouping(t *testing.T) {
	e := newEnv(t)
	e.cat.setDoc(corefacts.Document{DocMeta: corefacts.DocMeta{DocID: 103, KBID: "faq", Title: "Warranty"}, Content: "Warranty lasts one year."})
	e.cat.setDoc(corefacts.Document{DocMeta: corefacts.DocMeta{DocID: 202, KBID: "policy", Title: "Escalation"}, Content: "Escalate after two days."})
	for _, tc := range []struct {
		name        string
		items       []TurnItem
		wantTitles  string
		wantScores  []float64
		wantSummary map[string]string // title → summary
	}{
		{name: "chunks of one document",
			items: []TurnItem{
				{DocID: docRefund, Title: "退款规则", Content: refundChunk2, Score: 0.55},
				{DocID: docRefund, Title: "退款规则", Content: refundChunk1, Score: 0.82},
			},
			wantTitles: "退款规则", wantScores: []float64{0.82},
			wantSummary: map[string]string{"退款规则": "# 退款规则 退款窗口设为0时，订单不可退款。 … [图：流程图] 超过窗口的退款需要主管审批。"}},
		{name: "several documents, best score first",
			items: []TurnItem{
				{DocID: docShip, Title: "Shipping", Content: shipChunk, Score: 0.61},
				{DocID: docRefund, Title: "退款规则", Content: refundChunk1, Score: 0.82},
				{DocID: docPolicy, Title: "Policy", Content: policyChunk, Score: 0.7},
				{DocID: docRefund, Title: "退款规则", Content: refundChunk2, Score: 0.55},
			},
			wantTitles: "退款规则,Policy,Shipping", wantScores: []float64{0.82, 0.7, 0.61},
			wantSummary: map[string]string{"Shipping": "Shipping takes 3-5 days. Express shipping takes 1 day.", "Policy": policyChunk}},
		{name: "at most three",
			items: []TurnItem{
				{DocID: 103, Title: "Warranty", Content: "Warranty lasts one year.", Score: 0.5},
				{DocID: docShip, Title: "Shipping", Content: shipChunk, Score: 0.61},
				{DocID: 202, Title: "Escalation", Content: "Escalate after two days.", Score: 0.9},
				{DocID: docRefund, Title: "退款规则", Content: refundChunk1, Score: 0.82},
				{DocID: docPolicy, Title: "Policy", Content: policyChunk, Score: 0.7},
			},
			wantTitles: "Escalation,退款规则,Policy", wantScores: []float64{0.9, 0.82, 0.7}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e.cat.edit(func(c *fakeCatalog) { c.docCalls = 0 })
			hints, outcome, _ := e.turnHints(tc.items)
			if outcome != HintsMinted {
				t.Errorf("outcome: got %q; want %q", outcome, HintsMinted)
			}
			if got := hintTitles(hints); got != tc.wantTitles {
				t.Fatalf("titles: got %q; want %q", got, tc.wantTitles)
			}
			for i, h := range hints {
				if h.Score != tc.wantScores[i] {
					t.Errorf("hint %d score: got %v; want %v", i, h.Score, tc.wantScores[i])
				}
				if want, ok := tc.wantSummary[h.Title]; ok && h.Summary != want {
					t.Errorf("hint %s summary: got %q; want %q", h.Title, h.Summary, want)
				}
				if want := e.cat.docs[docIDOf(t, e, h.Title)].Revision; h.Revision != want {
					t.Errorf("hint %s revision: got %s; want %s", h.Title, h.Revision, want)
				}
				if want := t0.Add(protocol.ReferenceTTL).Format(time.RFC3339); h.ExpiresAt != want {
					t.Errorf("hint %s expires_at: got %s; want %s", h.Title, h.ExpiresAt, want)
				}
			}
			if e.cat.docCalls != 1 {
				t.Errorf("catalog document queries: got %d; want 1 for all candidates", e.cat.docCalls)
			}
		})
	}
}

func docIDOf(t *testing.T, e *env, title string) int64 {
	t.Helper()
	for id, d := range e.cat.docs {
		if d.Title == title {
			return id
		}
	}
	t.Fatalf("no document titled %q", title)
	return 0
}

// TestTurnHintsExcluded: documents that are not ready, whose KB is disabled
// or not in the route, gone, or edited since Core retrieved the chunk, give
// no hint; unusable items (no doc id, NaN score) neither.
func TestTurnHintsExcluded(t *testing.T) {
	refund := TurnItem{DocID: docRefund, Title: "退款规则", Content: refundChunk1, Score: 0.82}
	ship := TurnItem{DocID: docShip, Title: "Shipping", Content: shipChunk, Score: 0.61}
	policy := TurnItem{DocID: docPolicy, Title: "Policy", Content: policyChunk, Score: 0.7}
	for _, tc := range []struct {
		name        string
		change      func(c *fakeCatalog)
		items       []TurnItem
		wantTitles  string
		wantOutcome string
	}{
		{"baseline", nil, []TurnItem{refund, ship, policy}, "退款规则,Policy,Shipping", HintsMinted},
		{"not ready", func(c *fakeCatalog) {
			d := c.docs[docRefund]
			d.Status = "embedding"
			c.docs[docRefund] = d
		}, []TurnItem{refund, ship}, "Shipping", HintsMinted},
		{"KB disabled", func(c *fakeCatalog) { c.kbs["policy"] = false }, []TurnItem{refund, policy}, "退款规则", HintsMinted},
		{"KB not in the route", func(c *fakeCatalog) {
			c.docs[301] = corefacts.Document{DocMeta: corefacts.DocMeta{DocID: 301, KBID: "hr", Title: "Salaries", Status: "ready"}, Content: "Salaries are secret."}
			c.kbs["hr"] = true
		}, []TurnItem{{DocID: 301, Title: "Salaries", Content: "Salaries are secret.", Score: 0.99}, ship}, "Shipping", HintsMinted},
		{"document gone", func(c *fakeCatalog) { delete(c.docs, docShip) }, []TurnItem{ship}, "", HintsNone},
		{"edited after Core's retrieval (stale chunk)", func(c *fakeCatalog) {
			d := c.docs[docRefund]
			d.Content = strings.Replace(d.Content, "订单不可退款", "订单可以退款", 1)
			d.Revision = corefacts.Revision(d.Title, d.Content)
			c.docs[docRefund] = d
		}, []TurnItem{refund, policy}, "Policy", HintsMinted},
		{"unusable items", nil, []TurnItem{{DocID: 0, Content: policyChunk, Score: 0.9}, {DocID: docPolicy, Content: policyChunk, Score: nan()}}, "", HintsNone},
		{"no items", nil, nil, "", HintsNone},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			if tc.change != nil {
				e.cat.edit(tc.change)
			}
			hints, outcome, raw := e.turnHints(tc.items)
			if got := hintTitles(hints); got != tc.wantTitles {
				t.Errorf("titles: got %q; want %q", got, tc.wantTitles)
			}
			if outcome != tc.wantOutcome {
				t.Errorf("outcome: got %q; want %q", outcome, tc.wantOutcome)
			}
			if strings.Contains(string(raw), "Salaries") {
				t.Errorf("hints %s mention a document outside the route", raw)
			}
		})
	}
}

// TestTurnHintsBudget: huge titles and escape-heavy summaries still fit the
// serialized array within 4096 bytes: summaries are shortened first (on
// character boundaries), then the lowest ranks dropped.
func TestTurnHintsBudget(t *testing.T) {
	escapy := strings.Repeat("\"\\\u2028<>&\x01", 200) // 6-byte escapes and friends
	chinese := strings.Repeat("退款窗口设为0时订单不可退款", 100)
	for _, tc := range []struct {
		name       string
		titles     [3]string
		contents   [3]string
		wantTitles int // hints kept
		shortened  bool
	}{
		{"escape-heavy summaries are shortened, all kept", [3]string{"A", "B", "C"}, [3]string{escapy, escapy, chinese}, 3, true},
		{"huge titles drop the lowest ranks", [3]string{strings.Repeat("标", 500), strings.Repeat("题", 500), strings.Repeat("\"", 1200)}, [3]string{chinese, escapy, "short"}, 2, true},
		{"a title too long for the budget alone is dropped", [3]string{"A", strings.Repeat("\u2028", 700), "C"}, [3]string{"one", "two", "three"}, 2, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			var items []TurnItem
			for i := range 3 {
				id := int64(500 + i)
				e.cat.setDoc(corefacts.Document{DocMeta: corefacts.DocMeta{DocID: id, KBID: "faq", Title: tc.titles[i]}, Content: tc.contents[i]})
				items = append(items, TurnItem{DocID: id, Title: tc.titles[i], Content: tc.contents[i], Score: 0.9 - float64(i)/10})
			}
			hints, outcome, raw := e.turnHints(items)
			if len(raw) > protocol.SearchMaxBytes {
				t.Fatalf("hints array: got %d bytes; want ≤ %d", len(raw), protocol.SearchMaxBytes)
			}
			if len(hints) != tc.wantTitles || outcome != HintsMinted {
				t.Fatalf("got %d hints (%s); want %d minted", len(hints), outcome, tc.wantTitles)
			}
			shortened := false
			for _, h := range hints {
				if !utf8.ValidString(h.Summary) {
					t.Errorf("summary of %.20s is not valid UTF-8", h.Title)
				}
				full := summarize([]string{e.cat.docs[docIDOf(t, e, h.Title)].Content})
				if !strings.HasPrefix(full, h.Summary) {
					t.Errorf("summary of %.20s is not a prefix of the extractive summary", h.Title)
				}
				shortened = shortened || h.Summary != full
			}
			if shortened != tc.shortened {
				t.Errorf("summaries shortened: got %v; want %v", shortened, tc.shortened)
			}
			if hints[0].Title != tc.titles[0] {
				t.Errorf("first hint: got %.20s; want the best-ranked %.20s", hints[0].Title, tc.titles[0])
			}
		})
	}
}

// TestTurnHintReadWithRun: a turn hint is read with the turn's run (200)
// and not without it (400 knowledge_reference_invalid); minting again for a
// replay gives the same documents with a fresh expiry.
func TestTurnHintReadWithRun(t *testing.T) {
	e := newEnv(t)
	items := []TurnItem{
		{DocID: docRefund, Title: "退款规则", Content: refundChunk1, Score: 0.82},
		{DocID: docPolicy, Title: "Policy", Content: policyChunk, Score: 0.7},
	}
	hints, _, _ := e.turnHints(items)
	if len(hints) != 2 {
		t.Fatalf("got %d hints; want 2", len(hints))
	}
	for _, tc := range []struct {
		name     string
		body     map[string]any
		wantCode protocol.ErrorCode // "" = 200
	}{
		{"with the run", map[string]any{"ref": hints[0].Ref, "run_id": runA}, ""},
		{"with the run in upper case", map[string]any{"ref": hints[0].Ref, "run_id": strings.ToUpper(runA)}, ""},
		{"without the run", map[string]any{"ref": hints[0].Ref}, protocol.CodeReferenceInvalid},
		{"with another run", map[string]any{"ref": hints[0].Ref, "run_id": runB}, protocol.CodeReferenceInvalid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, _, ke := e.call("read", tokA, routeKey, readBodyJSON(tc.body))
			switch {
			case tc.wantCode == "" && ke != nil:
				t.Fatalf("got %d %s; want 200", ke.Status, ke.Code)
			case tc.wantCode == "" && m["title"] != "退款规则":
				t.Errorf("read title: got %v; want 退款规则", m["title"])
			case tc.wantCode != "" && (ke == nil || ke.Status != 400 || ke.Code != tc.wantCode):
				t.Errorf("got %v; want 400 %s", ke, tc.wantCode)
			}
		})
	}
	if _, _, ke := e.call("read", tokB, routeKey, readBodyJSON(map[string]any{"ref": hints[0].Ref, "run_id": runA})); ke == nil {
		t.Errorf("another session read the hint; want it refused")
	}

	e.clock.Advance(90 * time.Second)
	again, _, _ := e.turnHints(items)
	if got, want := hintTitles(again), hintTitles(hints); got != want {
		t.Errorf("replay documents: got %q; want %q", got, want)
	}
	if want := t0.Add(90*time.Second + protocol.ReferenceTTL).Format(time.RFC3339); again[0].ExpiresAt != want {
		t.Errorf("replay expiry: got %s; want a fresh %s", again[0].ExpiresAt, want)
	}
	if again[0].Ref == hints[0].Ref {
		t.Errorf("replay ref: got the first turn's ref; want a freshly minted one")
	}
}

// TestNextRune: nextRune says what utf8.DecodeRuneInString and isSpaceRune
// say, for every non-ASCII character and for invalid sequences.
func TestNextRune(t *testing.T) {
	check := func(s string) {
		t.Helper()
		r, wantSize := utf8.DecodeRuneInString(s)
		wantInvalid := r == utf8.RuneError && wantSize == 1
		wantSpace := !wantInvalid && isSpaceRune(r)
		if size, space, invalid := nextRune(s); size != wantSize || space != wantSpace || invalid != wantInvalid {
			t.Errorf("%q: got (%d, %v, %v); want (%d, %v, %v)", s, size, space, invalid, wantSize, wantSpace, wantInvalid)
		}
	}
	for r := rune(0x80); r <= utf8.MaxRune; r++ {
		if utf8.ValidRune(r) {
			check(string(r) + "x")
		}
	}
	for _, s := range []string{"\x80", "\xc2", "\xc2x", "\xe2\x80", "\xe2\x80x", "\xed\xa0\x80", "\xe0\x80\x80", "\xf0\x80\x80\x80",
		"\xf4\x90\x80\x80", "\xf5\x80\x80\x80", "\xff", "\xc0\xaf", "\xef\xbb", "\xe3\x80"} {
		check(s)
	}
}

// TestTurnHintsForReusesDelivery: with the route's state read before the
// turn was forwarded (Delivery), hints cost one catalog call — the
// documents.
func TestTurnHintsForReusesDelivery(t *testing.T) {
	e := newEnv(t)
	items := []TurnItem{{DocID: docRefund, Title: "退款规则", Content: refundChunk1, Score: 0.82}}
	d, err := e.svc.Delivery(context.Background(), testkit.RouteKey(routeKey))
	if err != nil || d.Status != protocol.StatusOK {
		t.Fatalf("Delivery: %+v, %v", d, err)
	}
	raw, outcome, meta, docs := e.countedTurnHints(d, items)
	if outcome != HintsMinted || !strings.Contains(string(raw), `"title":"退款规则"`) {
		t.Fatalf("got %s %s; want the refund hint", outcome, raw)
	}
	if meta != 0 || docs != 1 {
		t.Errorf("catalog calls: %d route/KB and %d document calls; want 0 and 1", meta, docs)
	}
}

// TestTurnHintsForStatus: the route's delivery status decides before any
// catalog call: a route without knowledge has no hints ("none"), one whose
// catalog or retrieval was down when the turn was forwarded gets "[]" as a
// failure, and so does a Delivery that did not come from Service.Delivery.
func TestTurnHintsForStatus(t *testing.T) {
	items := []TurnItem{{DocID: docRefund, Title: "退款规则", Content: refundChunk1, Score: 0.82}}
	for _, tc := range []struct {
		name   string
		route  string
		mutate func(e *env)
		d      *Delivery // instead of Service.Delivery
		want   string
	}{
		{name: "no knowledge configured", route: routeNone, want: HintsNone},
		{name: "unknown route", route: "ghost-route", want: HintsNone},
		{name: "retrieval breaker open", route: routeKey, mutate: func(e *env) { e.ret.unusable = true }, want: HintsFailed},
		{name: "no KB enabled", route: routeKey, mutate: func(e *env) { e.cat.kbs = map[string]bool{} }, want: HintsFailed},
		{name: "catalog down, last configuration known", route: routeKey, mutate: func(e *env) {
			if _, err := e.svc.Delivery(context.Background(), testkit.RouteKey(routeKey)); err != nil {
				t.Fatal(err)
			}
			e.cat.down = true
		}, want: HintsFailed},
		{name: "not from Delivery", d: &Delivery{Status: protocol.StatusOK, ScopeRevision: ScopeRevision(routeKey, &defaultKBConfg)}, want: HintsFailed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			if tc.mutate != nil {
				tc.mutate(e)
			}
			var d Delivery
			if tc.d != nil {
				d = *tc.d
			} else {
				var err error
				if d, err = e.svc.Delivery(context.Background(), testkit.RouteKey(tc.route)); err != nil {
					t.Fatal(err)
				}
			}
			raw, outcome, meta, docs := e.countedTurnHints(d, items)
			if outcome != tc.want || string(raw) != "[]" {
				t.Errorf("got %s %s; want %s []", outcome, raw, tc.want)
			}
			if meta != 0 || docs != 0 {
				t.Errorf("catalog calls: %d route/KB and %d document calls; want none", meta, docs)
			}
		})
	}
}
