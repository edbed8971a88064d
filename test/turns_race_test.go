package test

// One mode per turn under every interleaving (SPEC §7; issue 19 item 5,
// issue 25 item 2): a refused attempt never releases the records of a turn
// another attempt created the run for, on the memory and the Redis ledger,
// with one replica and with two sharing Redis; and a Redis (or identity)
// outage does not let a field-less turn through while an on_demand attempt
// of it is in flight.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/bailinghub/knowledge-sidecar/internal/fakecore"
	"github.com/bailinghub/knowledge-sidecar/internal/testkit"
	"github.com/bailinghub/knowledge-sidecar/internal/testkit/testdb"
	"github.com/bailinghub/knowledge-sidecar/ledger"
	"github.com/bailinghub/knowledge-sidecar/sharedredis"
)

const attemptHeader = "X-Test-Attempt"

// withUndeclared adds a field Core refuses (400, no run) to a turn body.
func withUndeclared(body []byte) []byte {
	return bytes.Replace(body, []byte("{"), []byte(`{"undeclared_field": 1, `), 1)
}

// holdMarked makes the tap hold every request carrying attemptHeader: held
// receives once it is in flight (forwarded, not yet at Core), and it goes
// on to Core when release is closed.
func holdMarked(tp *coreTap) (held <-chan struct{}, release chan struct{}) {
	h := make(chan struct{}, 1)
	rel := make(chan struct{})
	tp.setHold(func(r *http.Request) {
		if r.Header.Get(attemptHeader) == "" {
			return
		}
		h <- struct{}{}
		<-rel
	})
	return h, rel
}

// answerMode is how a 200 turn answer delivered knowledge: "on_demand" or
// "inline" (the block's mode, or Core's own inline knowledge without a
// block); "" for anything else.
func answerMode(r turnResult) string {
	if r.Status != 200 {
		return ""
	}
	var v struct {
		KD *struct {
			Mode string `json:"mode"`
		} `json:"knowledge_delivery"`
	}
	if json.Unmarshal(r.Body, &v) != nil {
		return ""
	}
	if v.KD == nil {
		return "inline"
	}
	return v.KD.Mode
}

// raceTrials runs trial n times on each race set-up, with one client per
// set-up and a fresh turn per trial (its id from name, the set-up and i).
func raceTrials(t *testing.T, name string, n int, trial func(t *testing.T, su raceSetup, c *http.Client, i int, ti turnInput)) {
	for _, su := range raceSetups(t) {
		t.Run(su.name, func(t *testing.T) {
			c := newClient(t)
			for i := range n {
				trial(t, su, c, i, newTurn(fmt.Sprintf("%s-%s-%d", name, su.name, i)))
			}
		})
	}
}

type raceSetup struct {
	name  string
	w     *World
	tap   *coreTap
	sides [2]*Sidecar // A goes through the first, B through the second
}

func raceSetups(t *testing.T) []raceSetup {
	var out []raceSetup
	mk := func(name string, l1, l2 ledger.Ledger) {
		w := NewWorld(t, WorldOptions{})
		tap := newCoreTap(t, w.Core)
		// sidecar.Deps hook: the two replicas' ledgers are the race under test
		s1 := StartSidecar(t, SidecarOptions{CoreURL: tap.URL, Features: w.Features(t, FeatureOptions{Ledger: l1})})
		s2 := s1
		if l2 != nil {
			s2 = StartSidecar(t, SidecarOptions{CoreURL: tap.URL, Features: w.Features(t, FeatureOptions{Ledger: l2})})
		}
		out = append(out, raceSetup{name, w, tap, [2]*Sidecar{s1, s2}})
	}
	mk("memory", ledger.NewMemory(100_000, time.Hour, nil), nil)
	p1 := testdb.RedisPrefix(t)
	mk("redis", sharedRedisLedger(t, p1), nil)
	p2 := testdb.RedisPrefix(t)
	mk("redis_two_replicas", sharedRedisLedger(t, p2), sharedRedisLedger(t, p2))
	return out
}

