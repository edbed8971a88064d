package main

// What this proves: the remote MCP endpoint (SPEC §10) works with MCP
// clients nobody here wrote — the official MCP TypeScript SDK's Streamable
// HTTP client (test/mcpjs/client.mjs) and the MCP Inspector CLI — through a
// round-robin load balancer over two `serve` replicas that share nothing but
// the signing key and the catalog (a real MariaDB): no sticky sessions, refs
// and cursors issued by one replica verify on the other. The SDK validates
// every structuredContent against the tool's outputSchema, so a call that
// returns at all is evidence of schema validity. Everything asserted is
// compared with what the seeded document and the plain /knowledge/search
// endpoint hold, not with values copied from the implementation.
//
// node and the pinned packages (test/mcpjs/package-lock.json) are installed
// by scripts/test.sh (`npm ci`); without them the tests skip, and with
// CI=true they fail.

import (
	"bytes"
	"context"
	"crypto/md5"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
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
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bailinghub/knowledge-sidecar/internal/testkit"
	"github.com/bailinghub/knowledge-sidecar/internal/testkit/testdb"
)

const (
	mcpjsDir          = "../../test/mcpjs"
	mcpjsSDKVersion   = "1.32.2" // test/mcpjs/package.json
	mcpjsInspectorVer = "1.0.3"
	mcpjsRemoteVer    = "0.15.1"
	mcpAuthServer     = "https://auth.example"
	mcpScope          = "knowledge:read"
	// The seeded document: over 64 KiB (several pages of a read chain) and
	// under the 128 KiB chain budget (its chain ends by itself); the passage
	// sits far beyond the first page.
	mcpDocID    int64 = 201
	mcpDocTitle       = "Depot operations handbook"
	mcpPassage        = "The cobalt ladder beside the north lighthouse door must be inspected every quarter by two people."
	mcpQuery          = "cobalt ladder lighthouse inspected"
)

// mcpDocContent is the seeded document: numbered paragraphs, with the
// passage as paragraph 820 of 1000 (about 82% of the way in).
func mcpDocContent() string {
	var b strings.Builder
	for i := range 1000 {
		if i == 820 {
			b.WriteString(mcpPassage + "\n\n")
		}
		fmt.Fprintf(&b, "Aisle %03d of the depot stores pallets of batch %05d; staff log the count at the start of every shift.\n\n", i, 7919*i%100000)
	}
	return strings.TrimSpace(b.String())
}

// mcpWorld is two `serve` replicas behind a round-robin balancer.
type mcpWorld struct {
	w        *serveWorld
	lb       string // the balancer's base URL
	endpoint string // the MCP endpoint through the balancer
	content  string // the seeded document
	node     string
	mu       sync.Mutex
	calls    []lbCall // every request the balancer passed on
}

type lbCall struct {
	replica   int
	path      string
	rpc, tool string // JSON-RPC method and tools/call name, when a POST carries them
}

// requireMCPJS finds node and the pinned packages, or skips (fails with CI=true).
func requireMCPJS(t *testing.T) string {
	t.Helper()
	node, err := exec.LookPath("node")
	if err == nil {
		for pkg, want := range map[string]string{"@modelcontextprotocol/sdk": mcpjsSDKVersion, "@modelcontextprotocol/inspector": mcpjsInspectorVer, "mcp-remote": mcpjsRemoteVer} {
			var p struct{ Version string }
			b, rerr := os.ReadFile(filepath.Join(mcpjsDir, "node_modules", pkg, "package.json"))
			if rerr == nil {
				rerr = json.Unmarshal(b, &p)
			}
			if rerr == nil && p.Version != want {
				rerr = fmt.Errorf("%s is %s, package-lock.json pins %s (run npm ci in test/mcpjs)", pkg, p.Version, want)
			}
			if rerr != nil {
				err = rerr
				break
			}
		}
	}
	testkit.RequireService(t, "node with test/mcpjs installed (scripts/test.sh runs npm ci there)", err)
	return node
}

