package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/bailinghub/knowledge-sidecar/corefacts"
	"github.com/bailinghub/knowledge-sidecar/hostclient/hostclienttest"
	"github.com/bailinghub/knowledge-sidecar/internal/testkit"
	"github.com/bailinghub/knowledge-sidecar/mcpserver"
)

// mcpProc is `knowledge-sidecar mcp` running in process on pipes, with the
// SDK's client connected to it.
type mcpProc struct {
	session *mcp.ClientSession
	stdin   io.WriteCloser  // the server's stdin, as the host holds it
	stdout  *testkit.Buffer // everything the server wrote to stdout
	stderr  *testkit.Buffer
	done    chan int // the exit code
}

// startMCP runs cmdMCP with args and connects a client. The caller ends it
// with stop.
func startMCP(t *testing.T, args ...string) *mcpProc {
	t.Helper()
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	p := &mcpProc{stdin: inW, stdout: &testkit.Buffer{}, stderr: &testkit.Buffer{}, done: make(chan int, 1)}
	go func() {
		code := cmdMCP(args, inR, outW, p.stderr)
		_ = outW.Close()
		p.done <- code
	}()
	client := mcp.NewClient(&mcp.Implementation{Name: "test-host", Version: "1"}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s, err := client.Connect(ctx, &mcp.IOTransport{Reader: io.NopCloser(io.TeeReader(outR, p.stdout)), Writer: inW}, nil)
	if err != nil {
		_ = inW.Close()
		t.Fatalf("connect: %v (stderr: %s)", err, p.stderr)
	}
	p.session = s
	t.Cleanup(func() { _ = inW.Close(); _ = outR.Close() })
	return p
}

// stop closes the server's stdin, as a host does, and returns the exit code.
func (p *mcpProc) stop(t *testing.T) int {
	t.Helper()
	_ = p.stdin.Close()
	select {
	case code := <-p.done:
		_ = p.session.Close()
		return code
	case <-time.After(5 * time.Second):
		t.Fatal("the MCP server did not exit within 5 s of stdin closing")
		return -1
	}
}

// stopClean stops the server (stdin closed) and fails the test unless it
// exited 0.
func (p *mcpProc) stopClean(t *testing.T) {
	t.Helper()
	if code := p.stop(t); code != 0 {
		t.Errorf("exit code %d after stdin closed; want 0 (stderr: %s)", code, p.stderr)
	}
}

func (p *mcpProc) call(t *testing.T, tool string, args map[string]any) *mcp.CallToolResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	res, err := p.session.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		t.Fatalf("%s %v: JSON-RPC error %v; want a tool result", tool, args, err)
	}
	return res
}

func text(res *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

// structured decodes a successful result's structured content.
func structured(t *testing.T, res *mcp.CallToolResult, v any) {
	t.Helper()
	if res.IsError {
		t.Fatalf("isError: %s", text(res))
	}
	raw, err := json.Marshal(res.StructuredContent)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, v); err != nil {
		t.Fatalf("structured content %s: %v", raw, err)
	}
	first := ""
	if len(res.Content) == 1 {
		if tc, ok := res.Content[0].(*mcp.TextContent); ok {
			first = tc.Text
		}
	} else {
		t.Errorf("%d content items; want one text", len(res.Content))
	}
	var note struct {
		Note string `json:"note"`
	}
	if json.Unmarshal(raw, &note) != nil || note.Note == "" || !strings.Contains(first, note.Note) {
		t.Errorf("the text does not carry the structured content's note:\n text %.200s\n structured %.200s", first, raw)
	}
}

func jsonEqual(a, b any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return bytes.Equal(x, y)
}

