package test

// Ledger records cost their creator (issue 25 item 3): refused attempts
// leave no record, one session cannot evict another's, a turn Core never
// received leaves none, and writing records takes the session's rate limit.
// Every turn is counted once, a mode switch the ledger refuses as one ledger
// conflict.

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bailinghub/knowledge-sidecar/config"
	"github.com/bailinghub/knowledge-sidecar/internal/testkit"
	"github.com/bailinghub/knowledge-sidecar/internal/testkit/testdb"
	"github.com/bailinghub/knowledge-sidecar/ledger"
	"github.com/bailinghub/knowledge-sidecar/proxy"
)

// TestTurnRefusedAttemptsLeaveNoRecord: fresh turn ids reusing a bound
// user_message_id (Core: 409 turn_conflict, no run) and turns Core refuses
// with 400 leave the memory ledger as it was (the campaign: 7,309 keys in
// 15 s, 0 runs).
func TestTurnRefusedAttemptsLeaveNoRecord(t *testing.T) {
	w := NewWorld(t, WorldOptions{})
	l := ledger.NewMemory(100_000, time.Hour, nil)
	// sidecar.Deps hook: the test reads the memory ledger (Len)
	side := w.StartSidecar(t, FeatureOptions{Ledger: l})
	c := newClient(t)
	route := testdb.RouteMulti
	bound := newTurn("bound-msg")
	mustTurn(t, c, side, route, w.TokenA, bound.body(`"on_demand"`), "first turn")
	before, runs := l.Len(), w.Core.RunsCreated()
	for i := range 40 {
		ti := turnInput{Conv: bound.Conv, Turn: fmt.Sprint("fresh-", i), Msg: bound.Msg, Input: bound.Input}
		mode := []string{`"on_demand"`, `"inline"`}[i%2]
		if i%2 == 1 {
			ti.Msg = fmt.Sprint("msg-fresh-", i) // not bound here: Core refuses the undeclared field instead
		}
		body := ti.body(mode)
		if i%2 == 1 {
			body = withUndeclared(body)
		}
		r := send(t, c, "POST", turnsURL(side, route), w.TokenA, body, nil)
		if r.Status/100 != 4 {
			t.Fatalf("attempt %d: got %d %s; want Core's refusal", i, r.Status, r.Body)
		}
	}
	// The 409s of the bound user_message_id never get past the ledger
	// (on_demand → same mode: forwarded; Core 409; released) — either way
	// nothing is left but the first turn's two records.
	if got := l.Len(); got != before {
		t.Errorf("ledger records: got %d after 40 refused attempts; want %d", got, before)
	}
	if w.Core.RunsCreated() != runs {
		t.Errorf("Core created runs for refused attempts")
	}
	testkit.WaitMetric(t, side.Registry, "knowledge_sidecar_ledger_releases_total", map[string]string{"reason": "refused"}, 40)
}

// TestTurnSessionCannotEvictAnother: session A fills the memory ledger
// with its turns; session B's on_demand turn keeps its record (a switch is
// still 409). Before: one global LRU evicted B's record.
func TestTurnSessionCannotEvictAnother(t *testing.T) {
	w := NewWorld(t, WorldOptions{})
	l := ledger.NewMemory(40, time.Hour, nil) // 10 records (5 turns) per session
	// sidecar.Deps hook: the test reads the memory ledger (SessionCap, Len)
	side := w.StartSidecar(t, FeatureOptions{Ledger: l})
	c := newClient(t)
	route := testdb.RouteMulti
	victim := newTurn("victim")
	mustTurn(t, c, side, route, w.TokenB, victim.body(`"on_demand"`), "victim")
	for i := range 30 { // 60 records: more than the whole ledger
		mustTurn(t, c, side, route, w.TokenA, newTurn(fmt.Sprint("flood-", i)).body(`"inline"`), fmt.Sprint("flood ", i))
	}
	calls := w.Core.Calls(turnsPath(route))
	r := send(t, c, "POST", turnsURL(side, route), w.TokenB, victim.body(`"inline"`), nil)
	if r.Status != http.StatusConflict || string(r.Body) != turnConflictJSON || w.Core.Calls(turnsPath(route)) != calls {
		t.Fatalf("victim's mode switch after the flood: got %d %s; want 409 from the ledger", r.Status, r.Body)
	}
	if got := l.Len(); got != 2+l.SessionCap() {
		t.Errorf("records: got %d; want the victim's 2 + the flooder's %d", got, l.SessionCap())
	}
}

// rtFunc is an http.RoundTripper made of a function.
type rtFunc func(*http.Request) (*http.Response, error)

