package test

// End-to-end tests of native detection (SPEC §8.2): a Core that serves the
// knowledge protocol itself makes the sidecar transparent; an old Core (404
// on capabilities) gets the protocol from the sidecar; 401/403/5xx on the
// probe are relayed and decide nothing; the verdict is cached for the probe
// interval; "never" and "always" override the probe.

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/bailinghub/knowledge-sidecar/internal/fakecore"
	"github.com/bailinghub/knowledge-sidecar/internal/testkit"
	"github.com/bailinghub/knowledge-sidecar/internal/testkit/testdb"
)

func capsPath(route string) string {
	return "/agent-api/v1/workspaces/" + route + "/knowledge/capabilities"
}

// coreNotFound is a legacy Core's answer to the knowledge paths.
const coreNotFound = `{"error":"not_found"}`

// protocolState returns the core_protocol_state gauge values.
func protocolState(t testing.TB, sc *Sidecar) map[string]float64 {
	t.Helper()
	return metricByLabel(t, sc, "knowledge_sidecar_core_protocol_state", "state", "unknown", "legacy", "native")
}

func wantState(t testing.TB, sc *Sidecar, state string) {
	t.Helper()
	got := protocolState(t, sc)
	for s, v := range got {
		want := 0.0
		if s == state {
			want = 1
		}
		if v != want {
			t.Errorf("core_protocol_state: got %v; want only %s = 1", got, state)
			return
		}
	}
}

// servedCapabilities checks that the sidecar itself answered capabilities
// and returns its scope revision.
func servedCapabilities(t testing.TB, r turnResult, route string) string {
	t.Helper()
	var v struct {
		Schema    string `json:"schema_version"`
		Route     string `json:"route"`
		Supported bool   `json:"supported"`
		Rev       string `json:"knowledge_scope_revision"`
	}
	if r.Status != 200 || json.Unmarshal(r.Body, &v) != nil || v.Schema != "bailing.agent-knowledge-capabilities.v1" || !v.Supported || v.Route != route {
		t.Fatalf("got %d %s; want the sidecar's capabilities of %s", r.Status, r.Body, route)
	}
	return v.Rev
}

// nativeDoc is a native Core's capabilities answer with a revision the
// sidecar would never compute, so relayed and served answers differ.
func nativeDoc(route string) []byte {
	return []byte(`{"schema_version":"bailing.agent-knowledge-capabilities.v1","protocol":"bailing.agent-knowledge.v1","supported":true,"route":"` +
		route + `","enabled":true,"knowledge_scope_revision":"` + strings.Repeat("f", 64) +
		`","delivery_modes":["inline","on_demand"],"limits":{"search_max_results":3,"search_max_bytes":4096,"read_default_bytes":16384,"read_max_bytes":32768,"reference_ttl_seconds":300,"read_chain_max_bytes":131072}}`)
}

