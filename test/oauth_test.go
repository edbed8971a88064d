package test

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/bailinghub/knowledge-sidecar/catalog"
	"github.com/bailinghub/knowledge-sidecar/config"
	"github.com/bailinghub/knowledge-sidecar/corefacts"
	"github.com/bailinghub/knowledge-sidecar/internal/fakecore"
	"github.com/bailinghub/knowledge-sidecar/internal/testkit"
	"github.com/bailinghub/knowledge-sidecar/sidecar"
)

const (
	oauthApp      = "mcp-hosts"
	oauthRoute    = "orders"
	oauthVerifier = "verifier-0123456789-0123456789-0123456789-abcdef"
	oauthBizToken = "client-token-of-the-business-system"
)

// oauthWorld is two replicas built as `serve` builds them, with the OAuth
// front on (mcp.oauth.client_app_id), over one Core double whose client
// has a business consent page.
type oauthWorld struct {
	logs     *testkit.Buffer // both replicas' logs, debug level with access logs
	core     *fakecore.Core
	page     *fakecore.Consent
	replicas [2]*sidecar.App
	urls     [2]string
	issuer   string
}

func newOAuthWorld(t *testing.T, on bool) *oauthWorld {
	t.Helper()
	w := &oauthWorld{logs: &testkit.Buffer{}}
	log := slog.New(slog.NewJSONHandler(w.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	w.core = fakecore.New(fakecore.Options{ServiceToken: "svc_oauth-service-token-0123456789"})
	coreSrv := httptest.NewServer(w.core)
	t.Cleanup(func() { w.core.Close(); coreSrv.Close() })
	w.core.SetRoute(oauthRoute, fakecore.GateAllowed)
	w.page = fakecore.NewConsent(fakecore.ConsentOptions{CoreURL: coreSrv.URL, ClientToken: oauthBizToken,
		Principal: corefacts.Principal{ID: "user-42"}, OnBehalfOf: "t:user-42", Decision: "approve"})
	biz := httptest.NewServer(w.page)
	t.Cleanup(biz.Close)
	w.core.AddAuthClient(fakecore.AuthClient{AppID: oauthApp, AuthorizeURL: biz.URL + "/consent",
		AllowedRoutes: []string{oauthRoute}, Token: oauthBizToken})
	mem := catalog.NewMemCatalog()
	mem.PutRoute(oauthRoute, true, `{"kb_ids":[]}`)
	// The issuer is fixed before the replicas listen: the first replica's
	// address serves as the public URL of both (any replica answers any step).
	for i := range w.replicas {
		cfg := config.Defaults()
		cfg.Core.URL, cfg.Core.Token, cfg.Rollout = coreSrv.URL, "svc_oauth-service-token-0123456789", "allow:"+oauthRoute
		if on {
			cfg.MCP.PublicURL, cfg.MCP.OAuth.ClientAppID = "http://127.0.0.1:1", oauthApp
		}
		cfg.Log.Access = true
		// Not Validate: the catalog is given (Deps.Catalog), as the demo's.
		w.replicas[i], w.urls[i] = serveBuilt(t, cfg, sidecar.Deps{Catalog: mem, Logger: log})
	}
	w.issuer = "http://127.0.0.1:1"
	return w
}

func oauthSend(t *testing.T, method, u, ct, body string) *http.Response {
	t.Helper()
	req, _ := http.NewRequest(method, u, strings.NewReader(body))
	if ct != "" {
		req.Header.Set("Content-Type", ct)
	}
	res, err := http.DefaultTransport.RoundTrip(req) // no redirects followed
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { res.Body.Close() })
	return res
}

func readJSON(t *testing.T, res *http.Response) map[string]any {
	t.Helper()
	var m map[string]any
	b, _ := io.ReadAll(res.Body)
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("%d answer is not JSON: %q", res.StatusCode, b)
	}
	return m
}

