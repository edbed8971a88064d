package test

// Old clients see Core (SPEC §7, issue 19 item 4): a turn without
// knowledge_delivery that the sidecar cannot decide for goes to Core
// untouched and Core's answer comes back byte for byte.

import (
	"bytes"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bailinghub/knowledge-sidecar/corefacts"
	"github.com/bailinghub/knowledge-sidecar/ledger"
	"github.com/bailinghub/knowledge-sidecar/test/fakecore"
	"github.com/bailinghub/knowledge-sidecar/test/testdb"
)

// sameAnswer compares what the client got through the sidecar with Core's
// direct answer to the same request: status, the headers that matter and
// the body bytes.
func sameAnswer(t testing.TB, got, direct turnResult) {
	t.Helper()
	if got.Status != direct.Status || !bytes.Equal(got.Body, direct.Body) {
		t.Fatalf("through the sidecar: %d %q; Core directly: %d %q", got.Status, got.Body, direct.Status, direct.Body)
	}
	for _, h := range []string{"Content-Type", "Content-Length", "Content-Encoding", "Cache-Control", "WWW-Authenticate", "Retry-After"} {
		if g, w := got.Header.Values(h), direct.Header.Values(h); strings.Join(g, ",") != strings.Join(w, ",") {
			t.Errorf("header %s: got %q; Core directly %q", h, g, w)
		}
	}
}

// TestTurnOldClientsSeeCore: for each thing the sidecar cannot decide for a
// field-less turn, Core receives the client's exact bytes and the client
// gets exactly what Core answers that request directly. The same turns
// with the field are the sidecar's (401, 404) and never reach Core.
func TestTurnOldClientsSeeCore(t *testing.T) {
	w := NewWorld(t, WorldOptions{})
	revoked := fakecore.Token("revoked-session")
	w.Core.AddSession(revoked, corefacts.Session{
		SessionID: testdb.SessionA, ClientAppID: testdb.AppA, Principal: corefacts.Principal{ID: "user-42"},
		AllowedRoutes: []string{testdb.RouteMulti}, ExpiresAt: time.Now().Add(15 * time.Minute),
	})
	w.Core.RevokeSession(revoked)
	deadRedis, err := ledger.NewRedis(ledger.RedisOptions{URL: "redis://" + deadAddr(t) + "/0", DialTimeout: 300 * time.Millisecond, OpTimeout: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	tap := newCoreTap(t, w.Core)
	side := StartSidecar(t, SidecarOptions{CoreURL: tap.URL, Features: w.Features(t, FeatureOptions{})})
	sideNoLedger := StartSidecar(t, SidecarOptions{CoreURL: tap.URL, Features: w.Features(t, FeatureOptions{Ledger: deadRedis})})
	c := newClient(t)
	route := testdb.RouteMulti

	cases := []struct {
		name    string
		side    *Sidecar
		route   string
		token   string
		prepare func()
		// replay: Core's direct answer is its replay of the run the
		// forwarded turn created (same bytes).
		replay bool
	}{
		{name: "unknown_bearer", side: side, route: route, token: fakecore.Token("nobody")},
		{name: "no_bearer", side: side, route: route, token: ""},
		{name: "malformed_bearer", side: side, route: route, token: "not-a-token"},
		{name: "revoked_session", side: side, route: route, token: revoked},
		{name: "route_upper_case", side: side, route: "Alpha", token: w.TokenA},
		{name: "route_too_short", side: side, route: "a", token: w.TokenA},
		{name: "route_bad_and_unauthenticated", side: side, route: "Alpha", token: fakecore.Token("nobody")},
		{name: "identity_down", side: side, route: route, token: w.TokenA, replay: true,
			prepare: func() { w.Core.SetFault("/agent-auth/v1/session", fakecore.Fault{Status: 503}) }},
		{name: "ledger_down", side: sideNoLedger, route: route, token: w.TokenA, replay: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			defer w.Core.ClearFaults()
			if tc.prepare != nil {
				tc.prepare()
			}
			ti := newTurn("old-" + tc.name)
			sent := ti.body("")
			n := tap.count()
			got := send(t, c, "POST", turnsURL(tc.side, tc.route), tc.token, sent, nil)
			e := tap.oneSince(t, n)
			if e.Path != turnsPath(tc.route) || !bytes.Equal(e.ReqBody, sent) {
				t.Fatalf("Core received %s %q; want the client's %s %q", e.Path, e.ReqBody, turnsPath(tc.route), sent)
			}
			if g, w := e.ReqHeader.Get("Authorization"), tc.token; (w == "" && g != "") || (w != "" && g != "Bearer "+w) {
				t.Errorf("Core's Authorization: got %q", g)
			}
			checkRelayed(t, got, e)
			w.Core.ClearFaults()
			direct := send(t, c, "POST", w.CoreURL+turnsPath(tc.route), tc.token, sent, nil)
			sameAnswer(t, got, direct)
			if tc.replay && got.Status != 200 {
				t.Fatalf("got %d %s; want Core's 200", got.Status, got.Body)
			}
			if !tc.replay && got.Status/100 != 4 {
				t.Fatalf("got %d %s; want Core's refusal", got.Status, got.Body)
			}
		})
	}

	// The same turns with the field are the protocol's: the sidecar
	// answers them, and the turn never reaches Core.
	for _, tc := range []struct {
		name, route, token, code string
		status                   int
	}{
		{"field_unknown_bearer", route, fakecore.Token("nobody"), "unauthorized", 401},
		{"field_no_bearer", route, "", "unauthorized", 401},
		{"field_route_upper_case", "Alpha", w.TokenA, "route_unavailable", 404},
		{"field_route_bad_and_unauthenticated", "Alpha", fakecore.Token("nobody"), "unauthorized", 401},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := tap.count()
			r := send(t, c, "POST", turnsURL(side, tc.route), tc.token, newTurn("old-"+tc.name).body(`"on_demand"`), nil)
			checkErrorJSON(t, r, tc.status, tc.code)
			if tap.count() != n {
				t.Errorf("the turn with the field reached Core")
			}
		})
	}
	// A percent-encoded route segment is no literal path: Core could decode
	// it into the route key, so even a field-less turn stays refused.
	t.Run("encoded_route_refused", func(t *testing.T) {
		for _, seg := range []string{"kb%2Dmulti", "%6Bb-multi"} {
			n := tap.count()
			r := send(t, c, "POST", side.URL+"/agent-api/v1/workspaces/"+seg+"/turns", w.TokenA, newTurn("old-enc").body(""), nil)
			checkErrorJSON(t, r, http.StatusNotFound, "route_unavailable")
			if tap.count() != n {
				t.Errorf("%s: the turn reached Core", seg)
			}
		}
	})
	// The one answer the sidecar gives a field-less turn: the mode switch.
	t.Run("mode_switch_is_409", func(t *testing.T) {
		ti := newTurn("old-switch")
		if r := send(t, c, "POST", turnsURL(side, route), w.TokenA, ti.body(`"on_demand"`), nil); r.Status != 200 {
			t.Fatalf("on_demand: got %d %s", r.Status, r.Body)
		}
		n := tap.count()
		r := send(t, c, "POST", turnsURL(side, route), w.TokenA, ti.body(""), nil)
		if r.Status != http.StatusConflict || string(r.Body) != turnConflictJSON || tap.count() != n {
			t.Fatalf("got %d %s (Core called %d times); want 409 %s from the sidecar", r.Status, r.Body, tap.count()-n, turnConflictJSON)
		}
	})
}

