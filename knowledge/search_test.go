package knowledge

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/bailinghub/knowledge-sidecar/catalog"
	"github.com/bailinghub/knowledge-sidecar/corefacts"
	"github.com/bailinghub/knowledge-sidecar/internal/testkit"
	"github.com/bailinghub/knowledge-sidecar/protocol"
)

func hintsOf(t *testing.T, m map[string]any) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, h := range m["hints"].([]any) {
		out = append(out, h.(map[string]any))
	}
	return out
}

func titles(hs []map[string]any) string {
	var s []string
	for _, h := range hs {
		s = append(s, h["title"].(string))
	}
	return strings.Join(s, ",")
}

func TestSearchResponseShape(t *testing.T) {
	e := newEnv(t)
	_, raw, ke := e.call("search", tokA, routeKey, `{"query":"退款","run_id":"`+strings.ToUpper(runA)+`"}`)
	if ke != nil {
		t.Fatal(ke)
	}
	// Keys in protocol order, run_id canonical lowercase.
	wantPrefix := `{"schema_version":"bailing.agent-knowledge-search.v1","route":"order-assistant","run_id":"` + runA +
		`","knowledge_scope_revision":"` + ScopeRevision(routeKey, &defaultKBConfg) + `","trust":"reference_only","status":"ok","hints":[{"ref":"kr2.k1.`
	if !strings.HasPrefix(string(raw), wantPrefix) {
		t.Fatalf("body starts %.300s; want %s", raw, wantPrefix)
	}
	if !strings.HasSuffix(string(raw), `],"truncated":false}`) {
		t.Fatalf("body ends %s; want truncated last", raw[len(raw)-40:])
	}
	var m map[string]json.RawMessage
	_ = json.Unmarshal(raw, &m)
	var hints []map[string]json.RawMessage
	_ = json.Unmarshal(m["hints"], &hints)
	for _, h := range hints {
		var keys []string
		for k := range h {
			keys = append(keys, k)
		}
		if len(h) != 6 {
			t.Fatalf("hint keys %v; want exactly ref,title,summary,revision,score,expires_at", keys)
		}
		for _, k := range []string{"ref", "title", "summary", "revision", "score", "expires_at"} {
			if _, ok := h[k]; !ok {
				t.Fatalf("hint lacks %q", k)
			}
		}
	}
	// Hint order and contents.
	got := e.mustOK("search", tokA, routeKey, `{"query":"退款"}`)
	if _, has := got["run_id"]; has {
		t.Fatalf("run_id present without being given")
	}
	hs := hintsOf(t, got)
	if titles(hs) != "退款规则,Policy,Shipping" {
		t.Fatalf("titles %s; want merged by score across KBs, one per doc", titles(hs))
	}
	first := hs[0]
	if first["revision"] != corefacts.Revision("退款规则", refundContent) {
		t.Errorf("revision %v; want sha256(title NUL content)", first["revision"])
	}
	if first["score"] != 0.82 {
		t.Errorf("score %v; want Core's 0.82 as returned", first["score"])
	}
	if first["expires_at"] != "2026-09-01T12:05:00Z" {
		t.Errorf("expires_at %v; want issue + 300 s in RFC 3339 UTC", first["expires_at"])
	}
	if s := first["summary"].(string); s != "# 退款规则 退款窗口设为0时，订单不可退款。 … [图：流程图] 超过窗口的退款需要主管审批。" {
		t.Errorf("summary %q; want both hit chunks, whitespace-collapsed, best first", s)
	}
}

