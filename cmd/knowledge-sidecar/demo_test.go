package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bailinghub/knowledge-sidecar/hostclient"
	"github.com/bailinghub/knowledge-sidecar/internal/testkit"
	"github.com/bailinghub/knowledge-sidecar/proxy"
	"github.com/bailinghub/knowledge-sidecar/sidecar"
)

// runningDemo is the demo's world and sidecar, in process, on 127.0.0.1:0.
type runningDemo struct {
	base    string // http://addr
	ws      string // base of the demo workspace
	token   string
	text    string // the printed walkthrough
	world   *demoWorld
	client  *http.Client
	content map[string]string // document content by title
}

// startDemo runs what cmdDemo runs, with the given documents, and stops it at
// cleanup.
func startDemo(t *testing.T, docs []demoDoc, own bool) *runningDemo {
	t.Helper()
	return startDemoClock(t, docs, own, nil)
}

// startDemoClock is startDemo with the knowledge service's clock (nil: time.Now).
func startDemoClock(t *testing.T, docs []demoDoc, own bool, now func() time.Time) *runningDemo {
	t.Helper()
	token := randomToken("bha_")
	w, err := startDemoWorld(docs, token, nil)
	if err != nil {
		t.Fatalf("startDemoWorld: %v", err)
	}
	t.Cleanup(w.close)
	app, err := sidecar.Build(context.Background(), w.config("127.0.0.1:0", "127.0.0.1:0"),
		sidecar.Deps{Logger: slog.New(slog.DiscardHandler), Version: version, Catalog: w.catalog, Now: now})
	if err != nil {
		t.Fatalf("sidecar: %v", err)
	}
	t.Cleanup(app.Close)
	srv := app.Server
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	aln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	walkthrough := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		done <- srv.Run(ctx, proxy.ServeOptions{
			Listener: ln, AdminListener: aln,
			ReadHeaderTimeout: 10 * time.Second, IdleTimeout: time.Minute, MaxHeaderBytes: 1 << 20,
			ShutdownTimeout: 5 * time.Second,
			OnListening: func(p, a net.Addr) {
				var b bytes.Buffer
				printWalkthrough(&b, p.String(), a.String(), token, docs, walkthroughQueries(docs, own), "")
				walkthrough <- b.String()
			},
		})
	}()
	tr := &http.Transport{DisableCompression: true}
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil && !errors.Is(err, context.Canceled) {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(15 * time.Second):
			t.Error("Run did not return")
		}
		tr.CloseIdleConnections()
	})
	d := &runningDemo{token: token, world: w, client: &http.Client{Transport: tr, Timeout: 30 * time.Second}, content: map[string]string{}}
	select {
	case d.text = <-walkthrough:
	case err := <-done:
		t.Fatalf("Run returned before listening: %v", err)
	case <-time.After(15 * time.Second):
		t.Fatal("demo did not start listening")
	}
	d.base = "http://" + ln.Addr().String()
	d.ws = d.base + "/agent-api/v1/workspaces/" + demoRoute
	for _, doc := range docs {
		d.content[doc.title] = doc.content
	}
	return d
}

// do sends what the walkthrough's curl sends: the bearer, and with -d a
// form-encoded Content-Type (curl's default), not JSON.
func (d *runningDemo) do(t *testing.T, method, url, body string) (int, []byte) {
	t.Helper()
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, r)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+d.token)
	if body != "" {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	res, err := d.client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return res.StatusCode, raw
}

type demoHint struct {
	Ref   string `json:"ref"`
	Title string `json:"title"`
}

func (d *runningDemo) search(t *testing.T, query string, limit int) []demoHint {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"query": query, "limit": limit})
	code, raw := d.do(t, "POST", d.ws+"/knowledge/search", string(body))
	var res struct {
		Status string     `json:"status"`
		Hints  []demoHint `json:"hints"`
	}
	if code != 200 || json.Unmarshal(raw, &res) != nil || res.Status != "ok" {
		t.Fatalf("search %q: got %d %s; want 200 status ok", query, code, raw)
	}
	return res.Hints
}