func writeTokenFile(t *testing.T, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

type mcpHint struct {
	Ref   string `json:"ref"`
	Title string `json:"title"`
}

// TestMCPAgainstDemo drives the MCP server with the SDK's client against the
// demo: tools, search, read, paging, errors as tool results, 20 calls, and a
// clean shutdown with nothing but JSON-RPC on stdout.
func TestMCPAgainstDemo(t *testing.T) {
	clock := testkit.NewRunningClock()
	d := startSamples(t, clock.Now)
	// The token file ends with a newline, as `echo $TOKEN > file` writes it.
	p := startMCP(t, "--url", d.base, "--route", demoRoute, "--token-file", writeTokenFile(t, d.token+"\n"))
	if s := p.stderr.String(); s != "" {
		t.Errorf("stderr at start-up: %q; want nothing for a supported route", s)
	}

	t.Run("list tools", func(t *testing.T) {
		res, err := p.session.ListTools(context.Background(), nil)
		if err != nil {
			t.Fatal(err)
		}
		want := map[string]mcpserver.ToolDef{}
		for _, def := range mcpserver.Tools() {
			want[def.Name] = def
		}
		if len(res.Tools) != 2 || len(want) != 2 {
			t.Fatalf("got %d tools; want knowledge_search and knowledge_read", len(res.Tools))
		}
		for _, tool := range res.Tools {
			def, ok := want[tool.Name]
			var schema any
			_ = json.Unmarshal(def.InputSchema, &schema)
			if !ok || tool.Description != def.Description || !jsonEqual(tool.InputSchema, schema) {
				t.Errorf("tool %s: got %v; want the description and schema of docs/protocol.md", tool.Name, tool.InputSchema)
			}
		}
	})

	var handbook string
	t.Run("search", func(t *testing.T) {
		var out struct {
			Status string    `json:"status"`
			Hints  []mcpHint `json:"hints"`
		}
		structured(t, p.call(t, "knowledge_search", map[string]any{"query": "What happens if the refund window is set to 0?"}), &out)
		if out.Status != "ok" || len(out.Hints) == 0 || out.Hints[0].Title != "Refund policy" {
			t.Errorf("got %+v; want status ok with \"Refund policy\" first", out)
		}
		structured(t, p.call(t, "knowledge_search", map[string]any{"query": "operations handbook procedure", "limit": 1}), &out)
		if len(out.Hints) != 1 || out.Hints[0].Title != "Operations handbook" {
			t.Fatalf("got %+v; want the operations handbook", out.Hints)
		}
		handbook = out.Hints[0].Ref
	})

	t.Run("read and page", func(t *testing.T) {
		if handbook == "" {
			t.Skip("search failed")
		}
		type page struct {
			Content    string  `json:"content"`
			NextCursor *string `json:"next_cursor"`
			Truncated  bool    `json:"truncated"`
		}
		var first, second page
		structured(t, p.call(t, "knowledge_read", map[string]any{"ref": handbook, "max_bytes": 4096}), &first)
		if first.NextCursor == nil || !first.Truncated || first.Content == "" {
			t.Fatalf("first page: next_cursor %v truncated %v; want a cursor", first.NextCursor, first.Truncated)
		}
		structured(t, p.call(t, "knowledge_read", map[string]any{"ref": handbook, "cursor": *first.NextCursor, "max_bytes": 4096}), &second)
		whole := d.content["Operations handbook"]
		if !strings.HasPrefix(whole, first.Content+second.Content) {
			t.Errorf("pages 1+2 (%d bytes) are not the start of the document", len(first.Content)+len(second.Content))
		}
	})

	t.Run("errors are tool results", func(t *testing.T) {
		if handbook == "" {
			t.Skip("search failed")
		}
		mid := len(handbook) / 2
		flip := byte('A')
		if handbook[mid] == 'A' {
			flip = 'B'
		}
		tampered := handbook[:mid] + string(flip) + handbook[mid+1:]
		cases := []struct {
			name         string
			tool         string
			args         map[string]any
			prefix, next string
		}{
			{"tampered ref", "knowledge_read", map[string]any{"ref": tampered}, "knowledge_reference_invalid: ", "Search again"},
			{"limit out of range", "knowledge_search", map[string]any{"query": "refund", "limit": 4}, "invalid_request: ", "Fix the arguments"},
			{"unknown argument", "knowledge_search", map[string]any{"query": "refund", "route": "other"}, "invalid_request: ", "Fix the arguments"},
			{"max_bytes too small", "knowledge_read", map[string]any{"ref": handbook, "max_bytes": 100}, "invalid_request: ", "Fix the arguments"},
			{"query too long", "knowledge_search", map[string]any{"query": strings.Repeat("知", 2001)}, "invalid_request: ", "Fix the arguments"},
			{"unknown run", "knowledge_search", map[string]any{"query": "refund", "run_id": "0b9a3e2c-3c1d-4f7e-9a55-1e2d3c4b5a69"}, "run_not_found: ", "current run"},
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				res := p.call(t, tc.tool, tc.args)
				if got := text(res); !res.IsError || !strings.HasPrefix(got, tc.prefix) || !strings.Contains(got, tc.next) {
					t.Errorf("got isError %v %q; want isError starting %q advising %q", res.IsError, got, tc.prefix, tc.next)
				}
			})
		}
	})

	t.Run("20 calls", func(t *testing.T) {
		for i := 0; i < 20; i++ {
			clock.Advance(time.Second) // the session's rate limit refills; no call is refused
			var out struct {
				Status string `json:"status"`
			}
			structured(t, p.call(t, "knowledge_search", map[string]any{"query": "shipping", "limit": 1 + i%3}), &out)
			if out.Status != "ok" {
				t.Fatalf("call %d: status %q; want ok", i+1, out.Status)
			}
		}
	})

	p.stopClean(t)
	sc := bufio.NewScanner(strings.NewReader(p.stdout.String()))
	sc.Buffer(nil, 1<<20)
	lines := 0
	for sc.Scan() {
		var msg struct {
			JSONRPC string `json:"jsonrpc"`
		}
		if err := json.Unmarshal(sc.Bytes(), &msg); err != nil || msg.JSONRPC != "2.0" {
			t.Errorf("stdout line %q is not JSON-RPC", sc.Text())
		}
		lines++
	}
	if lines < 30 {
		t.Errorf("%d JSON-RPC lines on stdout; want one per answer (at least 30)", lines)
	}
	if strings.Contains(p.stderr.String(), d.token) {
		t.Error("stderr shows the token")
	}
}