// TestNativeCoreTransparent: against a Core that serves the protocol, the
// first capabilities request is Core's own answer, and from then on
// capabilities, search, read and turns pass through byte for byte
// (knowledge_delivery reaches Core).
func TestNativeCoreTransparent(t *testing.T) {
	w := NewWorld(t, WorldOptions{Core: fakecore.Options{Native: true}})
	tap, side := w.startTapped(t, FeatureOptions{})
	c := newClient(t)
	route := testdb.RouteMulti
	wantState(t, side, "unknown")

	direct := send(t, c, "GET", w.CoreURL+capsPath(route), w.TokenA, nil, nil)
	r := send(t, c, "GET", side.WS(route)+"/knowledge/capabilities", w.TokenA, nil, nil)
	if r.Status != direct.Status || !bytes.Equal(r.Body, direct.Body) || direct.Status != 200 {
		t.Fatalf("probe answer: got %d %s; want Core's %d %s", r.Status, r.Body, direct.Status, direct.Body)
	}
	for _, h := range []string{"Content-Type", "Cache-Control"} {
		if r.Header.Get(h) != direct.Header.Get(h) {
			t.Errorf("%s: got %q; want Core's %q", h, r.Header.Get(h), direct.Header.Get(h))
		}
	}
	wantState(t, side, "native")

	decisions := testkit.Metric(t, side.Registry, "knowledge_sidecar_rollout_decisions_total", map[string]string{"decision": "native"})
	for _, tc := range []struct {
		name, method, path string
		body               []byte
	}{
		{"capabilities", "GET", "/knowledge/capabilities", nil},
		{"search", "POST", "/knowledge/search", []byte(`{"query": "refund window", "limit": 3}`)},
		{"read", "POST", "/knowledge/read", []byte(`{"ref": "knowledge:1"}`)},
		{"turn_on_demand", "POST", "/turns", newTurn("native-od").body(`"on_demand"`)},
		{"turn_inline", "POST", "/turns", newTurn("native-in").body(`"inline"`)},
		{"turn_invalid", "POST", "/turns", newTurn("native-bad").body(`"hint"`)},
		{"turn_absent", "POST", "/turns", newTurn("native-absent").body("")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tap.sendRelayed(t, c, tc.method, side.WS(route)+tc.path, w.TokenA, tc.body)
		})
	}
	if got := testkit.Metric(t, side.Registry, "knowledge_sidecar_rollout_decisions_total", map[string]string{"decision": "native"}) - decisions; got != 7 {
		t.Errorf("rollout_decisions_total{native}: got +%v; want +7", got)
	}
	if got := testkit.Metric(t, side.Registry, "knowledge_sidecar_turns_total", map[string]string{"mode": "on_demand", "outcome": "rewritten"}); got != 0 {
		t.Errorf("turns were rewritten on a native Core: %v", got)
	}
}

// TestNativeLegacyCoreServed: an old Core answers the probe 404 not_found,
// so the sidecar serves the protocol (and intercepts turns) itself.
func TestNativeLegacyCoreServed(t *testing.T) {
	w, tap, side, c := tappedWorld(t)
	route := testdb.RouteMulti

	r := send(t, c, "GET", side.WS(route)+"/knowledge/capabilities", w.TokenA, nil, nil)
	servedCapabilities(t, r, route)
	if got := w.Core.Calls(capsPath(route)); got != 1 {
		t.Errorf("probes: got %d; want 1", got)
	}
	wantState(t, side, "legacy")
	r = send(t, c, "GET", side.WS(route)+"/knowledge/capabilities", w.TokenA, nil, nil)
	servedCapabilities(t, r, route)
	if got := w.Core.Calls(capsPath(route)); got != 1 {
		t.Errorf("probes after a cached verdict: got %d; want 1", got)
	}
	code, _, body := Call(t, c, "POST", side.WS(route)+"/knowledge/search", w.TokenA, map[string]any{"query": "refund window"})
	if code != 200 || !bytes.Contains(body, []byte(`"schema_version":"bailing.agent-knowledge-search.v1"`)) {
		t.Errorf("search: got %d %s; want the sidecar's answer", code, body)
	}
	// The one probe is the first capabilities request, forwarded through
	// the pass-through proxy; nothing else reached Core.
	if ex := tap.since(0); len(ex) != 1 || ex[0].Method != "GET" || ex[0].Path != capsPath(route) {
		t.Errorf("Core's proxied path got %d requests; want only the capabilities probe", len(ex))
	}
	r, e := tap.post(t, c, turnsURL(side, route), w.TokenA, newTurn("legacy").body(`"on_demand"`), nil)
	if r.Status != 200 || bytes.Contains(e.ReqBody, []byte("knowledge_delivery")) || !bytes.Contains(r.Body, []byte(`"mode":"on_demand"`)) {
		t.Errorf("turn: got %d %s (Core got %s); want an intercepted turn", r.Status, r.Body, e.ReqBody)
	}

	t.Run("malformed_route", func(t *testing.T) {
		// Never sent to Core as a probe (even when a probe is due); the
		// sidecar answers like for any knowledge request on a malformed route.
		side := w.StartSidecar(t, FeatureOptions{})
		for _, tc := range []struct {
			token  string
			status int
			code   string
		}{{w.TokenA, 404, "route_unavailable"}, {"", 401, "unauthorized"}} {
			r := send(t, c, "GET", side.WS("Bad_Route")+"/knowledge/capabilities", tc.token, nil, nil)
			checkErrorJSON(t, r, tc.status, tc.code)
			wantState(t, side, "unknown")
		}
	})
}

