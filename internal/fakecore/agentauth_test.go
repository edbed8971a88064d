package fakecore_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/bailinghub/knowledge-sidecar/corefacts"
	"github.com/bailinghub/knowledge-sidecar/internal/fakecore"
	"github.com/bailinghub/knowledge-sidecar/internal/testkit"
)

const (
	verifier    = "verifier-0123456789-0123456789-0123456789-abcdef"
	clientToken = "client-token-of-the-business-system"
)

func challenge(v string) string {
	s := sha256.Sum256([]byte(v))
	return base64.RawURLEncoding.EncodeToString(s[:])
}

func postJSON(t *testing.T, u string, body any, hdr ...string) (int, map[string]any) {
	t.Helper()
	b, _ := json.Marshal(body)
	req, _ := http.NewRequest(http.MethodPost, u, bytes.NewReader(b))
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	res, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var out map[string]any
	raw, _ := io.ReadAll(res.Body)
	_ = json.Unmarshal(raw, &out)
	return res.StatusCode, out
}

// authWorld is a Core double with an Agent Auth client whose consent page
// approves or denies on GET.
func authWorld(t *testing.T, clock *testkit.Clock) (*fakecore.Core, *httptest.Server, *fakecore.Consent) {
	t.Helper()
	c := fakecore.New(fakecore.Options{Now: clock.Now, AccessTTL: time.Minute})
	core := httptest.NewServer(c)
	t.Cleanup(core.Close)
	page := fakecore.NewConsent(fakecore.ConsentOptions{CoreURL: core.URL, ClientToken: clientToken,
		Principal: corefacts.Principal{ID: "user-42"}, OnBehalfOf: "t:user-42", Decision: "approve"})
	biz := httptest.NewServer(page)
	t.Cleanup(biz.Close)
	c.AddAuthClient(fakecore.AuthClient{AppID: "mcp-hosts", AuthorizeURL: biz.URL + "/consent",
		AllowedRoutes: []string{"orders"}, Token: clientToken})
	return c, core, page
}

func authorization(redirect string) map[string]any {
	return map[string]any{"client_app_id": "mcp-hosts", "redirect_uri": redirect, "state": "state-12345",
		"requested_routes": []string{"orders"}, "device_label": "MCP host",
		"code_challenge": challenge(verifier), "code_challenge_method": "S256"}
}

// signIn creates an authorization and lets the consent page decide; it
// returns the callback Core sent the browser to.
func signIn(t *testing.T, core string) *url.URL {
	t.Helper()
	st, out := postJSON(t, core+"/agent-auth/v1/authorizations", authorization("http://127.0.0.1:4567/cb"))
	if st != http.StatusCreated {
		t.Fatalf("create authorization: got %d %v; want 201", st, out)
	}
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	res, err := client.Get(out["authorization_url"].(string))
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	loc, err := url.Parse(res.Header.Get("Location"))
	if res.StatusCode != http.StatusSeeOther || err != nil {
		t.Fatalf("consent: got %d %q; want 303 to the callback", res.StatusCode, res.Header.Get("Location"))
	}
	return loc
}

func TestAgentAuthAuthorizationRules(t *testing.T) {
	_, core, _ := authWorld(t, testkit.NewClock(time.Unix(1e9, 0)))
	for name, mod := range map[string]func(m map[string]any){
		"localhost callback":   func(m map[string]any) { m["redirect_uri"] = "http://localhost:4567/cb" },
		"no port":              func(m map[string]any) { m["redirect_uri"] = "http://127.0.0.1/cb" },
		"https callback":       func(m map[string]any) { m["redirect_uri"] = "https://127.0.0.1:4567/cb" },
		"short state":          func(m map[string]any) { m["state"] = "short" },
		"plain method":         func(m map[string]any) { m["code_challenge_method"] = "plain" },
		"short challenge":      func(m map[string]any) { m["code_challenge"] = "abc" },
		"unknown field":        func(m map[string]any) { m["scope"] = "x" },
		"missing state":        func(m map[string]any) { delete(m, "state") },
		"blank device":         func(m map[string]any) { m["device_label"] = "  " },
		"duplicate route":      func(m map[string]any) { m["requested_routes"] = []string{"orders", "orders"} },
		"route not a key":      func(m map[string]any) { m["requested_routes"] = []string{"*"} },
		"wrong type for state": func(m map[string]any) { m["state"] = 12345678 },
	} {
		m := authorization("http://127.0.0.1:4567/cb")
		mod(m)
		if st, out := postJSON(t, core.URL+"/agent-auth/v1/authorizations", m); st != 400 || out["error"] != "invalid_request" {
			t.Errorf("%s: got %d %v; want 400 invalid_request", name, st, out)
		}
	}
	m := authorization("http://[::1]:4567/cb")
	m["requested_routes"] = []string{"billing"}
	if st, out := postJSON(t, core.URL+"/agent-auth/v1/authorizations", m); st != 400 || out["error"] != "invalid_client" {
		t.Errorf("route outside the allowlist: got %d %v; want 400 invalid_client", st, out)
	}
	m["client_app_id"], m["requested_routes"] = "nobody", []string{"orders"}
	if st, out := postJSON(t, core.URL+"/agent-auth/v1/authorizations", m); st != 400 || out["error"] != "invalid_client" {
		t.Errorf("unknown client: got %d %v; want 400 invalid_client", st, out)
	}
	// 10 per minute per client and IP (the first X-Forwarded-For entry).
	for i := range 11 {
		st, _ := postJSON(t, core.URL+"/agent-auth/v1/authorizations", authorization("http://[::1]:4567/cb"),
			"X-Forwarded-For", "203.0.113.9, 10.0.0.1")
		if want := map[bool]int{true: 201, false: 429}[i < 10]; st != want {
			t.Fatalf("authorization %d from one address: got %d; want %d", i+1, st, want)
		}
	}
	if st, _ := postJSON(t, core.URL+"/agent-auth/v1/authorizations", authorization("http://[::1]:4567/cb"),
		"X-Forwarded-For", "203.0.113.10"); st != 201 {
		t.Errorf("another address: got %d; want 201", st)
	}
}

