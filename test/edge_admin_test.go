package test

import (
	"bytes"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/bailinghub/knowledge-sidecar/internal/fakecore"
	"github.com/bailinghub/knowledge-sidecar/internal/testkit/testdb"
)

// TestAdminListenerRefusesBrowsers: issue 39, finding 7e. A DNS-rebinding
// page reaches the admin listener under its own host name, and a
// cross-site form can POST to it. The admin listener answers only IP
// literals, localhost and admin_allowed_hosts in Host, and refuses
// state-changing requests from another origin.
func TestAdminListenerRefusesBrowsers(t *testing.T) {
	u := startUpstream(t, func(u *upstream, w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	sc := StartSidecar(t, SidecarOptions{CoreURL: u.URL, AdminAllowedHosts: []string{"sidecar-admin.internal"}})
	au, _ := url.Parse(sc.AdminURL)
	port := au.Port()
	do := func(method, path, host string, hdr ...string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(method, sc.AdminURL+path, nil)
		req.Host = host
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("%s %s (Host %s): %v", method, path, host, err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	for _, host := range []string{"127.0.0.1:" + port, "localhost:" + port, "LOCALHOST", "[::1]:" + port, "sidecar-admin.internal:" + port} {
		for _, path := range []string{"/healthz", "/metrics", "/-/explain?route=" + testdb.RouteMulti} {
			if code, body := do("GET", path, host); code == http.StatusForbidden {
				t.Errorf("GET %s with Host %s: got 403 %s; want it served", path, host, body)
			}
		}
	}
	for _, host := range []string{"rebind.attacker.example", "rebind.attacker.example:" + port, "localhost.attacker.example", "127.0.0.1.nip.io"} {
		for _, path := range []string{"/-/explain?route=" + testdb.RouteMulti, "/-/status", "/metrics"} {
			if code, body := do("GET", path, host); code != http.StatusForbidden || !strings.Contains(body, "host_not_allowed") {
				t.Errorf("GET %s with Host %s: got %d %s; want 403 host_not_allowed", path, host, code, body)
			}
		}
	}
	local := "127.0.0.1:" + port
	for _, hdr := range [][]string{
		{"Origin", "https://attacker.example", "Sec-Fetch-Site", "cross-site"},
		{"Sec-Fetch-Site", "cross-site"},
		{"Origin", "https://attacker.example"},
	} {
		if code, body := do("POST", "/-/reload", local, hdr...); code != http.StatusForbidden {
			t.Errorf("cross-origin POST /-/reload %v: got %d %s; want 403", hdr, code, body)
		}
	}
	// Not a browser, or the same origin: refused or not for its own reasons
	// (no reloader here), never as cross-origin.
	for _, hdr := range [][]string{nil, {"Sec-Fetch-Site", "same-origin"}, {"Origin", "http://" + local}} {
		if code, body := do("POST", "/-/reload", local, hdr...); code == http.StatusForbidden {
			t.Errorf("POST /-/reload %v: got 403 %s; want it not refused as cross-origin", hdr, body)
		}
	}
}

// TestMCPChallengeCannotBeInjected: issue 39, finding 7c. A '"' (%22) in
// the route segment was copied into the 401's WWW-Authenticate, adding a
// second resource_metadata pointing elsewhere. The challenge is built
// from the route table and the parsed route key, never from the request
// path.
func TestMCPChallengeCannotBeInjected(t *testing.T) {
	kw := newKWorld(t, fakecore.Options{SystemInfo: true})
	sc := kw.start(t, kopts{FeatureOptions: FeatureOptions{
		MCP: MCPOptions{AuthorizationServers: []string{"https://auth.example"}, Scopes: []string{"agent"}}}})
	initialize := []byte(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`)
	post := func(target string) *http.Response {
		t.Helper()
		req, err := http.NewRequest(http.MethodPost, sc.URL+target, bytes.NewReader(initialize))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		res, err := kw.c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		drainClose(res.Body)
		return res
	}
	for _, seg := range []string{
		`x%22,resource_metadata=%22https:evil.example`,
		`kb-multi%22,%20resource_metadata=%22http:evil.example`,
		`%22`,
		`a%5C%22b`,
	} {
		res := post("/agent-api/v1/workspaces/" + seg + "/knowledge/mcp")
		wa := res.Header.Values("WWW-Authenticate")
		all := strings.Join(wa, " | ")
		if strings.Contains(all, "evil") || strings.Count(all, "resource_metadata") > 1 || strings.Count(all, `"`)%2 != 0 {
			t.Errorf("route segment %s: %d WWW-Authenticate %q; want no auth-param from the request", seg, res.StatusCode, wa)
		}
	}
	res := post("/agent-api/v1/workspaces/" + testdb.RouteMulti + "/knowledge/mcp")
	want := `Bearer resource_metadata="` + sc.URL + "/.well-known/oauth-protected-resource/agent-api/v1/workspaces/" + testdb.RouteMulti + `/knowledge/mcp"`
	if res.StatusCode != http.StatusUnauthorized || res.Header.Get("WWW-Authenticate") != want {
		t.Errorf("a route key: %d WWW-Authenticate %q; want 401 %q", res.StatusCode, res.Header.Get("WWW-Authenticate"), want)
	}
}
