package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bailinghub/knowledge-sidecar/corefacts"
	"github.com/bailinghub/knowledge-sidecar/internal/fakecore"
	"github.com/bailinghub/knowledge-sidecar/internal/testkit/testdb"
)

// oauthSummary is oauth.mjs's output.
type oauthSummary struct {
	Errors    map[string]string
	SignedIn  bool
	ClientID  *string
	Authorize struct {
		Origin, Path, Resource, RedirectURI, ClientID string
		HasState                                      bool
	}
	Callback struct {
		Host        string
		HasCode     bool
		Error       *string
		StateLength int
	}
	Tools                []string
	Search, AfterExpiry  toolResult
	Tokens               int
	Rotated              bool
	RedirectsAfterSignIn int
	RevokeStatus         int
	AfterRevoke          string
	NewSignInAsked       bool
}

// startOAuthWorld is two `serve` replicas (SQL catalog) behind a
// round-robin balancer whose address is mcp.public_url, with the OAuth
// front on for the fixture client app-a, whose consent page (the business
// system's double) is page.
func startOAuthWorld(t *testing.T) (w *serveWorld, lb string, page *fakecore.Consent, node string) {
	t.Helper()
	node = requireMCPJS(t)
	var replicas atomic.Pointer[[]*url.URL]
	var next atomic.Uint64
	rp := &httputil.ReverseProxy{Rewrite: func(r *httputil.ProxyRequest) {
		rs := *replicas.Load()
		r.SetURL(rs[int((next.Add(1)-1)%uint64(len(rs)))])
		r.Out.Host = r.In.Host
	}}
	bal := httptest.NewServer(rp)
	t.Cleanup(bal.Close)

	w = newServeWorld(t, "mcpoauth", fmt.Sprintf("mcp:\n  public_url: %q\n  oauth:\n    client_app_id: %q\n", bal.URL, testdb.AppA))
	coreURL := w.coreURL
	page = fakecore.NewConsent(fakecore.ConsentOptions{CoreURL: coreURL, ClientToken: "client-token-app-a-0123456789",
		Principal: corefacts.Principal{ID: "user-42"}, OnBehalfOf: "t:user-42", Decision: "approve"})
	biz := httptest.NewServer(page)
	t.Cleanup(biz.Close)
	w.core.AddAuthClient(fakecore.AuthClient{AppID: testdb.AppA, AuthorizeURL: biz.URL + "/consent",
		AllowedRoutes: []string{testdb.RouteMulti}, Token: "client-token-app-a-0123456789"})

	key := make([]byte, 32)
	_, _ = rand.Read(key)
	w.env = append(w.env, "KNOWLEDGE_SIDECAR_SIGNING_KEYS=k1:"+base64.StdEncoding.EncodeToString(key))
	w.writeCfg("allow:" + testdb.RouteMulti)
	var rs []*url.URL
	for range 2 {
		p := startServe(t, w.bin, w.env)
		u, _ := url.Parse(p.url)
		rs = append(rs, u)
	}
	replicas.Store(&rs)
	return w, bal.URL, page, node
}

// runOAuthJS runs oauth.mjs; each EXPIRE line it prints is answered (after
// the Core double has expired every access token) with a line on its stdin.
func runOAuthJS(t *testing.T, node string, core *fakecore.Core, arg any) oauthSummary {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	b, _ := json.Marshal(arg)
	cmd := exec.CommandContext(ctx, node, "oauth.mjs", string(b))
	cmd.Dir = mcpjsDir
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir(), "NO_COLOR=1"}
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var last string
	sc := bufio.NewScanner(stdout)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if line := sc.Text(); line == "EXPIRE" {
			core.ExpireAccessTokens()
			_, _ = io.WriteString(stdin, "go\n")
		} else {
			last = line
		}
	}
	_ = stdin.Close()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("oauth.mjs: %v\nstderr:\n%s", err, stderr.String())
	}
	var s oauthSummary
	if err := json.Unmarshal([]byte(last), &s); err != nil {
		t.Fatalf("oauth.mjs output %q: %v\nstderr:\n%s", last, err, stderr.String())
	}
	return s
}

// TestMCPOAuthOfficialSDK: the official MCP TypeScript SDK, given only the
// URL of the endpoint behind two replicas, signs a user in through the
// business page (its own discovery, registration and PKCE), calls the
// tools, keeps working after its access token expired (it refreshes by
// itself, the refresh token rotated), and after revocation is sent to sign
// in again; a denied sign-in brings the host access_denied.
func TestMCPOAuthOfficialSDK(t *testing.T) {
	w, lb, page, node := startOAuthWorld(t)
	endpoint := lb + "/agent-api/v1/workspaces/" + testdb.RouteMulti + "/knowledge/mcp"
	s := runOAuthJS(t, node, w.core, map[string]any{"url": endpoint, "mode": "signin", "query": "refund window"})
	if len(s.Errors) > 0 {
		t.Fatalf("steps failed: %v", s.Errors)
	}
	if !s.SignedIn || s.ClientID == nil || *s.ClientID != testdb.AppA {
		t.Fatalf("sign-in: signedIn %v client %v", s.SignedIn, s.ClientID)
	}
	if s.Authorize.Origin != lb || s.Authorize.Path != "/oauth/authorize" || s.Authorize.Resource != endpoint || s.Authorize.HasState {
		t.Errorf("the SDK's authorization request: %+v; want the front's endpoint, the MCP URL as resource, no state", s.Authorize)
	}
	if !strings.HasPrefix(s.Authorize.RedirectURI, "http://localhost:") || !strings.HasPrefix(s.Callback.Host, "127.0.0.1:") ||
		!s.Callback.HasCode || s.Callback.StateLength < 8 {
		t.Errorf("callback %+v; want the localhost callback answered on 127.0.0.1 with a code and a state", s.Callback)
	}
	if len(s.Tools) != 2 || s.Search.IsError {
		t.Errorf("tools %v, search %+v; want both tools and an answered search", s.Tools, s.Search)
	}
	if s.AfterExpiry.IsError || !s.Rotated || s.RedirectsAfterSignIn != 1 {
		t.Errorf("after expiry: %+v rotated %v redirects %d; want the call answered after a refresh, no new sign-in",
			s.AfterExpiry, s.Rotated, s.RedirectsAfterSignIn)
	}
	if s.RevokeStatus != 200 || s.AfterRevoke != "unauthorized" || !s.NewSignInAsked {
		t.Errorf("revoke %d, then %q (new sign-in asked: %v); want 200, then unauthorized with a new sign-in",
			s.RevokeStatus, s.AfterRevoke, s.NewSignInAsked)
	}

	page.SetDecision("deny")
	d := runOAuthJS(t, node, w.core, map[string]any{"url": endpoint, "mode": "deny", "query": "x"})
	if d.SignedIn || d.Callback.Error == nil || *d.Callback.Error != "access_denied" || d.Callback.HasCode {
		t.Errorf("deny: %+v; want the callback with error=access_denied and no sign-in", d)
	}
}
