package test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/bailinghub/knowledge-sidecar/internal/fakecore"
	"github.com/bailinghub/knowledge-sidecar/internal/testkit"
	"github.com/bailinghub/knowledge-sidecar/internal/testkit/testdb"
	"github.com/bailinghub/knowledge-sidecar/protocol"
)

// bearerRT adds the host's bearer to every request of an MCP client and
// records the MCP-Protocol-Version headers it sent.
type bearerRT struct {
	token    string
	mu       sync.Mutex
	versions map[string]bool
}

func (b *bearerRT) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	if v := r.Header.Get("MCP-Protocol-Version"); v != "" {
		b.mu.Lock()
		b.versions[v] = true
		b.mu.Unlock()
	}
	return http.DefaultTransport.RoundTrip(r)
}

// connectRemote connects the go-sdk's Streamable HTTP client to endpoint,
// asking for the SDK's latest revision.
func connectRemote(t *testing.T, ctx context.Context, endpoint, token string) *mcp.ClientSession {
	t.Helper()
	cs, _ := connectRevision(t, ctx, endpoint, token, "")
	return cs
}

// connectRevision connects asking for revision ("" the latest); the
// transport tells which revisions the client's requests then spoke.
func connectRevision(t *testing.T, ctx context.Context, endpoint, token, revision string) (*mcp.ClientSession, *bearerRT) {
	t.Helper()
	rt := &bearerRT{token: token, versions: map[string]bool{}}
	tr := &mcp.StreamableClientTransport{Endpoint: endpoint, HTTPClient: &http.Client{Transport: rt}, DisableStandaloneSSE: true}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test-host", Version: "1"}, nil).Connect(ctx, tr, &mcp.ClientSessionOptions{ProtocolVersion: revision})
	if err != nil {
		t.Fatalf("connect %s: %v", endpoint, err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	return cs, rt
}

// TestMCPRemoteEndpoint: the remote MCP endpoint (SPEC §10), in the
// 2026-07-28 revision (server/discover, per-request _meta) and in the
// initialize-era ones, lists the two tools, searches and reads through the
// knowledge service as the caller, asking Core's identity endpoint once per
// HTTP request (not once more for the tool call inside it), and counts
// mcp_requests_total.
func TestMCPRemoteEndpoint(t *testing.T) {
	kw := newKWorld(t, fakecore.Options{SystemInfo: true})
	sc := kw.start(t, kopts{})
	for _, rev := range []string{"2026-07-28", "2025-11-25", "2025-06-18", "2025-03-26"} {
		t.Run(rev, func(t *testing.T) { remoteSearchRead(t, kw, sc, rev) })
	}
}

func remoteSearchRead(t *testing.T, kw *kworld, sc *ksidecar, revision string) {
	reg := sc.Registry
	route := testdb.RouteMulti
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	cs, rt := connectRevision(t, ctx, sc.WS(route)+"/knowledge/mcp", kw.TokenA, revision)
	if got := cs.InitializeResult().ProtocolVersion; got != revision {
		t.Errorf("negotiated %q; want %q", got, revision)
	}
	t.Cleanup(func() {
		if !rt.versions[revision] || len(rt.versions) != 1 {
			t.Errorf("the client's requests spoke %v; want only %s", rt.versions, revision)
		}
	})

	tools, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tl := range tools.Tools {
		names = append(names, tl.Name)
	}
	slices.Sort(names)
	if strings.Join(names, ",") != protocol.ReadTool+","+protocol.SearchTool {
		t.Fatalf("tools: %v", names)
	}

	mark := kw.rec.mark()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: protocol.SearchTool, Arguments: map[string]any{"query": refundQuery}})
	if err != nil || res.IsError {
		t.Fatalf("search: %v %+v", err, res)
	}
	if n := len(kw.rec.since(mark, "/agent-auth/v1/session")); n != 1 {
		t.Errorf("one tools/call asked Core's identity %d times; want 1 (the edge's, held for the tool call)", n)
	}
	var answer struct {
		Status string `json:"status"`
		Hints  []struct {
			Ref string `json:"ref"`
		} `json:"hints"`
	}
	raw, _ := json.Marshal(res.StructuredContent)
	if err := json.Unmarshal(raw, &answer); err != nil || answer.Status == "" || len(answer.Hints) == 0 {
		t.Fatalf("search answer: %s", raw)
	}
	res, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: protocol.ReadTool, Arguments: map[string]any{"ref": answer.Hints[0].Ref}})
	if err != nil || res.IsError {
		t.Fatalf("read: %v %+v", err, res)
	}
	// A ref minted for the session is refused to another bearer, as a tool
	// error naming the protocol's code (no JSON-RPC error).
	other := connectRemote(t, ctx, sc.WS(route)+"/knowledge/mcp", kw.TokenStar)
	res, err = other.CallTool(ctx, &mcp.CallToolParams{Name: protocol.ReadTool, Arguments: map[string]any{"ref": answer.Hints[0].Ref}})
	if err != nil || !res.IsError || res.StructuredContent != nil {
		t.Fatalf("another session's ref: %v %+v; want a tool error without structuredContent", err, res)
	}
	if text := res.Content[0].(*mcp.TextContent).Text; !strings.HasPrefix(text, string(protocol.CodeReferenceInvalid)) {
		t.Errorf("another session's ref: %q; want it to start with %s", text, protocol.CodeReferenceInvalid)
	}
	for _, c := range []struct {
		method, outcome string
		min             float64
	}{{"tools/list", "ok", 1}, {"tools/call", "ok", 2}, {"tools/call", "tool_error", 1}} {
		got := testkit.Metric(t, reg, "knowledge_sidecar_mcp_requests_total", map[string]string{"method": c.method, "outcome": c.outcome})
		if got < c.min {
			t.Errorf("mcp_requests_total{%s,%s} = %v; want ≥ %v", c.method, c.outcome, got, c.min)
		}
	}
}