// TestTurnRefusedAttemptRace: attempt A (on_demand, a field Core refuses)
// is forwarded first and held before Core; attempt B (on_demand, valid)
// joins A's records, is forwarded and creates the run; only then does A
// reach Core and get its 400. A retry of the same ids in the other mode,
// or without the field, is then 409 turn_conflict without reaching Core
// (before the fix: A's refusal freed the records and the inline retry was
// served inline from B's frozen run). 50 trials per set-up.
func TestTurnRefusedAttemptRace(t *testing.T) {
	const trials = 50
	raceTrials(t, "refused-race", trials, func(t *testing.T, su raceSetup, c *http.Client, i int, ti turnInput) {
		route := testdb.RouteMulti
		held, release := holdMarked(su.tap)
		aDone := make(chan turnResult, 1)
		go func() {
			r, err := trySend(c, "POST", turnsURL(su.sides[0], route), su.w.TokenA,
				withUndeclared(ti.body(`"on_demand"`)), map[string]string{attemptHeader: "A"})
			if err != nil {
				t.Errorf("attempt A: %v", err)
			}
			aDone <- r
		}()
		waitFor(t, held, "attempt A in flight")
		b := send(t, c, "POST", turnsURL(su.sides[1], route), su.w.TokenA, ti.body(`"on_demand"`), nil)
		if answerMode(b) != "on_demand" {
			t.Fatalf("trial %d: attempt B got %d %s; want 200 on_demand", i, b.Status, b.Body)
		}
		close(release)
		if a := waitFor(t, aDone, "attempt A"); a.Status != 400 || !bytes.Contains(a.Body, []byte("undeclared")) {
			t.Fatalf("trial %d: attempt A got %d %s; want Core's 400", i, a.Status, a.Body)
		}
		su.tap.setHold(nil)
		n := su.tap.count()
		for _, side := range su.sides {
			for _, delivery := range []string{`"inline"`, ""} {
				r := send(t, c, "POST", turnsURL(side, route), su.w.TokenA, ti.body(delivery), nil)
				if r.Status != http.StatusConflict || string(r.Body) != turnConflictJSON {
					t.Fatalf("trial %d: retry with %q: got %d %s (mode %q); want 409 turn_conflict — the turn is on_demand", i, delivery, r.Status, r.Body, answerMode(r))
				}
			}
		}
		if su.tap.count() != n {
			t.Fatalf("trial %d: a mode switch reached Core", i)
		}
		again := send(t, c, "POST", turnsURL(su.sides[0], route), su.w.TokenA, ti.body(`"on_demand"`), nil)
		if answerMode(again) != "on_demand" || runIDOf(t, again.Body) != runIDOf(t, b.Body) {
			t.Fatalf("trial %d: on_demand retry: got %d %s; want B's run replayed", i, again.Status, again.Body)
		}
	})
}

// TestTurnRefusedAttemptFreeRace: the same two attempts and an inline and
// a field-less retry, all at once with no ordering imposed, 50 trials per
// set-up: whatever the interleaving, a turn id is never served in two
// modes.
func TestTurnRefusedAttemptFreeRace(t *testing.T) {
	const trials = 50
	raceTrials(t, "free-race", trials, func(t *testing.T, su raceSetup, c *http.Client, i int, ti turnInput) {
		route := testdb.RouteMulti
		bodies := [][]byte{withUndeclared(ti.body(`"on_demand"`)), ti.body(`"on_demand"`), ti.body(`"inline"`), ti.body("")}
		results := make([]turnResult, len(bodies))
		start := make(chan struct{})
		var wg sync.WaitGroup
		for j, body := range bodies {
			wg.Go(func() {
				<-start
				r, err := trySend(c, "POST", turnsURL(su.sides[j%2], route), su.w.TokenA, body, nil)
				if err != nil {
					t.Errorf("attempt %d: %v", j, err)
				}
				results[j] = r
			})
		}
		close(start)
		wg.Wait()
		// And a late retry of each mode, after every attempt settled.
		results = append(results,
			send(t, c, "POST", turnsURL(su.sides[0], route), su.w.TokenA, ti.body(`"inline"`), nil),
			send(t, c, "POST", turnsURL(su.sides[1], route), su.w.TokenA, ti.body(`"on_demand"`), nil),
			send(t, c, "POST", turnsURL(su.sides[1], route), su.w.TokenA, ti.body(""), nil))
		modes := map[string]bool{}
		for _, r := range results {
			if m := answerMode(r); m != "" {
				modes[m] = true
			}
		}
		if len(modes) > 1 {
			t.Fatalf("trial %d: turn served in modes %v", i, modes)
		}
	})
}