// TestDemoWalkthrough performs the printed walkthrough's steps over HTTP.
func TestDemoWalkthrough(t *testing.T) {
	docs, _ := mustLoadDocs(t, "")
	d := startDemo(t, docs, false)
	if !strings.Contains(d.text, d.ws) || !strings.Contains(d.text, d.token) || !strings.Contains(d.text, "Refund policy") {
		t.Errorf("walkthrough does not show the workspace URL, the token and the documents:\n%s", d.text)
	}

	t.Run("1 capabilities", func(t *testing.T) {
		code, raw := d.do(t, "GET", d.ws+"/knowledge/capabilities", "")
		var c struct {
			Supported bool `json:"supported"`
			Enabled   bool `json:"enabled"`
		}
		if code != 200 || json.Unmarshal(raw, &c) != nil || !c.Supported || !c.Enabled {
			t.Errorf("got %d %s; want supported and enabled", code, raw)
		}
	})

	t.Run("2 search", func(t *testing.T) {
		hints := d.search(t, "What happens if the refund window is set to 0?", 3)
		if len(hints) == 0 || hints[0].Title != "Refund policy" {
			t.Errorf("hints %+v; want \"Refund policy\" first", hints)
		}
	})

	t.Run("3 read until the chain budget", func(t *testing.T) {
		hints := d.search(t, "operations handbook procedure", 1)
		if len(hints) != 1 || hints[0].Title != "Operations handbook" {
			t.Fatalf("hints %+v; want the operations handbook", hints)
		}
		content := d.content["Operations handbook"]
		if len(content) <= 131072 {
			t.Fatalf("precondition: the handbook has %d bytes; want more than the 131072-byte chain budget", len(content))
		}
		var got strings.Builder
		cursor := ""
		for page := 1; ; page++ {
			req := map[string]any{"ref": hints[0].Ref, "max_bytes": 32768}
			if cursor != "" {
				req["cursor"] = cursor
			}
			body, _ := json.Marshal(req)
			code, raw := d.do(t, "POST", d.ws+"/knowledge/read", string(body))
			var p hostclient.ReadAnswer
			if code != 200 || json.Unmarshal(raw, &p) != nil {
				t.Fatalf("page %d: got %d %.200s", page, code, raw)
			}
			if len(raw) > 32768 || p.TotalContentBytes != int64(len(content)) {
				t.Errorf("page %d: %d bytes, total_content_bytes %d; want ≤ 32768 and %d", page, len(raw), p.TotalContentBytes, len(content))
			}
			got.WriteString(p.Content)
			if p.NextCursor == nil {
				if !p.BudgetExhausted || !p.Truncated {
					t.Errorf("last page: budget_exhausted %v truncated %v; want true true", p.BudgetExhausted, p.Truncated)
				}
				break
			}
			cursor = *p.NextCursor
			if page > 20 {
				t.Fatal("more than 20 pages")
			}
		}
		if s := got.String(); len(s) > 131072 || len(s) < 131072-3 || !strings.HasPrefix(content, s) {
			t.Errorf("pages concatenate to %d bytes; want the first 131072 bytes of the handbook", len(s))
		}
	})

	turn := func(mode string) (int, []byte) {
		return d.do(t, "POST", d.ws+"/turns", `{"client_conversation_id":"c1","client_turn_id":"t1",
       "user_message_id":"m1","user_input":"Can I get a refund?","knowledge_delivery":"`+mode+`"}`)
	}
	t.Run("4 on-demand turn", func(t *testing.T) {
		code, raw := turn("on_demand")
		var res struct {
			RunID   string `json:"run_id"`
			Context struct {
				Knowledge     []json.RawMessage `json:"knowledge"`
				KnowledgeRefs []json.RawMessage `json:"knowledge_refs"`
				Instructions  string            `json:"instructions"`
			} `json:"context"`
			Delivery *struct {
				SchemaVersion string            `json:"schema_version"`
				Mode          string            `json:"mode"`
				Protocol      string            `json:"protocol"`
				Scope         string            `json:"knowledge_scope_revision"`
				Status        string            `json:"status"`
				Hints         []json.RawMessage `json:"hints"`
			} `json:"knowledge_delivery"`
		}
		if code != 200 || json.Unmarshal(raw, &res) != nil {
			t.Fatalf("got %d %.300s; want 200", code, raw)
		}
		if res.Context.Knowledge == nil || len(res.Context.Knowledge) != 0 || res.Context.KnowledgeRefs == nil || len(res.Context.KnowledgeRefs) != 0 {
			t.Errorf("context knowledge %v refs %v; want two empty arrays", res.Context.Knowledge, res.Context.KnowledgeRefs)
		}
		dl := res.Delivery
		if dl == nil || dl.SchemaVersion != "bailing.agent-knowledge-delivery.v1" || dl.Mode != "on_demand" ||
			dl.Protocol != "bailing.agent-knowledge.v1" || dl.Status != "ok" || len(dl.Scope) != 64 || dl.Hints == nil {
			t.Errorf("knowledge_delivery block: %+v", dl)
		}
		if res.RunID == "" || res.Context.Instructions == "" {
			t.Errorf("run_id %q instructions %q; want Core's turn context kept", res.RunID, res.Context.Instructions)
		}
		// Same-run hints: what Core retrieved for "Can I get a refund?",
		// the refund policy first and nothing of the operations handbook,
		// readable with the turn's run_id and not without it.
		var hints []demoHint
		for _, h := range dl.Hints {
			var one demoHint
			if json.Unmarshal(h, &one) != nil {
				t.Fatalf("hint %s is not a hint", h)
			}
			hints = append(hints, one)
		}
		if len(hints) == 0 || hints[0].Title != "Refund policy" {
			t.Fatalf("turn hints %+v; want \"Refund policy\" first", hints)
		}
		for _, h := range hints {
			if h.Title == "Operations handbook" {
				t.Errorf("turn hints %+v; the operations handbook says nothing about refunds", hints)
			}
		}
		body, _ := json.Marshal(map[string]string{"ref": hints[0].Ref, "run_id": res.RunID})
		var page struct {
			Title string `json:"title"`
			RunID string `json:"run_id"`
		}
		if code, raw := d.do(t, "POST", d.ws+"/knowledge/read", string(body)); code != 200 || json.Unmarshal(raw, &page) != nil ||
			page.Title != "Refund policy" || page.RunID != res.RunID {
			t.Errorf("reading the turn hint with its run: got %d %.200s; want 200 \"Refund policy\"", code, raw)
		}
		body, _ = json.Marshal(map[string]string{"ref": hints[0].Ref})
		if code, raw := d.do(t, "POST", d.ws+"/knowledge/read", string(body)); code != 400 || !strings.Contains(string(raw), "knowledge_reference_invalid") {
			t.Errorf("reading the turn hint without its run: got %d %s; want 400 knowledge_reference_invalid", code, raw)
		}
		if !strings.Contains(d.text, ".knowledge_delivery.hints[0].ref, run_id") {
			t.Errorf("walkthrough does not show reading a turn hint with its run_id:\n%s", d.text)
		}
	})

	t.Run("4 inline retry conflicts", func(t *testing.T) {
		runs := d.world.core.RunsCreated()
		code, raw := turn("inline")
		var e struct{ Error, Message string }
		if code != 409 || json.Unmarshal(raw, &e) != nil || e.Error != "turn_conflict" {
			t.Errorf("got %d %s; want 409 turn_conflict", code, raw)
		}
		if got := d.world.core.RunsCreated(); got != runs {
			t.Errorf("runs: got %d; want %d (no new business work)", got, runs)
		}
	})

	t.Run("5 pass-through", func(t *testing.T) {
		code, raw := d.do(t, "GET", d.base+"/agent-api/v1/unknown", "")
		if code != 404 || strings.TrimSpace(string(raw)) != `{"error":"not_found"}` {
			t.Errorf("got %d %s; want Core's own 404", code, raw)
		}
	})

	t.Run("7 MCP at a URL", func(t *testing.T) {
		q := walkthroughQueries(nil, false).search
		if !strings.Contains(d.text, "$WS/knowledge/mcp") || !strings.Contains(d.text, `"arguments":`+shellJSONArg(map[string]any{"query": q})) {
			t.Fatalf("walkthrough does not show the MCP call:\n%s", d.text)
		}
		if text := d.demoMCPSearch(t, q); !strings.Contains(text, "Refund policy") || !strings.Contains(text, "ref: kr2.") {
			t.Errorf("the model reads %q; want the refund policy's hint with its ref", text)
		}
	})

	t.Run("6 forged reference", func(t *testing.T) {
		code, raw := d.do(t, "POST", d.ws+"/knowledge/read", `{"ref":"kr2.core.forged"}`)
		var e struct{ Error, Message string }
		if code != 400 || json.Unmarshal(raw, &e) != nil || e.Error != "knowledge_reference_invalid" || e.Message == "" {
			t.Errorf("got %d %s; want 400 knowledge_reference_invalid", code, raw)
		}
		if strings.Contains(string(raw), d.world.coreURL) || strings.Contains(string(raw), "127.0.0.1") {
			t.Errorf("error names an address: %s", raw)
		}
	})
}