// TestMCPWrongToken: a rejected token is a warning at start-up and an
// isError result on every call, never a crash.
func TestMCPWrongToken(t *testing.T) {
	d := startSamples(t, nil)
	t.Setenv(tokenEnv, randomToken("bha_"))
	base, seen := recordBearers(t, d.base)
	p := startMCP(t, "--url", base, "--route", demoRoute)
	if s := p.stderr.String(); !strings.Contains(s, `"level":"WARN"`) || !strings.Contains(s, `"detail":"capabilities answered 401`) {
		t.Errorf("stderr %q; want a JSON warning naming 401", s)
	}
	for _, tool := range []string{"knowledge_search", "knowledge_read"} {
		args := map[string]any{"query": "refund"}
		if tool == "knowledge_read" {
			args = map[string]any{"ref": "anything"}
		}
		i := seen.len()
		res := p.call(t, tool, args)
		if got := text(res); !res.IsError || !strings.HasPrefix(got, "unauthorized: ") || !strings.Contains(got, "give up") {
			t.Errorf("%s: got isError %v %q; want isError starting \"unauthorized: \" telling the model to give up", tool, res.IsError, got)
		}
		if n := len(seen.since(i)); n != 1 {
			t.Errorf("%s: %d requests; want 1 (the environment's token cannot change: no retry)", tool, n)
		}
	}
	p.stopClean(t)
}

// startSamples runs the demo with its built-in documents and the given
// knowledge clock (nil: time.Now).
func startSamples(t *testing.T, now func() time.Time) *runningDemo {
	t.Helper()
	docs, _ := mustLoadDocs(t, "")
	return startDemoClock(t, docs, false, now)
}

// closedURL is the address of a port that refuses connections.
func closedURL(t *testing.T) string {
	t.Helper()
	return hostclienttest.RefusedURL(t)
}

