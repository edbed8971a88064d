package knowledge

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/bailinghub/knowledge-sidecar/corefacts"
	"github.com/bailinghub/knowledge-sidecar/internal/testkit"
	"github.com/bailinghub/knowledge-sidecar/protocol"
)

func TestCapabilitiesBody(t *testing.T) {
	e := newEnv(t)
	_, raw, ke := e.call("capabilities", tokA, routeKey, "")
	if ke != nil {
		t.Fatal(ke)
	}
	want := `{"schema_version":"bailing.agent-knowledge-capabilities.v1","protocol":"bailing.agent-knowledge.v1","supported":true,"route":"order-assistant","enabled":true,"knowledge_scope_revision":"` +
		ScopeRevision(routeKey, &defaultKBConfg) +
		`","delivery_modes":["inline","on_demand"],"limits":{"search_max_results":3,"search_max_bytes":4096,"read_default_bytes":16384,"read_max_bytes":32768,"reference_ttl_seconds":300,"read_chain_max_bytes":131072}}`
	if string(raw) != want {
		t.Fatalf("got  %s\nwant %s", raw, want)
	}
	if n := len(e.ret.callList()); n != 0 {
		t.Fatalf("capabilities made %d Core search calls; want 0", n)
	}
}

func TestCapabilitiesEnabled(t *testing.T) {
	tests := []struct {
		name   string
		route  string
		mutate func(e *env)
		want   bool
	}{
		{"knowledge and everything usable", routeKey, nil, true},
		{"no knowledge configured", routeNone, nil, false},
		{"retrieval breaker open", routeKey, func(e *env) { e.ret.unusable = true }, false},
		{"catalog breaker open", routeKey, func(e *env) { e.cat.unusable = true }, false},
		{"a disabled KB does not disable the route", routeKey, func(e *env) { e.cat.kbs["faq"] = false }, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			if tc.mutate != nil {
				tc.mutate(e)
			}
			m := e.mustOK("capabilities", tokA, tc.route, "")
			if m["enabled"] != tc.want || m["supported"] != true {
				t.Fatalf("enabled %v supported %v; want %v true", m["enabled"], m["supported"], tc.want)
			}
		})
	}
}

func TestCapabilitiesCatalogDown(t *testing.T) {
	e := newEnv(t)
	before := e.mustOK("capabilities", tokA, routeKey, "")
	e.cat.down = true
	after := e.mustOK("capabilities", tokA, routeKey, "")
	if after["enabled"] != false || after["knowledge_scope_revision"] != before["knowledge_scope_revision"] {
		t.Fatalf("catalog down: got enabled %v revision %v; want false and the last known revision", after["enabled"], after["knowledge_scope_revision"])
	}
	if _, _, ke := e.call("capabilities", tokA, routeTwin, ""); ke == nil || ke.Status != 503 {
		t.Fatalf("catalog down, route never seen: got %v; want 503", ke)
	}
	if _, _, ke := e.call("search", tokA, routeKey, `{"query":"x"}`); ke == nil || ke.Code != protocol.CodeUnavailable {
		t.Fatalf("search with catalog down: got %v; want 503 knowledge_unavailable (no stale config for search)", ke)
	}
}