// TestMCPRemoteHTTP: the endpoint's HTTP rules (SPEC §10): a request
// without or with a refused bearer is 401 with a Bearer challenge naming
// the RFC 9728 document when authorization servers are configured, and
// that document is served; a batch is refused; GET and DELETE are 405 with
// Allow: POST;
// a body over 64 KiB is 413; an unknown profile is 400; a workspace that is
// not rolled out passes through to Core untouched.
func TestMCPRemoteHTTP(t *testing.T) {
	kw := newKWorld(t, fakecore.Options{SystemInfo: true})
	sc := kw.start(t, kopts{FeatureOptions: FeatureOptions{Rollout: "allow:" + testdb.RouteMulti,
		MCP: MCPOptions{AuthorizationServers: []string{"https://auth.example"}, Scopes: []string{"agent"}}}})
	route := testdb.RouteMulti
	endpoint := sc.WS(route) + "/knowledge/mcp"
	initialize := []byte(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`)
	post := func(url, token string, body []byte, hdr ...string) (*http.Response, []byte) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		for i := 0; i+1 < len(hdr); i += 2 {
			if hdr[i] == "Host" {
				req.Host = hdr[i+1]
				continue
			}
			req.Header.Set(hdr[i], hdr[i+1])
		}
		return doRead(t, kw.c, req)
	}

	metaURL := sc.URL + "/.well-known/oauth-protected-resource/agent-api/v1/workspaces/" + route + "/knowledge/mcp"
	for _, token := range []string{"", "not-a-token"} {
		res, body := post(endpoint, token, initialize)
		want := `Bearer resource_metadata="` + metaURL + `"`
		if res.StatusCode != http.StatusUnauthorized || res.Header.Get("WWW-Authenticate") != want {
			t.Errorf("token %q: %d WWW-Authenticate %q; want 401 %q (%s)", token, res.StatusCode, res.Header.Get("WWW-Authenticate"), want, body)
		}
	}
	r := kw.call(t, "GET", metaURL, "", nil)
	var meta struct {
		Resource             string   `json:"resource"`
		AuthorizationServers []string `json:"authorization_servers"`
		BearerMethods        []string `json:"bearer_methods_supported"`
		Scopes               []string `json:"scopes_supported"`
	}
	if err := json.Unmarshal(r.Body, &meta); r.Status != 200 || err != nil || meta.Resource != endpoint ||
		strings.Join(meta.AuthorizationServers, ",") != "https://auth.example" || strings.Join(meta.BearerMethods, ",") != "header" ||
		strings.Join(meta.Scopes, ",") != "agent" {
		t.Errorf("metadata: %d %s", r.Status, r.Body)
	}

	if res, body := post(endpoint, kw.TokenA, initialize); res.StatusCode != 200 || res.Header.Get("Mcp-Session-Id") != "" ||
		!strings.HasPrefix(res.Header.Get("Content-Type"), "application/json") {
		t.Errorf("initialize: %d session %q type %q: %s; want 200, no session, JSON", res.StatusCode, res.Header.Get("Mcp-Session-Id"), res.Header.Get("Content-Type"), body)
	}
	// A mesh proxy or an ingress connects over loopback with the public
	// Host: the SDK's DNS-rebinding guard would answer 403 (it is off: the
	// bearer is checked on every request).
	if res, body := post(endpoint, kw.TokenA, initialize, "Host", "agents.example.com"); res.StatusCode != 200 {
		t.Errorf("loopback with a public Host: %d %s; want 200", res.StatusCode, body)
	}
	if res, body := post(endpoint, kw.TokenA, []byte(`{"jsonrpc":"2.0","id":1,"method":"tools/list","secret-looking`)); res.StatusCode != 400 ||
		!strings.Contains(string(body), "-32700") || strings.Contains(string(body), "secret-looking") {
		t.Errorf("malformed JSON: %d %s; want 400 -32700, the body not quoted back", res.StatusCode, body)
	}
	if res, body := post(endpoint, kw.TokenA, []byte(`[`+string(initialize)+`]`)); res.StatusCode != 400 || !strings.Contains(string(body), "-32600") {
		t.Errorf("batch: %d %s; want 400 -32600", res.StatusCode, body)
	}
	if res, body := post(endpoint, kw.TokenA, append(initialize[:len(initialize)-1:len(initialize)-1], []byte(`,"pad":"`+strings.Repeat("x", 65<<10)+`"}`)...)); res.StatusCode != http.StatusRequestEntityTooLarge ||
		!strings.Contains(string(body), `"payload_too_large"`) {
		t.Errorf("66 KiB body: %d %s; want 413", res.StatusCode, body)
	}
	if res, body := post(endpoint+"?profile=nope", kw.TokenA, initialize); res.StatusCode != 400 || !strings.Contains(string(body), "invalid_request") {
		t.Errorf("unknown profile: %d %s; want 400 invalid_request", res.StatusCode, body)
	}
	for _, method := range []string{"GET", "DELETE"} {
		if r := kw.call(t, method, endpoint, kw.TokenA, nil); r.Status != http.StatusMethodNotAllowed || r.Header.Get("Allow") != "POST" {
			t.Errorf("%s: %d Allow %q; want 405 POST", method, r.Status, r.Header.Get("Allow"))
		}
	}
	// Not rolled out: Core's answer (the fake Core has no such path: 404).
	mark := kw.rec.mark()
	res, _ := post(sc.WS(testdb.RouteLegacy)+"/knowledge/mcp", kw.TokenA, initialize)
	if res.StatusCode != http.StatusNotFound || len(kw.rec.since(mark, "/agent-api/v1/workspaces/"+testdb.RouteLegacy+"/knowledge/mcp")) != 1 {
		t.Errorf("not rolled out: %d; want Core's 404, the request forwarded", res.StatusCode)
	}
}

// TestMCPRemoteAudit: a tool call of the remote endpoint is audited under
// its tool's name (SPEC §11: mcp:<tool>), with the caller's session and the
// documents its answer disclosed, and a refused read as refused.
func TestMCPRemoteAudit(t *testing.T) {
	w, file, url := auditedWorld(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	cs := connectRemote(t, ctx, url+"/agent-api/v1/workspaces/"+testdb.RouteMulti+"/knowledge/mcp", w.TokenA)
	if res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: protocol.SearchTool, Arguments: map[string]any{"query": refundQuery}}); err != nil || res.IsError {
		t.Fatalf("search: %v %+v", err, res)
	}
	if res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: protocol.ReadTool, Arguments: map[string]any{"ref": "kr2.forged"}}); err != nil || !res.IsError {
		t.Fatalf("forged read: %v %+v", err, res)
	}
	evs := readAudit(t, file)
	if len(evs) != 2 {
		t.Fatalf("%d audit events; want 2 (one per tool call): %+v", len(evs), evs)
	}
	if e := evs[0]; e.Endpoint != "mcp:"+protocol.SearchTool || e.SessionID != testdb.SessionA || len(e.Documents) == 0 {
		t.Errorf("search event: %+v; want mcp:%s, session A, the hinted documents", e, protocol.SearchTool)
	}
	if e := evs[1]; e.Endpoint != "mcp:"+protocol.ReadTool || e.Status != "refused" || e.Error != string(protocol.CodeReferenceInvalid) {
		t.Errorf("read event: %+v; want mcp:%s refused %s", e, protocol.ReadTool, protocol.CodeReferenceInvalid)
	}
}