func TestSearchRetrievalCalls(t *testing.T) {
	// The retriever is never given the route's min_score: it asks Core for
	// the unfiltered top k, and the sidecar applies the threshold itself.
	tests := []struct {
		name     string
		topK     int
		minScore float64
		limit    string
		wantK    int
	}{
		{"default limit", 5, 0.35, "", 12},
		{"limit 1 uses top_k", 5, 0.5, `,"limit":1`, 5},
		{"large top_k", 15, 0.35, `,"limit":3`, 15},
		{"top_k 20 cap", 20, 0.9, "", 20},
		{"unnormalized top_k capped at 20", 30, 0.9, "", 20},
		{"min_score 0", 5, 0, `,"limit":2`, 8},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			e.cat.edit(func(c *fakeCatalog) {
				k := *c.routes[routeKey].Knowledge
				k.TopK, k.MinScore = tc.topK, tc.minScore
				c.routes[routeKey] = corefacts.Route{Key: routeKey, Enabled: true, Knowledge: &k}
			})
			e.mustOK("search", tokA, routeKey, `{"query":" 退款 "`+tc.limit+`}`)
			calls := e.ret.callList()
			if len(calls) != 2 {
				t.Fatalf("got %d Core calls; want one per KB (2)", len(calls))
			}
			seen := map[string]bool{}
			for _, c := range calls {
				seen[c.KB] = true
				if c.TopK != tc.wantK || c.Query != " 退款 " {
					t.Fatalf("call %+v; want top_k %d and the query as given", c, tc.wantK)
				}
			}
			if !seen["faq"] || !seen["policy"] {
				t.Fatalf("searched %v; want faq and policy", seen)
			}
		})
	}
}

func TestSearchHitsBelowRouteThresholdAreDropped(t *testing.T) {
	e := newEnv(t)
	e.cat.edit(func(c *fakeCatalog) {
		k := *c.routes[routeKey].Knowledge
		k.MinScore = 0.65
		c.routes[routeKey] = corefacts.Route{Key: routeKey, Enabled: true, Knowledge: &k}
	})
	hs := hintsOf(t, e.mustOK("search", tokA, routeKey, `{"query":"x"}`))
	if titles(hs) != "退款规则,Policy" {
		t.Fatalf("titles %s; want only hits ≥ 0.65 (Core may ignore thresholds)", titles(hs))
	}
}

func TestSearchConcurrentPerKB(t *testing.T) {
	e := newEnv(t)
	var barrier sync.WaitGroup
	barrier.Add(2) // both KB calls must be in flight at once
	e.ret.barrier = &barrier
	m := e.mustOK("search", tokA, routeKey, `{"query":"x"}`)
	if m["status"] != protocol.StatusOK {
		t.Fatalf("status %v; want ok (calls ran concurrently)", m["status"])
	}
}

func TestSearchPerKBTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, func(o *Options) { o.RetrievalTimeout = 2 * time.Second })
		e.ret.hang["policy"] = true
		start := time.Now()
		m := e.mustOK("search", tokA, routeKey, `{"query":"x"}`)
		if m["status"] != protocol.StatusPartial {
			t.Fatalf("status %v; want partial when one KB times out", m["status"])
		}
		if d := time.Since(start); d != 2*time.Second {
			t.Fatalf("search took %v; want exactly the per-KB timeout 2s", d)
		}
		if titles(hintsOf(t, m)) != "退款规则,Shipping" {
			t.Fatalf("titles %s; want the answering KB's hits", titles(hintsOf(t, m)))
		}
	})
}

func TestSearchStatus(t *testing.T) {
	tests := []struct {
		name       string
		mutate     func(e *env)
		route      string
		wantStatus string
		wantTitles string
		wantCalls  int
	}{
		{"all answered", nil, routeKey, protocol.StatusOK, "退款规则,Policy,Shipping", 2},
		{"no hits above threshold is ok and empty", func(e *env) {
			e.cat.routes[routeKey].Knowledge.MinScore = 0.9
		}, routeKey, protocol.StatusOK, "", 2},
		{"a KB with a ready document answers no hit: failed", func(e *env) { delete(e.ret.hits, "policy") }, routeKey, protocol.StatusPartial, "退款规则,Shipping", 2},
		{"every KB with a ready document answers no hit: unavailable", func(e *env) { e.ret.hits = nil }, routeKey, protocol.StatusUnavailable, "", 2},
		{"a KB without a ready document answers no hit: ok", func(e *env) {
			delete(e.ret.hits, "policy")
			d := e.cat.docs[docPolicy]
			d.Status = "embedding"
			e.cat.docs[docPolicy] = d
		}, routeKey, protocol.StatusOK, "退款规则,Shipping", 2},
		{"one KB errors", func(e *env) { e.ret.errs["policy"] = corefacts.ErrUnavailable }, routeKey, protocol.StatusPartial, "退款规则,Shipping", 2},
		{"one KB disabled is skipped", func(e *env) { e.cat.kbs["policy"] = false }, routeKey, protocol.StatusPartial, "退款规则,Shipping", 1},
		{"one KB missing is skipped", func(e *env) { delete(e.cat.kbs, "policy") }, routeKey, protocol.StatusPartial, "退款规则,Shipping", 1},
		{"every KB fails", func(e *env) {
			e.ret.errs["faq"], e.ret.errs["policy"] = corefacts.ErrBreakerOpen, corefacts.ErrUnavailable
		}, routeKey, protocol.StatusUnavailable, "", 2},
		{"every KB disabled", func(e *env) { e.cat.kbs["faq"], e.cat.kbs["policy"] = false, false }, routeKey, protocol.StatusUnavailable, "", 0},
		{"no knowledge configured", nil, routeNone, protocol.StatusDisabled, "", 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			if tc.mutate != nil {
				tc.mutate(e)
			}
			m := e.mustOK("search", tokA, tc.route, `{"query":"x"}`)
			if m["status"] != tc.wantStatus || titles(hintsOf(t, m)) != tc.wantTitles {
				t.Fatalf("got %v %q; want %s %q", m["status"], titles(hintsOf(t, m)), tc.wantStatus, tc.wantTitles)
			}
			if _, isArray := m["hints"].([]any); !isArray {
				t.Fatalf("hints %v; want an array, never null", m["hints"])
			}
			if n := len(e.ret.callList()); n != tc.wantCalls {
				t.Fatalf("got %d Core calls; want %d", n, tc.wantCalls)
			}
		})
	}
}

