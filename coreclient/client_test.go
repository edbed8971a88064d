package coreclient_test

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bailinghub/knowledge-sidecar/breaker"
	"github.com/bailinghub/knowledge-sidecar/config"
	"github.com/bailinghub/knowledge-sidecar/coreclient"
	"github.com/bailinghub/knowledge-sidecar/corefacts"
	"github.com/bailinghub/knowledge-sidecar/hostclient/hostclienttest"
	"github.com/bailinghub/knowledge-sidecar/internal/fakecore"
	"github.com/bailinghub/knowledge-sidecar/internal/testkit"
)

const testServiceToken = "svc-0123456789-secret"

var (
	aliceToken = fakecore.Token("alice")
	aliceAuth  = "Bearer " + aliceToken
)

type env struct {
	core   *fakecore.Core
	srv    *httptest.Server
	client *coreclient.Client
	reg    *prometheus.Registry
	clock  *testkit.Clock
	t      testing.TB
}

func newEnv(t *testing.T, fo fakecore.Options, mutate func(*coreclient.Options)) *env {
	t.Helper()
	fo.ServiceToken = testServiceToken
	core := fakecore.New(fo)
	core.AddSession(aliceToken, corefacts.Session{
		SessionID: "s-1", ClientAppID: "app-1",
		Principal:     corefacts.Principal{ID: "user-42", Tenant: "t-7", Roles: []string{"manager"}, Audience: "internal"},
		OnBehalfOf:    "t-7:user-42",
		AllowedRoutes: []string{"orders"},
		ExpiresAt:     time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC),
	})
	core.SetRoute("orders", fakecore.GateAllowed)
	srv := httptest.NewServer(core)
	t.Cleanup(srv.Close)
	t.Cleanup(core.Close) // runs first: ends hanging requests
	e := &env{core: core, srv: srv, reg: prometheus.NewRegistry(), clock: testkit.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)), t: t}
	o := coreclient.Options{
		BaseURL:      srv.URL,
		ServiceToken: testServiceToken,
		Transport:    srv.Client().Transport,
		Timeout:      2 * time.Second,
		Metrics:      coreclient.NewMetrics(e.reg),
		Now:          e.clock.Now,
	}
	if mutate != nil {
		mutate(&o)
	}
	c, err := coreclient.NewClient(o)
	if err != nil {
		t.Fatal(err)
	}
	e.client = c
	return e
}

// assertClean fails if err's text reveals the address, a credential or Core's text.
func (e *env) assertClean(t *testing.T, err error) {
	t.Helper()
	if err == nil {
		return
	}
	u, _ := url.Parse(e.srv.URL)
	host, port, _ := net.SplitHostPort(u.Host)
	msg := err.Error()
	for _, secret := range []string{e.srv.URL, u.Host, host, ":" + port, aliceToken, testServiceToken, "知识库"} {
		if strings.Contains(msg, secret) {
			t.Errorf("error %q reveals %q", msg, secret)
		}
	}
}

func requests(e *env, op, outcome string) float64 {
	return testkit.Metric(e.t, e.reg, "knowledge_sidecar_core_requests_total", map[string]string{"op": op, "outcome": outcome})
}

func TestNewClientValidatesOptions(t *testing.T) {
	for _, base := range []string{"", "core:8080", "ftp://core", "http://user:pw@core", "http://core/?q=1", "/relative"} {
		if _, err := coreclient.NewClient(coreclient.Options{BaseURL: base}); err == nil {
			t.Errorf("base %q: got nil error; want a validation error", base)
		} else if base != "" && strings.Contains(err.Error(), base) {
			t.Errorf("base %q: error %q echoes the value", base, err)
		}
	}
	if _, err := coreclient.NewClient(coreclient.Options{BaseURL: "https://core.internal/prefix/"}); err != nil {
		t.Errorf("valid base: got %v; want nil", err)
	}
}

func TestSessionOK(t *testing.T) {
	e := newEnv(t, fakecore.Options{}, nil)
	s, err := e.client.Session(context.Background(), aliceAuth)
	if err != nil {
		t.Fatalf("got %v; want nil", err)
	}
	if s.SessionID != "s-1" || s.ClientAppID != "app-1" || s.Principal.ID != "user-42" || s.Principal.Tenant != "t-7" ||
		s.Principal.Audience != "internal" || len(s.Principal.Roles) != 1 || s.OnBehalfOf != "t-7:user-42" ||
		len(s.AllowedRoutes) != 1 || s.AllowedRoutes[0] != "orders" || !s.ExpiresAt.Equal(time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)) {
		t.Errorf("got %+v; want alice's session", s)
	}
	r, _ := e.core.LastRequest("/agent-auth/v1/session")
	if got := r.Header.Get("Authorization"); got != aliceAuth {
		t.Errorf("forwarded authorization got %q; want the caller's verbatim", got)
	}
	if got := requests(e, coreclient.OpSession, coreclient.OutcomeOK); got != 1 {
		t.Errorf("requests{session,ok} got %v; want 1", got)
	}
}