// TestTurnTaskRefusalReleases: Core refuses an on_demand turn with its own
// 409 TASK_REQUIRED (no run); the same ids without the field, and in
// inline mode, then reach Core (before: the record stayed and the sidecar
// answered 409 turn_conflict itself).
func TestTurnTaskRefusalReleases(t *testing.T) {
	w, tap, side, c := tappedWorld(t)
	route := testdb.RouteMulti
	taskRequired := []byte(`{"error":"TASK_REQUIRED","message":"This session must bind its turns to a governed task."}`)
	for _, next := range []string{"", `"inline"`} {
		t.Run("then_"+map[string]string{"": "absent", `"inline"`: "inline"}[next], func(t *testing.T) {
			ti := newTurn("task-required-" + next)
			w.Core.SetFault(turnsPath(route), fakecore.Fault{Status: 409, Body: taskRequired})
			r := send(t, c, "POST", turnsURL(side, route), w.TokenA, ti.body(`"on_demand"`), nil)
			w.Core.ClearFaults()
			if r.Status != 409 || !bytes.Equal(r.Body, taskRequired) {
				t.Fatalf("on_demand: got %d %s; want Core's 409 TASK_REQUIRED", r.Status, r.Body)
			}
			r, e := tap.post(t, c, turnsURL(side, route), w.TokenA, ti.body(next), nil)
			if r.Status != 200 || e.Status != 200 {
				t.Fatalf("the same ids, delivery %q: got %d %s; want Core's 200", next, r.Status, r.Body)
			}
			if answerMode(r) != "inline" {
				t.Errorf("got mode %q; want inline", answerMode(r))
			}
		})
	}
	testkit.WaitMetric(t, side.Registry, "knowledge_sidecar_ledger_releases_total", map[string]string{"reason": "refused"}, 2)
}