// TestMCPRemoteNativeCore: with a Core that serves the protocol natively
// the MCP endpoint is still the sidecar's (Core has none, SPEC §8.2):
// nothing reaches Core's …/knowledge/mcp, and a tool's search is sent to
// Core's native search endpoint with the host's bearer and the tool's
// protocol request.
func TestMCPRemoteNativeCore(t *testing.T) {
	kw := newKWorld(t, fakecore.Options{SystemInfo: true, Native: true})
	sc := kw.start(t, kopts{FeatureOptions: FeatureOptions{NativeDetection: "always"}})
	ws := "/agent-api/v1/workspaces/" + testdb.RouteMulti
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	mark := kw.rec.mark()
	cs := connectRemote(t, ctx, sc.WS(testdb.RouteMulti)+"/knowledge/mcp", kw.TokenA)
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: protocol.SearchTool, Arguments: map[string]any{"query": refundQuery}})
	if err != nil || res.IsError {
		t.Fatalf("search through a native Core: %v %+v", err, res)
	}
	if n := len(kw.rec.since(mark, ws+"/knowledge/mcp")); n != 0 {
		t.Errorf("native Core: %d MCP requests forwarded to Core; want the sidecar to answer them", n)
	}
	fwd := kw.rec.since(mark, ws+"/knowledge/search")
	if len(fwd) != 1 {
		t.Fatalf("native Core: %d searches sent to Core; want the tool's one", len(fwd))
	}
	if fwd[0].Header.Get("Authorization") != "Bearer "+kw.TokenA || !strings.Contains(string(fwd[0].Body), refundQuery) {
		t.Errorf("Core's search got %q with %q; want the tool's request with the host's bearer",
			fwd[0].Body, fwd[0].Header.Get("Authorization"))
	}
}