func TestSessionErrors(t *testing.T) {
	big := `{"session_id":"s","client_app_id":"a","principal":{"id":"p"},"pad":"` + strings.Repeat("x", 70<<10) + `"}`
	tests := []struct {
		name      string
		auth      string
		fault     *fakecore.Fault
		want      error
		wantCalls int
	}{
		{"empty header", "", nil, corefacts.ErrUnauthorized, 0},
		{"header with newline", "Bearer a\nb", nil, corefacts.ErrUnauthorized, 0},
		{"unknown token", "Bearer " + fakecore.Token("mallory"), nil, corefacts.ErrUnauthorized, 1},
		{"5xx", aliceAuth, &fakecore.Fault{Status: 502}, corefacts.ErrUnavailable, 1},
		{"missing fields", aliceAuth, &fakecore.Fault{Status: 200, Body: []byte(`{"session_id":"s","principal":{}}`)}, corefacts.ErrUnavailable, 1},
		{"not json", aliceAuth, &fakecore.Fault{Status: 200, Body: []byte(`<html>`)}, corefacts.ErrUnavailable, 1},
		{"too large", aliceAuth, &fakecore.Fault{Status: 200, Body: []byte(big)}, corefacts.ErrUnavailable, 1},
		{"403", aliceAuth, &fakecore.Fault{Status: 403, Body: []byte(`{"error":"forbidden"}`)}, corefacts.ErrUnavailable, 1},
		{"reset", aliceAuth, &fakecore.Fault{Reset: true}, corefacts.ErrUnavailable, 1},
		{"over 4 KiB", "Bearer bha_" + strings.Repeat("a", 4<<10), nil, corefacts.ErrUnauthorized, 0},
		{"not Core's scheme", "Basic " + fakecore.Token("alice"), nil, corefacts.ErrUnauthorized, 0},
		{"not Core's token", "Bearer " + strings.Repeat("x", 60), nil, corefacts.ErrUnauthorized, 0},
		{"short token", "Bearer bha_short", nil, corefacts.ErrUnauthorized, 0},
		{"two spaces", "Bearer  " + fakecore.Token("alice"), nil, corefacts.ErrUnauthorized, 0},
		{"431 of Core's front", aliceAuth, &fakecore.Fault{Status: 431, Body: []byte{}}, corefacts.ErrRequestRefused, 1},
		{"400 of a front", aliceAuth, &fakecore.Fault{Status: 400, Body: []byte(`Bad Request`)}, corefacts.ErrRequestRefused, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, fakecore.Options{}, nil)
			if tt.fault != nil {
				e.core.SetFault("/agent-auth/", *tt.fault)
			}
			_, err := e.client.Session(context.Background(), tt.auth)
			if !errors.Is(err, tt.want) {
				t.Errorf("got %v; want %v", err, tt.want)
			}
			if got := e.core.Calls("/"); got < tt.wantCalls || (tt.wantCalls == 0 && got != 0) {
				t.Errorf("core calls got %d; want %d", got, tt.wantCalls)
			}
			e.assertClean(t, err)
		})
	}
}

func TestTimeoutAndCancellation(t *testing.T) {
	e := newEnv(t, fakecore.Options{}, func(o *coreclient.Options) {
		o.Timeout = 50 * time.Millisecond
		o.Identity = breaker.Settings{Failures: 1}
	})
	e.core.SetFault("/agent-auth/", fakecore.Fault{Hang: true})

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := e.client.Session(ctx, aliceAuth)
	if !errors.Is(err, context.Canceled) || !errors.Is(err, corefacts.ErrUnavailable) {
		t.Errorf("caller cancelled: got %v; want context.Canceled and ErrUnavailable", err)
	}
	if !e.client.IdentityUsable() {
		t.Error("identity breaker opened on a caller cancellation; want it closed")
	}
	if got := requests(e, coreclient.OpSession, coreclient.OutcomeCanceled); got != 1 {
		t.Errorf("requests{session,canceled} got %v; want 1", got)
	}

	_, err = e.client.Session(context.Background(), aliceAuth)
	if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, corefacts.ErrUnavailable) {
		t.Errorf("own timeout: got %v; want DeadlineExceeded and ErrUnavailable", err)
	}
	e.assertClean(t, err)
	if e.client.IdentityUsable() {
		t.Error("identity breaker closed after a Core timeout with Failures=1; want open")
	}
}