func TestScopeRevision(t *testing.T) {
	k := corefacts.KnowledgeConfig{KBIDs: []string{"a", "b"}, TopK: 5, MinScore: 0.35, Inject: "chunk", MaxDocs: 4}
	canonical := `{"inject":"chunk","kb_ids":["a","b"],"max_docs":4,"min_score":0.35,"page_boost":false,"protocol":"bailing.agent-knowledge.v1","route":"order-assistant","top_k":5}`
	if got := string(canonicalScope(routeKey, &k)); got != canonical {
		t.Fatalf("canonical form\n got  %s\n want %s", got, canonical)
	}
	sum := sha256.Sum256([]byte(canonical))
	if got := ScopeRevision(routeKey, &k); got != hex.EncodeToString(sum[:]) || len(got) != 64 {
		t.Fatalf("revision %s; want sha256 hex of the canonical form", got)
	}
	none := `{"knowledge":null,"protocol":"bailing.agent-knowledge.v1","route":"plain-route"}`
	if got := string(canonicalScope(routeNone, nil)); got != none {
		t.Fatalf("canonical form without knowledge\n got  %s\n want %s", got, none)
	}
	// Same config → same value (a copy, another Service); every field matters.
	k2 := k
	k2.KBIDs = []string{"a", "b"}
	if ScopeRevision(routeKey, &k) != ScopeRevision(routeKey, &k2) {
		t.Fatalf("equal configs give different revisions")
	}
	variants := map[string]func(c *corefacts.KnowledgeConfig){
		"kb order":   func(c *corefacts.KnowledgeConfig) { c.KBIDs = []string{"b", "a"} },
		"kb removed": func(c *corefacts.KnowledgeConfig) { c.KBIDs = []string{"a"} },
		"top_k":      func(c *corefacts.KnowledgeConfig) { c.TopK = 6 },
		"min_score":  func(c *corefacts.KnowledgeConfig) { c.MinScore = 0.36 },
		"inject":     func(c *corefacts.KnowledgeConfig) { c.Inject = "doc" },
		"max_docs":   func(c *corefacts.KnowledgeConfig) { c.MaxDocs = 5 },
		"page_boost": func(c *corefacts.KnowledgeConfig) { c.PageBoost = true },
	}
	seen := map[string]string{ScopeRevision(routeKey, &k): "base", ScopeRevision(routeNone, nil): "none", ScopeRevision(routeTwin, &k): "route"}
	if len(seen) != 3 {
		t.Fatalf("route key or knowledge presence does not change the revision")
	}
	for name, edit := range variants {
		c := k
		c.KBIDs = append([]string(nil), k.KBIDs...)
		edit(&c)
		rev := ScopeRevision(routeKey, &c)
		if prev, dup := seen[rev]; dup {
			t.Errorf("%s gives the same revision as %s", name, prev)
		}
		seen[rev] = name
	}
	e1, e2 := newEnv(t), newEnv(t)
	a := e1.mustOK("capabilities", tokA, routeKey, "")["knowledge_scope_revision"]
	b := e2.mustOK("capabilities", tokB, routeKey, "")["knowledge_scope_revision"]
	if a != b || a != ScopeRevision(routeKey, &defaultKBConfg) {
		t.Fatalf("replicas disagree: %v vs %v", a, b)
	}
}