// TestMCPRemotePublicURL: behind a proxy that rewrites Host, mcp.public_url
// is what the metadata's resource and the 401's resource_metadata are
// built on, not the Host the sidecar saw; without it, a trusted proxy's
// X-Forwarded-Proto: https makes them https.
func TestMCPRemotePublicURL(t *testing.T) {
	kw := newKWorld(t, fakecore.Options{SystemInfo: true})
	path := "/agent-api/v1/workspaces/" + testdb.RouteMulti + "/knowledge/mcp"
	meta := "/.well-known/oauth-protected-resource" + path
	for _, c := range []struct {
		name, public, wantBase string
		trusted                bool
	}{
		{"public_url", "https://agents.example.com", "https://agents.example.com", false},
		{"trusted X-Forwarded-Proto", "", "https://internal.example", true},
		{"untrusted X-Forwarded-Proto", "", "http://internal.example", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			var trusted []netip.Prefix
			if c.trusted {
				trusted = []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}
			}
			f := kw.World.Features(t, FeatureOptions{MCP: MCPOptions{AuthorizationServers: []string{"https://auth.example"}, PublicURL: c.public}})
			sc := StartSidecar(t, SidecarOptions{CoreURL: kw.CoreURL, Features: f, TrustedProxies: trusted})
			send := func(method, p string) *http.Response {
				req, _ := http.NewRequest(method, sc.URL+p, strings.NewReader(`{}`))
				req.Host = "internal.example"
				req.Header.Set("X-Forwarded-Proto", "https")
				req.Header.Set("Content-Type", "application/json")
				res, err := kw.c.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { res.Body.Close() })
				return res
			}
			res := send(http.MethodPost, path)
			if want := `Bearer resource_metadata="` + c.wantBase + meta + `"`; res.StatusCode != 401 || res.Header.Get("WWW-Authenticate") != want {
				t.Errorf("401: %d %q; want %q", res.StatusCode, res.Header.Get("WWW-Authenticate"), want)
			}
			var doc struct {
				Resource string `json:"resource"`
			}
			res = send(http.MethodGet, meta)
			if err := json.NewDecoder(res.Body).Decode(&doc); err != nil || doc.Resource != c.wantBase+path {
				t.Errorf("metadata resource %q (%v); want %q", doc.Resource, err, c.wantBase+path)
			}
		})
	}
}