func TestDeadCore(t *testing.T) {
	addr := strings.TrimPrefix(hostclienttest.RefusedURL(t), "http://") // refuses connections for the whole test
	c, err := coreclient.NewClient(coreclient.Options{BaseURL: "http://" + addr, ServiceToken: testServiceToken})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.SearchKB(context.Background(), "faq", "q", 5)
	if !errors.Is(err, corefacts.ErrUnavailable) {
		t.Errorf("got %v; want ErrUnavailable", err)
	}
	if strings.Contains(err.Error(), addr) || strings.Contains(err.Error(), "127.0.0.1") {
		t.Errorf("error %q reveals the address", err)
	}
}

func TestSystemInfo(t *testing.T) {
	tests := []struct {
		name      string
		opts      fakecore.Options
		route     string
		gate      string
		auth      string
		fault     *fakecore.Fault
		want      error
		wantCore  *corefacts.CoreError
		wantCalls int
	}{
		{name: "allowed", opts: fakecore.Options{SystemInfo: true}, route: "orders", auth: aliceAuth, wantCalls: 1},
		{name: "unauthorized", opts: fakecore.Options{SystemInfo: true}, route: "orders", auth: "Bearer " + fakecore.Token("x"), want: corefacts.ErrUnauthorized, wantCalls: 1},
		{name: "route not allowed", opts: fakecore.Options{SystemInfo: true}, route: "orders", gate: fakecore.GateRouteNotAllowed, auth: aliceAuth,
			wantCore: &corefacts.CoreError{Status: 403, Code: "route_not_allowed", Message: "The Agent Session is not allowed to use this route."}, wantCalls: 1},
		{name: "audience", opts: fakecore.Options{SystemInfo: true}, route: "orders", gate: fakecore.GateAudienceNotAllowed, auth: aliceAuth,
			wantCore: &corefacts.CoreError{Status: 403, Code: "audience_not_allowed", Message: "The business identity is not allowed to use this route."}, wantCalls: 1},
		{name: "unknown route", opts: fakecore.Options{SystemInfo: true}, route: "ghost", auth: aliceAuth,
			wantCore: &corefacts.CoreError{Status: 404, Code: "route_unavailable", Message: "The configured route is unavailable."}, wantCalls: 1},
		{name: "malformed route is not sent", opts: fakecore.Options{SystemInfo: true}, route: "Bad/../x", auth: aliceAuth,
			wantCore: &corefacts.CoreError{Status: 404, Code: "route_unavailable", Message: "The configured route is unavailable."}, wantCalls: 0},
		{name: "old core", opts: fakecore.Options{}, route: "orders", auth: aliceAuth, want: corefacts.ErrEndpointAbsent, wantCalls: 1},
		{name: "5xx", opts: fakecore.Options{SystemInfo: true}, route: "orders", auth: aliceAuth, fault: &fakecore.Fault{Status: 503}, want: corefacts.ErrUnavailable, wantCalls: 1},
		{name: "4xx without agent body", opts: fakecore.Options{SystemInfo: true}, route: "orders", auth: aliceAuth, fault: &fakecore.Fault{Status: 404, Body: []byte(`nope`)}, want: corefacts.ErrUnavailable, wantCalls: 1},
		{name: "empty header", opts: fakecore.Options{SystemInfo: true}, route: "orders", auth: "", want: corefacts.ErrUnauthorized, wantCalls: 0},
		{name: "header over 4 KiB", opts: fakecore.Options{SystemInfo: true}, route: "orders", auth: "Bearer bha_" + strings.Repeat("a", 4<<10), want: corefacts.ErrUnauthorized, wantCalls: 0},
		{name: "431 without agent body", opts: fakecore.Options{SystemInfo: true}, route: "orders", auth: aliceAuth, fault: &fakecore.Fault{Status: 431, Body: []byte{}}, want: corefacts.ErrRequestRefused, wantCalls: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, tt.opts, nil)
			if tt.gate != "" {
				e.core.SetRoute(tt.route, tt.gate)
			}
			if tt.fault != nil {
				e.core.SetFault("/agent-api/", *tt.fault)
			}
			err := e.client.SystemInfo(context.Background(), tt.auth, testkit.RouteKey(tt.route))
			switch {
			case tt.wantCore != nil:
				var ce *corefacts.CoreError
				if !errors.As(err, &ce) || *ce != *tt.wantCore {
					t.Errorf("got %v; want %+v", err, tt.wantCore)
				}
			case tt.want == nil && err != nil:
				t.Errorf("got %v; want nil", err)
			case tt.want != nil && !errors.Is(err, tt.want):
				t.Errorf("got %v; want %v", err, tt.want)
			}
			if got := e.core.Calls("/"); got != tt.wantCalls {
				t.Errorf("core calls got %d; want %d", got, tt.wantCalls)
			}
			if tt.auth != "" && tt.wantCalls > 0 {
				if r, _ := e.core.LastRequest("/agent-api/"); r.Header.Get("Authorization") != tt.auth {
					t.Errorf("forwarded authorization got %q; want the caller's", r.Header.Get("Authorization"))
				}
			}
			e.assertClean(t, err)
		})
	}
}