func TestSearchRecheck(t *testing.T) {
	tests := []struct {
		name       string
		mutate     func(e *env)
		wantTitles string
	}{
		{"doc not ready", func(e *env) { e.cat.editDoc(docRefund, func(d *corefacts.Document) { d.Status = "embedding" }) }, "Policy,Shipping"},
		{"doc deleted", func(e *env) { delete(e.cat.docs, docShip) }, "退款规则,Policy"},
		{"doc moved to a KB outside the route", func(e *env) { e.cat.editDoc(docShip, func(d *corefacts.Document) { d.KBID = "elsewhere" }) }, "退款规则,Policy"},
		{"doc moved to another route KB than the hit's", func(e *env) { e.cat.editDoc(docShip, func(d *corefacts.Document) { d.KBID = "policy" }) }, "退款规则,Policy"},
		{"hit from a KB not asked for", func(e *env) {
			e.ret.hits["policy"] = append(e.ret.hits["policy"], corefacts.Hit{KBID: "secret-kb", DocID: 999, Content: "x", Score: 0.99})
			e.cat.docs[999] = corefacts.Document{DocMeta: corefacts.DocMeta{DocID: 999, KBID: "secret-kb", Title: "Secret", Status: "ready"}, Content: "x"}
		}, "退款规则,Policy,Shipping"},
		{"stale fragment dropped", func(e *env) {
			e.cat.editDoc(docShip, func(d *corefacts.Document) { d.Content = "Shipping is now free." })
		}, "退款规则,Policy"},
		{"doc rank from best surviving hit", func(e *env) {
			// The refund doc's best chunk is gone; its second chunk (0.55)
			// still matches, so it ranks below Shipping (0.61).
			e.cat.editDoc(docRefund, func(d *corefacts.Document) {
				d.Content = "![流程图](https://cdn/x.png)\n\n\n超过窗口的退款需要主管审批。"
			})
		}, "Policy,Shipping,退款规则"},
		{"whitespace differences tolerated", func(e *env) {
			e.cat.editDoc(docShip, func(d *corefacts.Document) { d.Content = "Shipping\n\ttakes   3-5\r\ndays." })
		}, "退款规则,Policy,Shipping"},
		{"image with empty alt removed like Core", func(e *env) {
			e.ret.hits["policy"] = []corefacts.Hit{{KBID: "policy", DocID: docPolicy, Content: "Policy:\nrefunds over 1000 need two approvals.", Score: 0.7}}
			e.cat.editDoc(docPolicy, func(d *corefacts.Document) {
				d.Content = "Policy: ![](https://x/y.png)refunds over 1000 need two approvals."
			})
		}, "退款规则,Policy,Shipping"},
		{"image alt changed is stale", func(e *env) {
			e.cat.editDoc(docRefund, func(d *corefacts.Document) {
				d.Content = strings.Replace(refundContent, "![流程图]", "![新流程]", 1)
				d.Content = strings.Replace(d.Content, "退款窗口设为0时，订单不可退款。", "", 1)
			})
		}, "Policy,Shipping"},
		{"hit claims a doc of another KB", func(e *env) {
			e.ret.hits["faq"] = append(e.ret.hits["faq"], corefacts.Hit{KBID: "faq", DocID: docPolicy, Content: policyContent, Score: 0.99})
		}, "退款规则,Policy,Shipping"},
		{"non-finite scores ignored", func(e *env) {
			e.ret.hits["policy"] = []corefacts.Hit{{KBID: "policy", DocID: docPolicy, Content: policyContent, Score: nan()}}
		}, "退款规则,Shipping"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			// A search before the change fills the re-check memo with the
			// old revisions' answers, which must not decide the next one.
			if got := titles(hintsOf(t, e.mustOK("search", tokA, routeKey, `{"query":"x"}`))); got != "退款规则,Policy,Shipping" {
				t.Fatalf("before the change: titles %q", got)
			}
			tc.mutate(e)
			m := e.mustOK("search", tokA, routeKey, `{"query":"x"}`)
			if got := titles(hintsOf(t, m)); got != tc.wantTitles {
				t.Fatalf("titles %q; want %q", got, tc.wantTitles)
			}
			for _, h := range hintsOf(t, m) {
				if strings.Contains(h["summary"].(string), "free") || strings.Contains(h["title"].(string), "Secret") {
					t.Fatalf("hint %v quotes text the route may not show", h)
				}
			}
		})
	}
}