// TestMCPStartup: unsupported answers stop the server with exit 1; other
// failures warn and serve; usage problems exit 2.
func TestMCPStartup(t *testing.T) {
	status := func(code int) string {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(code)
			_, _ = w.Write([]byte(`{"error":"x","message":"y"}`))
		}))
		t.Cleanup(srv.Close)
		return srv.URL
	}
	closed := closedURL(t)

	cases := []cliCase{
		{"404 unsupported", []string{"--url", status(404), "--route", "demo"}, "bha_x", 1, "does not support"},
		{"405 unsupported", []string{"--url", status(405), "--route", "demo"}, "bha_x", 1, "does not support"},
		{"501 unsupported", []string{"--url", status(501), "--route", "demo"}, "bha_x", 1, "does not support"},
		{"200 of another protocol", []string{"--url", status(200), "--route", "demo"}, "bha_x", 1, "not with bailing.agent-knowledge-capabilities.v1"},
		{"503 serves", []string{"--url", status(503), "--route", "demo"}, "bha_x", 0, `"level":"WARN","msg":"capabilities probe failed; serving anyway, each tool call will report the error","detail":"capabilities answered 503`},
		{"unreachable serves", []string{"--url", closed, "--route", "demo"}, "bha_x", 0, `"detail":"the knowledge service could not be reached"`},
		{"no route", []string{"--url", closed}, "bha_x", 2, "--route is required"},
		{"no url", []string{"--route", "demo"}, "bha_x", 2, "--url is required"},
		{"bad url", []string{"--url", "127.0.0.1:8080", "--route", "demo"}, "bha_x", 2, "--url must be"},
		{"no token", []string{"--url", closed, "--route", "demo"}, "", 2, "MCP hosts start the server with only HOME, PATH, SHELL and TERM"},
		{"bad run id", []string{"--url", closed, "--route", "demo", "--run-id", "run-1"}, "bha_x", 2, "--run-id (or BAILING_RUN_ID) must be a UUID"},
		{"unknown profile", []string{"--url", closed, "--route", "demo", "--profile", "claude"}, "bha_x", 2, "--profile must be knowledge or openai"},
		{"openai profile serves", []string{"--url", closed, "--route", "demo", "--profile", "openai"}, "bha_x", 0, `"detail":"the knowledge service could not be reached"`},
		{"empty token file", []string{"--url", closed, "--route", "demo", "--token-file", writeTokenFile(t, "\n")}, "bha_x", 2, "token file is empty"},
		{"missing token file", []string{"--url", closed, "--route", "demo", "--token-file", filepath.Join(t.TempDir(), "none")}, "bha_x", 2, "token file"},
		{"both token flags", []string{"--url", closed, "--route", "demo", "--token-file", writeTokenFile(t, "bha_x"), "--token-command", "echo bha_x"}, "", 2, "not both"},
		{"failing token command", []string{"--url", closed, "--route", "demo", "--token-command", "echo bha_printed; exit 4"}, "bha_x", 2, "token command failed: exit status 4"},
		{"token command prints nothing", []string{"--url", closed, "--route", "demo", "--token-command", "true"}, "bha_x", 2, "printed no token"},
		{"token command serves", []string{"--url", closed, "--route", "demo", "--token-command", "echo bha_from-command"}, "", 0, `"detail":"the knowledge service could not be reached"`},
	}
	runCLICases(t, cases, func(args []string, stdout, stderr io.Writer) int {
		// stdin is already closed: a server that serves exits 0 at once.
		return cmdMCP(args, io.NopCloser(strings.NewReader("")), stdout, stderr)
	}, func(t *testing.T, stdout string) {
		if stdout != "" {
			t.Errorf("stdout %q; want nothing but JSON-RPC (none here)", stdout)
		}
	})
}

// TestMCPAnswersBeforeExit: a host that writes a call and closes stdin still
// gets the answer, then the server exits 0.
func TestMCPAnswersBeforeExit(t *testing.T) {
	closed := closedURL(t)
	t.Setenv(tokenEnv, "bha_x")
	in := strings.Join([]string{
		`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"x","version":"1"}}}`,
		`{"jsonrpc":"2.0","method":"notifications/initialized"}`,
		`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"knowledge_search","arguments":{"query":"refund"}}}`,
	}, "\n") + "\n"
	var stdout, stderr bytes.Buffer
	code := cmdMCP([]string{"--url", closed, "--route", "demo"}, io.NopCloser(strings.NewReader(in)), &stdout, &stderr)
	var answered bool
	for _, line := range strings.Split(strings.TrimSpace(stdout.String()), "\n") {
		var msg testkit.ToolCallAnswer
		if json.Unmarshal([]byte(line), &msg) == nil && string(msg.ID) == "2" && msg.Result.IsError &&
			len(msg.Result.Content) == 1 && strings.HasPrefix(msg.Result.Content[0].Text, "knowledge_unavailable: ") {
			answered = true
		}
	}
	if code != 0 || !answered {
		t.Errorf("exit %d, stdout %s; want 0 and call 2 answered with isError knowledge_unavailable", code, stdout.String())
	}
}

