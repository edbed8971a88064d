package mcpauth_test

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/bailinghub/knowledge-sidecar/coreclient"
	"github.com/bailinghub/knowledge-sidecar/corefacts"
	"github.com/bailinghub/knowledge-sidecar/internal/fakecore"
	"github.com/bailinghub/knowledge-sidecar/mcpauth"
)

const (
	appID       = "mcp-hosts"
	issuer      = "https://kb.example.com"
	resource    = issuer + "/agent-api/v1/workspaces/orders/knowledge/mcp"
	verifier    = "verifier-0123456789-0123456789-0123456789-abcdef"
	clientToken = "client-token-of-the-business-system"
)

var host = netip.MustParseAddr("203.0.113.7")

func challenge(v string) string {
	s := sha256.Sum256([]byte(v))
	return base64.RawURLEncoding.EncodeToString(s[:])
}

type world struct {
	core    *fakecore.Core
	coreURL string
	page    *fakecore.Consent
	svc     *mcpauth.Service
	seen    map[[2]string]int
}

func newWorld(t *testing.T, mutate func(*mcpauth.Options)) *world {
	t.Helper()
	c := fakecore.New(fakecore.Options{})
	srv := httptest.NewServer(c)
	t.Cleanup(srv.Close)
	t.Cleanup(c.Close)
	page := fakecore.NewConsent(fakecore.ConsentOptions{CoreURL: srv.URL, ClientToken: clientToken,
		Principal: corefacts.Principal{ID: "user-42"}, OnBehalfOf: "t:user-42", Decision: "approve"})
	biz := httptest.NewServer(page)
	t.Cleanup(biz.Close)
	c.AddAuthClient(fakecore.AuthClient{AppID: appID, AuthorizeURL: biz.URL + "/consent",
		AllowedRoutes: []string{"orders", "billing"}, Token: clientToken})
	cc, err := coreclient.NewClient(coreclient.Options{BaseURL: srv.URL, Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	w := &world{core: c, coreURL: srv.URL, page: page, seen: map[[2]string]int{}}
	o := mcpauth.Options{Core: cc, ClientAppID: appID, Issuer: issuer,
		Served:  func(r string) bool { return r == "orders" || r == "billing" },
		Observe: func(e, o string) { w.seen[[2]string{e, o}]++ }}
	if mutate != nil {
		mutate(&o)
	}
	if w.svc, err = mcpauth.New(o); err != nil {
		t.Fatal(err)
	}
	return w
}

func authorizeQuery(mod func(url.Values)) string {
	q := url.Values{"response_type": {"code"}, "client_id": {appID}, "redirect_uri": {"http://localhost:33418/callback"},
		"code_challenge": {challenge(verifier)}, "code_challenge_method": {"S256"}, "state": {"host-state-1"},
		"resource": {resource}, "scope": {"anything"}}
	if mod != nil {
		mod(q)
	}
	return q.Encode()
}

func (w *world) do(endpoint, query, ct, body string) mcpauth.Answer {
	return w.svc.Handle(context.Background(), mcpauth.Request{Endpoint: endpoint, RawQuery: query, ContentType: ct,
		Body: []byte(body), Client: host})
}

func jsonOf(t *testing.T, a mcpauth.Answer) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(a.JSON, &m); err != nil {
		t.Fatalf("answer %d is not JSON: %q", a.Status, a.JSON)
	}
	return m
}

// follow sends the browser from the business page to the callback (the
// consent page decides on GET) and returns the callback Core sent it to.
func follow(t *testing.T, location string) *url.URL {
	t.Helper()
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	res, err := client.Get(location)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	u, err := url.Parse(res.Header.Get("Location"))
	if res.StatusCode != http.StatusSeeOther || err != nil {
		t.Fatalf("consent page: got %d; want 303", res.StatusCode)
	}
	return u
}

func TestMetadata(t *testing.T) {
	w := newWorld(t, nil)
	a := w.do(mcpauth.EndpointMetadata, "", "", "")
	m := jsonOf(t, a)
	if a.Status != 200 || m["issuer"] != issuer || m["token_endpoint"] != issuer+"/oauth/token" ||
		m["authorization_endpoint"] != issuer+"/oauth/authorize" || m["registration_endpoint"] != issuer+"/oauth/register" ||
		m["revocation_endpoint"] != issuer+"/oauth/revoke" {
		t.Errorf("metadata %d %s", a.Status, a.JSON)
	}
	if _, ok := m["jwks_uri"]; ok {
		t.Error("metadata names a jwks_uri")
	}
	for k, want := range map[string]string{"code_challenge_methods_supported": `["S256"]`,
		"token_endpoint_auth_methods_supported": `["none"]`, "response_types_supported": `["code"]`,
		"grant_types_supported": `["authorization_code","refresh_token"]`} {
		if got, _ := json.Marshal(m[k]); string(got) != want {
			t.Errorf("%s: got %s; want %s", k, got, want)
		}
	}
}

func TestRegister(t *testing.T) {
	w := newWorld(t, nil)
	for _, tc := range []struct {
		name, body string
		status     int
		code       string
	}{
		{"loopback", `{"redirect_uris":["http://localhost:33418/callback","http://127.0.0.1:9/cb"],"client_name":"Claude","token_endpoint_auth_method":"none"}`, 201, ""},
		{"ipv6 loopback", `{"redirect_uris":["http://[::1]:9/cb"]}`, 201, ""},
		{"hosted callback", `{"redirect_uris":["https://app.example.com/cb"]}`, 400, "invalid_redirect_uri"},
		{"no port", `{"redirect_uris":["http://127.0.0.1/cb"]}`, 400, "invalid_redirect_uri"},
		{"fragment", `{"redirect_uris":["http://127.0.0.1:9/cb#x"]}`, 400, "invalid_redirect_uri"},
		{"none", `{"client_name":"x"}`, 400, "invalid_redirect_uri"},
		{"secret client", `{"redirect_uris":["http://127.0.0.1:9/cb"],"token_endpoint_auth_method":"client_secret_basic"}`, 400, "invalid_client_metadata"},
		{"implicit", `{"redirect_uris":["http://127.0.0.1:9/cb"],"grant_types":["implicit"]}`, 400, "invalid_client_metadata"},
		{"token response", `{"redirect_uris":["http://127.0.0.1:9/cb"],"response_types":["token"]}`, 400, "invalid_client_metadata"},
		{"not json", `redirect_uris=x`, 400, "invalid_client_metadata"},
		{"array", `[]`, 400, "invalid_client_metadata"},
		{"wrong type", `{"redirect_uris":"http://127.0.0.1:9/cb"}`, 400, "invalid_client_metadata"},
		{"too large", `{"x":"` + strings.Repeat("a", mcpauth.MaxBody) + `"}`, 413, "invalid_client_metadata"},
	} {
		a := w.do(mcpauth.EndpointRegister, "", "application/json", tc.body)
		m := jsonOf(t, a)
		if a.Status != tc.status || (tc.code != "" && m["error"] != tc.code) {
			t.Errorf("%s: got %d %s; want %d %s", tc.name, a.Status, a.JSON, tc.status, tc.code)
		}
		if tc.status == 201 && (m["client_id"] != appID || m["token_endpoint_auth_method"] != "none") {
			t.Errorf("%s: registration %s", tc.name, a.JSON)
		}
	}
}

// TestAuthorizeRefusals: an unusable client_id or redirect_uri is an error
// page (never a redirect); every other error is a 302 to the host's
// callback with error and the host's state.
func TestAuthorizeRefusals(t *testing.T) {
	w := newWorld(t, nil)
	for name, mod := range map[string]func(url.Values){
		"foreign client":        func(q url.Values) { q.Set("client_id", "other") },
		"no client":             func(q url.Values) { q.Del("client_id") },
		"hosted callback":       func(q url.Values) { q.Set("redirect_uri", "https://evil.example.com/cb") },
		"no callback":           func(q url.Values) { q.Del("redirect_uri") },
		"two callbacks":         func(q url.Values) { q.Add("redirect_uri", "http://127.0.0.1:1/x") },
		"callback without port": func(q url.Values) { q.Set("redirect_uri", "http://localhost/cb") },
	} {
		a := w.do(mcpauth.EndpointAuthorize, authorizeQuery(mod), "", "")
		if a.Status != 400 || a.Location != "" {
			t.Errorf("%s: got %d Location %q; want a 400 page", name, a.Status, a.Location)
		}
	}
	for _, tc := range []struct {
		name string
		mod  func(url.Values)
		code string
	}{
		{"token response", func(q url.Values) { q.Set("response_type", "token") }, "unsupported_response_type"},
		{"no response type", func(q url.Values) { q.Del("response_type") }, "invalid_request"},
		{"plain PKCE", func(q url.Values) { q.Set("code_challenge_method", "plain") }, "invalid_request"},
		{"no PKCE", func(q url.Values) { q.Del("code_challenge"); q.Del("code_challenge_method") }, "invalid_request"},
		{"short state", func(q url.Values) { q.Set("state", "short") }, "invalid_request"},
		{"long state", func(q url.Values) { q.Set("state", strings.Repeat("s", 513)) }, "invalid_request"},
		{"no resource", func(q url.Values) { q.Del("resource") }, "invalid_target"},
		{"foreign resource", func(q url.Values) {
			q.Set("resource", "https://other.example.com/agent-api/v1/workspaces/orders/knowledge/mcp")
		}, "invalid_target"},
		{"unserved route", func(q url.Values) { q.Set("resource", issuer+"/agent-api/v1/workspaces/hr/knowledge/mcp") }, "invalid_target"},
		{"not the mcp path", func(q url.Values) { q.Set("resource", issuer+"/agent-api/v1/workspaces/orders/knowledge/search") }, "invalid_target"},
		{"duplicate", func(q url.Values) { q.Add("scope", "b") }, "invalid_request"},
	} {
		a := w.do(mcpauth.EndpointAuthorize, authorizeQuery(tc.mod), "", "")
		u, _ := url.Parse(a.Location)
		if a.Status != 302 || u.Host != "localhost:33418" || u.Query().Get("error") != tc.code {
			t.Errorf("%s: got %d %q; want 302 to the callback with error=%s", tc.name, a.Status, a.Location, tc.code)
			continue
		}
		if st := u.Query().Get("state"); st != mapState(tc.name) {
			t.Errorf("%s: state %q; want the host's", tc.name, st)
		}
	}
	if n := w.core.Calls("/agent-auth/"); n != 0 {
		t.Errorf("Core was called %d times for refused requests", n)
	}
	// Core's own refusals: a route outside the client's allowlist is Core's
	// invalid_client; Core down is temporarily_unavailable.
	w.core.AddAuthClient(fakecore.AuthClient{AppID: appID, AuthorizeURL: "", Token: clientToken})
	a := w.do(mcpauth.EndpointAuthorize, authorizeQuery(nil), "", "")
	if u, _ := url.Parse(a.Location); a.Status != 302 || u.Query().Get("error") != "invalid_client" {
		t.Errorf("Core's invalid_client: got %d %q", a.Status, a.Location)
	}
	w.core.SetFault("/agent-auth/v1/authorizations", fakecore.Fault{Reset: true})
	a = w.do(mcpauth.EndpointAuthorize, authorizeQuery(nil), "", "")
	if u, _ := url.Parse(a.Location); a.Status != 302 || u.Query().Get("error") != "temporarily_unavailable" {
		t.Errorf("Core down: got %d %q", a.Status, a.Location)
	}
	if w.seen[[2]string{mcpauth.EndpointAuthorize, mcpauth.OutcomeUnavailable}] != 1 {
		t.Errorf("outcomes %v; want one unavailable authorize", w.seen)
	}
}

func mapState(name string) string {
	switch name {
	case "short state":
		return "short"
	case "long state":
		return strings.Repeat("s", 513)
	}
	return "host-state-1"
}

// TestSignIn: the whole flow through the front — a localhost callback
// given to Core as 127.0.0.1, the host's address as Core's one
// X-Forwarded-For entry, the exchange (form-encoded, with localhost
// translated the same way), refresh with rotation, revoke.
func TestSignIn(t *testing.T) {
	w := newWorld(t, nil)
	a := w.do(mcpauth.EndpointAuthorize, authorizeQuery(nil), "", "")
	if a.Status != 302 || !strings.Contains(a.Location, "/consent?authorization_id=") {
		t.Fatalf("authorize: got %d %q %s; want 302 to the business page", a.Status, a.Location, a.JSON)
	}
	req, _ := w.core.LastRequest("/agent-auth/v1/authorizations")
	var sent map[string]any
	_ = json.Unmarshal(req.Body, &sent)
	if sent["redirect_uri"] != "http://127.0.0.1:33418/callback" || sent["device_label"] != "MCP host" ||
		sent["state"] != "host-state-1" || req.Header.Get("X-Forwarded-For") != "203.0.113.7" {
		t.Errorf("Core got %s with X-Forwarded-For %q", req.Body, req.Header.Values("X-Forwarded-For"))
	}
	cb := follow(t, a.Location)
	if cb.Host != "127.0.0.1:33418" || cb.Query().Get("state") != "host-state-1" {
		t.Fatalf("callback %s", cb.Redacted())
	}
	form := url.Values{"grant_type": {"authorization_code"}, "code": {cb.Query().Get("code")}, "client_id": {appID},
		"redirect_uri": {"http://localhost:33418/callback"}, "code_verifier": {verifier}, "resource": {resource}}
	tok := w.do(mcpauth.EndpointToken, "", "application/x-www-form-urlencoded", form.Encode())
	m := jsonOf(t, tok)
	if tok.Status != 200 || !tok.NoCache || m["token_type"] != "Bearer" || m["expires_in"] != float64(900) ||
		!strings.HasPrefix(m["access_token"].(string), "bha_") || !strings.HasPrefix(m["refresh_token"].(string), "bhr_") {
		t.Fatalf("exchange: got %d %s", tok.Status, tok.JSON)
	}
	if _, ok := m["session_id"]; ok {
		t.Error("the token answer carries Core's extra fields")
	}
	// The same code again: Core's invalid_grant, relayed.
	again := w.do(mcpauth.EndpointToken, "", "application/x-www-form-urlencoded", form.Encode())
	if again.Status != 400 || jsonOf(t, again)["error"] != "invalid_grant" {
		t.Errorf("code reused: got %d %s", again.Status, again.JSON)
	}
	// Refresh, JSON-encoded this time.
	body, _ := json.Marshal(map[string]string{"grant_type": "refresh_token", "refresh_token": m["refresh_token"].(string), "client_id": appID})
	ref := w.do(mcpauth.EndpointToken, "", "application/json; charset=utf-8", string(body))
	m2 := jsonOf(t, ref)
	if ref.Status != 200 || m2["refresh_token"] == m["refresh_token"] {
		t.Fatalf("refresh: got %d %s", ref.Status, ref.JSON)
	}
	// Revoke the refresh token: the session ends.
	rv := w.do(mcpauth.EndpointRevoke, "", "application/x-www-form-urlencoded",
		url.Values{"token": {m2["refresh_token"].(string)}, "token_type_hint": {"refresh_token"}, "client_id": {appID}}.Encode())
	if rv.Status != 200 {
		t.Fatalf("revoke: got %d %s", rv.Status, rv.JSON)
	}
	body, _ = json.Marshal(map[string]string{"grant_type": "refresh_token", "refresh_token": m2["refresh_token"].(string), "client_id": appID})
	if r := w.do(mcpauth.EndpointToken, "", "application/json", string(body)); r.Status != 400 {
		t.Errorf("refresh after revoke: got %d %s; want 400", r.Status, r.JSON)
	}
	// An unknown token revokes nothing, still 200.
	if r := w.do(mcpauth.EndpointRevoke, "", "application/x-www-form-urlencoded", "token=whatever"); r.Status != 200 {
		t.Errorf("unknown token: got %d", r.Status)
	}
	// A host that sent no state gets Core's random one back.
	a = w.do(mcpauth.EndpointAuthorize, authorizeQuery(func(q url.Values) { q.Del("state") }), "", "")
	if cb := follow(t, a.Location); len(cb.Query().Get("state")) < 8 {
		t.Errorf("no state: callback %s; want a random state", cb.Redacted())
	}
	// Deny: Core sends error=access_denied to the callback.
	w.page.SetDecision("deny")
	a = w.do(mcpauth.EndpointAuthorize, authorizeQuery(nil), "", "")
	if cb := follow(t, a.Location); cb.Query().Get("error") != "access_denied" {
		t.Errorf("deny: callback %s", cb.Redacted())
	}
}

func TestTokenRefusals(t *testing.T) {
	w := newWorld(t, nil)
	const form = "application/x-www-form-urlencoded"
	for _, tc := range []struct {
		name, ct, body string
		status         int
		code           string
	}{
		{"no grant", form, "client_id=" + appID, 400, "invalid_request"},
		{"password", form, "grant_type=password&client_id=" + appID, 400, "unsupported_grant_type"},
		{"no code", form, "grant_type=authorization_code&client_id=" + appID + "&redirect_uri=http://127.0.0.1:1/cb&code_verifier=" + verifier, 400, "invalid_request"},
		{"foreign client", form, "grant_type=refresh_token&client_id=x&refresh_token=bhr_x", 400, "invalid_client"},
		{"no client", form, "grant_type=refresh_token&refresh_token=bhr_x", 400, "invalid_request"},
		{"bad verifier", form, "grant_type=authorization_code&client_id=" + appID + "&code=bhc_x&redirect_uri=http://127.0.0.1:1/cb&code_verifier=short", 400, "invalid_grant"},
		{"hosted callback", form, "grant_type=authorization_code&client_id=" + appID + "&code=bhc_x&redirect_uri=https://e.com/cb&code_verifier=" + verifier, 400, "invalid_grant"},
		{"foreign resource", form, "grant_type=refresh_token&client_id=" + appID + "&refresh_token=bhr_x&resource=https://e.com/mcp", 400, "invalid_target"},
		{"duplicate", form, "grant_type=refresh_token&grant_type=refresh_token", 400, "invalid_request"},
		{"bad form", form, "a=%zz", 400, "invalid_request"},
		{"text body", "text/plain", "grant_type=refresh_token", 400, "invalid_request"},
		{"json number", "application/json", `{"grant_type":"refresh_token","refresh_token":5,"client_id":"` + appID + `"}`, 400, "invalid_request"},
		{"json number elsewhere ignored", "application/json", `{"grant_type":"refresh_token","refresh_token":"bhr_x","client_id":"` + appID + `","extra":5}`, 400, "invalid_grant"},
		{"unknown refresh token", form, "grant_type=refresh_token&client_id=" + appID + "&refresh_token=bhr_unknown", 400, "invalid_grant"},
		{"too large", form, "x=" + strings.Repeat("a", mcpauth.MaxBody), 413, "invalid_request"},
	} {
		a := w.do(mcpauth.EndpointToken, "", tc.ct, tc.body)
		if m := jsonOf(t, a); a.Status != tc.status || m["error"] != tc.code || !a.NoCache {
			t.Errorf("%s: got %d %s; want %d %s (no-cache)", tc.name, a.Status, a.JSON, tc.status, tc.code)
		}
	}
	w.core.SetFault("/agent-auth/v1/token", fakecore.Fault{Status: 502})
	a := w.do(mcpauth.EndpointToken, "", form, "grant_type=refresh_token&client_id="+appID+"&refresh_token=bhr_x")
	if a.Status != 503 || jsonOf(t, a)["error"] != "temporarily_unavailable" {
		t.Errorf("Core failing: got %d %s; want 503 temporarily_unavailable", a.Status, a.JSON)
	}
	if strings.Contains(string(a.JSON), "bhr_") {
		t.Error("an answer carries the token")
	}
	for name, body := range map[string]string{"no token": "token_type_hint=refresh_token", "foreign client": "token=bhr_x&client_id=x"} {
		if r := w.do(mcpauth.EndpointRevoke, "", form, body); r.Status != 400 {
			t.Errorf("revoke %s: got %d; want 400", name, r.Status)
		}
	}
}

// TestRateLimit: 30 at once from one address, then 429 with Retry-After;
// another address is not affected; metadata is not limited.
func TestRateLimit(t *testing.T) {
	w := newWorld(t, nil)
	for i := range 30 {
		if a := w.do(mcpauth.EndpointRegister, "", "application/json", `{}`); a.Status != 400 {
			t.Fatalf("request %d: got %d; want 400", i+1, a.Status)
		}
	}
	a := w.do(mcpauth.EndpointToken, "", "", "")
	if a.Status != 429 || a.RetryAfter < 1 {
		t.Fatalf("31st: got %d Retry-After %d; want 429 with Retry-After", a.Status, a.RetryAfter)
	}
	if a := w.do(mcpauth.EndpointMetadata, "", "", ""); a.Status != 200 {
		t.Errorf("metadata: got %d", a.Status)
	}
	other := w.svc.Handle(context.Background(), mcpauth.Request{Endpoint: mcpauth.EndpointRegister, Body: []byte(`{}`),
		Client: netip.MustParseAddr("198.51.100.1")})
	if other.Status != 400 {
		t.Errorf("another address: got %d; want 400", other.Status)
	}
	if w.seen[[2]string{mcpauth.EndpointToken, mcpauth.OutcomeRateLimited}] != 1 {
		t.Errorf("outcomes %v", w.seen)
	}
}

func TestNewRefusesBadOptions(t *testing.T) {
	cc, _ := coreclient.NewClient(coreclient.Options{BaseURL: "http://127.0.0.1:1"})
	served := func(string) bool { return true }
	for name, o := range map[string]mcpauth.Options{
		"issuer with path": {Core: cc, Served: served, ClientAppID: appID, Issuer: "https://a.example/x"},
		"bad client":       {Core: cc, Served: served, ClientAppID: "A", Issuer: issuer},
		"no core":          {Served: served, ClientAppID: appID, Issuer: issuer},
	} {
		if _, err := mcpauth.New(o); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