// TestNativeProbeRelayed: 401, 403, a native Core's own 404 gate code and
// 5xx on the probe are relayed to the caller exactly and are never taken as
// "legacy": the state stays unknown and the next request probes again.
func TestNativeProbeRelayed(t *testing.T) {
	w := NewWorld(t, WorldOptions{})
	c := newClient(t)
	route := testdb.RouteMulti
	for _, tc := range []struct {
		name   string
		token  string
		fault  fakecore.Fault
		status int
		body   string
	}{
		{name: "401", token: fakecore.Token("nobody"), status: 401, body: `{"error":"unauthorized"}`},
		{name: "403", fault: fakecore.Fault{Status: 403, Body: []byte(`{"error":"route_not_allowed","message":"The Agent Session is not allowed to use this route."}`)}, status: 403},
		{name: "404_gate_code", fault: fakecore.Fault{Status: 404, Body: []byte(`{"error":"route_unavailable","message":"The configured route is unavailable."}`)}, status: 404},
		{name: "500", fault: fakecore.Fault{Status: 500, Body: []byte(`{"error":"internal_error","request_id":"5e0b5b8e-5a52-4a8e-9d33-0c8b8e1f0001"}`)}, status: 500},
		{name: "502", fault: fakecore.Fault{Status: 502, Body: []byte(`{"error":"bad_gateway"}`)}, status: 502},
		{name: "503", fault: fakecore.Fault{Status: 503, Body: []byte(`{"error":"hub_paused","status":"paused"}`)}, status: 503},
	} {
		t.Run(tc.name, func(t *testing.T) {
			side := w.StartSidecar(t, FeatureOptions{})
			token := w.TokenA
			if tc.token != "" {
				token = tc.token
			}
			if tc.fault.Status != 0 {
				w.Core.SetFault(capsPath(route), tc.fault)
				tc.body = string(tc.fault.Body)
			}
			probes := w.Core.Calls(capsPath(route))
			r := send(t, c, "GET", side.WS(route)+"/knowledge/capabilities", token, nil, nil)
			w.Core.ClearFaults()
			if r.Status != tc.status || string(r.Body) != tc.body {
				t.Fatalf("got %d %s; want Core's %d %s", r.Status, r.Body, tc.status, tc.body)
			}
			if got := w.Core.Calls(capsPath(route)) - probes; got != 1 {
				t.Errorf("probes: got %d; want 1", got)
			}
			wantState(t, side, "unknown")

			// Not cached: the next request probes again and now learns "legacy".
			r = send(t, c, "GET", side.WS(route)+"/knowledge/capabilities", w.TokenA, nil, nil)
			servedCapabilities(t, r, route)
			if got := w.Core.Calls(capsPath(route)) - probes; got != 2 {
				t.Errorf("probes: got %d; want 2", got)
			}
			wantState(t, side, "legacy")
		})
	}

	// An answer too large to be a capabilities document is not relayed
	// and decides nothing, like a Core that cannot be reached.
	for _, tc := range []struct {
		name  string
		fault fakecore.Fault
	}{
		{"oversized_answer", fakecore.Fault{Status: 200, Body: []byte(`{"pad":"` + strings.Repeat("x", 64<<10) + `"}`)}},
		{"core_unreachable", fakecore.Fault{Reset: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			side := w.StartSidecar(t, FeatureOptions{})
			w.Core.SetFault(capsPath(route), tc.fault)
			r := send(t, c, "GET", side.WS(route)+"/knowledge/capabilities", w.TokenA, nil, nil)
			w.Core.ClearFaults()
			checkErrorJSON(t, r, http.StatusServiceUnavailable, "knowledge_unavailable")
			wantState(t, side, "unknown")
			r = send(t, c, "GET", side.WS(route)+"/knowledge/capabilities", w.TokenA, nil, nil)
			servedCapabilities(t, r, route)
			wantState(t, side, "legacy")
		})
	}
}