// bearerLog is a reverse proxy in front of the demo that records the bearer
// and the status of every knowledge request.
type bearerLog struct {
	mu   sync.Mutex
	seen []bearerSeen
}

type bearerSeen struct {
	token  string
	status int
}

func recordBearers(t *testing.T, base string) (string, *bearerLog) {
	t.Helper()
	target, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	l := &bearerLog{}
	rp := &httputil.ReverseProxy{
		Rewrite:  func(r *httputil.ProxyRequest) { r.SetURL(target) },
		ErrorLog: log.New(io.Discard, "", 0),
		ModifyResponse: func(res *http.Response) error {
			if strings.Contains(res.Request.URL.Path, "/knowledge/") {
				l.mu.Lock()
				l.seen = append(l.seen, bearerSeen{strings.TrimPrefix(res.Request.Header.Get("Authorization"), "Bearer "), res.StatusCode})
				l.mu.Unlock()
			}
			return nil
		},
	}
	srv := httptest.NewServer(rp)
	t.Cleanup(srv.Close)
	return srv.URL, l
}

// since returns what was seen from index i on.
func (l *bearerLog) since(i int) []bearerSeen {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]bearerSeen(nil), l.seen[i:]...)
}

func (l *bearerLog) len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.seen)
}

// rotate makes the demo's Core accept next for the demo session and reject
// old, as Core does when an access token is refreshed.
func rotate(d *runningDemo, old, next string) {
	d.world.core.AddSession(next, corefacts.Session{
		SessionID:     "6f1c2f7e-5a53-4d52-9a0e-3f3b5f0c9d11",
		ClientAppID:   demoClient,
		Principal:     corefacts.Principal{ID: "demo-user", Tenant: "demo-tenant", Roles: []string{"agent"}},
		OnBehalfOf:    "demo-tenant:demo-user",
		AllowedRoutes: []string{demoRoute},
	})
	d.world.core.RevokeSession(old)
}

// replaceTokenFile writes a new file beside path and renames it over path, as
// a Kubernetes secret update does.
func replaceTokenFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path+".tmp", []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(path+".tmp", path); err != nil {
		t.Fatal(err)
	}
}

func searchOK(t *testing.T, p *mcpProc) {
	t.Helper()
	var out struct {
		Status string `json:"status"`
	}
	structured(t, p.call(t, "knowledge_search", map[string]any{"query": "refund"}), &out)
	if out.Status != "ok" {
		t.Errorf("status %q; want ok", out.Status)
	}
}

// TestMCPTokenFileRotation: the token file is replaced mid-session (write
// and rename, as a Kubernetes secret update) and Core stops accepting the old
// token: the next call already sends the new one. A rewrite os.Stat cannot
// see is picked up after the 401, with one retry.
func TestMCPTokenFileRotation(t *testing.T) {
	d := startSamples(t, nil)
	base, seen := recordBearers(t, d.base)
	path := writeTokenFile(t, d.token+"\n")
	p := startMCP(t, "--url", base, "--route", demoRoute, "--token-file", path)
	searchOK(t, p)

	second := randomToken("bha_")
	rotate(d, d.token, second)
	replaceTokenFile(t, path, second+"\n")
	i := seen.len()
	searchOK(t, p)
	if got := seen.since(i); len(got) != 1 || got[0].token != second || got[0].status != 200 {
		t.Errorf("after the file was replaced: %+v; want one request with the new token, answered 200", got)
	}

	// The same length, the same inode, the modification time put back.
	third := randomToken("bha_")
	before, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	rotate(d, second, third)
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = f.WriteAt([]byte(third+"\n"), 0)
	_ = f.Close()
	if err := os.Chtimes(path, before.ModTime(), before.ModTime()); err != nil {
		t.Fatal(err)
	}
	i = seen.len()
	searchOK(t, p)
	if got := seen.since(i); len(got) != 2 || got[0] != (bearerSeen{second, 401}) || got[1] != (bearerSeen{third, 200}) {
		t.Errorf("after an in-place rewrite: %d requests %v; want the old token's 401, then the new one's 200", len(got), got)
	}

	p.stopClean(t)
	for _, tok := range []string{d.token, second, third} {
		if strings.Contains(p.stderr.String(), tok) || strings.Contains(p.stdout.String(), tok) {
			t.Error("stderr or stdout shows a token")
		}
	}
}