// TestMCPRemoteIdentityDown: with Core's identity endpoint failing, a tool
// call is still answered 200 — a tool result with isError naming
// knowledge_unavailable and telling the model to wait (SPEC §10: never an
// HTTP 5xx for a call) — while initialize answers (it needs no identity);
// a refused bearer stays a 401.
func TestMCPRemoteIdentityDown(t *testing.T) {
	kw := newKWorld(t, fakecore.Options{SystemInfo: true})
	sc := kw.start(t, kopts{FeatureOptions: FeatureOptions{CoreTimeout: 300 * time.Millisecond}})
	kw.Core.SetFault("/agent-auth", fakecore.Fault{Status: 503})
	defer kw.Core.ClearFault("/agent-auth")
	headers := map[string]string{"Accept": "application/json, text/event-stream", "MCP-Protocol-Version": "2025-06-18"}
	endpoint := sc.WS(testdb.RouteMulti) + "/knowledge/mcp"
	code, body := callH(t, http.MethodPost, endpoint, kw.TokenA,
		[]byte(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"knowledge_search","arguments":{"query":"refund"}}}`), headers)
	var rpc testkit.ToolCallAnswer
	if err := json.Unmarshal(body, &rpc); code != 200 || err != nil || !rpc.Result.IsError || len(rpc.Result.Content) != 1 ||
		!strings.HasPrefix(rpc.Result.Content[0].Text, string(protocol.CodeUnavailable)+":") ||
		!strings.Contains(rpc.Result.Content[0].Text, "temporarily unavailable") {
		t.Fatalf("tools/call with identity down: %d %s; want 200, a tool error knowledge_unavailable with a next step", code, body)
	}
	code, body = callH(t, http.MethodPost, endpoint, kw.TokenA,
		[]byte(`{"jsonrpc":"2.0","id":2,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`), headers)
	if code != 200 || !strings.Contains(string(body), `"protocolVersion":"2025-06-18"`) {
		t.Errorf("initialize with identity down: %d %s; want 200", code, body)
	}
	kw.Core.ClearFault("/agent-auth")
	if code, _ := callH(t, http.MethodPost, endpoint, fakecore.Token("stranger"), []byte(`{}`), headers); code != http.StatusUnauthorized {
		t.Errorf("a refused bearer: %d; want 401", code)
	}
}

// TestMCPRemoteAnswersAreJSONRPC: every answer of the remote endpoint is
// application/json with Cache-Control: no-store — tool results and the
// refusals the SDK would write as plain text quoting the request (SPEC §10,
// issue 39 item 7d), each a JSON-RPC error with the request's id.
func TestMCPRemoteAnswersAreJSONRPC(t *testing.T) {
	kw := newKWorld(t, fakecore.Options{SystemInfo: true})
	sc := kw.start(t, kopts{})
	endpoint := sc.WS(testdb.RouteMulti) + "/knowledge/mcp"
	const secret = "quoted-back-secret"
	search := `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"knowledge_search","arguments":{"query":"refund"}}}`
	for _, tc := range []struct {
		name, body string
		hdr        map[string]string
		status     int
		code       int    // 0: a result
		id         string // the answer's id
	}{
		{"tools/list", `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`, nil, 200, 0, "1"},
		{"tools/call", search, nil, 200, 0, "3"},
		{"text/plain body", search, map[string]string{"Content-Type": "text/plain; x=" + secret}, 415, -32600, "3"},
		{"Accept without event streams", search, map[string]string{"Accept": "application/json"}, 400, -32600, "3"},
		{"unsupported protocol version", search, map[string]string{"MCP-Protocol-Version": "1999-" + secret}, 400, -32600, "3"},
		{"not JSON", `{"jsonrpc":"2.0",` + secret, nil, 400, -32700, "null"},
		{"JSON but no JSON-RPC", `{"hello":"` + secret + `"}`, nil, 400, -32600, "null"},
		{"wrong jsonrpc version", `{"jsonrpc":"1.0","id":"a","method":"tools/list"}`, nil, 400, -32600, `"a"`},
		{"unknown method", `{"jsonrpc":"2.0","id":"m-1","method":"` + secret + `/list"}`, nil, 400, -32601, `"m-1"`},
		{"unknown method, 2026-07-28", `{"jsonrpc":"2.0","id":4,"method":"` + secret + `"}`, map[string]string{"MCP-Protocol-Version": "2026-07-28"}, 404, -32601, "4"},
		// Refused by the SDK itself (a notification with an id, a call without
		// params): its plain-text answer is replaced.
		{"notification with an id", `{"jsonrpc":"2.0","id":5,"method":"notifications/initialized"}`, nil, 400, -32600, "5"},
		{"tools/call without params", `{"jsonrpc":"2.0","id":6,"method":"tools/call"}`, nil, 400, -32600, "6"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest(http.MethodPost, endpoint, strings.NewReader(tc.body))
			req.Header.Set("Authorization", "Bearer "+kw.TokenA)
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Accept", "application/json, text/event-stream")
			req.Header.Set("MCP-Protocol-Version", "2025-06-18")
			for k, v := range tc.hdr {
				req.Header.Set(k, v)
			}
			res, raw := doRead(t, kw.c, req)
			body := string(raw)
			if res.StatusCode != tc.status || !strings.HasPrefix(res.Header.Get("Content-Type"), "application/json") ||
				res.Header.Get("Cache-Control") != "no-store" {
				t.Fatalf("got %d %q Cache-Control %q: %s; want %d application/json no-store", res.StatusCode,
					res.Header.Get("Content-Type"), res.Header.Get("Cache-Control"), body, tc.status)
			}
			var rpc testkit.RPCAnswer
			if err := json.Unmarshal(raw, &rpc); err != nil || rpc.JSONRPC != "2.0" || string(rpc.ID) != tc.id {
				t.Fatalf("got %s; want a JSON-RPC answer with id %s", body, tc.id)
			}
			switch {
			case tc.code == 0 && (rpc.Error != nil || len(rpc.Result) == 0):
				t.Errorf("got %s; want a result", body)
			case tc.code != 0 && (rpc.Error == nil || rpc.Error.Code != tc.code):
				t.Errorf("got %s; want error %d", body, tc.code)
			}
			if strings.Contains(body, secret) {
				t.Errorf("the answer quotes the request: %s", body)
			}
		})
	}
}

// TestMCPRemoteWalkCost: a knowledge_read with near that pages through the
// chain asks Core's route gate (and identity) once for the tool call, not
// once per page, and costs the session one rate-limit token per 4 pages it
// reads (issue 39 item 3: one token no longer buys a 32-page walk).
func TestMCPRemoteWalkCost(t *testing.T) {
	kw := newKWorld(t, fakecore.Options{SystemInfo: true})
	// 6 tokens that do not refill within the test: the search takes 1.
	sc := kw.start(t, kopts{FeatureOptions: FeatureOptions{RateLimit: 0.0001, RateBurst: 6}})
	_, h := kw.mustSearch(t, sc, testdb.RouteMulti, kw.TokenA, map[string]any{"query": testdb.BigDocUnit, "limit": 1}, testdb.DocBigTitle)
	headers := map[string]string{"Accept": "application/json, text/event-stream", "MCP-Protocol-Version": "2025-06-18"}
	endpoint := sc.WS(testdb.RouteMulti) + "/knowledge/mcp"
	nearMiss := func(maxBytes int) (isError bool, text string) {
		t.Helper()
		args, _ := json.Marshal(map[string]any{"ref": h.Ref, "near": "a passage this document does not hold", "max_bytes": maxBytes})
		code, body := callH(t, http.MethodPost, endpoint, kw.TokenA,
			[]byte(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"knowledge_read","arguments":`+string(args)+`}}`), headers)
		var rpc testkit.ToolCallAnswer
		if err := json.Unmarshal(body, &rpc); code != 200 || err != nil || len(rpc.Result.Content) == 0 {
			t.Fatalf("near read: %d %s", code, body)
		}
		return rpc.Result.IsError, rpc.Result.Content[0].Text
	}
	// 32 KiB pages: the 128 KiB chain in 4 pages, one token, one gate question.
	mark := kw.rec.mark()
	if isErr, text := nearMiss(protocol.ReadMaxBytes); isErr {
		t.Fatalf("4-page walk: %.200s; want the first page", text)
	}
	gate := "/agent-api/v1/workspaces/" + testdb.RouteMulti + "/system-info"
	if n, id := len(kw.rec.since(mark, gate)), len(kw.rec.since(mark, "/agent-auth/v1/session")); n != 1 || id != 1 {
		t.Errorf("4-page walk asked the route gate %d times and identity %d times; want 1 and 1", n, id)
	}
	// 4 KiB pages: 32 pages would cost 8 tokens; 4 are left.
	mark = kw.rec.mark()
	isErr, text := nearMiss(protocol.ReadMinBytes)
	if !isErr || !strings.HasPrefix(text, string(protocol.CodeRateLimited)+":") {
		t.Errorf("32-page walk with 4 tokens left: %.200s; want a tool error rate_limited", text)
	}
	if n := len(kw.rec.since(mark, gate)); n != 1 {
		t.Errorf("32-page walk asked the route gate %d times; want 1", n)
	}
}