// TestNativeProbeInterval: a verdict holds for the probe interval (on the
// injected clock) and is re-probed after it, in both directions.
func TestNativeProbeInterval(t *testing.T) {
	const interval = time.Minute
	w := NewWorld(t, WorldOptions{})
	clock := testkit.NewClock(time.Now())
	tap := newCoreTap(t, w.Core)
	side := StartSidecar(t, SidecarOptions{CoreURL: tap.URL,
		Features: w.Features(t, FeatureOptions{Now: clock.Now, ProbeInterval: interval})})
	c := newClient(t)
	route := testdb.RouteMulti
	caps := side.WS(route) + "/knowledge/capabilities"
	native := nativeDoc(route)

	// The Core answers like a native one: native verdict, relayed.
	w.Core.SetFault(capsPath(route), fakecore.Fault{Status: 200, Body: native})
	r := send(t, c, "GET", caps, w.TokenA, nil, nil)
	if r.Status != 200 || !bytes.Equal(r.Body, native) {
		t.Fatalf("probe: got %d %s; want Core's native document", r.Status, r.Body)
	}
	wantState(t, side, "native")
	w.Core.ClearFaults()

	// Within the interval nothing is probed: everything passes through,
	// even though Core is now a legacy one.
	for _, d := range []time.Duration{0, interval - time.Second} {
		clock.Advance(d)
		n := tap.count()
		r = send(t, c, "GET", caps, w.TokenA, nil, nil)
		if e := tap.oneSince(t, n); r.Status != 404 || string(r.Body) != coreNotFound || e.Path != capsPath(route) {
			t.Fatalf("within the interval: got %d %s; want Core's 404 passed through", r.Status, r.Body)
		}
		code, _, body := Call(t, c, "POST", side.WS(route)+"/knowledge/search", w.TokenA, map[string]any{"query": "refund"})
		if code != 404 || string(body) != coreNotFound {
			t.Fatalf("search within the interval: got %d %s; want Core's 404", code, body)
		}
	}
	wantState(t, side, "native")

	// After the interval the next capabilities request probes: legacy.
	clock.Advance(2 * time.Second)
	probes := w.Core.Calls(capsPath(route))
	r = send(t, c, "GET", caps, w.TokenA, nil, nil)
	rev := servedCapabilities(t, r, route)
	if rev == strings.Repeat("f", 64) {
		t.Fatalf("served answer is Core's")
	}
	wantState(t, side, "legacy")

	// Core turns native again: the legacy verdict holds for the interval.
	w.Core.SetFault(capsPath(route), fakecore.Fault{Status: 200, Body: native})
	clock.Advance(interval - time.Second)
	r = send(t, c, "GET", caps, w.TokenA, nil, nil)
	if got := servedCapabilities(t, r, route); got != rev {
		t.Errorf("cached legacy verdict: revision %s; want the sidecar's %s", got, rev)
	}
	if got := w.Core.Calls(capsPath(route)) - probes; got != 1 {
		t.Errorf("probes: got %d; want 1", got)
	}
	clock.Advance(2 * time.Second)
	r = send(t, c, "GET", caps, w.TokenA, nil, nil)
	if r.Status != 200 || !bytes.Equal(r.Body, native) {
		t.Fatalf("re-probe: got %d %s; want Core's native document", r.Status, r.Body)
	}
	wantState(t, side, "native")
}

// TestNativeOverrides: "never" serves the protocol even in front of a
// native Core and never probes; "always" passes everything through even in
// front of a legacy Core.
func TestNativeOverrides(t *testing.T) {
	route := testdb.RouteMulti
	t.Run("never", func(t *testing.T) {
		w := NewWorld(t, WorldOptions{Core: fakecore.Options{Native: true}})
		tap, side := w.startTapped(t, FeatureOptions{NativeDetection: "never"})
		c := newClient(t)
		wantState(t, side, "legacy")
		r := send(t, c, "GET", side.WS(route)+"/knowledge/capabilities", w.TokenA, nil, nil)
		rev := servedCapabilities(t, r, route)
		if w.Core.Calls(capsPath(route)) != 0 {
			t.Errorf("capabilities was probed with native detection never")
		}
		ti := newTurn("never")
		r = send(t, c, "POST", turnsURL(side, route), w.TokenA, ti.body(`"on_demand"`), nil)
		e := tap.oneSince(t, 0)
		if !bytes.Equal(e.ReqBody, ti.body("")) {
			t.Errorf("Core received %s; want the body without the field", e.ReqBody)
		}
		checkRewrite(t, e.RespBody, r.Body, "on_demand", "partial", rev)
	})
	t.Run("always", func(t *testing.T) {
		w := NewWorld(t, WorldOptions{})
		tap, side := w.startTapped(t, FeatureOptions{NativeDetection: "always"})
		c := newClient(t)
		wantState(t, side, "native")
		for _, tc := range []struct {
			name, method, path string
			body               []byte
			status             int
		}{
			{"capabilities", "GET", "/knowledge/capabilities", nil, 404},
			{"search", "POST", "/knowledge/search", []byte(`{"query":"refund"}`), 404},
			{"read", "POST", "/knowledge/read", []byte(`{"ref":"x"}`), 404},
			{"turn", "POST", "/turns", newTurn("always").body(`"on_demand"`), 400}, // undeclared field
		} {
			t.Run(tc.name, func(t *testing.T) {
				r := tap.sendRelayed(t, c, tc.method, side.WS(route)+tc.path, w.TokenA, tc.body)
				if r.Status != tc.status {
					t.Errorf("got %d %s; want Core's %d", r.Status, r.Body, tc.status)
				}
			})
		}
		if got, want := w.Core.Calls(capsPath(route)), 1; got != want {
			t.Errorf("capabilities calls: got %d; want %d (the passed-through request, no probe)", got, want)
		}
	})
}