// redisRelay puts a TCP relay (the catalog tests' tcpForwarder) in front of
// the test Redis and returns a Redis ledger through it, so the test can
// take Redis away from a running sidecar.
func redisRelay(t *testing.T) (*tcpForwarder, *ledger.Redis, *sharedredis.Client) {
	t.Helper()
	u, err := url.Parse(redisTestURL())
	if err != nil {
		t.Fatal(err)
	}
	// tcpForwarder reads its target from a DSN's address.
	f := newTCPForwarder(t, "relay@tcp("+u.Host+")/relay")
	relayed := *u
	relayed.Host = f.ln.Addr().String()
	c, err := sharedredis.New(sharedredis.Options{URL: relayed.String(), DialTimeout: 300 * time.Millisecond, OpTimeout: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	l, err := ledger.NewRedis(c, ledger.RedisOptions{KeyPrefix: testdb.RedisPrefix(t), TTL: 10 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Ping(t.Context()); err != nil {
		l.Close()
		testkit.RequireService(t, "Redis at KS_TEST_REDIS_URL", err)
	}
	return f, l, c
}

// TestTurnOutageWhileOnDemandInFlight: an on_demand attempt is forwarded
// and held before Core; then Redis goes away (or identity fails). A
// field-less turn with the same ids would fail open and reach Core, which
// could replay the on_demand attempt's run with inline knowledge: while
// that attempt is in flight it is 409 turn_conflict instead. Turns of
// other ids still fail open.
func TestTurnOutageWhileOnDemandInFlight(t *testing.T) {
	for _, outage := range []string{"redis", "identity"} {
		t.Run(outage, func(t *testing.T) {
			relay, l, _ := redisRelay(t)
			w := NewWorld(t, WorldOptions{})
			// sidecar.Deps hook: a ledger behind a relay the test cuts
			tap, side := w.startTapped(t, FeatureOptions{Ledger: l})
			c := newClient(t)
			route := testdb.RouteMulti
			ti := newTurn("outage-" + outage)

			held, release := holdMarked(tap)
			aDone := make(chan turnResult, 1)
			go func() {
				r, err := trySend(c, "POST", turnsURL(side, route), w.TokenA, ti.body(`"on_demand"`), map[string]string{attemptHeader: "A"})
				if err != nil {
					t.Errorf("attempt A: %v", err)
				}
				aDone <- r
			}()
			waitFor(t, held, "the on_demand attempt in flight")
			switch outage {
			case "redis":
				relay.shut()
			case "identity":
				w.Core.SetFault("/agent-auth/v1/session", fakecore.Fault{Status: 503})
			}
			n := tap.count()
			for _, k := range []struct {
				name string
				ti   turnInput
			}{
				{"both_keys", ti},
				{"same_turn_key", turnInput{Conv: ti.Conv, Turn: ti.Turn, Msg: ti.Msg + "-x", Input: ti.Input}},
				{"same_user_message_key", turnInput{Conv: ti.Conv + "-x", Turn: ti.Turn + "-x", Msg: ti.Msg, Input: ti.Input}},
			} {
				r := send(t, c, "POST", turnsURL(side, route), w.TokenA, k.ti.body(""), nil)
				if r.Status != http.StatusConflict || string(r.Body) != turnConflictJSON {
					t.Errorf("%s: field-less turn during the outage: got %d %s; want 409 turn_conflict", k.name, r.Status, r.Body)
				}
			}
			if tap.count() != n {
				t.Errorf("a field-less turn of the in-flight on_demand turn reached Core")
			}
			// Another turn fails open, as before.
			other := newTurn("outage-other-" + outage)
			if r := send(t, c, "POST", turnsURL(side, route), w.TokenA, other.body(""), nil); r.Status != 200 || answerMode(r) != "inline" {
				t.Errorf("another field-less turn: got %d %s; want Core's 200 (fail open)", r.Status, r.Body)
			}
			close(release)
			if a := waitFor(t, aDone, "attempt A"); answerMode(a) != "on_demand" {
				t.Fatalf("attempt A: got %d %s; want 200 on_demand", a.Status, a.Body)
			}
			reason := map[string]string{"redis": "ledger", "identity": "identity"}[outage]
			testkit.WaitMetric(t, side.Registry, "knowledge_sidecar_ledger_fail_open_total", map[string]string{"reason": reason}, 1)
		})
	}
}

// TestTurnReleaseFailsRedisPaused: a refused on_demand attempt whose ledger
// release fails (SPEC §7, issue 30 finding 5c), run as it was found, with a
// real Redis paused (SIGSTOP) while Core refuses the attempt. The record
// that release should have removed never answers 409 to the corrected retry.
func TestTurnReleaseFailsRedisPaused(t *testing.T) {
	addr, redis := testkit.RedisServer(t, "--port")
	rl, err := newRedisLedger(sharedredis.Options{URL: "redis://" + addr + "/0", DialTimeout: 300 * time.Millisecond, OpTimeout: 300 * time.Millisecond}, ledger.RedisOptions{})
	if err != nil {
		t.Fatal(err)
	}
	led := ledger.NewRetrying(rl, time.Hour, nil)
	w := NewWorld(t, WorldOptions{})
	route := testdb.RouteMulti
	tap := newCoreTap(t, w.Core)
	var pause sync.Once
	tap.hold = func(r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/turns") {
			// Redis hangs while Core refuses the attempt: the release fails.
			pause.Do(func() { _ = redis.Process.Signal(syscall.SIGSTOP) })
		}
	}
	// sidecar.Deps hook: a Retrying ledger over a Redis the test kills
	side := StartSidecar(t, SidecarOptions{CoreURL: tap.URL, Features: w.Features(t, FeatureOptions{Ledger: led})})
	c := newClient(t)

	refusal := []byte(`{"error":"TASK_REQUIRED","message":"The governed task operation could not be accepted."}`)
	w.Core.SetFault(turnsPath(route), fakecore.Fault{Status: 409, Body: refusal})
	ti := newTurn("release-paused")
	r := send(t, c, "POST", turnsURL(side, route), w.TokenA, ti.body(modeJSON("on_demand")), nil)
	if r.Status != 409 || string(r.Body) != string(refusal) {
		t.Fatalf("the refused attempt: got %d %s; want Core's 409 relayed", r.Status, r.Body)
	}
	if got := testkit.Metric(t, side.Registry, "knowledge_sidecar_ledger_errors_total", nil); got != 1 {
		t.Fatalf("ledger_errors_total after the refusal with Redis paused: %v; want 1 (the failed release)", got)
	}
	_ = redis.Process.Signal(syscall.SIGCONT)
	w.Core.ClearFaults()

	// The corrected retry, in the other mode, at once: served, not 409.
	r = send(t, c, "POST", turnsURL(side, route), w.TokenA, ti.body(modeJSON("inline")), nil)
	if r.Status != 200 || answerMode(r) != "inline" {
		t.Fatalf("the corrected retry after the failed release: got %d %s; want 200 inline", r.Status, r.Body)
	}
	testkit.Eventually(t, 10*time.Second, "no release left pending", func() bool { return led.Pending() == 0 })
}