// TestOAuthFront: discovery from the MCP 401, authorization on one
// replica, exchange, MCP call, refresh and revocation on the other; the
// headers and statuses of SPEC §12 on the way.
func TestOAuthFront(t *testing.T) {
	w := newOAuthWorld(t, true)
	a, b := w.urls[0], w.urls[1]
	mcpPath := "/agent-api/v1/workspaces/" + oauthRoute + "/knowledge/mcp"
	resource := w.issuer + mcpPath

	// 1. The 401 names the RFC 9728 document, which names the issuer.
	res := oauthSend(t, "POST", a+mcpPath, "application/json", `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`)
	if want := `Bearer resource_metadata="` + w.issuer + "/.well-known/oauth-protected-resource" + mcpPath + `"`; res.StatusCode != 401 ||
		res.Header.Get("WWW-Authenticate") != want {
		t.Fatalf("MCP without a bearer: %d %q; want 401 %q", res.StatusCode, res.Header.Get("WWW-Authenticate"), want)
	}
	prm := readJSON(t, oauthSend(t, "GET", b+"/.well-known/oauth-protected-resource"+mcpPath, "", ""))
	if got, _ := json.Marshal(prm["authorization_servers"]); string(got) != `["`+w.issuer+`"]` || prm["resource"] != resource {
		t.Fatalf("protected resource metadata %v", prm)
	}
	res = oauthSend(t, "GET", a+"/.well-known/oauth-authorization-server", "", "")
	meta := readJSON(t, res)
	if res.StatusCode != 200 || meta["issuer"] != w.issuer || res.Header.Get("Cache-Control") != "no-store" {
		t.Fatalf("metadata %d %v", res.StatusCode, meta)
	}

	// 2. Registration, then authorization on replica a.
	res = oauthSend(t, "POST", b+"/oauth/register", "application/json", `{"redirect_uris":["http://localhost:40111/cb"]}`)
	if reg := readJSON(t, res); res.StatusCode != 201 || reg["client_id"] != oauthApp {
		t.Fatalf("register %d %v", res.StatusCode, reg)
	}
	sum := sha256.Sum256([]byte(oauthVerifier))
	q := url.Values{"response_type": {"code"}, "client_id": {oauthApp}, "redirect_uri": {"http://localhost:40111/cb"},
		"code_challenge": {base64.RawURLEncoding.EncodeToString(sum[:])}, "code_challenge_method": {"S256"},
		"resource": {resource}}
	req, _ := http.NewRequest("GET", a+"/oauth/authorize?"+q.Encode(), nil)
	req.Header.Set("X-Forwarded-For", "198.51.100.99") // an untrusted peer's own header
	res, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != 302 || !strings.Contains(res.Header.Get("Location"), "/consent?authorization_id=") {
		t.Fatalf("authorize %d %q", res.StatusCode, res.Header.Get("Location"))
	}
	seen, _ := w.core.LastRequest("/agent-auth/v1/authorizations")
	if xff := seen.Header.Values("X-Forwarded-For"); len(xff) != 1 || xff[0] != "127.0.0.1" {
		t.Errorf("Core's X-Forwarded-For %q; want exactly the peer [127.0.0.1]", xff)
	}
	browser := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	res, err = browser.Get(res.Header.Get("Location"))
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	cb, _ := url.Parse(res.Header.Get("Location"))
	if cb.Host != "127.0.0.1:40111" || cb.Query().Get("code") == "" || len(cb.Query().Get("state")) < 8 {
		t.Fatalf("callback %s; want 127.0.0.1:40111 with a code and a state", cb.Redacted())
	}

	// 3. Exchange on replica b (form-encoded), then an MCP call with the token.
	form := url.Values{"grant_type": {"authorization_code"}, "code": {cb.Query().Get("code")}, "client_id": {oauthApp},
		"redirect_uri": {"http://localhost:40111/cb"}, "code_verifier": {oauthVerifier}, "resource": {resource}}
	res = oauthSend(t, "POST", b+"/oauth/token", "application/x-www-form-urlencoded", form.Encode())
	tok := readJSON(t, res)
	if res.StatusCode != 200 || res.Header.Get("Pragma") != "no-cache" || res.Header.Get("Cache-Control") != "no-store" || tok["token_type"] != "Bearer" {
		t.Fatalf("token %d %v %v", res.StatusCode, res.Header, tok)
	}
	mcpCall := func(base, access string) int {
		req, _ := http.NewRequest("POST", base+mcpPath, strings.NewReader(
			`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`))
		req.Header.Set("Authorization", "Bearer "+access)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res.StatusCode
	}
	if st := mcpCall(a, tok["access_token"].(string)); st != 200 {
		t.Fatalf("MCP with the signed-in token: %d", st)
	}

	// 4. Refresh on a (JSON accepted too): the old access token stops, the new works.
	body, _ := json.Marshal(map[string]string{"grant_type": "refresh_token", "refresh_token": tok["refresh_token"].(string), "client_id": oauthApp})
	res = oauthSend(t, "POST", a+"/oauth/token", "application/json", string(body))
	tok2 := readJSON(t, res)
	if res.StatusCode != 200 || mcpCall(b, tok["access_token"].(string)) != 401 || mcpCall(b, tok2["access_token"].(string)) != 200 {
		t.Fatalf("refresh %d %v", res.StatusCode, tok2)
	}

	// 5. Revoke on b; the refresh token is dead on a.
	res = oauthSend(t, "POST", b+"/oauth/revoke", "application/x-www-form-urlencoded", url.Values{"token": {tok2["refresh_token"].(string)}}.Encode())
	if res.StatusCode != 200 {
		t.Fatalf("revoke %d", res.StatusCode)
	}
	body, _ = json.Marshal(map[string]string{"grant_type": "refresh_token", "refresh_token": tok2["refresh_token"].(string), "client_id": oauthApp})
	res = oauthSend(t, "POST", a+"/oauth/token", "application/json", string(body))
	if m := readJSON(t, res); res.StatusCode != 400 || m["error"] != "invalid_grant" {
		t.Errorf("refresh after revoke: %d %v; want 400 invalid_grant", res.StatusCode, m)
	}

	// 6. Bad input: an unusable redirect_uri is a page, an oversized body 413,
	// never a 5xx, and the metric counts by endpoint and outcome.
	q.Set("redirect_uri", "https://evil.example.com/cb")
	res = oauthSend(t, "GET", a+"/oauth/authorize?"+q.Encode(), "", "")
	if res.StatusCode != 400 || res.Header.Get("Location") != "" {
		t.Errorf("foreign callback: %d Location %q; want a 400 page", res.StatusCode, res.Header.Get("Location"))
	}
	res = oauthSend(t, "POST", a+"/oauth/token", "application/x-www-form-urlencoded", "x="+strings.Repeat("a", 20<<10))
	if res.StatusCode != 413 {
		t.Errorf("oversized token request: %d; want 413", res.StatusCode)
	}
	// 7. Nothing secret in the logs of either replica: no code, token,
	// verifier or state (the access log names the path only).
	logs := w.logs.String()
	if !strings.Contains(logs, "/oauth/token") {
		t.Fatalf("no access log of the token endpoint:\n%s", logs)
	}
	for _, secret := range []string{cb.Query().Get("code"), cb.Query().Get("state"), oauthVerifier,
		tok["access_token"].(string), tok["refresh_token"].(string), tok2["access_token"].(string), tok2["refresh_token"].(string)} {
		if strings.Contains(logs, secret) {
			t.Errorf("a secret of the sign-in is in the logs: %.12s…", secret)
		}
	}
	reg := w.replicas[0].Server.Registry()
	if n := testkit.Metric(t, reg, "knowledge_sidecar_oauth_requests_total", map[string]string{"endpoint": "token", "outcome": "core_refused"}); n != 1 {
		t.Errorf("oauth_requests_total{token,core_refused} = %v; want 1", n)
	}
}

// TestOAuthFrontOff: without mcp.oauth.client_app_id the front's paths are
// Core's (passed through), and the MCP 401 says only "Bearer".
func TestOAuthFrontOff(t *testing.T) {
	w := newOAuthWorld(t, false)
	before := w.core.Calls("/oauth/token")
	res := oauthSend(t, "POST", w.urls[0]+"/oauth/token", "application/x-www-form-urlencoded", "grant_type=refresh_token")
	if res.StatusCode != 404 || w.core.Calls("/oauth/token") != before+1 {
		t.Errorf("front off: /oauth/token %d; want Core's 404, passed through", res.StatusCode)
	}
	res = oauthSend(t, "POST", w.urls[0]+"/agent-api/v1/workspaces/"+oauthRoute+"/knowledge/mcp", "application/json", `{}`)
	if res.StatusCode != 401 || res.Header.Get("WWW-Authenticate") != "Bearer" {
		t.Errorf("front off: MCP 401 %q", res.Header.Get("WWW-Authenticate"))
	}
}