// firstRequest is a knowledge or on_demand turn request that may be the
// first one a sidecar sees (native detection on the first request).
type firstRequest struct {
	name, path string
	body       []byte
}

// sendFirst starts a sidecar of w behind a tap, sends fr as its first
// request and checks that it probed Core once; it returns the probes
// counted before.
func sendFirst(t *testing.T, w *World, c *http.Client, route string, fr firstRequest) (*coreTap, *Sidecar, turnResult, int) {
	t.Helper()
	tap, side := w.startTapped(t, FeatureOptions{})
	probes := w.Core.Calls(capsPath(route))
	r := send(t, c, "POST", side.WS(route)+fr.path, w.TokenA, fr.body, nil)
	if got := w.Core.Calls(capsPath(route)) - probes; got != 1 {
		t.Errorf("probes: got %d; want 1", got)
	}
	return tap, side, r, probes
}

func firstRequests(tag string) []firstRequest {
	return []firstRequest{
		{"search", "/knowledge/search", []byte(`{"query": "refund window", "limit": 3}`)},
		{"read", "/knowledge/read", []byte(`{"ref": "knowledge:1"}`)},
		{"turn_on_demand", "/turns", newTurn("first-" + tag).body(`"on_demand"`)},
	}
}

// TestNativeFirstRequestProbes: with no verdict held, a search, read or
// on_demand turn does not wait for a capabilities request (SPEC §8.2): it
// probes Core's capabilities with its own bearer first and is handled by the
// verdict — passed through to a native Core byte for byte (Core's answer
// relayed), served by the sidecar in front of a legacy one. One probe, and
// the verdict is then held.
func TestNativeFirstRequestProbes(t *testing.T) {
	route := testdb.RouteMulti
	c := newClient(t)
	t.Run("native", func(t *testing.T) {
		w := NewWorld(t, WorldOptions{Core: fakecore.Options{Native: true}})
		for _, fr := range firstRequests("native") {
			t.Run(fr.name, func(t *testing.T) {
				tap, side, r, probes := sendFirst(t, w, c, route, fr)
				e := tap.oneSince(t, 0)
				if e.Path != "/agent-api/v1/workspaces/"+route+fr.path || !bytes.Equal(e.ReqBody, fr.body) {
					t.Errorf("Core received %s %q; want the client's request as sent", e.Path, e.ReqBody)
				}
				checkRelayed(t, r, e)
				wantState(t, side, "native")

				// The verdict is held: the next request passes without a probe.
				send(t, c, "POST", side.WS(route)+fr.path, w.TokenA, fr.body, nil)
				if got := w.Core.Calls(capsPath(route)) - probes; got != 1 {
					t.Errorf("probes after the verdict: got %d; want 1", got)
				}
				if tap.count() != 2 {
					t.Errorf("passed through: got %d requests; want 2", tap.count())
				}
			})
		}
	})
	t.Run("legacy", func(t *testing.T) {
		w := NewWorld(t, WorldOptions{})
		for _, fr := range firstRequests("legacy") {
			t.Run(fr.name, func(t *testing.T) {
				tap, side, r, probes := sendFirst(t, w, c, route, fr)
				wantState(t, side, "legacy")
				switch fr.name {
				case "search":
					if r.Status != 200 || !bytes.Contains(r.Body, []byte(`"schema_version":"bailing.agent-knowledge-search.v1"`)) {
						t.Errorf("got %d %s; want the sidecar's search answer", r.Status, r.Body)
					}
				case "read":
					checkErrorJSON(t, r, 400, "knowledge_reference_invalid")
				case "turn_on_demand":
					e := tap.oneSince(t, 0)
					if r.Status != 200 || bytes.Contains(e.ReqBody, []byte("knowledge_delivery")) || !bytes.Contains(r.Body, []byte(`"mode":"on_demand"`)) {
						t.Errorf("got %d %s (Core got %s); want an intercepted turn", r.Status, r.Body, e.ReqBody)
					}
				}
				if fr.name != "turn_on_demand" && tap.count() != 0 {
					t.Errorf("the request reached Core's proxied path %d times; want 0", tap.count())
				}
				send(t, c, "POST", side.WS(route)+"/knowledge/search", w.TokenA, []byte(`{"query":"refund"}`), nil)
				if got := w.Core.Calls(capsPath(route)) - probes; got != 1 {
					t.Errorf("probes after the verdict: got %d; want 1", got)
				}
			})
		}
	})
}