// tokenCommand is a --token-command that prints the content of a file and
// counts its runs.
type tokenCommand struct{ dir string }

func newTokenCommand(t *testing.T, token string) *tokenCommand {
	t.Helper()
	c := &tokenCommand{dir: t.TempDir()}
	c.set(t, token)
	return c
}

func (c *tokenCommand) command() string {
	return "echo run >> '" + filepath.Join(c.dir, "runs") + "'; cat '" + filepath.Join(c.dir, "current") + "'"
}

func (c *tokenCommand) set(t *testing.T, token string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(c.dir, "current"), []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
}

func (c *tokenCommand) runs() int {
	raw, _ := os.ReadFile(filepath.Join(c.dir, "runs"))
	return strings.Count(string(raw), "run\n")
}

// TestMCPTokenCommand: the command runs at start; after Core rejects its
// token it runs once more and the call is retried once with the new token.
func TestMCPTokenCommand(t *testing.T) {
	d := startSamples(t, nil)
	base, seen := recordBearers(t, d.base)
	cmd := newTokenCommand(t, d.token)
	p := startMCP(t, "--url", base, "--route", demoRoute, "--token-command", cmd.command())
	searchOK(t, p)
	if n := cmd.runs(); n != 1 {
		t.Errorf("the command ran %d times for start-up and a call; want 1 (only at start)", n)
	}

	second := randomToken("bha_")
	rotate(d, d.token, second)
	cmd.set(t, second)
	i := seen.len()
	searchOK(t, p)
	if got := seen.since(i); len(got) != 2 || got[0] != (bearerSeen{d.token, 401}) || got[1] != (bearerSeen{second, 200}) {
		t.Errorf("after the token was rotated: %v; want the old token's 401, then one retry with the new one answered 200", got)
	}
	if n := cmd.runs(); n != 2 {
		t.Errorf("the command ran %d times; want 2 (start and one refresh)", n)
	}
	i = seen.len()
	searchOK(t, p)
	if got := seen.since(i); len(got) != 1 || cmd.runs() != 2 {
		t.Errorf("the next call: %v after %d runs; want one request, no new run", got, cmd.runs())
	}
	p.stopClean(t)
	if strings.Contains(p.stderr.String(), d.token) || strings.Contains(p.stderr.String(), second) {
		t.Error("stderr shows a token")
	}
}

// TestMCPTokenStillBad: a refresh that gives another rejected token ends
// the call with the unauthorized tool error after exactly one retry.
func TestMCPTokenStillBad(t *testing.T) {
	d := startSamples(t, nil)
	base, seen := recordBearers(t, d.base)
	cmd := newTokenCommand(t, randomToken("bha_"))
	// Every run prints a new token Core does not know.
	random := "echo run >> '" + filepath.Join(cmd.dir, "runs") + "'; printf 'bha_%s\\n' $(od -An -N24 -tx1 /dev/urandom | tr -d ' \\n')"
	p := startMCP(t, "--url", base, "--route", demoRoute, "--token-command", random)
	for _, tool := range []string{"knowledge_search", "knowledge_read"} {
		args := map[string]any{"query": "refund"}
		if tool == "knowledge_read" {
			args = map[string]any{"ref": "anything"}
		}
		i, runs := seen.len(), cmd.runs()
		res := p.call(t, tool, args)
		if got := text(res); !res.IsError || !strings.HasPrefix(got, "unauthorized: ") {
			t.Errorf("%s: got isError %v %q; want the unauthorized tool error", tool, res.IsError, got)
		}
		got := seen.since(i)
		if len(got) != 2 || got[0].status != 401 || got[1].status != 401 || got[0].token == got[1].token || cmd.runs() != runs+1 {
			t.Errorf("%s: %d requests (%v), %d command runs; want exactly one retry with a new token and one run", tool, len(got), got, cmd.runs()-runs)
		}
	}
	p.stopClean(t)
}