func nan() float64 { var z float64; return z / z }

func TestSearchLimit(t *testing.T) {
	e := newEnv(t)
	for limit, want := range map[int]string{1: "退款规则", 2: "退款规则,Policy", 3: "退款规则,Policy,Shipping"} {
		m := e.mustOK("search", tokA, routeKey, fmt.Sprintf(`{"query":"x","limit":%d}`, limit))
		if got := titles(hintsOf(t, m)); got != want {
			t.Errorf("limit %d: titles %q; want %q", limit, got, want)
		}
	}
}

func TestSearchSummaryBounded(t *testing.T) {
	e := newEnv(t)
	long := strings.Repeat("退款窗口 规则\n\n", 300)
	e.ret.hits = map[string][]corefacts.Hit{"faq": {{KBID: "faq", DocID: docRefund, Content: long[:2100], Score: 0.9}}}
	e.cat.editDoc(docRefund, func(d *corefacts.Document) {
		d.Content = long
	})
	hs := hintsOf(t, e.mustOK("search", tokA, routeKey, `{"query":"x"}`))
	s := hs[0]["summary"].(string)
	if len(s) > SummaryMaxBytes || strings.Contains(s, "\n") || strings.Contains(s, "  ") {
		t.Fatalf("summary of %d bytes %q; want ≤ %d bytes, whitespace-collapsed", len(s), s[:40], SummaryMaxBytes)
	}
	if !strings.HasPrefix(collapseSpace(long, -1), s) {
		t.Fatalf("summary is not an extract of the chunk")
	}
}