// TestTurnUnauthenticatedFieldAnswersEarly: a turn whose bearer Core
// rejects and whose knowledge_delivery key has arrived gets 401 at once,
// though the rest of its body never comes; a field-less one is read to the
// end and goes to Core (whose 401 the client then gets).
func TestTurnUnauthenticatedFieldAnswersEarly(t *testing.T) {
	w := NewWorld(t, WorldOptions{})
	tap := newCoreTap(t, w.Core)
	side := StartSidecar(t, SidecarOptions{CoreURL: tap.URL, Features: w.Features(t, FeatureOptions{}), BodyIdleTimeout: time.Minute})
	path := turnsPath(testdb.RouteMulti)
	conn := dialRaw(t, side.Addr)
	start := `{"client_turn_id":"t1","knowledge_delivery":"on_demand","user_input":"`
	conn.send(t, "POST "+path+" HTTP/1.1\r\nHost: ks\r\nContent-Type: application/json\r\nContent-Length: 8000\r\nAuthorization: Bearer "+fakecore.Token("nobody")+"\r\n\r\n"+start)
	res, body := conn.response(t)
	if res.StatusCode != 401 || errorCode(body) != "unauthorized" {
		t.Fatalf("got %d %s; want the sidecar's 401 without the rest of the body", res.StatusCode, body)
	}
	if tap.count() != 0 {
		t.Errorf("Core was called")
	}

	full := newTurn("early-absent").body("")
	conn = dialRaw(t, side.Addr)
	conn.send(t, "POST "+path+" HTTP/1.1\r\nHost: ks\r\nContent-Type: application/json\r\nContent-Length: "+strconv.Itoa(len(full))+"\r\nAuthorization: Bearer "+fakecore.Token("nobody")+"\r\n\r\n")
	for i := 0; i < len(full); i += 64 {
		conn.send(t, string(full[i:min(i+64, len(full))]))
	}
	res, body = conn.response(t)
	if res.StatusCode != 401 || string(body) != `{"error":"unauthorized"}` {
		t.Fatalf("field-less: got %d %s; want Core's own 401", res.StatusCode, body)
	}
	if e := tap.oneSince(t, 0); !bytes.Equal(e.ReqBody, full) {
		t.Errorf("Core received %q; want the client's bytes", e.ReqBody)
	}
}
