package test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/bailinghub/knowledge-sidecar/breaker"
	"github.com/bailinghub/knowledge-sidecar/hostclient"
	"github.com/bailinghub/knowledge-sidecar/internal/fakecore"
	"github.com/bailinghub/knowledge-sidecar/internal/testkit/testdb"
)

// Fault injection end to end: Core identity, Core retrieval and the catalog
// fail in turn; the knowledge endpoints answer their defined errors without
// leaking where or why, pass-through keeps working and /readyz stays 200.

// knowledgeEndpoints calls the three endpoints of route with token; ref is
// used for the read (any string when the read is expected to fail earlier).
func knowledgeEndpoints(t *testing.T, kw *kworld, sc *ksidecar, route, token, ref string) map[string]kresp {
	t.Helper()
	return map[string]kresp{
		"capabilities": kw.call(t, "GET", sc.WS(route)+"/knowledge/capabilities", token, nil),
		"search":       kw.call(t, "POST", sc.WS(route)+"/knowledge/search", token, map[string]any{"query": refundQuery}),
		"read":         kw.call(t, "POST", sc.WS(route)+"/knowledge/read", token, map[string]any{"ref": ref}),
	}
}

// checkStillServing: pass-through and readiness do not depend on knowledge.
func checkStillServing(t *testing.T, kw *kworld, sc *ksidecar) {
	t.Helper()
	r := kw.call(t, "GET", sc.WS(testdb.RouteMulti)+"/system-info", kw.TokenA, nil)
	if r.Status != 200 || !strings.Contains(string(r.Body), "bailing.agent-system-info.v1") {
		t.Errorf("pass-through system-info: got %d %s; want Core's 200", r.Status, clip(string(r.Body)))
	}
	r = kw.call(t, "GET", sc.URL+"/agent-api/v1/unknown", kw.TokenA, nil)
	if r.Status != 404 || strings.TrimSpace(string(r.Body)) != `{"error":"not_found"}` {
		t.Errorf("pass-through unknown path: got %d %s; want Core's own 404", r.Status, r.Body)
	}
	if code, body := mustGet(t, kw.c, sc.AdminURL+"/readyz"); code != 200 {
		t.Errorf("/readyz: got %d %s; want 200 (readiness is not tied to knowledge)", code, body)
	}
}

// TestFaultIdentityDown: Core's Agent Auth answers 503, resets, or hangs
// past the Core timeout → 503 knowledge_unavailable, promptly.
func TestFaultIdentityDown(t *testing.T) {
	kw := newKWorld(t, fakecore.Options{SystemInfo: true})
	// A ref issued while everything works, to show reads fail for the
	// identity, not the ref.
	healthy := kw.start(t, kopts{})
	_, h := kw.mustSearch(t, healthy, testdb.RouteMulti, kw.TokenA, map[string]any{"query": refundQuery}, testdb.DocRefundTitle)

	cases := []struct {
		name  string
		fault fakecore.Fault
	}{
		{"status 503", fakecore.Fault{Status: 503}},
		{"status 500 with Core's body", fakecore.Fault{Status: 500}},
		{"connection reset", fakecore.Fault{Reset: true}},
		{"hang past the core timeout", fakecore.Fault{Hang: true}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			sc := kw.start(t, kopts{FeatureOptions: FeatureOptions{CoreTimeout: 300 * time.Millisecond}})
			kw.Core.SetFault("/agent-auth", tc.fault)
			defer kw.Core.ClearFault("/agent-auth")
			kbBefore := kw.Core.Calls("/kb/search")
			began := time.Now()
			for ep, r := range knowledgeEndpoints(t, kw, sc, testdb.RouteMulti, kw.TokenA, h.Ref) {
				wantError(t, ep, r, 503, "knowledge_unavailable")
			}
			if took := time.Since(began); took > 10*time.Second {
				t.Errorf("three requests took %v; want each bounded by the core timeout", took)
			}
			if got := kw.Core.Calls("/kb/search") - kbBefore; got != 0 {
				t.Errorf("/kb/search called %d times without an identity; want 0", got)
			}
			checkStillServing(t, kw, sc)
		})
	}
}

