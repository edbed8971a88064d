package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
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

// browserVisit is what the test's browser saw: the URL mcp-remote opened
// and where following it landed.
type browserVisit struct {
	Authorize              url.Values
	Origin, Path           string
	LandedHost, LandedPath string
	LandedWithCode         bool
	Status                 int
	Err                    error
}

// browserDouble is the browser mcp-remote opens: browser.mjs posts each
// URL to its control server, and the mcpRemote that started it follows it.
type browserDouble struct {
	control string
	urls    chan string
	mu      sync.Mutex
	visits  []browserVisit
}

func newBrowserDouble(t *testing.T) *browserDouble {
	b := &browserDouble{urls: make(chan string, 4)}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u, _ := io.ReadAll(r.Body)
		b.urls <- string(u)
	}))
	t.Cleanup(srv.Close)
	b.control = srv.URL
	return b
}

// follow opens u as a browser does: the sidecar's /oauth/authorize, the
// business consent page, the host's loopback callback.
func (b *browserDouble) follow(u string) {
	v := browserVisit{}
	if pu, err := url.Parse(u); err == nil {
		v.Authorize, v.Origin, v.Path = pu.Query(), pu.Scheme+"://"+pu.Host, pu.Path
	}
	resp, err := http.Get(u)
	if err == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		v.LandedHost, v.LandedPath, v.Status = resp.Request.URL.Host, resp.Request.URL.Path, resp.StatusCode
		v.LandedWithCode = resp.Request.URL.Query().Has("code")
	}
	v.Err = err
	b.mu.Lock()
	b.visits = append(b.visits, v)
	b.mu.Unlock()
}

func (b *browserDouble) seen() []browserVisit {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]browserVisit(nil), b.visits...)
}

// mcpRemote is one `mcp-remote URL` process: stdio on this side,
// Streamable HTTP + OAuth on the other, as an stdio-only host runs it.
type mcpRemote struct {
	t       *testing.T
	stdin   io.WriteCloser
	lines   chan string
	stderr  *lockedBuffer
	browser *browserDouble
	nextID  int
}

// lockedBuffer is a process's stderr, read while the process writes it;
// ready is closed once it holds the line mcp-remote logs when its OAuth
// callback server listens.
type lockedBuffer struct {
	mu    sync.Mutex
	b     strings.Builder
	ready chan struct{}
}

const mcpRemoteCallbackUp = "OAuth callback server running at"

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	n, err := l.b.Write(p)
	select {
	case <-l.ready:
	default:
		if strings.Contains(l.b.String(), mcpRemoteCallbackUp) {
			close(l.ready)
		}
	}
	return n, err
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// failure is what a failed step shows: mcp-remote's stderr and the
// browser's visits.
func (m *mcpRemote) failure() string {
	return fmt.Sprintf("stderr:\n%s\nbrowser visits: %+v", m.stderr.String(), m.browser.seen())
}

// startMCPRemote runs mcp-remote with its config (client, tokens) in
// configDir and browser.mjs as the browser. mcp-remote opens the browser
// before its callback server listens (a person takes longer than that to
// approve); the test's browser follows the URL once mcp-remote has logged
// that the callback server listens.
func startMCPRemote(t *testing.T, node, endpoint, configDir string, browser *browserDouble) *mcpRemote {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	browserJS, _ := filepath.Abs(filepath.Join(mcpjsDir, "browser.mjs"))
	cmd := exec.CommandContext(ctx, node, "node_modules/mcp-remote/dist/proxy.js", endpoint)
	cmd.Dir = mcpjsDir
	// No DISPLAY: mcp-remote's opener (xdg-open) falls back to $BROWSER.
	cmd.Env = []string{"PATH=" + filepath.Dir(node) + ":" + os.Getenv("PATH"), "HOME=" + t.TempDir(), "NO_COLOR=1",
		"MCP_REMOTE_CONFIG_DIR=" + configDir, "BROWSER=" + browserJS, "KS_BROWSER_CONTROL=" + browser.control}
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	m := &mcpRemote{t: t, stdin: stdin, lines: make(chan string, 16), stderr: &lockedBuffer{ready: make(chan struct{})}, browser: browser}
	cmd.Stderr = m.stderr
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			select {
			case m.lines <- sc.Text():
			case <-ctx.Done():
				return
			}
		}
		close(m.lines)
	}()
	browsed := make(chan struct{})
	go func() {
		defer close(browsed)
		for {
			select {
			case u := <-browser.urls:
				select {
				case <-m.stderr.ready:
					browser.follow(u)
				case <-ctx.Done():
					return
				}
			case <-ctx.Done():
				return
			}
		}
	}()
	t.Cleanup(func() {
		_ = stdin.Close()
		cancel()
		_ = cmd.Wait()
		<-browsed
	})
	return m
}

// call sends one JSON-RPC request over stdio and waits (bounded) for its
// response; notifications and other lines in between are skipped.
func (m *mcpRemote) call(method string, params any) json.RawMessage {
	m.t.Helper()
	m.nextID++
	req, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": m.nextID, "method": method, "params": params})
	if _, err := m.stdin.Write(append(req, '\n')); err != nil {
		m.t.Fatalf("%s: %v\n%s", method, err, m.failure())
	}
	deadline := time.After(90 * time.Second)
	for {
		select {
		case line, ok := <-m.lines:
			if !ok {
				m.t.Fatalf("%s: mcp-remote exited\n%s", method, m.failure())
			}
			var r struct {
				ID     *int
				Result json.RawMessage
				Error  *struct{ Message string }
			}
			if json.Unmarshal([]byte(line), &r) != nil || r.ID == nil || *r.ID != m.nextID {
				continue
			}
			if r.Error != nil {
				m.t.Fatalf("%s: error %q\n%s", method, r.Error.Message, m.failure())
			}
			return r.Result
		case <-deadline:
			m.t.Fatalf("%s: no answer from mcp-remote\n%s", method, m.failure())
		}
	}
}