// TestMCPRemoteAuditOneEventPerCall: a tool call that reads several pages
// writes exactly one audit event, naming the bytes its result showed (SPEC
// §11; issue 39 item 7b): a near miss walks the chain and shows no text; a
// near hit shows its window exactly (the page read again up to the window's
// end); a fetch shows the chain from its start to the 128 KiB budget.
func TestMCPRemoteAuditOneEventPerCall(t *testing.T) {
	w, file, url := auditedWorld(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	endpoint := url + "/agent-api/v1/workspaces/" + testdb.RouteMulti + "/knowledge/mcp"
	cs := connectRemote(t, ctx, endpoint, w.TokenA)
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: protocol.SearchTool, Arguments: map[string]any{"query": testdb.BigDocUnit, "limit": 1}})
	if err != nil || res.IsError {
		t.Fatalf("search: %v %+v", err, res)
	}
	var found struct {
		Hints []struct{ Ref, Title string }
	}
	if b, _ := json.Marshal(res.StructuredContent); json.Unmarshal(b, &found) != nil || len(found.Hints) != 1 || found.Hints[0].Title != testdb.DocBigTitle {
		t.Fatalf("search: %+v; want the big manual", res.StructuredContent)
	}
	ref := found.Hints[0].Ref
	res, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: protocol.ReadTool, Arguments: map[string]any{"ref": ref, "near": "a passage this manual does not hold"}})
	if err != nil || res.IsError {
		t.Fatalf("near miss: %v %+v", err, res)
	}
	res, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: protocol.ReadTool, Arguments: map[string]any{"ref": ref, "near": testdb.BigDocUnit + testdb.BigDocUnit}})
	var window struct {
		Content string `json:"content"`
	}
	if b, _ := json.Marshal(res.StructuredContent); err != nil || res.IsError || json.Unmarshal(b, &window) != nil || window.Content == "" || len(window.Content) > 8192 {
		t.Fatalf("near hit: %v %+v; want a window of at most 8,192 bytes", err, res)
	}
	ocs := connectRemote(t, ctx, endpoint+"?profile=openai", w.TokenA)
	if res, err := ocs.CallTool(ctx, &mcp.CallToolParams{Name: "fetch", Arguments: map[string]any{"id": ref}}); err != nil || res.IsError {
		t.Fatalf("fetch: %v %+v", err, res)
	}
	evs := readAudit(t, file)
	if len(evs) != 4 {
		t.Fatalf("%d audit events; want 4 (one per tool call): %+v", len(evs), evs)
	}
	// The miss walked the chain and showed no text.
	if e := evs[1]; e.Endpoint != "mcp:"+protocol.ReadTool || e.Status != "ok" || len(e.Documents) != 0 {
		t.Errorf("near miss event: %+v; want ok without documents", e)
	}
	// The hit's window is the exact range: the page read again up to it.
	if e := evs[2]; len(e.Documents) != 1 || e.Documents[0].Range == nil || e.Documents[0].Range[0] != 0 || e.Documents[0].Range[1] != len(window.Content) {
		t.Errorf("near hit event: %+v; want the big manual's range [0, %d)", e, len(window.Content))
	}
	for i, want := range []struct {
		endpoint   string
		start, end int
		exhausted  bool
	}{
		{"mcp:fetch", 0, protocol.ReadChainMaxBytes, true},
	} {
		e := evs[i+3]
		if e.Endpoint != want.endpoint || e.Status != "ok" || len(e.Documents) != 1 || e.Documents[0].DocID != testdb.DocBig {
			t.Errorf("%s event: %+v; want ok, the big manual once", want.endpoint, e)
			continue
		}
		d := e.Documents[0]
		// A page's text is its max_bytes less the answer's envelope.
		if d.Range == nil || d.Range[0] != want.start || d.Range[1] > want.end || d.Range[1] < want.end*9/10 ||
			d.BudgetExhausted == nil || *d.BudgetExhausted != want.exhausted {
			t.Errorf("%s event range %v exhausted %v; want [%d, ≤%d) exhausted %v", want.endpoint, d.Range, d.BudgetExhausted, want.start, want.end, want.exhausted)
		}
	}
}