// TestDelivery: the turn's delivery status and revision are decided here,
// final: a route the catalog does not know or has disabled is "disabled"
// with the revision of an empty configuration (the turn is forwarded and
// Core answers it), and the one error is 503 when no revision can be had.
func TestDelivery(t *testing.T) {
	tests := []struct {
		name    string
		route   string
		mutate  func(e *env)
		want    string
		wantRev string // "" = the route's own scope revision
		code    protocol.ErrorCode
	}{
		{"ok", routeKey, nil, protocol.StatusOK, "", ""},
		{"disabled", routeNone, nil, protocol.StatusDisabled, "", ""},
		{"partial", routeKey, func(e *env) { e.cat.kbs["faq"] = false }, protocol.StatusPartial, "", ""},
		{"kb missing partial", routeKey, func(e *env) { delete(e.cat.kbs, "policy") }, protocol.StatusPartial, "", ""},
		{"no kb enabled", routeKey, func(e *env) { e.cat.kbs = map[string]bool{} }, protocol.StatusUnavailable, "", ""},
		{"breaker open", routeKey, func(e *env) { e.ret.unusable = true }, protocol.StatusUnavailable, "", ""},
		{"catalog unusable", routeKey, func(e *env) { e.cat.unusable = true }, protocol.StatusUnavailable, "", ""},
		{"unknown route: disabled, forwarded", "ghost-route", nil, protocol.StatusDisabled, ScopeRevision("ghost-route", nil), ""},
		{"no route key: disabled (the edge refuses it before)", "BAD", nil, protocol.StatusDisabled, ScopeRevision("", nil), ""},
		{"disabled route: disabled, forwarded", "off-route", nil, protocol.StatusDisabled, ScopeRevision("off-route", nil), ""},
		{"catalog down nothing known: not forwarded", routeKey, func(e *env) { e.cat.down = true }, "", "", protocol.CodeUnavailable},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			if tc.mutate != nil {
				tc.mutate(e)
			}
			d, err := e.svc.Delivery(context.Background(), testkit.RouteKey(tc.route))
			if tc.code != "" {
				var ke *Error
				if !errors.As(err, &ke) || ke.Code != tc.code || ke.Status != 503 {
					t.Fatalf("got %+v, %v; want 503 %s", d, err, tc.code)
				}
				return
			}
			if err != nil || d.Status != tc.want {
				t.Fatalf("got %q, %v; want %q", d.Status, err, tc.want)
			}
			wantRev := tc.wantRev
			if wantRev == "" {
				wantRev = ScopeRevision(tc.route, e.cat.routes[tc.route].Knowledge)
			}
			if d.ScopeRevision != wantRev {
				t.Fatalf("revision %s; want %s", d.ScopeRevision, wantRev)
			}
			if n := len(e.ret.callList()); n != 0 {
				t.Fatalf("Delivery made %d Core search calls; want 0", n)
			}
		})
	}
	t.Run("catalog down after a success uses last known config", func(t *testing.T) {
		e := newEnv(t)
		d, _ := e.svc.Delivery(context.Background(), testkit.RouteKey(routeKey))
		e.cat.down = true
		d2, err := e.svc.Delivery(context.Background(), testkit.RouteKey(routeKey))
		if err != nil || d2.Status != protocol.StatusUnavailable || d2.ScopeRevision != d.ScopeRevision {
			t.Fatalf("got %q %q %v; want unavailable with the last revision", d2.Status, d2.ScopeRevision, err)
		}
	})
	t.Run("catalog down after a route without knowledge was seen", func(t *testing.T) {
		e := newEnv(t)
		_, _ = e.svc.Delivery(context.Background(), testkit.RouteKey(routeNone))
		e.cat.down = true
		d, err := e.svc.Delivery(context.Background(), testkit.RouteKey(routeNone))
		if err != nil || d.Status != protocol.StatusDisabled || d.ScopeRevision != ScopeRevision(routeNone, nil) {
			t.Fatalf("got %q %q %v; want disabled with the empty revision", d.Status, d.ScopeRevision, err)
		}
	})
}

func TestAuthenticate(t *testing.T) {
	e := newEnv(t)
	s, err := e.svc.Authenticate(context.Background(), tokA)
	if err != nil || s.SessionID != "sess-a" {
		t.Fatalf("got %+v %v; want session A", s, err)
	}
	tests := []struct {
		name   string
		auth   string
		mutate func(e *env)
		status int
	}{
		{"rejected", "Bearer bha_x", nil, 401},
		{"core down", tokA, func(e *env) { e.id.err = corefacts.ErrUnavailable }, 503},
		{"incomplete session", tokA, func(e *env) { e.id.sessions[tokA] = corefacts.Session{SessionID: "x"} }, 503},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			if tc.mutate != nil {
				tc.mutate(e)
			}
			_, err := e.svc.Authenticate(context.Background(), tc.auth)
			var ke *Error
			if !errors.As(err, &ke) || ke.Status != tc.status {
				t.Fatalf("got %v; want %d", err, tc.status)
			}
		})
	}
	t.Run("identity is asked on every request", func(t *testing.T) {
		e := newEnv(t)
		for i := 0; i < 3; i++ {
			e.mustOK("capabilities", tokA, routeKey, "")
		}
		if e.id.calls != 3 {
			t.Fatalf("got %d identity calls; want 3 (no caching)", e.id.calls)
		}
	})
}