func TestSystemInfoAbsenceIsRemembered(t *testing.T) {
	e := newEnv(t, fakecore.Options{}, func(o *coreclient.Options) { o.ProbeInterval = time.Minute })
	for i := range 3 {
		if err := e.client.SystemInfo(context.Background(), aliceAuth, testkit.RouteKey("orders")); !errors.Is(err, corefacts.ErrEndpointAbsent) {
			t.Fatalf("call %d: got %v; want ErrEndpointAbsent", i, err)
		}
	}
	if got := e.core.Calls("/agent-api/"); got != 1 {
		t.Errorf("core calls got %d; want 1 (absence remembered)", got)
	}
	e.clock.Advance(time.Minute + time.Second)
	_ = e.client.SystemInfo(context.Background(), aliceAuth, testkit.RouteKey("orders"))
	if got := e.core.Calls("/agent-api/"); got != 2 {
		t.Errorf("core calls after the interval got %d; want 2", got)
	}
}

func searchEnv(t *testing.T, mutate func(*coreclient.Options)) *env {
	return searchEnvWith(t, fakecore.Options{}, mutate)
}

func searchEnvWith(t *testing.T, fo fakecore.Options, mutate func(*coreclient.Options)) *env {
	e := newEnv(t, fo, mutate)
	e.core.AddDoc("faq", 1, "退款规则", "退款窗口为七天。超过窗口不能退款。")
	e.core.AddDoc("faq", 2, "Shipping", "Parcels ship within two days.")
	e.core.AddDoc("other", 3, "Other", "退款 other kb")
	e.core.AddDoc("off", 4, "Off", "退款")
	e.core.DisableKB("off")
	return e
}

func TestSearchKB(t *testing.T) {
	e := searchEnv(t, nil)
	hits, err := e.client.SearchKB(context.Background(), "faq", "退款窗口", 5)
	if err != nil {
		t.Fatalf("got %v; want nil", err)
	}
	if len(hits) != 2 || hits[0] != (corefacts.Hit{KBID: "faq", DocID: 1, Seq: 0, Title: "退款规则", Content: "退款窗口为七天。超过窗口不能退款。", Score: 1}) || hits[1].DocID != 2 {
		t.Errorf("hits got %+v; want doc 1's chunk with score 1, then doc 2's (unfiltered)", hits)
	}
	r, _ := e.core.LastRequest("/kb/search")
	if got := r.Header.Get("Authorization"); got != "Bearer "+testServiceToken {
		t.Errorf("authorization got %q; want the service token", got)
	}
	if strings.Contains(string(r.Body), aliceToken) || strings.Contains(r.Header.Get("Authorization"), "bha_") {
		t.Error("the caller's token reached /kb/search")
	}
	var body map[string]any
	if err := json.Unmarshal(r.Body, &body); err != nil {
		t.Fatal(err)
	}
	if ids, _ := json.Marshal(body["kb_ids"]); string(ids) != `["faq"]` || body["query"] != "退款窗口" || body["top_k"] != float64(5) || body["min_score"] != float64(-1) {
		t.Errorf("request body got %s; want kb_ids [faq], query, top_k 5, min_score -1", r.Body)
	}
	for _, path := range []string{"/agent-auth/", "/agent-api/"} {
		if got := e.core.Calls(path); got != 0 {
			t.Errorf("calls to %s got %d; want 0", path, got)
		}
	}
}