// demoMCPSearch sends the walkthrough's step 7: one tools/call of the remote
// MCP endpoint as curl sends it. It returns the text the model reads.
func (d *runningDemo) demoMCPSearch(t *testing.T, query string) string {
	t.Helper()
	args, _ := json.Marshal(map[string]any{"query": query})
	body := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"knowledge_search","arguments":` + string(args) + `}}`
	req, _ := http.NewRequest(http.MethodPost, d.ws+"/knowledge/mcp", strings.NewReader(body))
	for k, v := range map[string]string{"Authorization": "Bearer " + d.token, "Content-Type": "application/json",
		"Accept": "application/json, text/event-stream", "MCP-Protocol-Version": "2025-06-18"} {
		req.Header.Set(k, v)
	}
	res, err := d.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var rpc testkit.ToolCallAnswer
	if err := json.NewDecoder(res.Body).Decode(&rpc); err != nil || res.StatusCode != 200 || rpc.Result.IsError || len(rpc.Result.Content) != 1 {
		t.Fatalf("MCP tools/call: %d %v %+v; want 200 with one text item", res.StatusCode, err, rpc)
	}
	return rpc.Result.Content[0].Text
}

// docsDir is a new folder holding files (name, with / for subfolders →
// content), for --docs.
func docsDir(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, body := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// mustLoadDocs is loadDocs(dir) ("" for the built-in documents), failing
// the test on an error.
func mustLoadDocs(t *testing.T, dir string) (docs []demoDoc, notes []string) {
	t.Helper()
	docs, notes, err := loadDocs(dir)
	if err != nil {
		t.Fatal(err)
	}
	return docs, notes
}

// TestDemoDocsDir: --docs takes .md and .txt files, titled by a Markdown
// file's top heading or else the file name.
func TestDemoDocsDir(t *testing.T) {
	dir := docsDir(t, map[string]string{
		"guide.md":  "\n# Zebra Care Guide\n\nZebras need fresh water and open pasture.\n",
		"notes.txt": "Giraffes sleep standing up for short periods.\n",
		"image.png": "not a document",
	})
	if err := os.Mkdir(filepath.Join(dir, "sub.md"), 0o700); err != nil {
		t.Fatal(err)
	}
	docs, _ := mustLoadDocs(t, dir)
	var titles []string
	for _, doc := range docs {
		titles = append(titles, doc.title)
	}
	if strings.Join(titles, "|") != "Zebra Care Guide|notes" {
		t.Fatalf("titles: got %q; want [Zebra Care Guide notes]", titles)
	}
	d := startDemo(t, docs, true)
	if !strings.Contains(d.text, "Documents: Zebra Care Guide; notes") {
		t.Errorf("walkthrough does not list the documents:\n%s", d.text)
	}
	if !strings.Contains(d.text, "ranks search hits by shared keywords, not by embeddings") {
		t.Errorf("walkthrough does not say how the Core double ranks:\n%s", d.text)
	}
	// The printed search and read steps query with the user's own titles,
	// and running them finds those documents.
	for step, want := range map[string]string{
		`-d '{"limit":3,"query":"Zebra Care Guide"}'`: "Zebra Care Guide",
		`-d '{"limit":1,"query":"Zebra Care Guide"}'`: "Zebra Care Guide", // the longest document
	} {
		if !strings.Contains(d.text, step) {
			t.Errorf("walkthrough: want the step %s\n%s", step, d.text)
		}
		if hints := d.search(t, want, 1); len(hints) != 1 || hints[0].Title != want {
			t.Errorf("search %q: hints %+v; want %q first", want, hints, want)
		}
	}
	if strings.Contains(d.text, "refund window") {
		t.Errorf("walkthrough with --docs still asks about the built-in samples:\n%s", d.text)
	}
	for query, want := range map[string]string{"zebras pasture water": "Zebra Care Guide", "giraffes sleep standing": "notes"} {
		hints := d.search(t, query, 1)
		if len(hints) != 1 || hints[0].Title != want {
			t.Errorf("search %q: hints %+v; want %q", query, hints, want)
		}
	}
}

// TestDemoCommandErrors: bad flags and inputs exit before anything listens.
func TestDemoCommandErrors(t *testing.T) {
	empty := t.TempDir()
	cases := []struct {
		name string
		args []string
		code int
		want string
	}{
		{"unknown flag", []string{"--nope"}, 2, "flag provided but not defined"},
		{"token not shaped like Core's", []string{"--demo-token", "secret-demo-token"}, 2, "--demo-token must look like"},
		{"docs dir without documents", []string{"--docs", empty}, 1, "--docs " + empty + ": no non-empty .md or .txt files"},
		{"docs dir missing", []string{"--docs", filepath.Join(empty, "missing")}, 1, "demo: --docs " + filepath.Join(empty, "missing") + ": no such folder"},
		{"docs is a file", []string{"--docs", filepath.Join(empty, "file.md")}, 1, "demo: --docs " + filepath.Join(empty, "file.md") + ": not a folder"},
		{"bad log level", []string{"--log-level", "loud"}, 2, "--log-level must be"},
		{"audit to standard output", []string{"--audit", "-"}, 2, "--audit takes a file path"},
		{"audit file cannot be created", []string{"--audit", filepath.Join(empty, "missing", "audit.jsonl")}, 1, "demo: audit.file:"},
	}
	if err := os.WriteFile(filepath.Join(empty, "file.md"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			if got := run(append([]string{"demo"}, tc.args...), &stdout, &stderr); got != tc.code {
				t.Errorf("exit: got %d; want %d (stderr %s)", got, tc.code, stderr.String())
			}
			if !strings.Contains(stderr.String(), tc.want) {
				t.Errorf("stderr: got %q; want it to contain %q", stderr.String(), tc.want)
			}
			if strings.Contains(stderr.String()+stdout.String(), "secret-demo-token") {
				t.Errorf("the rejected token was echoed")
			}
		})
	}
}

// runDemoBinary starts `bin demo` on free ports with args and reads its
// walkthrough (trimmed lines, up to "Press Ctrl-C"); the rest of stdout is
// drained. The process is killed at cleanup.
func runDemoBinary(t *testing.T, bin string, args ...string) (*exec.Cmd, []string, *testkit.Buffer) {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"demo", "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0"}, args...)...)
	stderr := new(testkit.Buffer)
	cmd.Stderr = stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	var walk []string
	for sc := bufio.NewScanner(out); sc.Scan(); {
		line := strings.TrimSpace(sc.Text())
		walk = append(walk, line)
		if strings.HasPrefix(line, "Press Ctrl-C") {
			break
		}
	}
	go func() { _, _ = io.Copy(io.Discard, out) }()
	return cmd, walk, stderr
}

// walkthroughAddr is the sidecar's host:port the walkthrough names ("").
func walkthroughAddr(walk []string) string {
	for _, line := range walk {
		if a, ok := strings.CutPrefix(line, "sidecar   http://"); ok {
			return strings.Fields(a)[0]
		}
	}
	return ""
}

// TestDemoLogLevel runs the demo binary with --log-level debug: the
// sidecar's own request lines reach stderr (the default, warn, shows none),
// and never the one-replica warning of the in-memory ledger.
func TestDemoLogLevel(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	bin := buildBinary(t)
	for _, tc := range []struct {
		level       string
		wantRequest bool
	}{{"debug", true}, {"warn", false}} {
		t.Run(tc.level, func(t *testing.T) {
			cmd, walk, stderr := runDemoBinary(t, bin, "--log-level", tc.level)
			addr := walkthroughAddr(walk)
			if addr == "" {
				t.Fatalf("no walkthrough on stdout; stderr:\n%s", stderr.String())
			}
			res, err := http.Get("http://" + addr + "/agent-api/v1/unknown")
			if err != nil {
				t.Fatal(err)
			}
			res.Body.Close()
			if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			if err := cmd.Wait(); err != nil {
				t.Fatalf("demo exit after SIGTERM: %v\n%s", err, stderr.String())
			}
			if got := strings.Contains(stderr.String(), `"msg":"request"`); got != tc.wantRequest {
				t.Errorf("--log-level %s: request line in stderr: got %v; want %v\n%s", tc.level, got, tc.wantRequest, stderr.String())
			}
			// The demo is one process: the in-memory ledger sees every retry.
			if strings.Contains(stderr.String(), "turn ledger is in memory") {
				t.Errorf("--log-level %s: the demo warned about its in-memory ledger\n%s", tc.level, stderr.String())
			}
		})
	}
}

// TestDemoAnswersFollowTheQuestion pins the demo's answers on the built-in
// documents: search, a turn's inline knowledge and its same-run hints all
// rank by the question (stop-words ignored), so "Can I get a refund?" finds
// the refund policy first, and a shipping question finds the shipping page.
func TestDemoAnswersFollowTheQuestion(t *testing.T) {
	docs, _ := mustLoadDocs(t, "")
	d := startDemo(t, docs, false)
	for _, tc := range []struct{ query, want string }{
		{"Can I get a refund?", "Refund policy"},
		{"我可以退款吗？", "Refund policy"},
		{"How long does express shipping take?", "Shipping and delivery"},
		{"What happens if the refund window is set to 0?", "Refund policy"},
	} {
		if hints := d.search(t, tc.query, 3); len(hints) == 0 || hints[0].Title != tc.want {
			t.Errorf("search %q: hints %+v; want %q first", tc.query, hints, tc.want)
		}
	}
	turn := func(id, input, mode string) (titles []string, hints []demoHint) {
		t.Helper()
		body, _ := json.Marshal(map[string]string{"client_conversation_id": "pin-" + id, "client_turn_id": "t-" + id,
			"user_message_id": "m-" + id, "user_input": input, "knowledge_delivery": mode})
		code, raw := d.do(t, "POST", d.ws+"/turns", string(body))
		var res struct {
			Context struct {
				Knowledge []struct{ Title string } `json:"knowledge"`
			} `json:"context"`
			Delivery struct {
				Hints []demoHint `json:"hints"`
			} `json:"knowledge_delivery"`
		}
		if code != 200 || json.Unmarshal(raw, &res) != nil {
			t.Fatalf("turn %q: got %d %.300s", input, code, raw)
		}
		for _, k := range res.Context.Knowledge {
			titles = append(titles, k.Title)
		}
		return titles, res.Delivery.Hints
	}
	inline, _ := turn("1", "Can I get a refund?", "inline")
	if len(inline) == 0 || inline[0] != "Refund policy" || slices.Contains(inline, "Operations handbook") {
		t.Errorf("inline knowledge for a refund question: %q; want the refund policy first, no operations handbook", inline)
	}
	_, hints := turn("2", "Can I get a refund?", "on_demand")
	if len(hints) == 0 || hints[0].Title != "Refund policy" {
		t.Errorf("same-run hints for a refund question: %+v; want the refund policy first", hints)
	}
	inline, _ = turn("3", "Is express shipping available?", "inline")
	if len(inline) == 0 || inline[0] != "Shipping and delivery" {
		t.Errorf("inline knowledge for a shipping question: %q; want the shipping page first", inline)
	}
}

// TestDemoDocsTitleAtTop: only a "# " line at the top of a Markdown file
// (blank lines aside) titles it; a heading further down, a "## " line, or
// any heading in a .txt file leaves the file name.
func TestDemoDocsTitleAtTop(t *testing.T) {
	dir := docsDir(t, map[string]string{
		"top.md":     "\uFEFF\n\n#  Packing rules \n\nBoxes are taped twice.\n",
		"deep.md":    "Shipping takes three days.\n\n# Exceptions\n\nIslands take five.\n",
		"sub.md":     "## Only a section\n\nText.\n",
		"hashtag.md": "#nohashspace\n\nText.\n",
		"top.txt":    "# Not a heading in plain text\n\nInvoices are monthly.\n",
		"deep.txt":   "Invoices are monthly.\n# comment-like line\n",
	})
	docs, _ := mustLoadDocs(t, dir)
	var titles []string
	for _, d := range docs {
		titles = append(titles, d.title)
	}
	if got, want := strings.Join(titles, "|"), "Packing rules|deep|deep|hashtag|sub|top"; got != want {
		t.Errorf("titles: got %q; want %q", got, want)
	}
}

// TestDemoOwnDocsTurnRanking: with --docs, a turn retrieves from the
// question too, not the first documents of the folder.
func TestDemoOwnDocsTurnRanking(t *testing.T) {
	dir := docsDir(t, map[string]string{
		"a-backup.md": "# Database backup procedure\n\nRun the nightly backup at 02:00 and verify the dump.\n",
		"b-refund.md": "# Refund rules\n\nA refund is granted within 30 days of purchase.\n",
	})
	docs, _ := mustLoadDocs(t, dir)
	d := startDemo(t, docs, true)
	code, raw := d.do(t, "POST", d.ws+"/turns", `{"client_conversation_id":"c1","client_turn_id":"t1","user_message_id":"m1","user_input":"Can I get a refund?"}`)
	var res struct {
		Context struct {
			Knowledge []struct{ Title string } `json:"knowledge"`
		} `json:"context"`
	}
	if code != 200 || json.Unmarshal(raw, &res) != nil {
		t.Fatalf("turn: got %d %.300s", code, raw)
	}
	if len(res.Context.Knowledge) != 1 || res.Context.Knowledge[0].Title != "Refund rules" {
		t.Errorf("inline knowledge %+v; want only \"Refund rules\"", res.Context.Knowledge)
	}
}

// TestDemoDocsLoader: --docs reads subfolders, skips empty files with a
// note, keeps front matter out of the content (its title is the title), and
// the walkthrough counts documents in good English.
func TestDemoDocsLoader(t *testing.T) {
	dir := docsDir(t, map[string]string{
		"top.md":              "---\ntitle: \"Returns FAQ\"\nauthor: ops\n---\n# Heading not used\n\nReturns are accepted for 30 days.\n",
		"sub/deeper/note.txt": "Parcels are insured up to 500 euros.\n",
		"sub/empty.md":        " \n\n",
		"sub/only-fm.md":      "---\ntitle: Nothing here\n---\n",
		"sub/rule.md":         "---not front matter\nA line.\n",
		".git/notes.md":       "# Hidden\n\nNot a document.\n",
	})
	docs, notes := mustLoadDocs(t, dir)
	got := map[string]string{}
	for _, d := range docs {
		got[d.title] = d.content
	}
	if len(docs) != 3 || got["Returns FAQ"] == "" || got["note"] == "" || got["rule"] == "" {
		t.Fatalf("documents %q; want Returns FAQ, note (from a subfolder of a subfolder) and rule", got)
	}
	if c := got["Returns FAQ"]; strings.Contains(c, "author:") || strings.Contains(c, "---") || !strings.HasPrefix(c, "# Heading not used") {
		t.Errorf("front matter is content: %q", c)
	}
	if c := got["rule"]; !strings.HasPrefix(c, "---not front matter") {
		t.Errorf("a leading --- line that opens no front matter was dropped: %q", c)
	}
	wantNotes := []string{"skipped " + filepath.Join(dir, "sub", "empty.md") + ": it is empty", "skipped " + filepath.Join(dir, "sub", "only-fm.md") + ": it is empty"}
	if strings.Join(notes, "|") != strings.Join(wantNotes, "|") {
		t.Errorf("notes %q; want %q", notes, wantNotes)
	}
	var b bytes.Buffer
	printWalkthrough(&b, "127.0.0.1:1", "127.0.0.1:2", "bha_x", docs[:1], walkthroughQueries(docs[:1], true), "")
	if !strings.Contains(b.String(), "knowledge 1 document in KB") {
		t.Errorf("walkthrough for one document: %s", b.String())
	}
	b.Reset()
	printWalkthrough(&b, "127.0.0.1:1", "127.0.0.1:2", "bha_x", docs, walkthroughQueries(docs, true), "")
	if !strings.Contains(b.String(), "knowledge 3 documents in KB") {
		t.Errorf("walkthrough for three documents: %s", b.String())
	}
	// The note reaches the user's terminal.
	var stdout, stderr bytes.Buffer
	empty := t.TempDir()
	if err := os.WriteFile(filepath.Join(empty, "blank.txt"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if code := run([]string{"demo", "--docs", empty}, &stdout, &stderr); code != 1 || !strings.Contains(stderr.String(), "skipped "+filepath.Join(empty, "blank.txt")+": it is empty") {
		t.Errorf("exit %d, stderr %q; want 1 and the skipped file named", code, stderr.String())
	}
}

// TestDemoAudit runs the demo binary with --audit: the file is created 0600,
// a search writes its event before the answer, and the walkthrough's jq line
// (step 8), run as printed, shows the endpoint and the documents disclosed —
// and the file holds neither the query nor the token. jq is installed by
// scripts/test.sh; with CI=true a missing jq fails.
func TestDemoAudit(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	if _, err := exec.LookPath("jq"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("jq is not installed (CI=true); scripts/test.sh installs it")
		}
		t.Skip("SKIPPED: jq is not installed; run ./scripts/test.sh, which installs it")
	}
	bin := buildBinary(t)
	file := filepath.Join(t.TempDir(), "it's audit.jsonl") // a quote the jq line must survive
	cmd, walk, stderr := runDemoBinary(t, bin, "--audit", file)
	addr, token, jqLine := walkthroughAddr(walk), "", ""
	for _, line := range walk {
		if tok, ok := strings.CutPrefix(line, "export TOKEN="); ok {
			token = tok
		}
		if strings.HasPrefix(line, "jq -c ") {
			jqLine = line
		}
	}
	if addr == "" || token == "" || jqLine == "" {
		t.Fatalf("walkthrough lacks the address, the token or the audit's jq line (addr %q, jq %q); stderr:\n%s", addr, jqLine, stderr.String())
	}
	st, err := os.Stat(file)
	if err != nil {
		t.Fatalf("--audit did not create the file: %v", err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Errorf("audit file mode %v; want 0600", st.Mode().Perm())
	}
	const query = "What happens if the refund window is set to 0?"
	req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/agent-api/v1/workspaces/"+demoRoute+"/knowledge/search", strings.NewReader(`{"query":"`+query+`","limit":3}`))
	req.Header.Set("Authorization", "Bearer "+token)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, res.Body)
	res.Body.Close()
	if res.StatusCode != 200 {
		t.Fatalf("search: %d; want 200", res.StatusCode)
	}
	// The event is written before the answer: it is in the file now.
	jqOut, err := exec.Command("sh", "-c", jqLine).CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", jqLine, err, jqOut)
	}
	lines := strings.Split(strings.TrimSpace(string(jqOut)), "\n")
	if len(lines) != 1 {
		t.Fatalf("the jq line printed %d lines; want one event:\n%s", len(lines), jqOut)
	}
	var raw map[string]any
	if err := json.Unmarshal([]byte(lines[0]), &raw); err != nil {
		t.Fatalf("jq output %q: %v", lines[0], err)
	}
	if raw["endpoint"] != "search" || raw["status"] != "ok" || raw["principal_id"] != "demo-user" {
		t.Errorf("the jq line shows %s; want the search's event (endpoint search, status ok, principal demo-user)", lines[0])
	}
	if docs, _ := raw["docs"].([]any); len(docs) == 0 {
		t.Errorf("the jq line shows no documents: %s", lines[0])
	}
	content, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	for _, secret := range []string{query, token} {
		if strings.Contains(string(content), secret) {
			t.Errorf("the audit file holds %q", secret)
		}
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("demo exit after SIGTERM: %v\n%s", err, stderr.String())
	}
}

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