func TestMetrics(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	e := newEnv(t, func(o *Options) { o.Registerer = reg })
	// A second Service on the same registry shares the collectors.
	if _, err := New(Options{Identity: e.id, Retriever: e.ret, Catalog: e.cat, Keys: testKeys(t), Registerer: reg}); err != nil {
		t.Fatalf("second Service on one registry: %v", err)
	}
	e.mustOK("search", tokA, routeKey, `{"query":"x"}`)
	e.call("read", tokA, routeKey, `{"ref":"knowledge:1"}`)
	e.call("capabilities", "Bearer nope", routeKey, "")
	e.id.sysInfo[routeKey] = &corefacts.CoreError{Status: 403, Code: "audience_not_allowed"}
	e.call("capabilities", tokA, routeKey, "")
	for _, tc := range []struct {
		endpoint string
		code     protocol.ErrorCode
		want     float64
	}{
		{"search", statusOK, 1},
		{"read", protocol.CodeReferenceInvalid, 1},
		{"capabilities", protocol.CodeUnauthorized, 1},
		{"capabilities", codeCoreGate, 1},
	} {
		got := testutil.ToFloat64(e.svc.m.requests.WithLabelValues(tc.endpoint, string(tc.code)))
		if got != tc.want {
			t.Errorf("requests_total{%s,%s} = %v; want %v", tc.endpoint, tc.code, got, tc.want)
		}
	}
	if got := testutil.ToFloat64(e.svc.m.kbCalls.WithLabelValues("ok")); got != 2 {
		t.Errorf("search_kb_calls_total{ok} = %v; want 2", got)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if !strings.HasPrefix(mf.GetName(), "knowledge_sidecar_") {
			t.Errorf("metric %s; want namespace knowledge_sidecar", mf.GetName())
		}
	}
	// nil registerer: no metrics, no panics.
	if newEnv(t).svc.m != nil {
		t.Errorf("nil Registerer built metrics; want none")
	}
}

// TestWithIdentity: a session held for the request's authorization answers
// Authenticate without asking Core; another authorization is still asked
// (and refused), and a context without one asks every time (SPEC §2).
func TestWithIdentity(t *testing.T) {
	e := newEnv(t)
	ctx := WithIdentity(context.Background(), tokA, sessionA)
	if sess, err := e.svc.Authenticate(ctx, tokA); err != nil || sess.SessionID != sessionA.SessionID || e.id.calls != 0 {
		t.Fatalf("held identity: %+v %v after %d identity calls; want session A, no call", sess, err, e.id.calls)
	}
	if _, err := e.svc.Authenticate(ctx, "Bearer stranger"); err == nil || e.id.calls != 1 {
		t.Fatalf("another authorization: %v after %d calls; want refused by Core", err, e.id.calls)
	}
	for range 2 {
		if _, err := e.svc.Authenticate(context.Background(), tokA); err != nil {
			t.Fatal(err)
		}
	}
	if e.id.calls != 3 {
		t.Errorf("%d identity calls; want one per Authenticate without a held identity", e.id.calls)
	}
}

// TestWithIdentityTokenPerFourCalls: the calls made under one held identity
// take one token of the session's rate limit per 4 calls (a near read's or a
// fetch's pages: docs/hosts.md); without it every call takes one.
func TestWithIdentityTokenPerFourCalls(t *testing.T) {
	e := newEnv(t, func(o *Options) { o.RateLimit, o.RateBurst = 0.001, 3 })
	search := func(ctx context.Context) error {
		_, err := e.svc.Search(ctx, tokA, testkit.RouteKey(routeKey), strings.NewReader(`{"query":"退款"}`))
		return err
	}
	held := WithIdentity(context.Background(), tokA, sessionA)
	for i := range 4 {
		if err := search(held); err != nil {
			t.Fatalf("held identity, call %d: %v; want all within the one token", i+1, err)
		}
	}
	if err := search(held); err != nil { // the fifth call takes a second token
		t.Fatalf("held identity, call 5: %v; want the burst's second token", err)
	}
	if err := search(context.Background()); err != nil {
		t.Fatalf("second request: %v; want the burst's third token", err)
	}
	var ke *Error
	if err := search(context.Background()); !errors.As(err, &ke) || ke.Code != protocol.CodeRateLimited {
		t.Fatalf("third request: %v; want rate_limited (the held calls took two tokens, not five)", err)
	}
}