func TestServiceTokenOnlyOnKBSearch(t *testing.T) {
	e := searchEnv(t, func(o *coreclient.Options) {})
	_, _ = e.client.Session(context.Background(), aliceAuth)
	_ = e.client.SystemInfo(context.Background(), aliceAuth, testkit.RouteKey("orders"))
	_, _, _ = e.client.ProbeCapabilities(context.Background(), aliceAuth, testkit.RouteKey("orders"))
	for _, p := range []string{"/agent-auth/v1/session", "/agent-api/v1/workspaces/orders/system-info", "/agent-api/v1/workspaces/orders/knowledge/capabilities"} {
		r, ok := e.core.LastRequest(p)
		if !ok {
			t.Fatalf("%s: no request recorded", p)
		}
		for k, vs := range r.Header {
			for _, v := range vs {
				if strings.Contains(v, testServiceToken) {
					t.Errorf("%s: header %s carries the service token", p, k)
				}
			}
		}
	}
}

// Core is always asked for the unfiltered top k (min_score -1): hits of any
// score come back, the caller applies the route's threshold.
func TestSearchKBUnfiltered(t *testing.T) {
	e := searchEnv(t, nil)
	// "ship" is 1 of 4 query terms: score 0.25, below Core's 0.35 default;
	// doc 1 shares no term: score 0, still in the top k.
	hits, err := e.client.SearchKB(context.Background(), "faq", "ship refund policy now", 5)
	if err != nil {
		t.Fatal(err)
	}
	if len(hits) != 2 || hits[0].DocID != 2 || hits[0].Score != 0.25 || hits[1].DocID != 1 || hits[1].Score != 0 {
		t.Errorf("hits got %+v; want doc 2 at 0.25 and doc 1 at 0 (nothing filtered)", hits)
	}
	r, _ := e.core.LastRequest("/kb/search")
	var body struct {
		MinScore float64 `json:"min_score"`
	}
	_ = json.Unmarshal(r.Body, &body)
	if body.MinScore != -1 {
		t.Errorf("sent min_score got %v; want -1 (Core's filter off)", body.MinScore)
	}
}

func TestSearchKBErrors(t *testing.T) {
	tests := []struct {
		name    string
		kb      string
		token   string
		fault   *fakecore.Fault
		want    error
		outcome string
	}{
		{name: "disabled kb is empty, not an error", kb: "off", outcome: coreclient.OutcomeOK},
		{name: "deleted kb", kb: "ghost", want: corefacts.ErrKBMissing, outcome: coreclient.OutcomeClientError},
		{name: "kb not listed", kb: "faq", fault: &fakecore.Fault{Status: 200, Body: []byte(`{"kb_ids":[],"hits":[]}`)}, want: corefacts.ErrKBMissing, outcome: coreclient.OutcomeClientError},
		{name: "documented kb_id only", kb: "faq", fault: &fakecore.Fault{Status: 200, Body: []byte(`{"kb_id":"faq","hits":[]}`)}, want: corefacts.ErrKBMissing, outcome: coreclient.OutcomeClientError},
		{name: "service token refused", kb: "faq", token: "wrong", want: corefacts.ErrUnavailable, outcome: coreclient.OutcomeUnavailable},
		{name: "403", kb: "faq", fault: &fakecore.Fault{Status: 403, Body: []byte(`{"error":"执行器令牌只能用于执行器通道 /executor/*"}`)}, want: corefacts.ErrUnavailable, outcome: coreclient.OutcomeUnavailable},
		{name: "rate limited", kb: "faq", fault: &fakecore.Fault{Status: 429, Body: []byte(`{"error":"超出限速（60/分钟）"}`)}, want: corefacts.ErrRateLimited, outcome: coreclient.OutcomeRateLimited},
		{name: "other 400", kb: "faq", fault: &fakecore.Fault{Status: 400, Body: []byte(`{"error":"知识库需要 mysql 后端"}`)}, want: corefacts.ErrRequestRefused, outcome: coreclient.OutcomeClientError},
		{name: "413", kb: "faq", fault: &fakecore.Fault{Status: 413, Body: []byte(`{"error":"payload too large","max_bytes":1048576}`)}, want: corefacts.ErrRequestRefused, outcome: coreclient.OutcomeClientError},
		{name: "431", kb: "faq", fault: &fakecore.Fault{Status: 431, Body: []byte{}}, want: corefacts.ErrRequestRefused, outcome: coreclient.OutcomeClientError},
		{name: "5xx", kb: "faq", fault: &fakecore.Fault{Status: 500}, want: corefacts.ErrUnavailable, outcome: coreclient.OutcomeUnavailable},
		{name: "bad hits", kb: "faq", fault: &fakecore.Fault{Status: 200, Body: []byte(`{"kb_ids":["faq"],"hits":[{"doc_id":"x"}]}`)}, want: corefacts.ErrUnavailable, outcome: coreclient.OutcomeUnavailable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := searchEnv(t, func(o *coreclient.Options) {
				if tt.token != "" {
					o.ServiceToken = tt.token
				}
			})
			if tt.fault != nil {
				e.core.SetFault("/kb/search", *tt.fault)
			}
			hits, err := e.client.SearchKB(context.Background(), tt.kb, "退款", 5)
			if tt.want == nil {
				if err != nil || len(hits) != 0 {
					t.Errorf("got %v, %d hits; want nil, none", err, len(hits))
				}
			} else if !errors.Is(err, tt.want) {
				t.Errorf("got %v; want %v", err, tt.want)
			}
			if errors.Is(tt.want, corefacts.ErrKBMissing) && !errors.Is(err, corefacts.ErrNotFound) {
				t.Errorf("got %v; want it to wrap ErrNotFound", err)
			}
			if got := requests(e, coreclient.OpKBSearch, tt.outcome); got != 1 {
				t.Errorf("requests{kb_search,%s} got %v; want 1", tt.outcome, got)
			}
			e.assertClean(t, err)
		})
	}
}

