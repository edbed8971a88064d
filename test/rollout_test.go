package test

// End-to-end tests of the per-workspace rollout (SPEC §8.2): a workspace not
// rolled out is fully pass-through; allow/deny/percent policies; a runtime
// policy swap (the SIGHUP path) changes behaviour for new requests without
// dropping keep-alive connections or in-flight requests; percentage
// decisions are stable across instances and monotone when widening.

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"net"
	"net/http"
	"net/http/httptrace"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bailinghub/knowledge-sidecar/internal/testkit/testdb"
	"github.com/bailinghub/knowledge-sidecar/rollout"
)

// documentedBucket is the percentage bucket as the rollout package documents
// it for operators, computed independently of the implementation.
func documentedBucket(route string) uint64 {
	sum := sha256.Sum256([]byte(route))
	return binary.BigEndian.Uint64(sum[:8]) % 10000
}

// rolledOut tells from a capabilities answer whether the sidecar handled
// the request (true) or passed it to the legacy Core, which answers the
// unknown knowledge path with its own 404 not_found (false).
func rolledOut(t testing.TB, r turnResult) bool {
	t.Helper()
	if r.Status == 404 && string(r.Body) == coreNotFound {
		return false
	}
	if bytes.Contains(r.Body, []byte(`"error":"not_found"`)) {
		t.Fatalf("ambiguous answer %d %s", r.Status, r.Body)
	}
	return true
}

func decisions(t testing.TB, sc *Sidecar) map[string]float64 {
	t.Helper()
	return metricByLabel(t, sc, "knowledge_sidecar_rollout_decisions_total", "decision", "enabled", "disabled", "native")
}

func mustPolicy(t testing.TB, spec string) rollout.Policy {
	t.Helper()
	p, err := rollout.Parse(spec)
	if err != nil {
		t.Fatalf("rollout.Parse(%q): %v", spec, err)
	}
	return p
}