func startMCPWorld(t *testing.T) *mcpWorld {
	t.Helper()
	node := requireMCPJS(t)
	w := newServeWorld(t, "mcpjs", fmt.Sprintf("mcp:\n  authorization_servers: [%q]\n  scopes: [%q]\n", mcpAuthServer, mcpScope))
	m := &mcpWorld{w: w, content: mcpDocContent(), node: node}
	sum := md5.Sum([]byte(mcpDocTitle + "\x00" + m.content))
	w.db.Exec(t, `INSERT INTO bz_kb_docs (doc_id, kb_id, title, content, content_hash, status, chunk_count, created_at, updated_at)
		VALUES (?, ?, ?, ?, ?, 'ready', 1, UTC_TIMESTAMP(), UTC_TIMESTAMP())`,
		mcpDocID, testdb.KBManuals, mcpDocTitle, m.content, hex.EncodeToString(sum[:]))
	if err := w.db.IndexIn(context.Background(), w.core); err != nil {
		t.Fatal(err)
	}

	// The replicas share the signing key (set explicitly, not derived) and
	// the config; each has its own memory ledger and rate buckets.
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	w.env = append(w.env, "KNOWLEDGE_SIDECAR_SIGNING_KEYS=k1:"+base64.StdEncoding.EncodeToString(key))
	w.writeCfg("allow:" + testdb.RouteMulti)
	replicas := []*url.URL{}
	for range 2 {
		p := startServe(t, w.bin, w.env)
		u, _ := url.Parse(p.url)
		replicas = append(replicas, u)
	}

	// Round robin per request, no affinity of any kind; the Host header is
	// the balancer's, as behind a real one.
	var next atomic.Uint64
	rp := &httputil.ReverseProxy{Rewrite: func(r *httputil.ProxyRequest) {
		i := int((next.Add(1) - 1) % uint64(len(replicas)))
		r.SetURL(replicas[i])
		r.Out.Host = r.In.Host
		c := lbCall{replica: i, path: r.In.URL.Path}
		if body, ok := r.In.Context().Value(lbBodyKey{}).([]byte); ok {
			var rpc struct {
				Method string
				Params struct{ Name string }
			}
			if json.Unmarshal(body, &rpc) == nil {
				c.rpc, c.tool = rpc.Method, rpc.Params.Name
			}
		}
		m.mu.Lock()
		m.calls = append(m.calls, c)
		m.mu.Unlock()
	}}
	lb := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(http.MaxBytesReader(rw, r.Body, 1<<20))
		if err != nil {
			http.Error(rw, err.Error(), http.StatusBadRequest)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		rp.ServeHTTP(rw, r.WithContext(context.WithValue(r.Context(), lbBodyKey{}, body)))
	}))
	t.Cleanup(lb.Close)
	m.lb = lb.URL
	m.endpoint = lb.URL + "/agent-api/v1/workspaces/" + testdb.RouteMulti + "/knowledge/mcp"
	return m
}

type lbBodyKey struct{}

// runNode runs a program of test/mcpjs with node, bounded, and returns stdout.
func (m *mcpWorld) runNode(t *testing.T, args ...string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, m.node, args...)
	cmd.Dir = mcpjsDir
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir(), "NO_COLOR=1"}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("node %s: %v\nstdout:\n%s\nstderr:\n%s", args[0], err, stdout.String(), stderr.String())
	}
	return stdout.Bytes()
}

// toolResult is client.mjs's summary of one tool result.
type toolResult struct {
	IsError      bool
	Text         *string
	ContentTypes []string
	Structured   map[string]any
}

func (r toolResult) text() string {
	if r.Text == nil {
		return ""
	}
	return *r.Text
}

// jsSummary is client.mjs's output.
type jsSummary struct {
	Errors          map[string]string // step → what it threw
	ProtocolVersion *string
	SessionID       *string
	Tools           []struct {
		Name, Description string
		Title             *string
		Annotations       map[string]any
		InputSchema       struct {
			Properties map[string]any
			Required   []string
		}
		HasOutputSchema bool
	}
	Search       toolResult
	Pages        []toolResult
	Near         toolResult
	Tampered     toolResult
	Unauthorized map[string]struct {
		SDKError        *string
		Status          int
		WWWAuthenticate *string
	}
	Metadata *struct {
		ContentType string
		Status      int
		Body        map[string]any
	}
	OpenAI struct {
		Tools   []string
		Search  toolResult
		Results []struct{ ID, Title, URL string }
		Fetch   struct {
			toolResult
			Doc map[string]any
		}
	}
}