func TestSearchKBDropsOtherKBsHits(t *testing.T) {
	e := searchEnv(t, nil)
	e.core.SetFault("/kb/search", fakecore.Fault{Status: 200, Body: []byte(
		`{"kb_ids":["faq"],"hits":[{"score":0.9,"content":"a","doc_id":1,"title":"t","seq":2,"kb_id":"faq"},{"score":0.8,"content":"b","doc_id":7,"title":"u","seq":0,"kb_id":"other"}],"extra":1}`)})
	hits, err := e.client.SearchKB(context.Background(), "faq", "q", 5)
	if err != nil {
		t.Fatal(err)
	}
	if len(hits) != 1 || hits[0].DocID != 1 || hits[0].Seq != 2 || hits[0].KBID != "faq" {
		t.Errorf("hits got %+v; want only faq's doc 1", hits)
	}
}

func TestRetrievalBreakerOpenMeansNoCoreCalls(t *testing.T) {
	e := searchEnv(t, func(o *coreclient.Options) {
		o.Retrieval = breaker.Settings{Failures: 2, OpenTimeout: time.Hour}
	})
	e.core.SetFault("/kb/search", fakecore.Fault{Status: 503})
	for range 2 {
		if _, err := e.client.SearchKB(context.Background(), "faq", "q", 5); !errors.Is(err, corefacts.ErrUnavailable) {
			t.Fatalf("got %v; want ErrUnavailable", err)
		}
	}
	if e.client.Usable() {
		t.Fatal("usable got true after 2 failures; want false")
	}
	before := e.core.Calls("/kb/search")
	for range 5 {
		_, err := e.client.SearchKB(context.Background(), "faq", "q", 5)
		if !errors.Is(err, corefacts.ErrBreakerOpen) || !errors.Is(err, corefacts.ErrUnavailable) {
			t.Errorf("got %v; want ErrBreakerOpen (wrapping ErrUnavailable)", err)
		}
		e.assertClean(t, err)
	}
	if got := e.core.Calls("/kb/search") - before; got != 0 {
		t.Errorf("core calls while open got %d; want 0", got)
	}
	if got := requests(e, coreclient.OpKBSearch, coreclient.OutcomeOpen); got != 5 {
		t.Errorf("requests{kb_search,open} got %v; want 5", got)
	}
	// The identity breaker is separate.
	if _, err := e.client.Session(context.Background(), aliceAuth); err != nil {
		t.Errorf("session while retrieval is open: got %v; want nil", err)
	}
}

func TestKBMissingDoesNotTripBreaker(t *testing.T) {
	e := searchEnv(t, func(o *coreclient.Options) { o.Retrieval = breaker.Settings{Failures: 1} })
	for range 3 {
		if _, err := e.client.SearchKB(context.Background(), "ghost", "q", 5); !errors.Is(err, corefacts.ErrKBMissing) {
			t.Fatalf("got %v; want ErrKBMissing", err)
		}
	}
	if !e.client.Usable() {
		t.Error("usable got false after KB-missing answers; want true")
	}
}

