package test

// Old clients see Core (SPEC §7, issue 19 item 4): a turn without
// knowledge_delivery that the sidecar cannot decide for goes to Core
// untouched and Core's answer comes back byte for byte.

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bailinghub/knowledge-sidecar/corefacts"
	"github.com/bailinghub/knowledge-sidecar/internal/fakecore"
	"github.com/bailinghub/knowledge-sidecar/internal/testkit"
	"github.com/bailinghub/knowledge-sidecar/internal/testkit/testdb"
	"github.com/bailinghub/knowledge-sidecar/ledger"
	"github.com/bailinghub/knowledge-sidecar/sharedredis"
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
// gets exactly what Core answers that request directly. A caller whose
// bearer is missing or refused gets the same with the field too (SPEC
// §8.3: it holds nothing of the sidecar's; Core authenticates first). An
// authenticated turn with the field on a bad route is the sidecar's 404.
func TestTurnOldClientsSeeCore(t *testing.T) {
	w := NewWorld(t, WorldOptions{})
	revoked := fakecore.Token("revoked-session")
	w.Core.AddSession(revoked, corefacts.Session{
		SessionID: testdb.SessionA, ClientAppID: testdb.AppA, Principal: corefacts.Principal{ID: "user-42"},
		AllowedRoutes: []string{testdb.RouteMulti}, ExpiresAt: time.Now().Add(15 * time.Minute),
	})
	w.Core.RevokeSession(revoked)
	deadRedis, err := newRedisLedger(sharedredis.Options{URL: "redis://" + deadAddr(t) + "/0", DialTimeout: 300 * time.Millisecond, OpTimeout: 500 * time.Millisecond}, ledger.RedisOptions{})
	if err != nil {
		t.Fatal(err)
	}
	tap, side := w.startTapped(t, FeatureOptions{})
	// sidecar.Deps hook: a ledger on a dead Redis with short timeouts
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
		// unauth: the bearer is missing or refused, so the turn with the
		// field goes to Core too.
		unauth bool
	}{
		{name: "unknown_bearer", side: side, route: route, token: fakecore.Token("nobody"), unauth: true},
		{name: "no_bearer", side: side, route: route, token: "", unauth: true},
		{name: "malformed_bearer", side: side, route: route, token: "not-a-token", unauth: true},
		{name: "revoked_session", side: side, route: route, token: revoked, unauth: true},
		{name: "route_upper_case", side: side, route: "Alpha", token: w.TokenA},
		{name: "route_too_short", side: side, route: "a", token: w.TokenA},
		{name: "route_bad_and_unauthenticated", side: side, route: "Alpha", token: fakecore.Token("nobody"), unauth: true},
		{name: "identity_down", side: side, route: route, token: w.TokenA, replay: true,
			prepare: func() { w.Core.SetFault("/agent-auth/v1/session", fakecore.Fault{Status: 503}) }},
		{name: "ledger_down", side: sideNoLedger, route: route, token: w.TokenA, replay: true},
	}
	for _, tc := range cases {
		fields := []string{""}
		if tc.unauth {
			fields = append(fields, `"on_demand"`, `"sometimes"`)
		}
		for _, field := range fields {
			name := tc.name
			if field != "" {
				name += "/field_" + strings.Trim(field, `"`)
			}
			t.Run(name, func(t *testing.T) {
				defer w.Core.ClearFaults()
				if tc.prepare != nil {
					tc.prepare()
				}
				ti := newTurn("old-" + name)
				sent := ti.body(field)
				got, e := tap.post(t, c, turnsURL(tc.side, tc.route), tc.token, sent, nil)
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
	}

	// An authenticated turn with the field on a bad route is the
	// protocol's: the sidecar answers it, and it never reaches Core.
	for _, tc := range []struct {
		name, route, token, code string
		status                   int
	}{
		{"field_route_upper_case", "Alpha", w.TokenA, "route_unavailable", 404},
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
		mustTurn(t, c, side, route, w.TokenA, ti.body(`"on_demand"`), "on_demand")
		n := tap.count()
		r := send(t, c, "POST", turnsURL(side, route), w.TokenA, ti.body(""), nil)
		if r.Status != http.StatusConflict || string(r.Body) != turnConflictJSON || tap.count() != n {
			t.Fatalf("got %d %s (Core called %d times); want 409 %s from the sidecar", r.Status, r.Body, tap.count()-n, turnConflictJSON)
		}
	})
}

// TestTurnUnauthenticatedStreamsToCore: a turn whose bearer Core rejects
// is never read by the sidecar (SPEC §8.3): its body streams to Core as it
// arrives, holding none of the turn body budget, and Core's own 401 comes
// back byte for byte — with or without the field.
func TestTurnUnauthenticatedStreamsToCore(t *testing.T) {
	w := NewWorld(t, WorldOptions{})
	first := make(chan struct{}, 1)
	core := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/turns") {
			var b [1]byte
			if _, err := io.ReadFull(r.Body, b[:]); err == nil {
				first <- struct{}{} // Core has the body's first byte while the client still sends
			}
			r.Body = io.NopCloser(io.MultiReader(bytes.NewReader(b[:]), r.Body))
		}
		w.Core.ServeHTTP(rw, r)
	}))
	t.Cleanup(core.Close)
	side := StartSidecar(t, SidecarOptions{CoreURL: core.URL, Features: w.Features(t, FeatureOptions{}), BodyIdleTimeout: time.Minute})
	path := turnsPath(testdb.RouteMulti)
	for _, field := range []string{`"on_demand"`, ""} {
		full := newTurn("unauth-stream-" + strings.Trim(field, `"`)).body(field)
		conn := dialRaw(t, side.Addr)
		conn.send(t, "POST "+path+" HTTP/1.1\r\nHost: ks\r\nContent-Type: application/json\r\nContent-Length: "+strconv.Itoa(len(full))+
			"\r\nAuthorization: Bearer "+fakecore.Token("nobody")+"\r\n\r\n"+string(full[:40]))
		waitFor(t, first, "Core receiving the first bytes of the unauthenticated turn")
		if used := testkit.Metric(t, side.Registry, "knowledge_sidecar_turn_body_budget_used_bytes", nil); used != 0 {
			t.Errorf("field %q: the unauthenticated turn holds %v bytes of the turn body budget; want 0", field, used)
		}
		conn.send(t, string(full[40:]))
		res, body := conn.response(t)
		if res.StatusCode != 401 || string(body) != `{"error":"unauthorized"}` {
			t.Fatalf("field %q: got %d %s; want Core's own 401", field, res.StatusCode, body)
		}
	}
}