// plainSearch asks the protocol's own endpoint (through the balancer).
func (m *mcpWorld) plainSearch(t *testing.T, query string) map[string]any {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"query": query})
	req, _ := http.NewRequest("POST", m.lb+"/agent-api/v1/workspaces/"+testdb.RouteMulti+"/knowledge/search", bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+m.w.token)
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var out map[string]any
	if err := json.NewDecoder(res.Body).Decode(&out); err != nil || res.StatusCode != 200 {
		t.Fatalf("plain search: %d %v", res.StatusCode, err)
	}
	return out
}

// TestMCPRemoteTypeScriptSDK runs test/mcpjs/client.mjs once and checks
// its record, one subtest per aspect.
func TestMCPRemoteTypeScriptSDK(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary twice and node")
	}
	m := startMCPWorld(t)
	in, _ := json.Marshal(map[string]string{"url": m.endpoint, "token": m.w.token, "query": mcpQuery, "near": mcpPassage})
	raw := m.runNode(t, "client.mjs", string(in))
	var s jsSummary
	if err := json.Unmarshal(raw, &s); err != nil {
		t.Fatalf("client.mjs output: %v\n%s", err, raw)
	}
	t.Logf("protocol %v, %d pages", deref(s.ProtocolVersion), len(s.Pages))
	// steps fails the subtest when one of client.mjs's steps threw.
	steps := func(t *testing.T, names ...string) {
		t.Helper()
		for _, n := range names {
			if e, ok := s.Errors[n]; ok {
				t.Fatalf("client.mjs step %q: %s", n, e)
			}
		}
	}

	// Stateless: no session, and the balancer spread the requests — the
	// reads of one chain included — over both replicas.
	t.Run("stateless", func(t *testing.T) {
		steps(t, "connect")
		if s.SessionID != nil {
			t.Errorf("Mcp-Session-Id %q issued; the endpoint is stateless", *s.SessionID)
		}
		m.checkBothReplicas(t, "knowledge_read")
	})

	t.Run("tools_list", func(t *testing.T) {
		steps(t, "connect", "tools/list")
		var names []string
		for _, tool := range s.Tools {
			names = append(names, tool.Name)
			if tool.Title == nil || *tool.Title == "" {
				t.Errorf("%s: no title", tool.Name)
			}
			for hint, want := range map[string]bool{"readOnlyHint": true, "idempotentHint": true, "destructiveHint": false, "openWorldHint": false} {
				if got, ok := tool.Annotations[hint].(bool); !ok || got != want {
					t.Errorf("%s: annotation %s = %v; want %v", tool.Name, hint, tool.Annotations[hint], want)
				}
			}
			if !tool.HasOutputSchema {
				t.Errorf("%s: no object outputSchema", tool.Name)
			}
			// SPEC §10: the descriptions say how long refs live and where a
			// chain ends (protocol: 300 s, 131072 bytes).
			if !strings.Contains(tool.Description, "5 minutes") || tool.Name == "knowledge_read" && !strings.Contains(tool.Description, "128 KiB") {
				t.Errorf("%s: the description does not state the 5-minute ref life (and, for a read, the 128 KiB chain): %q", tool.Name, tool.Description)
			}
			want := map[string][]string{"knowledge_search": {"query", "limit", "run_id"}, "knowledge_read": {"ref", "cursor", "max_bytes", "run_id", "near"}}[tool.Name]
			for _, p := range want {
				if _, ok := tool.InputSchema.Properties[p]; !ok {
					t.Errorf("%s: inputSchema lacks %q", tool.Name, p)
				}
			}
		}
		if !slices.Equal(sorted(names), []string{"knowledge_read", "knowledge_search"}) {
			t.Errorf("tools: %v; want knowledge_search and knowledge_read", names)
		}
	})

	// knowledge_search: the protocol's answer plus a note, as the plain
	// endpoint gives it; the text names the hint's title and ref.
	t.Run("knowledge_search", func(t *testing.T) {
		steps(t, "connect", "knowledge_search")
		plain := m.plainSearch(t, mcpQuery)
		sc := s.Search.Structured
		if s.Search.IsError || sc == nil {
			t.Fatalf("knowledge_search: %+v", s.Search)
		}
		for _, k := range []string{"schema_version", "route", "status", "trust", "truncated", "knowledge_scope_revision"} {
			if fmt.Sprint(sc[k]) != fmt.Sprint(plain[k]) {
				t.Errorf("knowledge_search %s = %v; the plain endpoint says %v", k, sc[k], plain[k])
			}
		}
		if note, _ := sc["note"].(string); note == "" {
			t.Errorf("knowledge_search: structuredContent has no note: %v", sc)
		}
		if !slices.Equal(s.Search.ContentTypes, []string{"text"}) {
			t.Errorf("knowledge_search content: %v; want one text item", s.Search.ContentTypes)
		}
		hints, _ := sc["hints"].([]any)
		plainHints, _ := plain["hints"].([]any)
		if len(hints) == 0 || len(hints) != len(plainHints) {
			t.Fatalf("knowledge_search hints: %d; the plain endpoint gives %d", len(hints), len(plainHints))
		}
		hint := hints[0].(map[string]any)
		for _, k := range []string{"title", "summary", "revision"} {
			if hint[k] != plainHints[0].(map[string]any)[k] {
				t.Errorf("hint %s = %v; plain endpoint %v", k, hint[k], plainHints[0].(map[string]any)[k])
			}
		}
		if summary, _ := hint["summary"].(string); hint["title"] != mcpDocTitle || summary == "" ||
			!strings.Contains(strings.Join(strings.Fields(m.content), " "), strings.TrimSuffix(summary, "…")) {
			t.Errorf("first hint: %v; want the seeded %q, its summary a span of the document", hint, mcpDocTitle)
		}
		ref, _ := hint["ref"].(string)
		if text := s.Search.text(); !strings.Contains(text, mcpDocTitle) || !strings.Contains(text, ref) || strings.HasPrefix(strings.TrimSpace(text), "{") {
			t.Errorf("knowledge_search text is not a rendering naming the hint's title and ref:\n%s", text)
		}
	})

	// knowledge_read to the end of the chain: the pages are the document.
	t.Run("read_chain", func(t *testing.T) {
		steps(t, "connect", "knowledge_search", "knowledge_read chain")
		if len(s.Pages) < 2 {
			t.Fatalf("read chain: %d pages; a %d-byte document needs several", len(s.Pages), len(m.content))
		}
		var chain strings.Builder
		for i, p := range s.Pages {
			if p.IsError || p.Structured == nil {
				t.Fatalf("page %d: %+v", i, p)
			}
			content, _ := p.Structured["content"].(string)
			chain.WriteString(content)
			if !strings.Contains(p.text(), content) {
				t.Errorf("page %d: the text does not carry the page's content", i)
			}
			if note, _ := p.Structured["note"].(string); note == "" {
				t.Errorf("page %d: no note", i)
			}
			last := i == len(s.Pages)-1
			if cur, _ := p.Structured["next_cursor"].(string); last != (cur == "") || (!last && !strings.Contains(p.text(), cur)) {
				t.Errorf("page %d of %d: next_cursor %q (and the text must name it)", i, len(s.Pages), cur)
			}
		}
		lastPage := s.Pages[len(s.Pages)-1].Structured
		if chain.String() != m.content || lastPage["truncated"] != false || lastPage["budget_exhausted"] != false {
			t.Errorf("read chain: %d bytes (truncated %v, budget_exhausted %v); want the seeded %d-byte document whole",
				chain.Len(), lastPage["truncated"], lastPage["budget_exhausted"], len(m.content))
		}
	})

	// near: the page holding the passage, which starts within its first
	// 2 KiB; the passage is beyond the first page.
	t.Run("near", func(t *testing.T) {
		steps(t, "connect", "knowledge_search", "knowledge_read chain", "knowledge_read near")
		if len(s.Pages) == 0 || strings.Contains(fmt.Sprint(s.Pages[0].Structured["content"]), mcpPassage) {
			t.Fatal("the passage is on the first page (or there is none); the test proves nothing")
		}
		nearContent, _ := s.Near.Structured["content"].(string)
		at := strings.Index(nearContent, mcpPassage)
		first, _ := s.Pages[0].Structured["content"].(string)
		t.Logf("passage at byte %d of the document (first page %d bytes); at byte %d of the %d-byte near page",
			strings.Index(m.content, mcpPassage), len(first), at, len(nearContent))
		switch {
		case s.Near.IsError || s.Near.Structured == nil:
			t.Errorf("near: %+v", s.Near)
		case at < 0 || at >= 2048:
			t.Errorf("near: the passage is at byte %d of the page; want within the first 2048", at)
		case !strings.Contains(m.content, nearContent):
			t.Errorf("near: the page is not a span of the document")
		case s.Near.Structured["next_cursor"] == nil:
			t.Errorf("near: no next_cursor, though the document goes on after the page")
		case !strings.Contains(s.Near.text(), mcpPassage) || strings.Index(s.Near.text(), mcpPassage) >= 2048:
			t.Errorf("near: the text shows the passage at byte %d; want within its first 2048:\n%.3000s", strings.Index(s.Near.text(), mcpPassage), s.Near.text())
		}
	})

	// A tampered ref: a tool error naming the protocol's code, no
	// structuredContent (the SDK would have validated it).
	t.Run("tampered_ref", func(t *testing.T) {
		steps(t, "connect", "knowledge_search", "knowledge_read tampered")
		if !s.Tampered.IsError || !strings.Contains(s.Tampered.text(), "knowledge_reference_invalid") || s.Tampered.Structured != nil {
			t.Errorf("tampered ref: %+v; want isError naming knowledge_reference_invalid, no structuredContent", s.Tampered)
		}
	})

	// 401 without a token and with a refused one, and the metadata document.
	t.Run("unauthorized", func(t *testing.T) {
		steps(t, "unauthorized none", "unauthorized bad", "metadata")
		wantMeta := m.lb + "/.well-known/oauth-protected-resource/agent-api/v1/workspaces/" + testdb.RouteMulti + "/knowledge/mcp"
		for _, name := range []string{"none", "bad"} {
			u := s.Unauthorized[name]
			wa := deref(u.WWWAuthenticate)
			if u.Status != 401 || !strings.HasPrefix(wa, "Bearer") || !strings.Contains(wa, `resource_metadata="`+wantMeta+`"`) {
				t.Errorf("token %s: %d, WWW-Authenticate %q; want 401, Bearer, resource_metadata=%q", name, u.Status, wa, wantMeta)
			}
			if u.SDKError == nil {
				t.Errorf("token %s: the SDK client connected", name)
			}
		}
		if s.Metadata == nil || s.Metadata.Status != 200 || !strings.HasPrefix(s.Metadata.ContentType, "application/json") {
			t.Fatalf("metadata document: %+v", s.Metadata)
		}
		meta := s.Metadata.Body
		if meta["resource"] != m.endpoint || fmt.Sprint(meta["authorization_servers"]) != fmt.Sprint([]any{mcpAuthServer}) ||
			fmt.Sprint(meta["bearer_methods_supported"]) != "[header]" || fmt.Sprint(meta["scopes_supported"]) != fmt.Sprint([]any{mcpScope}) {
			t.Errorf("metadata document: %v; want resource %s, authorization_servers [%s], bearer_methods_supported [header], scopes_supported [%s]",
				meta, m.endpoint, mcpAuthServer, mcpScope)
		}
	})

	// The OpenAI profile: search and fetch; fetch's text is the whole chain.
	t.Run("openai_profile", func(t *testing.T) {
		steps(t, "openai profile")
		if !slices.Equal(sorted(s.OpenAI.Tools), []string{"fetch", "search"}) {
			t.Errorf("openai profile tools: %v; want search and fetch", s.OpenAI.Tools)
		}
		if s.OpenAI.Search.IsError || s.OpenAI.Fetch.IsError {
			t.Fatalf("openai profile: search %+v, fetch %+v", s.OpenAI.Search, s.OpenAI.Fetch.toolResult)
		}
		if len(s.OpenAI.Results) == 0 || s.OpenAI.Results[0].Title != mcpDocTitle || s.OpenAI.Results[0].ID == "" {
			t.Fatalf("openai search results: %+v; want the seeded %q first, with an id", s.OpenAI.Results, mcpDocTitle)
		}
		doc := s.OpenAI.Fetch.Doc
		if doc["id"] != s.OpenAI.Results[0].ID || doc["title"] != mcpDocTitle || doc["text"] != m.content {
			t.Errorf("openai fetch: id %v, title %v, %d bytes of text; want the searched id, %q whole (%d bytes)",
				doc["id"], doc["title"], len(fmt.Sprint(doc["text"])), mcpDocTitle, len(m.content))
		}
	})
}