func TestProbeCapabilities(t *testing.T) {
	tests := []struct {
		name   string
		opts   fakecore.Options
		auth   string
		fault  *fakecore.Fault
		status int
	}{
		{name: "legacy core", auth: aliceAuth, status: 404},
		{name: "native core", opts: fakecore.Options{Native: true}, auth: aliceAuth, status: 200},
		{name: "unauthorized is relayed", auth: "Bearer " + fakecore.Token("x"), status: 401},
		{name: "no header is relayed", status: 401},
		{name: "native gate 404 is relayed", opts: fakecore.Options{Native: true}, auth: aliceAuth, fault: &fakecore.Fault{Status: 404, Body: []byte(`{"error":"route_unavailable","message":"The configured route is unavailable."}`)}, status: 404},
		{name: "405", auth: aliceAuth, fault: &fakecore.Fault{Status: 405, Body: []byte(`{"error":"method_not_allowed"}`)}, status: 405},
		{name: "501", auth: aliceAuth, fault: &fakecore.Fault{Status: 501, Body: []byte(`{}`)}, status: 501},
		{name: "403", auth: aliceAuth, fault: &fakecore.Fault{Status: 403, Body: []byte(`{"error":"route_not_allowed"}`)}, status: 403},
		{name: "503", auth: aliceAuth, fault: &fakecore.Fault{Status: 503}, status: 503},
		{name: "unknown 200", auth: aliceAuth, fault: &fakecore.Fault{Status: 200, Body: []byte(`{"schema_version":"something.else"}`)}, status: 200},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, tt.opts, func(o *coreclient.Options) { o.Identity = breaker.Settings{Failures: 1} })
			if tt.fault != nil {
				e.core.SetFault("/agent-api/", *tt.fault)
			}
			status, _, err := e.client.ProbeCapabilities(context.Background(), tt.auth, testkit.RouteKey("orders"))
			if err != nil {
				t.Fatalf("got %v; want a probe", err)
			}
			if status != tt.status {
				t.Errorf("got status %d; want Core's %d", status, tt.status)
			}
			r, _ := e.core.LastRequest("/agent-api/")
			if r.Path != "/agent-api/v1/workspaces/orders/knowledge/capabilities" || r.Header.Get("Authorization") != tt.auth {
				t.Errorf("forwarded %s with %q; want the capabilities path with the caller's header", r.Path, r.Header.Get("Authorization"))
			}
			if !e.client.IdentityUsable() {
				t.Error("a probe moved the identity breaker; want probes outside breakers")
			}
		})
	}
	e := newEnv(t, fakecore.Options{}, nil)
	e.core.SetFault("/agent-api/", fakecore.Fault{Reset: true})
	_, _, err := e.client.ProbeCapabilities(context.Background(), aliceAuth, testkit.RouteKey("orders"))
	if !errors.Is(err, corefacts.ErrUnavailable) {
		t.Errorf("reset: got %v; want ErrUnavailable", err)
	}
	e.assertClean(t, err)
}

// Compile-time check against the shape of knowledge.Identity and
// knowledge.Retriever (not imported, so this package's tests do not depend on
// package knowledge compiling).
var _ interface {
	Session(context.Context, string) (corefacts.Session, error)
	SystemInfo(context.Context, string, corefacts.RouteKey) error
	SearchKB(context.Context, string, string, int) ([]corefacts.Hit, error)
	Usable() bool
} = (*coreclient.Client)(nil)

// The Core client's transport takes its settings from config.Defaults()
// unless given; it carries bearers and the service token, so an
// HTTP(S)_PROXY in the environment must never see them.
func TestNewTransport(t *testing.T) {
	d := config.Defaults()
	tr := coreclient.NewTransport(coreclient.TransportOptions{})
	if tr.ResponseHeaderTimeout != d.Core.Timeout || tr.MaxIdleConnsPerHost != d.Proxy.MaxIdleConnsPerHost || tr.MaxIdleConns < tr.MaxIdleConnsPerHost {
		t.Errorf("defaults: got response-header %v, idle %d/host of %d; want %v, %d", tr.ResponseHeaderTimeout, tr.MaxIdleConnsPerHost, tr.MaxIdleConns, d.Core.Timeout, d.Proxy.MaxIdleConnsPerHost)
	}
	if tr.Proxy != nil {
		t.Error("got a Proxy func on the Core transport; want nil (no environment proxy)")
	}
	if !tr.DisableCompression {
		t.Error("got transparent compression; want none (Core's answers read as sent)")
	}
	tr = coreclient.NewTransport(coreclient.TransportOptions{DialTimeout: time.Second, ResponseHeaderTimeout: 2 * time.Second, MaxIdleConnsPerHost: 8})
	if tr.ResponseHeaderTimeout != 2*time.Second || tr.MaxIdleConnsPerHost != 8 {
		t.Errorf("options: got response-header %v, idle %d/host; want 2s, 8", tr.ResponseHeaderTimeout, tr.MaxIdleConnsPerHost)
	}
}