// session initializes, lists the tools and calls knowledge_search; it
// returns the tool names and whether the call was answered.
func (m *mcpRemote) session(query string) (tools []string) {
	m.t.Helper()
	m.call("initialize", map[string]any{"protocolVersion": "2025-06-18", "capabilities": map[string]any{},
		"clientInfo": map[string]any{"name": "ks-stdio-host", "version": "1.0.0"}})
	_, _ = io.WriteString(m.stdin, `{"jsonrpc":"2.0","method":"notifications/initialized"}`+"\n")
	var l struct{ Tools []struct{ Name string } }
	_ = json.Unmarshal(m.call("tools/list", map[string]any{}), &l)
	for _, tl := range l.Tools {
		tools = append(tools, tl.Name)
	}
	m.search(query)
	return tools
}

// search calls knowledge_search and fails the test unless it is answered.
func (m *mcpRemote) search(query string) {
	m.t.Helper()
	var r toolResult
	_ = json.Unmarshal(m.call("tools/call", map[string]any{"name": "knowledge_search", "arguments": map[string]any{"query": query}}), &r)
	if r.IsError {
		m.t.Fatalf("knowledge_search through mcp-remote: %+v", r)
	}
}

// refreshTokenOf reads the refresh token mcp-remote keeps in its config dir.
func refreshTokenOf(t *testing.T, configDir string) string {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(configDir, "*", "*_tokens.json"))
	if len(files) != 1 {
		t.Fatalf("mcp-remote's token files in its config dir: %v; want one", files)
	}
	b, err := os.ReadFile(files[0])
	if err != nil {
		t.Fatal(err)
	}
	var tok struct {
		RefreshToken string `json:"refresh_token"`
	}
	if err := json.Unmarshal(b, &tok); err != nil || tok.RefreshToken == "" {
		t.Fatalf("mcp-remote's tokens: %v (refresh token kept: %v)", err, tok.RefreshToken != "")
	}
	return tok.RefreshToken
}

// TestMCPOAuthMCPRemote: `mcp-remote URL`, as an stdio-only host runs it,
// given only the URL of the endpoint behind two replicas, signs a user in
// (its discovery, registration, browser and loopback callback, the business
// page's approval), lists and calls the tools over stdio, keeps working
// after its access token expired at Core (it refreshes by itself), and a
// later run with the same config dir and an expired access token works
// without opening the browser again.
func TestMCPOAuthMCPRemote(t *testing.T) {
	w, lb, _, node := startOAuthWorld(t)
	endpoint := lb + "/agent-api/v1/workspaces/" + testdb.RouteMulti + "/knowledge/mcp"
	configDir, browser := t.TempDir(), newBrowserDouble(t)

	m := startMCPRemote(t, node, endpoint, configDir, browser)
	if tools := m.session("refund window"); len(tools) != 2 {
		t.Errorf("tools through mcp-remote: %v; want both", tools)
	}
	vs := browser.seen()
	if len(vs) != 1 {
		t.Fatalf("browser visits %+v; want exactly one sign-in", vs)
	}
	v := vs[0]
	if v.Origin != lb || v.Path != "/oauth/authorize" || v.Authorize.Get("resource") != endpoint ||
		!strings.HasPrefix(v.Authorize.Get("redirect_uri"), "http://localhost:") {
		t.Errorf("mcp-remote's authorization request %s%s %v; want the front's endpoint, the MCP URL as resource, a localhost callback",
			v.Origin, v.Path, v.Authorize)
	}
	if v.Err != nil || !strings.HasPrefix(v.LandedHost, "127.0.0.1:") || !v.LandedWithCode || v.Status != 200 {
		t.Errorf("the browser ended at %s%s %d (%v); want mcp-remote's callback on 127.0.0.1 with a code", v.LandedHost, v.LandedPath, v.Status, v.Err)
	}
	before := refreshTokenOf(t, configDir)

	// The access token expires at Core: the next call is refused, mcp-remote
	// refreshes by itself (the refresh token rotates), no browser.
	w.core.ExpireAccessTokens()
	m.search("refund window")
	after := refreshTokenOf(t, configDir)
	if after == before {
		t.Error("the call after expiry was answered without a refresh; want the rotated refresh token kept")
	}

	// A later run (a host restarted) finds the tokens in the config dir; its
	// access token has expired too.
	w.core.ExpireAccessTokens()
	m2 := startMCPRemote(t, node, endpoint, configDir, browser)
	if tools := m2.session("refund window"); len(tools) != 2 {
		t.Errorf("tools in the later run: %v; want both", tools)
	}
	if refreshTokenOf(t, configDir) == after {
		t.Error("the later run was answered without a refresh")
	}
	if vs := browser.seen(); len(vs) != 1 {
		t.Errorf("browser visits %d; want the one sign-in only", len(vs))
	}
}