// TestFaultRetrievalDown: every /kb/search fails → search answers 200
// status unavailable; after the breaker's failure count it opens and Core
// sees no further /kb/search call; capabilities says enabled:false.
func TestFaultRetrievalDown(t *testing.T) {
	kw := newKWorld(t, fakecore.Options{SystemInfo: true})
	const failures = 3
	sc := kw.start(t, kopts{FeatureOptions: FeatureOptions{Retrieval: breaker.Settings{Failures: failures, Window: time.Minute, OpenTimeout: time.Hour}}})
	caps := func() bool {
		r := kw.call(t, "GET", sc.WS(testdb.RouteMulti)+"/knowledge/capabilities", kw.TokenA, nil)
		if r.Status != 200 {
			t.Fatalf("capabilities: got %d %s; want 200", r.Status, r.Body)
		}
		return strings.Contains(string(r.Body), `"enabled":true`)
	}
	if !caps() {
		t.Fatal("capabilities: enabled false before the fault")
	}
	kw.Core.SetFault("/kb/search", fakecore.Fault{Status: 500})
	search := func(route string) hostclient.SearchAnswer {
		t.Helper()
		r, a := kw.search(t, sc, route, kw.TokenA, map[string]any{"query": refundQuery})
		if r.Status != 200 || a.Status != "unavailable" || len(a.Hints) != 0 {
			t.Errorf("%s search: got %d %s; want 200 status unavailable without hints", route, r.Status, r.Body)
		}
		return a
	}
	// kb-multi searches two KBs per request: two requests make four calls,
	// past the threshold of three.
	search(testdb.RouteMulti)
	search(testdb.RouteMulti)
	calls := kw.Core.Calls("/kb/search")
	if calls < failures {
		t.Fatalf("precondition: %d /kb/search calls; want at least %d", calls, failures)
	}
	for i := 0; i < 3; i++ {
		search(testdb.RouteMulti)
		search(testdb.RouteLegacy)
	}
	if got := kw.Core.Calls("/kb/search"); got != calls {
		t.Errorf("/kb/search calls with the breaker open: got %d more; want 0", got-calls)
	}
	if caps() {
		t.Error("capabilities: enabled true while retrieval is down; want false")
	}
	checkStillServing(t, kw, sc)
	// A disabled route still answers disabled, without Core.
	if r, a := kw.search(t, sc, testdb.RouteNull, kw.TokenStar, map[string]any{"query": refundQuery}); r.Status != 200 || a.Status != "disabled" {
		t.Errorf("kb-null search: got %d %s; want 200 disabled", r.Status, r.Body)
	}
}

// TestFaultCatalogDown: the catalog is unreachable (dead port) or loses its
// grants → 503 knowledge_unavailable, with no DSN, address or SQL in the
// body or the logs.
func TestFaultCatalogDown(t *testing.T) {
	kw := newKWorld(t, fakecore.Options{SystemInfo: true})
	healthy := kw.start(t, kopts{})
	_, h := kw.mustSearch(t, healthy, testdb.RouteMulti, kw.TokenA, map[string]any{"query": refundQuery}, testdb.DocRefundTitle)

	t.Run("dead port", func(t *testing.T) {
		const password = "catalog-pw-must-not-leak"
		dsn := fmt.Sprintf("ks_ro_dead:%s@tcp(%s)/ks_dead_db?parseTime=true", password, deadAddr(t))
		kw.addSecret(dsn)
		kw.addSecret(password)
		kw.addSecret("ks_dead_db")
		sc := kw.start(t, kopts{FeatureOptions: FeatureOptions{CatalogDSN: dsn}})
		for ep, r := range knowledgeEndpoints(t, kw, sc, testdb.RouteMulti, kw.TokenA, h.Ref) {
			wantError(t, ep, r, 503, "knowledge_unavailable")
		}
		// An on_demand turn cannot get a delivery block without the route's
		// scope revision: 503, and Core never sees the turn (no run).
		turns := kw.Core.Calls("/agent-api/v1/workspaces/" + testdb.RouteMulti + "/turns")
		r := kw.call(t, "POST", sc.WS(testdb.RouteMulti)+"/turns", kw.TokenA,
			`{"client_conversation_id":"c-down","client_turn_id":"t-down","user_message_id":"m-down","user_input":"hi","knowledge_delivery":"on_demand"}`)
		wantError(t, "turns", r, 503, "knowledge_unavailable")
		if kw.Core.Calls("/agent-api/v1/workspaces/"+testdb.RouteMulti+"/turns") != turns {
			t.Error("the on_demand turn reached Core without a scope revision for its delivery block")
		}
		checkStillServing(t, kw, sc)
	})

	t.Run("grants dropped", func(t *testing.T) {
		sc := kw.start(t, kopts{})
		cfg, err := mysql.ParseDSN(kw.DB.ReadOnlyDSN)
		if err != nil {
			t.Fatal(err)
		}
		account := fmt.Sprintf("'%s'@'%%'", cfg.User)
		kw.DB.Exec(t, "REVOKE SELECT (doc_id, kb_id, title, content, content_hash, status, updated_at) ON `"+
			kw.DB.Name+"`.bz_kb_docs FROM "+account)
		for _, ep := range []string{"search", "read"} {
			var r kresp
			if ep == "search" {
				r = kw.call(t, "POST", sc.WS(testdb.RouteMulti)+"/knowledge/search", kw.TokenA, map[string]any{"query": refundQuery})
			} else {
				r = kw.call(t, "POST", sc.WS(testdb.RouteMulti)+"/knowledge/read", kw.TokenA, map[string]any{"ref": h.Ref})
			}
			wantError(t, ep, r, 503, "knowledge_unavailable")
			for _, s := range []string{"denied", "command", "column", "ks_ro_"} {
				if strings.Contains(strings.ToLower(string(r.Body)), s) {
					t.Errorf("%s: error body %s mentions %q", ep, r.Body, s)
				}
			}
		}
		checkStillServing(t, kw, sc)
	})
}