// TestMCPRemoteInspectorCLI runs the MCP Inspector's CLI over HTTP with the
// bearer header: tools/list, then one tools/call.
func TestMCPRemoteInspectorCLI(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary twice and node")
	}
	m := startMCPWorld(t)
	cli := filepath.Join("node_modules", "@modelcontextprotocol", "inspector", "cli", "build", "cli.js")
	common := []string{cli, "--cli", m.endpoint, "--transport", "http", "--header", "Authorization: Bearer " + m.w.token}

	var list struct {
		Tools []struct {
			Name  string
			Title string
		}
	}
	raw := m.runNode(t, append(common, "--method", "tools/list")...)
	if err := json.Unmarshal(raw, &list); err != nil {
		t.Fatalf("tools/list output: %v\n%s", err, raw)
	}
	var names []string
	for _, tool := range list.Tools {
		names = append(names, tool.Name)
		if tool.Title == "" {
			t.Errorf("inspector tools/list: %s has no title", tool.Name)
		}
	}
	if !slices.Equal(sorted(names), []string{"knowledge_read", "knowledge_search"}) {
		t.Errorf("inspector tools/list: %v", names)
	}

	var call struct {
		IsError           bool
		Content           []struct{ Type, Text string }
		StructuredContent struct {
			Status string
			Hints  []struct{ Title, Summary string }
		}
	}
	raw = m.runNode(t, append(common, "--method", "tools/call", "--tool-name", "knowledge_search", "--tool-arg", "query="+mcpQuery)...)
	if err := json.Unmarshal(raw, &call); err != nil {
		t.Fatalf("tools/call output: %v\n%s", err, raw)
	}
	plain := m.plainSearch(t, mcpQuery)
	sc := call.StructuredContent
	if call.IsError || sc.Status != plain["status"] || len(sc.Hints) == 0 || sc.Hints[0].Title != mcpDocTitle ||
		len(call.Content) == 0 || !strings.Contains(call.Content[0].Text, mcpDocTitle) {
		t.Errorf("inspector tools/call knowledge_search: %s; want status %v and the seeded document first", raw, plain["status"])
	}
	m.checkBothReplicas(t, "")
}

// checkBothReplicas: the balancer sent MCP requests to both replicas and,
// when tool is not "", calls of that tool too (so a ref or cursor one
// replica issued was verified by the other).
func (m *mcpWorld) checkBothReplicas(t *testing.T, tool string) {
	t.Helper()
	m.mu.Lock()
	defer m.mu.Unlock()
	var all, calls [2]int
	for _, c := range m.calls {
		if strings.HasSuffix(c.path, "/knowledge/mcp") {
			all[c.replica]++
			if c.rpc == "tools/call" && c.tool == tool {
				calls[c.replica]++
			}
		}
	}
	t.Logf("MCP requests per replica %v; %q calls per replica %v", all, tool, calls)
	if all[0] == 0 || all[1] == 0 || (tool != "" && (calls[0] == 0 || calls[1] == 0)) {
		t.Errorf("MCP requests per replica %v, %s calls %v; the balancer should have used both", all, tool, calls)
	}
}

func sorted(s []string) []string { s = slices.Clone(s); slices.Sort(s); return s }

func deref(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}
