package main

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/bailinghub/knowledge-sidecar/sidecar"
)

// TestDemoSignIn: on a fixed loopback port the demo serves the OAuth front
// (on port 0 it cannot know its issuer, and does not); a host signs in
// through the demo's business consent page — shown, then approved with its
// button — and calls a tool with the token it got.
func TestDemoSignIn(t *testing.T) {
	docs, _ := mustLoadDocs(t, "")
	w, err := startDemoWorld(docs, randomToken("bha_"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.close)
	if cfg := w.config("127.0.0.1:0", "127.0.0.1:0"); cfg.MCP.OAuth.ClientAppID != "" {
		t.Errorf("port 0: the front is on (issuer %q)", cfg.MCP.PublicURL)
	}
	cfg := w.config("127.0.0.1:18080", "127.0.0.1:0") // formatted only: nothing listens on it
	if cfg.MCP.OAuth.ClientAppID != demoClient || cfg.MCP.PublicURL != "http://127.0.0.1:18080" {
		t.Fatalf("fixed port: oauth %q issuer %q", cfg.MCP.OAuth.ClientAppID, cfg.MCP.PublicURL)
	}
	app, err := sidecar.Build(context.Background(), cfg, sidecar.Deps{Catalog: w.catalog, SingleProcess: true})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(app.Server.Handler())
	t.Cleanup(func() { srv.Close(); app.Close() })

	browser := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	const verifier = "demo-verifier-0123456789-0123456789-0123456789"
	sum := sha256.Sum256([]byte(verifier))
	mcpPath := "/agent-api/v1/workspaces/" + demoRoute + "/knowledge/mcp"
	q := url.Values{"response_type": {"code"}, "client_id": {demoClient}, "redirect_uri": {"http://localhost:40999/cb"},
		"code_challenge": {base64.RawURLEncoding.EncodeToString(sum[:])}, "code_challenge_method": {"S256"},
		"state": {"demo-state-1"}, "resource": {cfg.MCP.PublicURL + mcpPath}}
	res, err := browser.Get(srv.URL + "/oauth/authorize?" + q.Encode())
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	page := res.Header.Get("Location")
	if res.StatusCode != 302 || !strings.HasPrefix(page, w.bizURL+"?authorization_id=") {
		t.Fatalf("authorize: %d %q; want 302 to the business page", res.StatusCode, page)
	}
	res, err = browser.Get(page)
	if err != nil {
		t.Fatal(err)
	}
	html, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 200 || !strings.Contains(string(html), "Approve") || !strings.Contains(string(html), "demo-user") {
		t.Fatalf("consent page: %d %s", res.StatusCode, html)
	}
	id := strings.TrimPrefix(page, w.bizURL+"?authorization_id=")
	res, err = browser.PostForm(w.bizURL, url.Values{"authorization_id": {id}, "decision": {"approve"}})
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	cb, _ := url.Parse(res.Header.Get("Location"))
	if res.StatusCode != 303 || cb.Host != "127.0.0.1:40999" || cb.Query().Get("state") != "demo-state-1" {
		t.Fatalf("approve: %d %q", res.StatusCode, res.Header.Get("Location"))
	}
	res, err = http.PostForm(srv.URL+"/oauth/token", url.Values{"grant_type": {"authorization_code"}, "client_id": {demoClient},
		"code": {cb.Query().Get("code")}, "redirect_uri": {"http://localhost:40999/cb"}, "code_verifier": {verifier}})
	if err != nil {
		t.Fatal(err)
	}
	var tok struct {
		AccessToken string `json:"access_token"`
	}
	_ = json.NewDecoder(res.Body).Decode(&tok)
	res.Body.Close()
	if res.StatusCode != 200 || tok.AccessToken == "" {
		t.Fatalf("token: %d", res.StatusCode)
	}
	req, _ := http.NewRequest("POST", srv.URL+mcpPath, strings.NewReader(
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"knowledge_search","arguments":{"query":"refund"}}}`))
	req.Header.Set("Authorization", "Bearer "+tok.AccessToken)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("MCP-Protocol-Version", "2025-06-18")
	res, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 200 || strings.Contains(string(body), `"isError":true`) || !strings.Contains(strings.ToLower(string(body)), "refund") {
		t.Errorf("tool call with the signed-in token: %d %s", res.StatusCode, body)
	}
}