// TestSearchBodyBudgetEndToEnd: adversarial titles and chunks through the
// whole Service; every body ≤ 4096 bytes and truncated reflects the fitting.
func TestSearchBodyBudgetEndToEnd(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	for i := 0; i < 150; i++ {
		e := newEnv(t)
		e.ret.hits = map[string][]corefacts.Hit{}
		var chunks []string
		for j := 0; j < 3; j++ {
			id := int64(500 + j)
			kb := []string{"faq", "policy"}[j%2]
			chunk := nastyString(r, 50+r.IntN(2000))
			chunks = append(chunks, chunk)
			content := nastyString(r, r.IntN(100)) + chunk + nastyString(r, r.IntN(100))
			title := nastyString(r, r.IntN(400))
			if n := []rune(title); len(n) > 191 {
				title = string(n[:191])
			}
			e.cat.setDoc(corefacts.Document{DocMeta: corefacts.DocMeta{DocID: id, KBID: kb, Title: title}, Content: content})
			e.ret.hits[kb] = append(e.ret.hits[kb], corefacts.Hit{KBID: kb, DocID: id, Content: chunk, Score: 0.9 - float64(j)/10})
		}
		_, raw, ke := e.call("search", tokA, routeKey, `{"query":"x","run_id":"`+runA+`"}`)
		if ke != nil {
			t.Fatal(ke)
		}
		if len(raw) > protocol.SearchMaxBytes {
			t.Fatalf("body %d bytes; want ≤ %d", len(raw), protocol.SearchMaxBytes)
		}
		var m struct {
			Hints []struct {
				Title   string `json:"title"`
				Summary string `json:"summary"`
			} `json:"hints"`
			Truncated bool `json:"truncated"`
		}
		if err := json.Unmarshal(raw, &m); err != nil {
			t.Fatal(err)
		}
		complete := len(m.Hints) == 3
		for _, h := range m.Hints {
			full := ""
			for j, c := range chunks {
				if e.cat.docs[int64(500+j)].Title == h.Title {
					full = summarize([]string{c})
				}
			}
			if !strings.HasPrefix(full, h.Summary) {
				t.Fatalf("summary is not a prefix of the chunk excerpt")
			}
			complete = complete && h.Summary == full
		}
		if m.Truncated == complete {
			t.Fatalf("truncated %v with %d hints (complete=%v); want truncated iff something was shortened or dropped", m.Truncated, len(m.Hints), complete)
		}
	}
}