// TestRolloutNotRolledOutIsPassThrough: for a workspace outside the rollout
// every request reaches Core byte for byte — the legacy Core answers the
// knowledge paths 404 not_found and refuses the undeclared
// knowledge_delivery field with 400 — while a rolled-out workspace on the
// same sidecar is served.
func TestRolloutNotRolledOutIsPassThrough(t *testing.T) {
	w := NewWorld(t, WorldOptions{})
	tap, side := w.startTapped(t, FeatureOptions{Rollout: "allow:" + testdb.RouteLegacy})
	c := newClient(t)
	route := testdb.RouteMulti
	before := decisions(t, side)
	for _, tc := range []struct {
		name, method, path string
		body               []byte
		status             int
		contains           string
	}{
		{"capabilities", "GET", "/knowledge/capabilities", nil, 404, coreNotFound},
		{"search", "POST", "/knowledge/search", []byte(`{"query": "refund window"}`), 404, coreNotFound},
		{"read", "POST", "/knowledge/read", []byte(`{"ref": "kr1.x"}`), 404, coreNotFound},
		{"turn_with_field", "POST", "/turns", newTurn("off-field").body(`"on_demand"`), 400, "undeclared fields"},
		{"turn_invalid_field", "POST", "/turns", newTurn("off-bad").body(`"hint"`), 400, "undeclared fields"},
		{"turn_without_field", "POST", "/turns", newTurn("off-absent").body(""), 200, `"ref":"knowledge:1"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := tap.sendRelayed(t, c, tc.method, side.WS(route)+tc.path, w.TokenA, tc.body)
			if r.Status != tc.status || !strings.Contains(string(r.Body), tc.contains) {
				t.Errorf("got %d %s; want Core's %d with %s", r.Status, r.Body, tc.status, tc.contains)
			}
		})
	}
	after := decisions(t, side)
	if got := after["disabled"] - before["disabled"]; got != 6 {
		t.Errorf("rollout_decisions_total{disabled}: got +%v; want +6", got)
	}
	if got := after["enabled"] - before["enabled"]; got != 0 {
		t.Errorf("rollout_decisions_total{enabled}: got +%v; want +0", got)
	}

	t.Run("rolled_out_neighbour", func(t *testing.T) {
		r := send(t, c, "GET", side.WS(testdb.RouteLegacy)+"/knowledge/capabilities", w.TokenA, nil, nil)
		servedCapabilities(t, r, testdb.RouteLegacy)
		n := tap.count()
		r = send(t, c, "POST", turnsURL(side, testdb.RouteLegacy), w.TokenA, newTurn("on-field").body(`"on_demand"`), nil)
		if e := tap.oneSince(t, n); r.Status != 200 || bytes.Contains(e.ReqBody, []byte("knowledge_delivery")) {
			t.Errorf("got %d %s (Core got %s); want an intercepted turn", r.Status, r.Body, e.ReqBody)
		}
	})
}

// TestRolloutPolicies: off, all, allow, deny and percent decide per
// workspace; percent follows the documented bucket formula.
func TestRolloutPolicies(t *testing.T) {
	w := NewWorld(t, WorldOptions{})
	side := w.StartSidecar(t, FeatureOptions{Rollout: "off"})
	c := newClient(t)
	multi, legacy := testdb.RouteMulti, testdb.RouteLegacy
	bm := int(documentedBucket(multi) / 100) // multi is enabled from percent bm+1
	percent := func(p int) string {
		if p > 100 {
			p = 100
		}
		return fmt.Sprint("percent:", p)
	}
	for _, tc := range []struct {
		spec          string
		multi, legacy bool
	}{
		{"off", false, false},
		{"all", true, true},
		{"allow:" + multi, true, false},
		{"allow:" + legacy + "," + multi, true, true},
		{"deny:" + multi, false, true},
		{"deny:" + legacy + ", " + multi, false, false},
		{"percent:0", false, false},
		{"percent:100", true, true},
		{percent(bm), false, documentedBucket(legacy) < uint64(bm)*100},
		{percent(bm + 1), bm+1 <= 100, documentedBucket(legacy) < uint64(min(bm+1, 100))*100},
	} {
		t.Run(tc.spec, func(t *testing.T) {
			side.Server.SetRollout(mustPolicy(t, tc.spec))
			before := decisions(t, side)
			for _, rc := range []struct {
				route string
				want  bool
			}{{multi, tc.multi}, {legacy, tc.legacy}} {
				r := send(t, c, "GET", side.WS(rc.route)+"/knowledge/capabilities", w.TokenA, nil, nil)
				if got := rolledOut(t, r); got != rc.want {
					t.Errorf("%s: rolled out %v; want %v (answer %d %s)", rc.route, got, rc.want, r.Status, r.Body)
				}
				// A turn with the field agrees with capabilities.
				r = send(t, c, "POST", turnsURL(side, rc.route), w.TokenA, newTurn(tc.spec+rc.route).body(`"inline"`), nil)
				if got := r.Status == 200 && bytes.Contains(r.Body, []byte(`"knowledge_delivery":{`)); got != rc.want {
					t.Errorf("%s turn: intercepted %v; want %v (answer %d %s)", rc.route, got, rc.want, r.Status, r.Body)
				}
			}
			after := decisions(t, side)
			wantEnabled := 0.0
			for _, on := range []bool{tc.multi, tc.legacy} {
				if on {
					wantEnabled += 2
				}
			}
			if got := after["enabled"] - before["enabled"]; got != wantEnabled {
				t.Errorf("rollout_decisions_total{enabled}: got +%v; want +%v", got, wantEnabled)
			}
			if got := after["disabled"] - before["disabled"]; got != 4-wantEnabled {
				t.Errorf("rollout_decisions_total{disabled}: got +%v; want +%v", got, 4-wantEnabled)
			}
		})
	}
}

// TestRolloutSwapKeepsConnections: Server.SetRollout (what SIGHUP calls)
// changes the decision for new requests on a keep-alive connection that
// stays open throughout, and a request already in flight keeps the decision
// it made.
func TestRolloutSwapKeepsConnections(t *testing.T) {
	w := NewWorld(t, WorldOptions{})
	tap, side := w.startTapped(t, FeatureOptions{Rollout: "off"})
	route := testdb.RouteMulti

	// One client, one connection: count dials and check reuse per request.
	var dials atomic.Int32
	tr := &http.Transport{
		DisableCompression: true,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			dials.Add(1)
			return (&net.Dialer{Timeout: 5 * time.Second}).DialContext(ctx, network, addr)
		},
	}
	t.Cleanup(tr.CloseIdleConnections)
	c := &http.Client{Transport: tr, Timeout: 30 * time.Second}
	var firstConn net.Conn
	do := func(t *testing.T, method, path string, body []byte) turnResult {
		t.Helper()
		req, err := http.NewRequest(method, side.WS(route)+path, bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+w.TokenA)
		var got httptrace.GotConnInfo
		req = req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) { got = i }}))
		resp, err := c.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		defer resp.Body.Close()
		var buf bytes.Buffer
		if _, err := buf.ReadFrom(resp.Body); err != nil {
			t.Fatal(err)
		}
		if firstConn == nil {
			firstConn = got.Conn
		} else if !got.Reused || got.Conn != firstConn {
			t.Errorf("%s %s: a new connection (reused %v); want the first one kept open", method, path, got.Reused)
		}
		return turnResult{resp.StatusCode, resp.Header, buf.Bytes()}
	}

	caps := func(t *testing.T) bool {
		t.Helper()
		return rolledOut(t, do(t, "GET", "/knowledge/capabilities", nil))
	}
	if caps(t) {
		t.Fatal("off: capabilities served by the sidecar")
	}
	side.Server.SetRollout(mustPolicy(t, "allow:"+route))
	if !caps(t) {
		t.Fatal("after SetRollout(allow): capabilities not served")
	}

	// A turn decided under "allow" is held inside Core while the policy
	// goes back to off.
	arrived, release := make(chan struct{}), make(chan struct{})
	var held atomic.Bool
	tap.setHold(func(r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/turns") && held.CompareAndSwap(false, true) {
			close(arrived)
			<-release
		}
	})
	inflight := make(chan turnResult, 1)
	other := newClient(t)
	go func() {
		r, err := trySend(other, "POST", turnsURL(side, route), w.TokenA, newTurn("inflight").body(`"on_demand"`), nil)
		if err != nil {
			t.Errorf("in-flight turn: %v", err)
		}
		inflight <- r
	}()
	waitFor(t, arrived, "the in-flight turn at Core")
	side.Server.SetRollout(mustPolicy(t, "off"))
	if caps(t) {
		t.Error("after SetRollout(off): capabilities still served")
	}
	r := do(t, "POST", "/turns", newTurn("after-off").body(`"on_demand"`))
	if r.Status != 400 || !bytes.Contains(r.Body, []byte("undeclared")) {
		t.Errorf("turn after SetRollout(off): got %d %s; want Core's 400", r.Status, r.Body)
	}
	close(release)
	got := waitFor(t, inflight, "the in-flight turn")
	if got.Status != 200 || !bytes.Contains(got.Body, []byte(`"mode":"on_demand"`)) || !bytes.Contains(got.Body, []byte(`"knowledge":[]`)) {
		t.Errorf("in-flight turn: got %d %s; want the on_demand rewrite it was admitted with", got.Status, got.Body)
	}
	side.Server.SetRollout(mustPolicy(t, "all"))
	if !caps(t) {
		t.Error("after SetRollout(all): capabilities not served")
	}
	if n := dials.Load(); n != 1 {
		t.Errorf("dials: got %d; want 1 (no connection dropped)", n)
	}
}

// TestRolloutPercentStable: percentage decisions are the same on two
// instances (a replica and a restart) and only add workspaces when the
// percentage grows.
func TestRolloutPercentStable(t *testing.T) {
	w := NewWorld(t, WorldOptions{})
	c := newClient(t)
	const n = 60
	routes := make([]string, n)
	for i := range routes {
		routes[i] = fmt.Sprintf("ws-%03d", i)
	}
	decide := func(t *testing.T, spec string) []bool {
		t.Helper()
		side := w.StartSidecar(t, FeatureOptions{Rollout: spec, NativeDetection: "never"})
		out := make([]bool, n)
		for i, r := range routes {
			out[i] = rolledOut(t, send(t, c, "GET", side.WS(r)+"/knowledge/capabilities", w.TokenA, nil, nil))
		}
		d := decisions(t, side)
		on := 0
		for _, v := range out {
			if v {
				on++
			}
		}
		if d["enabled"] != float64(on) || d["disabled"] != float64(n-on) {
			t.Errorf("%s: rollout_decisions_total %v; want enabled %d, disabled %d", spec, d, on, n-on)
		}
		if err := side.Stop(); err != nil {
			t.Fatal(err)
		}
		return out
	}
	var prev []bool
	for _, p := range []int{10, 35, 70, 95} {
		spec := fmt.Sprint("percent:", p)
		t.Run(spec, func(t *testing.T) {
			first := decide(t, spec)
			second := decide(t, spec) // another instance, started after the first stopped
			on := 0
			for i := range routes {
				if first[i] != second[i] {
					t.Errorf("%s: instance 1 says %v, instance 2 says %v", routes[i], first[i], second[i])
				}
				if want := documentedBucket(routes[i]) < uint64(p)*100; first[i] != want {
					t.Errorf("%s: rolled out %v; the documented bucket formula says %v", routes[i], first[i], want)
				}
				if prev != nil && prev[i] && !first[i] {
					t.Errorf("%s: rolled out at a lower percentage but not at %d%%", routes[i], p)
				}
				if first[i] {
					on++
				}
			}
			if p == 35 && (on == 0 || on == n) {
				t.Errorf("%d of %d routes rolled out at 35%%; the sample cannot show anything", on, n)
			}
			prev = first
		})
	}
}