func (f rtFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// TestTurnClientAbort: a client that leaves before its turn was written to
// Core (here: the connection to Core never comes) leaves no record — the
// other mode then reaches Core; one that leaves after Core received it
// leaves the record (Core may have created the run) — the other mode is
// 409 without reaching Core.
func TestTurnClientAbort(t *testing.T) {
	w := NewWorld(t, WorldOptions{})
	tap := newCoreTap(t, w.Core)
	def := config.Defaults()
	base := proxy.NewTransport(proxy.TransportOptions{DialTimeout: def.Proxy.DialTimeout,
		ResponseHeaderTimeout: def.Proxy.ResponseHeaderTimeout, MaxIdleConnsPerHost: def.Proxy.MaxIdleConnsPerHost})
	t.Cleanup(base.CloseIdleConnections)
	stuck := make(chan struct{}, 1)
	tr := rtFunc(func(r *http.Request) (*http.Response, error) {
		if r.Header.Get(attemptHeader) == "never-sent" {
			stuck <- struct{}{}
			<-r.Context().Done() // a dial that never completes
			return nil, r.Context().Err()
		}
		return base.RoundTrip(r)
	})
	// sidecar.Deps hook: a pass-through transport that cancels mid-turn
	side := StartSidecar(t, SidecarOptions{CoreURL: tap.URL, Transport: tr, Features: w.Features(t, FeatureOptions{})})
	c := newClient(t)
	route := testdb.RouteMulti

	abort := func(ti turnInput, marker string, inFlight <-chan struct{}) {
		ctx, cancel := context.WithCancel(context.Background())
		req, _ := http.NewRequestWithContext(ctx, "POST", turnsURL(side, route), bytes.NewReader(ti.body(`"on_demand"`)))
		req.Header.Set("Authorization", "Bearer "+w.TokenA)
		req.Header.Set(attemptHeader, marker)
		done := make(chan struct{})
		go func() {
			defer close(done)
			if res, err := c.Do(req); err == nil {
				drainClose(res.Body)
				t.Errorf("%s: the client got an answer; want its own abort", marker)
			}
		}()
		waitFor(t, inFlight, marker+" in flight")
		cancel()
		<-done
	}

	t.Run("never_sent", func(t *testing.T) {
		ti := newTurn("abort-never-sent")
		abort(ti, "never-sent", stuck)
		testkit.WaitMetric(t, side.Registry, "knowledge_sidecar_ledger_releases_total", map[string]string{"reason": "not_sent"}, 1)
		n := tap.count()
		r := send(t, c, "POST", turnsURL(side, route), w.TokenA, ti.body(`"inline"`), nil)
		if answerMode(r) != "inline" || tap.count() != n+1 {
			t.Fatalf("other mode after the abort: got %d %s; want Core's 200 inline (no record left)", r.Status, r.Body)
		}
	})
	t.Run("sent", func(t *testing.T) {
		ti := newTurn("abort-sent")
		held, release := holdMarked(tap)
		abort(ti, "sent", held)
		testkit.WaitMetric(t, side.Registry, "knowledge_sidecar_turns_total", map[string]string{"mode": "on_demand", "outcome": "upstream_error"}, 2)
		close(release) // Core now handles it (and may create the run)
		tap.setHold(nil)
		n := tap.count()
		r := send(t, c, "POST", turnsURL(side, route), w.TokenA, ti.body(`"inline"`), nil)
		if r.Status != http.StatusConflict || string(r.Body) != turnConflictJSON || tap.count() != n {
			t.Fatalf("other mode after the abort: got %d %s; want 409 from the ledger", r.Status, r.Body)
		}
		if got := testkit.Metric(t, side.Registry, "knowledge_sidecar_ledger_releases_total", map[string]string{"reason": "not_sent"}); got != 1 {
			t.Errorf("ledger_releases_total{not_sent}: got %v; want 1 (only the first abort)", got)
		}
	})
}

// TestTurnRecordsRateLimited: a keyed turn with knowledge_delivery takes a
// token from the session's knowledge bucket before its record is written
// (429 rate_limited with Retry-After, nothing reaches Core); turns without
// the field are never limited by the sidecar (old clients see Core), and
// the knowledge endpoints share the bucket.
func TestTurnRecordsRateLimited(t *testing.T) {
	w := NewWorld(t, WorldOptions{})
	l := ledger.NewMemory(1000, time.Hour, nil)
	// sidecar.Deps hook: the test reads the memory ledger (Len)
	side := w.StartSidecar(t, FeatureOptions{Ledger: l, RateLimit: 0.001, RateBurst: 2})
	c := newClient(t)
	route := testdb.RouteMulti
	for i := range 2 {
		mustTurn(t, c, side, route, w.TokenA, newTurn(fmt.Sprint("limited-", i)).body(`"on_demand"`), fmt.Sprint("turn ", i))
	}
	records, calls := l.Len(), w.Core.Calls(turnsPath(route))
	r := send(t, c, "POST", turnsURL(side, route), w.TokenA, newTurn("limited-over").body(`"inline"`), nil)
	checkErrorJSON(t, r, http.StatusTooManyRequests, "rate_limited")
	if ra, err := strconv.Atoi(r.Header.Get("Retry-After")); err != nil || ra < 1 {
		t.Errorf("Retry-After: got %q; want whole seconds ≥ 1", r.Header.Get("Retry-After"))
	}
	if l.Len() != records || w.Core.Calls(turnsPath(route)) != calls {
		t.Errorf("the limited turn wrote a record or reached Core")
	}
	// The other session has its own bucket.
	if r := send(t, c, "POST", turnsURL(side, route), w.TokenB, newTurn("limited-b").body(`"on_demand"`), nil); r.Status != 200 {
		t.Errorf("session B: got %d %s; want 200", r.Status, r.Body)
	}
	// Old clients are Core's to limit.
	for i := range 3 {
		if r := send(t, c, "POST", turnsURL(side, route), w.TokenA, newTurn(fmt.Sprint("limited-absent-", i)).body(""), nil); r.Status != 200 {
			t.Errorf("field-less turn %d: got %d %s; want Core's 200", i, r.Status, r.Body)
		}
	}
	// The knowledge endpoints draw on the same bucket.
	code, _, body := Call(t, c, "POST", side.WS(route)+"/knowledge/search", w.TokenA, map[string]any{"query": "refund window"})
	if code != http.StatusTooManyRequests {
		t.Errorf("search after the turns: got %d %s; want 429", code, body)
	}
	testkit.WaitMetric(t, side.Registry, "knowledge_sidecar_turns_total", map[string]string{"mode": "inline", "outcome": "rate_limited"}, 1)
}

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