// TestMCPRemoteReadLocation: through the official SDK against the remote
// MCP endpoint, each knowledge_read page of the 480,000-byte document says
// which bytes it holds, "[bytes A–B of 480,000]", in its text and its note —
// the first page, and the next one by the cursor the endpoint returned.
func TestMCPRemoteReadLocation(t *testing.T) {
	kw := newKWorld(t, fakecore.Options{SystemInfo: true})
	sc := kw.start(t, kopts{})
	content := testdb.BigDocContent()
	_, h := kw.mustSearch(t, sc, testdb.RouteMulti, kw.TokenA, map[string]any{"query": testdb.BigDocUnit, "limit": 1}, testdb.DocBigTitle)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	cs := connectRemote(t, ctx, sc.WS(testdb.RouteMulti)+"/knowledge/mcp", kw.TokenA)
	thousands := func(n int) string {
		s := strconv.Itoa(n)
		for i := len(s) - 3; i > 0; i -= 3 {
			s = s[:i] + "," + s[i:]
		}
		return s
	}
	at := 0
	args := map[string]any{"ref": h.Ref, "max_bytes": 8192}
	for page := 1; page <= 2; page++ {
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: protocol.ReadTool, Arguments: args})
		if err != nil || res.IsError {
			t.Fatalf("page %d: %v %+v", page, err, res)
		}
		var p struct {
			Content    string  `json:"content"`
			NextCursor *string `json:"next_cursor"`
			Note       string  `json:"note"`
			Total      int     `json:"total_content_bytes"`
		}
		raw, _ := json.Marshal(res.StructuredContent)
		if err := json.Unmarshal(raw, &p); err != nil || p.NextCursor == nil || p.Content != content[at:at+len(p.Content)] || p.Total != len(content) {
			t.Fatalf("page %d: %.200s", page, raw)
		}
		want := "[bytes " + thousands(at) + "–" + thousands(at+len(p.Content)) + " of " + thousands(len(content)) + "] "
		text := res.Content[0].(*mcp.TextContent).Text
		if !strings.HasPrefix(p.Note, want) || !strings.Contains(text, "\n---\n"+want) {
			t.Errorf("page %d: note %.100q; want it to start with %q, in the text too", page, p.Note, want)
		}
		at += len(p.Content)
		args = map[string]any{"ref": h.Ref, "cursor": *p.NextCursor, "max_bytes": 8192}
	}
}