func TestSearchCancelledContext(t *testing.T) {
	e := newEnv(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	e.ret.hang["faq"], e.ret.hang["policy"] = true, true
	out, err := e.svc.Search(ctx, tokA, testkit.RouteKey(routeKey), strings.NewReader(`{"query":"x"}`))
	if err != nil {
		t.Fatalf("got %v; want a body", err)
	}
	if !strings.Contains(string(out), `"status":"unavailable"`) {
		t.Fatalf("body %s; want status unavailable", out)
	}
}

// Bodies are read lazily in rank order: with many candidate documents, a
// search asks the catalog only for the first batch (2 × limit) when those
// survive, and for more only when some are dropped.
func TestSearchReadsOnlyTheBodiesItNeeds(t *testing.T) {
	e := newEnv(t)
	var hits []corefacts.Hit
	for i := int64(0); i < 20; i++ {
		id := 500 + i
		content := fmt.Sprintf("Candidate document %d about refunds.", i)
		e.cat.setDoc(corefacts.Document{DocMeta: corefacts.DocMeta{DocID: id, KBID: "faq", Title: fmt.Sprintf("Doc %d", i)}, Content: content})
		hits = append(hits, corefacts.Hit{KBID: "faq", DocID: id, Title: fmt.Sprintf("Doc %d", i), Content: content, Score: 0.9 - float64(i)/100})
	}
	e.ret.mu.Lock()
	e.ret.hits = map[string][]corefacts.Hit{"faq": hits}
	e.ret.mu.Unlock()

	m := e.mustOK("search", tokA, routeKey, `{"query":"refunds","limit":2}`)
	if got := titles(hintsOf(t, m)); got != "Doc 0,Doc 1" {
		t.Fatalf("titles %q; want Doc 0,Doc 1", got)
	}
	if got := len(e.cat.docsRead); got != 4 {
		t.Errorf("bodies asked of the catalog: got %d %v; want 4 (one batch of 2 × limit)", got, e.cat.docsRead)
	}

	// The first five candidates are gone: the search fetches further
	// batches until two documents survive.
	e.cat.mu.Lock()
	for i := int64(0); i < 5; i++ {
		delete(e.cat.docs, 500+i)
	}
	e.cat.docsRead = nil
	e.cat.mu.Unlock()
	m = e.mustOK("search", tokA, routeKey, `{"query":"refunds","limit":2}`)
	if got := titles(hintsOf(t, m)); got != "Doc 5,Doc 6" {
		t.Fatalf("titles %q; want Doc 5,Doc 6", got)
	}
	if got := len(e.cat.docsRead); got != 8 {
		t.Errorf("bodies asked of the catalog: got %d; want 8 (two batches)", got)
	}
}

// The model of Core below is written from Core's source (0.3.4,
// independently of corefacts and catalog): src/core/config/route-config.ts
// and src/services/kb.ts.

// coreRouteMinScore is routeKnowledgeConfig's numValue(k.min_score, 0.35, 0,
// 1) for a stored value whose JavaScript Number() is num: 0.35 when num is not
// finite, else num clamped to 0..1 (0 stays 0).
func coreRouteMinScore(num float64) float64 {
	if math.IsNaN(num) || math.IsInf(num, 0) {
		return 0.35
	}
	return math.Min(math.Max(num, 0), 1)
}

// coreKBSearchBodyMinScore is /kb/search's reading of its HTTP body,
// `Number(b.min_score ?? 0.35) || 0.35` (src/routes/kb.ts): 0 and NaN become
// 0.35 there, and only there.
func coreKBSearchBodyMinScore(num float64) float64 {
	if num == 0 || math.IsNaN(num) {
		return 0.35
	}
	return num
}

// coreSearch is KbService.search for one KB: scores sorted descending (a
// stable sort keeps ties in the given order), the top k, then the filter
// `h.score >= minScore` on the unrounded score, then each score rounded to 3
// decimals (Math.round(s*1000)/1000; Math.round rounds halves up).
func coreSearch(raw []float64, k int, minScore float64) []float64 {
	top := append([]float64(nil), raw...)
	sort.SliceStable(top, func(i, j int) bool { return top[i] > top[j] })
	top = top[:min(k, len(top))]
	var out []float64
	for _, s := range top {
		if s >= minScore {
			out = append(out, math.Floor(s*1000+0.5)/1000)
		}
	}
	return out
}

// routeMinScores are stored min_score values (JSON in bz_routes.knowledge,
// "" meaning the key is absent) with their JavaScript Number(), worked out
// by hand from the ECMAScript rules as the oracle.
var routeMinScores = []struct {
	json string
	num  float64
}{
	{"", math.NaN()}, // missing: Number(undefined)
	{"0", 0}, {"-0", 0}, {"null", 0}, {`""`, 0}, {`"  "`, 0}, {"false", 0}, {`"0"`, 0},
	{"true", 1}, {"1", 1}, {"0.35", 0.35}, {"0.5", 0.5}, {"1e-9", 1e-9}, {"0.0005", 0.0005},
	{`" 0.5 "`, 0.5}, {`"\u00a00.2\ufeff"`, 0.2}, {`".25"`, 0.25}, {`"0x10"`, 16}, {`"1e-1"`, 0.1},
	{"-0.5", -0.5}, {"7", 7}, {"1e400", math.Inf(1)}, {`"Infinity"`, math.Inf(1)},
	{`"high"`, math.NaN()}, {`"0.5x"`, math.NaN()}, {"{}", math.NaN()}, {"[]", 0}, {"[0.4]", 0.4},
}

// The sidecar asks Core with min_score -1 and applies the route's threshold
// itself: for random scored hit lists and every stored min_score above (plus
// random ones and a tie at a score), the route read by
// catalog.NormalizeKnowledge and filtered by aboveThreshold keeps exactly the
// hits Core's own turn retrieval keeps for that stored route. Scores travel
// rounded to 3 decimals, so against Core's unrounded scores the two can
// differ only for a hit within half a thousandth of the threshold.
func TestSearchThresholdEqualsCoreFilter(t *testing.T) {
	rng := rand.New(rand.NewPCG(19, 1))
	type stored struct {
		json string
		num  float64
	}
	values := func(scores []float64) []stored {
		out := []stored{}
		for _, v := range routeMinScores {
			out = append(out, stored(v))
		}
		r := rng.Float64()
		out = append(out, stored{strconv.FormatFloat(r, 'g', -1, 64), r})
		for _, sc := range scores { // a tie at the threshold
			if sc > 0 && sc <= 1 {
				out = append(out, stored{strconv.FormatFloat(sc, 'g', -1, 64), sc})
				break
			}
		}
		return out
	}
	asScores := func(hits []corefacts.Hit) []float64 {
		out := []float64{}
		for _, h := range hits {
			out = append(out, h.Score)
		}
		return out
	}
	sidecarThreshold := func(v stored) float64 {
		body := `{"kb_id":"faq"}`
		if v.json != "" {
			body = `{"kb_id":"faq","min_score":` + v.json + `}`
		}
		kc, err := catalog.NormalizeKnowledge([]byte(body))
		if err != nil || kc == nil {
			t.Fatalf("NormalizeKnowledge(%s): %v, %v", body, kc, err)
		}
		return corefacts.ScoreThreshold(kc.MinScore)
	}
	// What the sidecar receives: Core's answer for the body min_score -1.
	unfiltered := coreKBSearchBodyMinScore(corefacts.UnfilteredMinScore)
	for trial := 0; trial < 500; trial++ {
		n, k := rng.IntN(30), 1+rng.IntN(20)
		raw := make([]float64, n)
		rounded := make([]float64, n)
		for i := range raw {
			raw[i] = rng.Float64()*1.2 - 0.2 // cosine: may be negative
			if rng.IntN(4) == 0 {
				raw[i] = float64(rng.IntN(1001)) / 1000 // on the grid Core rounds to
			}
			rounded[i] = math.Round(raw[i]*1000) / 1000
		}
		for _, v := range values(rounded) {
			s := coreRouteMinScore(v.num)
			th := sidecarThreshold(v)
			var hits []corefacts.Hit
			for i, sc := range coreSearch(rounded, k, unfiltered) {
				hits = append(hits, corefacts.Hit{KBID: "faq", DocID: int64(i + 1), Score: sc})
			}
			got := asScores(aboveThreshold(hits, th))
			if want := coreSearch(rounded, k, s); fmt.Sprint(got) != fmt.Sprint(want) && !(len(got) == 0 && len(want) == 0) {
				t.Fatalf("scores %v, k %d, stored min_score %s: sidecar kept %v; Core keeps %v", rounded, k, v.json, got, want)
			}
			// Against Core's unrounded scores: equal but for hits within
			// 0.0005 of the threshold.
			var rawHits []corefacts.Hit
			for i, sc := range coreSearch(raw, k, unfiltered) {
				rawHits = append(rawHits, corefacts.Hit{DocID: int64(i + 1), Score: sc})
			}
			kept := asScores(aboveThreshold(rawHits, th))
			core := coreSearch(raw, k, s)
			for _, list := range [][]float64{kept, core} {
				for _, sc := range list {
					inKept, inCore := slices.Contains(kept, sc), slices.Contains(core, sc)
					if inKept != inCore && math.Abs(sc-s) > 0.0005+1e-12 {
						t.Fatalf("raw %v, k %d, stored min_score %s: score %v kept by sidecar %v, by Core %v, %v from the threshold",
							raw, k, v.json, sc, inKept, inCore, math.Abs(sc-s))
					}
				}
			}
		}
	}
}

// ScoreThreshold is the last two steps of Core's numValue (not finite → 0.35,
// clamp 0..1) on the catalog's normalized min_score: 0 stays 0.
func TestScoreThreshold(t *testing.T) {
	for _, tc := range []struct{ in, want float64 }{
		{0, 0}, {math.Copysign(0, -1), 0}, {math.NaN(), 0.35}, {math.Inf(1), 0.35}, {math.Inf(-1), 0.35},
		{-0.5, 0}, {1e-9, 1e-9}, {0.2, 0.2}, {0.35, 0.35}, {1, 1}, {7, 1},
	} {
		got := corefacts.ScoreThreshold(tc.in)
		if got != tc.want || math.Signbit(got) {
			t.Errorf("ScoreThreshold(%v) got %v; want %v", tc.in, got, tc.want)
		}
	}
	if corefacts.KeepsScore(math.NaN(), 0) || corefacts.KeepsScore(math.Inf(1), 0) || !corefacts.KeepsScore(0.35, 0.35) || corefacts.KeepsScore(0.349, 0.35) {
		t.Error("KeepsScore: want score ≥ threshold for finite scores only")
	}
}

// A KB that holds a ready document and answers no hit at all has failed
// (an embeddings outage looks like that): the catalog is asked about those
// KBs only, once, and never when every KB answered something; hits below
// the threshold cost no catalog query.
func TestSearchSilentFailure(t *testing.T) {
	reg := prometheus.NewRegistry()
	e := newEnv(t, func(o *Options) { o.Registerer = reg })
	emptyFailures := func() float64 { return testutil.ToFloat64(e.svc.m.kbCalls.WithLabelValues(kbEmptyFailure)) }

	// Healthy: no ReadyKBs question.
	if m := e.mustOK("search", tokA, routeKey, `{"query":"x"}`); m["status"] != protocol.StatusOK {
		t.Fatalf("status %v; want ok", m["status"])
	}
	if asks := e.cat.readyCalls(); len(asks) != 0 {
		t.Fatalf("ReadyKBs asked %v with every KB answering hits; want never", asks)
	}

	// Hits below the threshold only: ok, empty, and no catalog query at all
	// after the KB flags (threshold before any catalog work on hits).
	e.cat.edit(func(c *fakeCatalog) { c.routes[routeKey].Knowledge.MinScore, c.docCalls = 0.95, 0 })
	if m := e.mustOK("search", tokA, routeKey, `{"query":"x"}`); m["status"] != protocol.StatusOK || len(hintsOf(t, m)) != 0 {
		t.Fatalf("got %v %v; want ok and no hints", m["status"], m["hints"])
	}
	if asks, docs := e.cat.readyCalls(), e.cat.docCalls; len(asks) != 0 || docs != 0 {
		t.Fatalf("below-threshold answers cost %d ReadyKBs and %d Documents queries; want none", len(asks), docs)
	}
	e.cat.edit(func(c *fakeCatalog) { c.routes[routeKey].Knowledge.MinScore = 0.35 })

	// policy answers nothing although it holds a ready document.
	e.ret.mu.Lock()
	delete(e.ret.hits, "policy")
	e.ret.mu.Unlock()
	m := e.mustOK("search", tokA, routeKey, `{"query":"x"}`)
	if m["status"] != protocol.StatusPartial || titles(hintsOf(t, m)) != "退款规则,Shipping" {
		t.Fatalf("got %v %q; want partial with faq's hints", m["status"], titles(hintsOf(t, m)))
	}
	if asks := e.cat.readyCalls(); fmt.Sprint(asks) != "[[policy]]" {
		t.Fatalf("ReadyKBs asked %v; want once, for policy only", asks)
	}
	if got := emptyFailures(); got != 1 {
		t.Fatalf("search_kb_calls_total{result=empty_failure} = %v; want 1", got)
	}

	// Both answer nothing: one question for both, unavailable.
	e.ret.mu.Lock()
	e.ret.hits = nil
	e.ret.mu.Unlock()
	m = e.mustOK("search", tokA, routeKey, `{"query":"x"}`)
	if m["status"] != protocol.StatusUnavailable || len(hintsOf(t, m)) != 0 {
		t.Fatalf("got %v %v; want unavailable", m["status"], m["hints"])
	}
	if asks := e.cat.readyCalls(); len(asks) != 2 || fmt.Sprint(asks[1]) != "[faq policy]" {
		t.Fatalf("ReadyKBs asked %v; want a second, single question for faq and policy", asks)
	}
	if got := emptyFailures(); got != 3 {
		t.Fatalf("empty_failure = %v; want 3", got)
	}

	// The catalog cannot answer the question: the search cannot tell an
	// outage from an empty KB, so it fails like any catalog failure.
	e.cat.edit(func(c *fakeCatalog) { c.readyDown = true })
	if _, _, ke := e.call("search", tokA, routeKey, `{"query":"x"}`); ke == nil || ke.Status != 503 || ke.Code != protocol.CodeUnavailable {
		t.Fatalf("got %+v; want 503 knowledge_unavailable", ke)
	}
}

// TestErrorClass: a wrapped error takes the first class its chain matches
// (a breaker refusal that is also a timeout is breaker_open); anything else,
// nil included, is other.
func TestErrorClass(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{fmt.Errorf("core: %w", corefacts.ErrBreakerOpen), "breaker_open"},
		{fmt.Errorf("%w: %w", corefacts.ErrBreakerOpen, context.DeadlineExceeded), "breaker_open"},
		{fmt.Errorf("x: %w", context.DeadlineExceeded), "timeout"},
		{context.Canceled, "canceled"},
		{fmt.Errorf("x: %w", corefacts.ErrUnavailable), "unavailable"},
		{corefacts.ErrRequestRefused, "refused"},
		{corefacts.ErrUnauthorized, "unauthorized"},
		{corefacts.ErrRateLimited, "rate_limited"},
		{fmt.Errorf("plain"), "other"},
		{nil, "other"},
	} {
		if got := errorClass(tc.err); got != tc.want {
			t.Errorf("errorClass(%v) = %q; want %q", tc.err, got, tc.want)
		}
	}
}