// TestNativeFirstRequestUndecided: a first-request probe answered 401
// (the request's own bearer is refused), 403, 5xx or not at all decides
// nothing: the request is handled as for a legacy Core (the sidecar
// answers it, even in front of a native Core), the state stays unknown, and
// the next request probes again and learns the verdict.
func TestNativeFirstRequestUndecided(t *testing.T) {
	w := NewWorld(t, WorldOptions{Core: fakecore.Options{Native: true}})
	c := newClient(t)
	route := testdb.RouteMulti
	search := []byte(`{"query": "refund window"}`)
	for _, tc := range []struct {
		name  string
		token string
		fault fakecore.Fault
		check func(t *testing.T, r turnResult)
	}{
		{name: "401", token: fakecore.Token("nobody"), check: func(t *testing.T, r turnResult) {
			checkErrorJSON(t, r, 401, "unauthorized") // the sidecar's answer: Core's has no message
		}},
		{name: "403", fault: fakecore.Fault{Status: 403, Body: []byte(`{"error":"route_not_allowed","message":"The Agent Session is not allowed to use this route."}`)}},
		{name: "503", fault: fakecore.Fault{Status: 503, Body: []byte(`{"error":"hub_paused","status":"paused"}`)}},
		{name: "unreachable", fault: fakecore.Fault{Reset: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tap, side := w.startTapped(t, FeatureOptions{})
			token := w.TokenA
			if tc.token != "" {
				token = tc.token
			}
			if tc.fault.Status != 0 || tc.fault.Reset {
				w.Core.SetFault(capsPath(route), tc.fault)
			}
			probes := w.Core.Calls(capsPath(route))
			r := send(t, c, "POST", side.WS(route)+"/knowledge/search", token, search, nil)
			w.Core.ClearFaults()
			if got := w.Core.Calls(capsPath(route)) - probes; got != 1 {
				t.Errorf("probes: got %d; want 1", got)
			}
			if tap.count() != 0 {
				t.Fatalf("the search reached Core (%d requests); want it handled as legacy", tap.count())
			}
			if tc.check != nil {
				tc.check(t, r)
			} else if r.Status != 200 || !bytes.Contains(r.Body, []byte(`"schema_version":"bailing.agent-knowledge-search.v1"`)) {
				t.Errorf("got %d %s; want the sidecar's own search answer", r.Status, r.Body)
			}
			wantState(t, side, "unknown")

			// Nothing was held: the next request probes again, now native.
			r = send(t, c, "POST", side.WS(route)+"/knowledge/search", w.TokenA, search, nil)
			if got := w.Core.Calls(capsPath(route)) - probes; got != 2 {
				t.Errorf("probes: got %d; want 2", got)
			}
			checkRelayed(t, r, tap.oneSince(t, 0))
			wantState(t, side, "native")
		})
	}
}