func TestAgentAuthCodeRefreshRevoke(t *testing.T) {
	clock := testkit.NewClock(time.Unix(1e9, 0))
	c, core, page := authWorld(t, clock)
	cb := signIn(t, core.URL)
	code := cb.Query().Get("code")
	if cb.Host != "127.0.0.1:4567" || cb.Query().Get("state") != "state-12345" || !strings.HasPrefix(code, "bhc_") {
		t.Fatalf("callback %s; want 127.0.0.1:4567 with a bhc_ code and the state", cb.Redacted())
	}
	exchange := map[string]any{"grant_type": "authorization_code", "client_app_id": "mcp-hosts", "code": code,
		"redirect_uri": "http://127.0.0.1:4567/cb", "code_verifier": verifier}
	bad := map[string]any{}
	for k, v := range exchange {
		bad[k] = v
	}
	bad["code_verifier"] = strings.Repeat("x", 43)
	if st, out := postJSON(t, core.URL+"/agent-auth/v1/token", bad); st != 400 || out["error"] != "invalid_grant" {
		t.Errorf("wrong verifier: got %d %v; want 400 invalid_grant", st, out)
	}
	st, tok := postJSON(t, core.URL+"/agent-auth/v1/token", exchange)
	if st != 200 || tok["token_type"] != "Bearer" || tok["expires_in"] != float64(60) {
		t.Fatalf("exchange: got %d %v; want 200, Bearer, expires_in 60", st, tok)
	}
	if st, _ := postJSON(t, core.URL+"/agent-auth/v1/token", exchange); st != 400 {
		t.Errorf("code used twice: got %d; want 400", st)
	}
	session := func(access string) int {
		req, _ := http.NewRequest(http.MethodGet, core.URL+"/agent-auth/v1/session", nil)
		req.Header.Set("Authorization", "Bearer "+access)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res.StatusCode
	}
	a1, r1 := tok["access_token"].(string), tok["refresh_token"].(string)
	if session(a1) != 200 {
		t.Fatal("a fresh access token does not authenticate")
	}
	clock.Advance(61 * time.Second)
	if session(a1) != 401 {
		t.Error("an expired access token still authenticates")
	}
	refresh := func(rt string) (int, map[string]any) {
		return postJSON(t, core.URL+"/agent-auth/v1/token",
			map[string]any{"grant_type": "refresh_token", "client_app_id": "mcp-hosts", "refresh_token": rt})
	}
	st, tok2 := refresh(r1)
	if st != 200 || tok2["refresh_token"] == r1 || tok2["session_id"] != tok["session_id"] {
		t.Fatalf("refresh: got %d %v; want 200, a rotated refresh token, the same session", st, tok2)
	}
	a2, r2 := tok2["access_token"].(string), tok2["refresh_token"].(string)
	if session(a2) != 200 {
		t.Fatal("the refreshed access token does not authenticate")
	}
	st, tok3 := refresh(r2)
	if st != 200 || session(a2) != 401 {
		t.Fatalf("second refresh: got %d; the previous access token must stop at once", st)
	}
	// Replaying a rotated refresh token fails and revokes the session.
	if st, out := refresh(r1); st != 400 || out["error"] != "invalid_grant" {
		t.Errorf("replay: got %d %v; want 400 invalid_grant", st, out)
	}
	if session(tok3["access_token"].(string)) != 401 {
		t.Error("a replay did not revoke the session")
	}
	if st, out := postJSON(t, core.URL+"/agent-auth/v1/token", map[string]any{"grant_type": "password"}); st != 400 || out["error"] != "unsupported_grant_type" {
		t.Errorf("password grant: got %d %v; want unsupported_grant_type", st, out)
	}

	// A second sign-in, revoked by its refresh token.
	cb = signIn(t, core.URL)
	exchange["code"] = cb.Query().Get("code")
	_, tok = postJSON(t, core.URL+"/agent-auth/v1/token", exchange)
	if st, out := postJSON(t, core.URL+"/agent-auth/v1/revoke", map[string]any{"client_app_id": "mcp-hosts",
		"refresh_token": tok["refresh_token"]}); st != 200 || out["revoked"] != true {
		t.Errorf("revoke: got %d %v; want 200 revoked", st, out)
	}
	if session(tok["access_token"].(string)) != 401 {
		t.Error("a revoked session still authenticates")
	}

	// Codes live 2 minutes.
	cb = signIn(t, core.URL)
	exchange["code"] = cb.Query().Get("code")
	clock.Advance(2 * time.Minute)
	if st, _ := postJSON(t, core.URL+"/agent-auth/v1/token", exchange); st != 400 {
		t.Errorf("a code 2 minutes old: got %d; want 400", st)
	}

	// Deny: the callback gets access_denied and the state.
	page.SetDecision("deny")
	cb = signIn(t, core.URL)
	if cb.Query().Get("error") != "access_denied" || cb.Query().Get("state") != "state-12345" || cb.Query().Has("code") {
		t.Errorf("deny: callback %s; want error=access_denied with the state", cb.Redacted())
	}
	if c.PendingAuthorizations() != 0 {
		t.Errorf("pending authorizations: %d; want 0", c.PendingAuthorizations())
	}
}