// TestRateLimitDoesNotTripBreaker: Core's 429 (its per-client limit on our
// credential, here the fake Core's own bucket) is ErrRateLimited, not
// ErrUnavailable; it is counted as rate_limited and never opens the breaker.
func TestRateLimitDoesNotTripBreaker(t *testing.T) {
	e := searchEnv(t, func(o *coreclient.Options) { o.Retrieval = breaker.Settings{Failures: 1} })
	e.core.SetRateLimit(1)
	if _, err := e.client.SearchKB(context.Background(), "faq", "退款", 5); err != nil {
		t.Fatalf("first call: got %v; want nil", err)
	}
	for i := range 3 {
		_, err := e.client.SearchKB(context.Background(), "faq", "退款", 5)
		if !errors.Is(err, corefacts.ErrRateLimited) || errors.Is(err, corefacts.ErrUnavailable) {
			t.Fatalf("call %d: got %v; want ErrRateLimited, not ErrUnavailable", i+2, err)
		}
		e.assertClean(t, err)
	}
	if !e.client.Usable() {
		t.Error("usable got false after 429 answers; want true (the breaker stays closed)")
	}
	if got := requests(e, coreclient.OpKBSearch, coreclient.OutcomeRateLimited); got != 3 {
		t.Errorf("requests{kb_search,rate_limited} got %v; want 3", got)
	}
	if got := e.core.Calls("/kb/search"); got != 4 {
		t.Errorf("core calls got %d; want 4 (none refused by a breaker)", got)
	}
}

// TestSearchKBOtherSpelling: Core echoes the id as sent and matches it
// case-insensitively; the client accepts its echo either way.
func TestSearchKBOtherSpelling(t *testing.T) {
	e := searchEnv(t, nil)
	hits, err := e.client.SearchKB(context.Background(), "FAQ", "退款窗口", 5)
	if err != nil || len(hits) != 2 || hits[0].KBID != "FAQ" || hits[0].DocID != 1 {
		t.Fatalf("got %+v, %v; want doc 1 under FAQ", hits, err)
	}
	r, _ := e.core.LastRequest("/kb/search")
	if !strings.Contains(string(r.Body), `"kb_ids":["FAQ"]`) {
		t.Errorf("request body got %s; want the id as given", r.Body)
	}
}

// TestRefusedRequestsDoNotTripBreakers: answers Core's HTTP front gives to
// a request the caller shaped (431 to long headers, 400/413 to a body) are
// ErrRequestRefused, counted client_error, and move neither breaker — even
// with Failures: 1, many of them leave both closed.
func TestRefusedRequestsDoNotTripBreakers(t *testing.T) {
	e := searchEnvWith(t, fakecore.Options{MaxHeaderSize: 2 << 10}, func(o *coreclient.Options) {
		o.Identity = breaker.Settings{Failures: 1, OpenTimeout: time.Hour}
		o.Retrieval = breaker.Settings{Failures: 1, OpenTimeout: time.Hour}
	})
	// A bearer of Core's shape under the sidecar's 4 KiB bound, over a
	// small front bound: Core's front answers 431 itself.
	long := "Bearer " + fakecore.Token("alice") + strings.Repeat("a", 3<<10)
	for range 5 {
		if _, err := e.client.Session(context.Background(), long); !errors.Is(err, corefacts.ErrRequestRefused) || !errors.Is(err, corefacts.ErrUnauthorized) {
			t.Fatalf("session with a refused header: got %v; want ErrRequestRefused wrapping ErrUnauthorized", err)
		}
	}
	e.core.SetFault("/kb/search", fakecore.Fault{Status: 413, Body: []byte(`{"error":"payload too large","max_bytes":1048576}`)})
	for range 5 {
		if _, err := e.client.SearchKB(context.Background(), "faq", "q", 5); !errors.Is(err, corefacts.ErrRequestRefused) || errors.Is(err, corefacts.ErrUnavailable) {
			t.Fatalf("search refused: got %v; want ErrRequestRefused, not ErrUnavailable", err)
		}
	}
	if !e.client.IdentityUsable() || !e.client.Usable() {
		t.Fatalf("breakers: identity usable %v, retrieval usable %v; want both closed", e.client.IdentityUsable(), e.client.Usable())
	}
	if got := requests(e, coreclient.OpSession, coreclient.OutcomeClientError); got != 5 {
		t.Errorf("requests{session,client_error} got %v; want 5", got)
	}
	if got := e.core.HeaderRefusals(); got != 5 {
		t.Errorf("Core's front refused %d requests; want 5", got)
	}
	// The same client still authenticates a proper bearer.
	if _, err := e.client.Session(context.Background(), aliceAuth); err != nil {
		t.Errorf("session after the refusals: got %v; want nil", err)
	}
}
