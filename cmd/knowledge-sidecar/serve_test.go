package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/bailinghub/knowledge-sidecar/corefacts"
	"github.com/bailinghub/knowledge-sidecar/internal/fakecore"
	"github.com/bailinghub/knowledge-sidecar/internal/testkit"
	"github.com/bailinghub/knowledge-sidecar/internal/testkit/testdb"
)

// TestMain prints one line when tests were skipped for want of MariaDB,
// Redis or python3 (without CI=true), and removes the binary the tests
// share.
func TestMain(m *testing.M) {
	testkit.Main(m, func() {
		if built.dir != "" {
			os.RemoveAll(built.dir)
		}
	})
}

// serveWorld is what a `serve` process runs against: the fake Core with one
// Agent session, a fresh catalog, the binary, its environment (secrets) and
// its config file.
type serveWorld struct {
	db                  *testdb.DB
	core                *fakecore.Core
	coreURL             string
	token, serviceToken string
	bin, cfgPath        string
	env                 []string
	extraYAML           string // appended after the log section
	t                   *testing.T
}

func newServeWorld(t *testing.T, seed, extraYAML string) *serveWorld {
	t.Helper()
	w := &serveWorld{t: t, db: testdb.New(t), serviceToken: "svc_" + seed + "-service-token-0123456789abcdef", extraYAML: extraYAML}
	core := fakecore.New(fakecore.Options{ServiceToken: w.serviceToken})
	w.core = core
	coreSrv := httptest.NewServer(core)
	t.Cleanup(func() { core.Close(); coreSrv.Close() })
	w.coreURL = coreSrv.URL
	core.SetRoute(testdb.RouteMulti, fakecore.GateAllowed)
	w.token = fakecore.Token(seed)
	core.AddSession(w.token, corefacts.Session{
		SessionID: testdb.SessionA, ClientAppID: testdb.AppA,
		Principal: corefacts.Principal{ID: "user-42"}, AllowedRoutes: []string{testdb.RouteMulti},
		ExpiresAt: time.Now().Add(15 * time.Minute),
	})
	w.bin = buildBinary(t)
	w.cfgPath = filepath.Join(t.TempDir(), "sidecar.yaml")
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "KNOWLEDGE_SIDECAR_") {
			w.env = append(w.env, kv)
		}
	}
	w.env = append(w.env,
		"KNOWLEDGE_SIDECAR_CONFIG="+w.cfgPath,
		"KNOWLEDGE_SIDECAR_CORE_TOKEN="+w.serviceToken,
		"KNOWLEDGE_SIDECAR_CATALOG_DSN="+w.db.ReadOnlyDSN,
		"KNOWLEDGE_SIDECAR_CORE_CLIENT_APP_ID="+testdb.AppA,
	)
	return w
}

// writeCfg writes the config file with the rollout. Both listeners are on
// port 0: the kernel picks free ports, which the process's "listening" log
// line names.
func (w *serveWorld) writeCfg(rollout string) {
	cfg := fmt.Sprintf("listen: \"127.0.0.1:0\"\nadmin_listen: \"127.0.0.1:0\"\ncore:\n  url: %q\nrollout: %q\nnative_detection: never\nshutdown:\n  drain_delay: 0s\n  timeout: 5s\nlog:\n  level: info\n%s",
		w.coreURL, rollout, w.extraYAML)
	if err := os.WriteFile(w.cfgPath, []byte(cfg), 0o600); err != nil {
		w.t.Fatal(err)
	}
}

// start runs `serve` with rollout off and waits until it is ready.
func (w *serveWorld) start(t *testing.T) *serveProc {
	t.Helper()
	w.writeCfg("off")
	return startServe(t, w.bin, w.env)
}

// serveProc is a running `knowledge-sidecar serve` process.
type serveProc struct {
	cmd      *exec.Cmd
	url      string // proxy listener
	adminURL string
	done     chan struct{} // closed when the process has exited
	exitErr  error         // valid after done
	mu       sync.Mutex
	stderr   bytes.Buffer
	scanned  int            // stderr bytes looked at for the listening line
	bound    chan [2]string // the listening line's proxy and admin addresses, once
}

func (p *serveProc) logs() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stderr.String()
}

type lockedWriter struct{ p *serveProc }

// Write keeps the log and hands on the addresses of the first "listening"
// line (the bound listeners, as `serve` reports them to an operator).
func (w lockedWriter) Write(b []byte) (int, error) {
	p := w.p
	p.mu.Lock()
	defer p.mu.Unlock()
	n, err := p.stderr.Write(b)
	for p.bound != nil {
		rest := p.stderr.Bytes()[p.scanned:]
		i := bytes.IndexByte(rest, '\n')
		if i < 0 {
			break
		}
		p.scanned += i + 1
		var line struct{ Msg, Proxy, Admin string }
		if json.Unmarshal(rest[:i], &line) == nil && line.Msg == "listening" {
			p.bound <- [2]string{line.Proxy, line.Admin}
			p.bound = nil
		}
	}
	return n, err
}

// built is this command compiled once for every test of the package that
// runs it as a process (a link of the whole binary each time cost seconds
// per test on a loaded machine); the tests only execute it.
var built struct {
	once sync.Once
	dir  string
	bin  string
	err  error
}

// buildBinary compiles this command, once per test process, into a
// temporary directory TestMain removes.
func buildBinary(t *testing.T) string {
	t.Helper()
	built.once.Do(func() {
		built.dir, built.err = os.MkdirTemp("", "ks-serve-test-")
		if built.err != nil {
			return
		}
		built.bin = filepath.Join(built.dir, "knowledge-sidecar")
		// go test puts its own GOROOT/bin first on the PATH of the tests it runs.
		out, err := exec.Command("go", "build", "-o", built.bin, ".").CombinedOutput()
		if err != nil {
			built.err = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if built.err != nil {
		t.Fatal(built.err)
	}
	return built.bin
}

// startServe runs `serve` with env (its config file listens on port 0),
// learns the bound addresses from the "listening" log line and checks that
// /readyz answers 200.
func startServe(t *testing.T, bin string, env []string) *serveProc {
	t.Helper()
	return startServeWith(t, bin, env, nil)
}

// startServeWith is startServe with the process's standard output (nil:
// /dev/null).
func startServeWith(t *testing.T, bin string, env []string, stdout *os.File) *serveProc {
	t.Helper()
	bound := make(chan [2]string, 1)
	p := &serveProc{done: make(chan struct{}), bound: bound}
	p.cmd = exec.Command(bin, "serve")
	p.cmd.Env = env
	if stdout != nil {
		p.cmd.Stdout = stdout
	}
	p.cmd.Stderr = lockedWriter{p}
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start: %v", err)
	}
	go func() { p.exitErr = p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		<-p.done
	})
	select {
	case addrs := <-bound:
		p.url, p.adminURL = "http://"+addrs[0], "http://"+addrs[1]
	case <-p.done:
		t.Fatalf("serve exited before listening: %v\n%s", p.exitErr, p.logs())
	case <-time.After(20 * time.Second):
		t.Fatalf("serve did not log its listening line\n%s", p.logs())
	}
	// Both listeners are bound before the line, and a sidecar is ready from
	// its start: no wait, one request.
	res, err := (&http.Client{Timeout: 10 * time.Second}).Get(p.adminURL + "/readyz")
	if err != nil {
		t.Fatalf("readyz: %v\n%s", err, p.logs())
	}
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("readyz: got %d; want 200\n%s", res.StatusCode, p.logs())
	}
	return p
}

// terminate sends SIGTERM and fails unless the process drains and exits 0
// (bounded).
func (p *serveProc) terminate(t *testing.T) {
	t.Helper()
	signalExit(t, "serve", p.cmd, syscall.SIGTERM, 20*time.Second, p.done, &p.exitErr, p.logs)
}

// signalExit sends sig to the process of cmd (what names it) and fails the
// test unless done closes within bound and *exitErr is then nil; logs is
// what it printed.
func signalExit(t *testing.T, what string, cmd *exec.Cmd, sig os.Signal, bound time.Duration, done <-chan struct{}, exitErr *error, logs func() string) {
	t.Helper()
	if err := cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(bound):
		t.Fatalf("%s did not exit after %v\n%s", what, sig, logs())
	}
	if *exitErr != nil {
		t.Fatalf("%s exit after %v: %v; want 0\n%s", what, sig, *exitErr, logs())
	}
}

// metricLine returns the value of one exposition line, "" when absent.
func metricLine(t *testing.T, adminURL, series string) string {
	t.Helper()
	res, err := http.Get(adminURL + "/metrics")
	if err != nil {
		t.Fatalf("metrics: %v", err)
	}
	defer res.Body.Close()
	sc := bufio.NewScanner(res.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), series+" "); ok {
			return v
		}
	}
	return ""
}

// waitMetric polls /metrics until series has value want (a signal is
// handled asynchronously and has no acknowledgement but the metric).
func waitMetric(t *testing.T, adminURL, series, want string) {
	t.Helper()
	if !testkit.Poll(10*time.Second, func() bool { return metricLine(t, adminURL, series) == want }) {
		t.Fatalf("%s: got %q; want %q", series, metricLine(t, adminURL, series), want)
	}
}

// TestServeReloadAndStop builds the binary and runs `serve` against a fake
// Core and a real MariaDB catalog: SIGHUP with a changed rollout takes
// effect without a restart, SIGHUP with an invalid file is rejected and
// keeps the running policy, both counted in config_reloads_total; SIGTERM
// drains and exits 0.
func TestServeReloadAndStop(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	w := newServeWorld(t, "serve-test", "")
	db, token, serviceToken, cfgPath := w.db, w.token, w.serviceToken, w.cfgPath
	writeCfg := w.writeCfg
	p := w.start(t)

	// The sidecar's client keeps Core's default limit (60/min) and the widest
	// route searches two KBs: warned at start-up, 30 searches a minute.
	if got := metricLine(t, p.adminURL, "knowledge_sidecar_core_client_rate_limit_per_minute"); got != "60" {
		t.Errorf("rate limit gauge: got %q; want 60", got)
	}
	if got := metricLine(t, p.adminURL, "knowledge_sidecar_core_search_capacity_per_minute"); got != "30" {
		t.Errorf("search capacity gauge: got %q; want 30", got)
	}
	if logs := p.logs(); !strings.Contains(logs, `"level":"WARN","msg":"Core rate-limits the sidecar's own client`) || !strings.Contains(logs, `"search_capacity_per_min":30`) {
		t.Errorf("logs lack the start-up rate-limit warning:\n%s", logs)
	}

	c := &http.Client{Timeout: 10 * time.Second}
	capabilities := func() (int, string) {
		t.Helper()
		req, _ := http.NewRequest("GET", p.url+"/agent-api/v1/workspaces/"+testdb.RouteMulti+"/knowledge/capabilities", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		res, err := c.Do(req)
		if err != nil {
			t.Fatalf("capabilities: %v", err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	served := func(code int, body string) bool {
		return code == 200 && strings.Contains(body, `"schema_version":"bailing.agent-knowledge-capabilities.v1"`)
	}

	if code, body := capabilities(); code != 404 || body != `{"error":"not_found"}` {
		t.Fatalf("rollout off: got %d %s; want Core's 404", code, body)
	}

	writeCfg("allow:" + testdb.RouteMulti)
	if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitMetric(t, p.adminURL, `knowledge_sidecar_config_reloads_total{result="ok"}`, "1")
	if code, body := capabilities(); !served(code, body) {
		t.Fatalf("after SIGHUP with allow: got %d %s; want the sidecar's capabilities", code, body)
	}
	if !strings.Contains(p.logs(), `"level":"WARN","msg":"turn ledger is in memory`) {
		t.Errorf("rolled out with the memory ledger: no warning that conflicts are detected only in this process\n%s", p.logs())
	}

	if err := os.WriteFile(cfgPath, []byte("rollout: \"percent:200\"\nno_such_key: 1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitMetric(t, p.adminURL, `knowledge_sidecar_config_reloads_total{result="rejected"}`, "1")
	if code, body := capabilities(); !served(code, body) {
		t.Fatalf("after a rejected reload: got %d %s; want the running policy kept", code, body)
	}
	if got := metricLine(t, p.adminURL, `knowledge_sidecar_config_reloads_total{result="ok"}`); got != "1" {
		t.Errorf(`config_reloads_total{result="ok"}: got %q; want 1`, got)
	}
	if strings.Contains(p.logs(), serviceToken) || strings.Contains(p.logs(), db.ReadOnlyDSN) {
		t.Errorf("logs contain a secret")
	}

	writeCfg("off")
	if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitMetric(t, p.adminURL, `knowledge_sidecar_config_reloads_total{result="ok"}`, "2")
	if !strings.Contains(p.logs(), `"level":"WARN","msg":"configuration reload turns the knowledge protocol off for every workspace`) {
		t.Errorf("reload to off: no warning\n%s", p.logs())
	}

	p.terminate(t)
}

// TestServeReloadEndpointAndWatch: POST /-/reload on the admin listener
// applies a changed file like SIGHUP (200), rejects an invalid one with its
// problems (400, running policy kept); the proxy listener passes /-/reload to
// Core; GET is 405; with reload.watch the changed file is applied without any
// call. The start-up line and the access log are checked on the way.
func TestServeReloadEndpointAndWatch(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	w := newServeWorld(t, "reload-test", "  access: true\nreload:\n  watch: true\n  watch_interval: 1s\n")
	db, token, serviceToken, cfgPath, coreURL := w.db, w.token, w.serviceToken, w.cfgPath, w.coreURL
	writeCfg := w.writeCfg
	p := w.start(t)

	c := &http.Client{Timeout: 10 * time.Second}
	do := func(method, url string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(method, url, nil)
		req.Header.Set("Authorization", "Bearer "+token)
		res, err := c.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, url, err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	capsURL := p.url + "/agent-api/v1/workspaces/" + testdb.RouteMulti + "/knowledge/capabilities"
	served := func() bool {
		code, body := do("GET", capsURL)
		return code == 200 && strings.Contains(body, `"schema_version":"bailing.agent-knowledge-capabilities.v1"`)
	}
	if served() {
		t.Fatal("rollout off: the sidecar served capabilities; want Core's 404")
	}

	// The endpoint, like SIGHUP. Writing the same content the watcher may
	// also apply: the ok count is checked as "at least", the effect exactly.
	writeCfg("allow:" + testdb.RouteMulti)
	if code, body := do("POST", p.adminURL+"/-/reload"); code != 200 || body != `{"status":"reloaded"}` {
		t.Fatalf("POST /-/reload: got %d %s; want 200 reloaded", code, body)
	}
	if !served() {
		t.Fatal("after POST /-/reload with allow: want the sidecar's capabilities")
	}

	// Invalid: 400 with the problems, the running policy kept.
	if err := os.WriteFile(cfgPath, []byte("rollout: \"percent:200\"\nno_such_key: 1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, body := do("POST", p.adminURL+"/-/reload")
	if code != 400 || !strings.Contains(body, `"status":"rejected"`) || !strings.Contains(body, "no_such_key: line 2: unknown setting") ||
		!strings.Contains(body, "rollout:") {
		t.Fatalf("invalid reload: got %d %s; want 400 listing no_such_key and rollout", code, body)
	}
	if !served() {
		t.Fatal("after a rejected reload: want the running policy kept")
	}
	if code, _ := do("GET", p.adminURL+"/-/reload"); code != 405 {
		t.Errorf("GET /-/reload: got %d; want 405", code)
	}
	// The proxy listener never reloads: /-/reload is Core's path there.
	if code, body := do("POST", p.url+"/-/reload"); code != 404 || body != `{"error":"not found"}` {
		t.Errorf("POST /-/reload on the proxy listener: got %d %s; want Core's 404", code, body)
	}

	// The watcher: a valid change is applied with no call at all. Polling
	// the log is the only way to observe a timer-driven reload.
	writeCfg("deny:" + testdb.RouteMulti)
	if !testkit.Poll(15*time.Second, func() bool {
		return strings.Contains(p.logs(), `"msg":"configuration reloaded","rollout":"deny:`+testdb.RouteMulti+`"`)
	}) {
		t.Fatalf("reload.watch: the rollout change was not applied\n%s", p.logs())
	}
	if served() {
		t.Error("after the watched change to deny: the sidecar still serves capabilities")
	}
	if !strings.Contains(p.logs(), "reload watch: the configuration file changed") {
		t.Errorf("logs: want the watcher's line\n%s", p.logs())
	}

	logs := p.logs()
	for _, want := range []string{`"msg":"starting knowledge-sidecar"`, `"core_host":"` + strings.TrimPrefix(coreURL, "http://") + `"`,
		`"ledger":"memory"`, `"catalog":true`, `"msg":"request"`, `"duration_ms":`} {
		if !strings.Contains(logs, want) {
			t.Errorf("logs: want %s\n%s", want, logs)
		}
	}
	if strings.Contains(logs, serviceToken) || strings.Contains(logs, db.ReadOnlyDSN) || strings.Contains(logs, token) {
		t.Errorf("logs contain a secret")
	}
}

// TestMCPFloodMemoryBound: the `serve` process, under the Kubernetes
// example's 256 MiB bound (GOMEMLIMIT at 90 % of it, as serve derives it
// from a cgroup), answers a flood of remote MCP reads that each render a
// whole read chain — 8 sessions with 16 calls in flight each, fetch and
// near misses against a 300 000-character document and one whose every
// line needs JSON escapes — with its peak resident memory (VmHWM) under the
// bound: answers past proxy.mcp_answer_budget are tool errors overloaded,
// never a process that grows into an OOM kill (issue 39 item 2).
func TestMCPFloodMemoryBound(t *testing.T) {
	const (
		bound    = 256 << 20
		sessions = 8
		workers  = 16 // calls in flight per session
		calls    = 6  // per worker
	)
	w := newServeWorld(t, "mcp-flood", "rate_limit:\n  rps: 1000000\n  burst: 1000000\n")
	// The document whose text grows most when encoded: three quarters <, & and > (six bytes each in JSON).
	line := "quokka marsupial burrow " + strings.Repeat(`<&>"`, 16) + "\n"
	escapes := strings.Repeat(line, (256<<10)/len(line))
	const escapesID, escapesTitle = 7001, "Escapes"
	w.db.Exec(t, `INSERT INTO bz_kb_docs (doc_id, kb_id, title, content, status, created_at, updated_at)
		VALUES (?, ?, ?, ?, 'ready', UTC_TIMESTAMP(), UTC_TIMESTAMP())`, escapesID, testdb.KBManuals, escapesTitle, escapes)
	if err := w.db.IndexIn(context.Background(), w.core); err != nil {
		t.Fatal(err)
	}
	tokens := make([]string, sessions)
	for i := range tokens {
		tokens[i] = fakecore.Token(fmt.Sprintf("mcp-flood-%d", i))
		w.core.AddSession(tokens[i], corefacts.Session{
			SessionID: fmt.Sprintf("f0000000-0000-4000-8000-%012d", i+1), ClientAppID: testdb.AppA,
			Principal: corefacts.Principal{ID: fmt.Sprintf("user-%d", i)}, AllowedRoutes: []string{testdb.RouteMulti},
			ExpiresAt: time.Now().Add(15 * time.Minute),
		})
	}
	w.env = append(w.env, fmt.Sprintf("GOMEMLIMIT=%d", bound/10*9))
	w.writeCfg("all")
	p := startServe(t, w.bin, w.env)
	ws := p.url + "/agent-api/v1/workspaces/" + testdb.RouteMulti
	c := &http.Client{Timeout: 60 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: sessions * workers}}

	post := func(url, token, body string, mcp bool) (int, []byte, error) {
		req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Content-Type", "application/json")
		if mcp {
			req.Header.Set("Accept", "application/json, text/event-stream")
			req.Header.Set("MCP-Protocol-Version", "2025-06-18")
		}
		res, err := c.Do(req)
		if err != nil {
			return 0, nil, err
		}
		defer res.Body.Close()
		var b bytes.Buffer
		_, err = b.ReadFrom(res.Body)
		return res.StatusCode, b.Bytes(), err
	}
	// Each session's refs of the two documents.
	refOf := func(token, query, title string) string {
		code, body, err := post(ws+"/knowledge/search", token, `{"query":"`+query+`","limit":3}`, false)
		var a struct {
			Hints []struct{ Ref, Title string }
		}
		if err != nil || code != 200 || json.Unmarshal(body, &a) != nil {
			t.Fatalf("search %q: %d %v %s", query, code, err, body)
		}
		for _, h := range a.Hints {
			if h.Title == title {
				return h.Ref
			}
		}
		t.Fatalf("search %q: no hint titled %q in %s", query, title, body)
		return ""
	}
	type refs struct{ big, escapes string }
	sref := make([]refs, sessions)
	for i, tok := range tokens {
		sref[i] = refs{refOf(tok, testdb.BigDocUnit, testdb.DocBigTitle), refOf(tok, "quokka marsupial burrow", escapesTitle)}
	}

	var ok, overloaded, unavailable atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan string, sessions*workers)
	for s := range sessions {
		for k := range workers {
			wg.Go(func() {
				for n := range calls {
					ref := sref[s].big
					if (k+n)%2 == 1 {
						ref = sref[s].escapes
					}
					url, call := ws+"/knowledge/mcp?profile=openai", `{"name":"fetch","arguments":{"id":"`+ref+`"}}`
					if (k+n)%4 >= 2 {
						// A near miss walks the whole chain and answers its first page.
						url, call = ws+"/knowledge/mcp", `{"name":"knowledge_read","arguments":{"ref":"`+ref+`","near":"no such passage anywhere zyxw"}}`
					}
					code, body, err := post(url, tokens[s], `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":`+call+`}`, true)
					var rpc testkit.ToolCallAnswer
					switch {
					case err != nil || code != 200 || json.Unmarshal(body, &rpc) != nil || len(rpc.Result.Content) == 0:
						errs <- fmt.Sprintf("%d %v %.300s", code, err, body)
						return
					case !rpc.Result.IsError:
						ok.Add(1)
					case strings.HasPrefix(rpc.Result.Content[0].Text, "overloaded:"):
						overloaded.Add(1)
					case strings.HasPrefix(rpc.Result.Content[0].Text, "knowledge_unavailable:"):
						// The fake Core shares the test's process (and its race
						// detector): under the flood its answers can come too late.
						unavailable.Add(1)
					default:
						errs <- fmt.Sprintf("tool error %.300s", rpc.Result.Content[0].Text)
						return
					}
				}
			})
		}
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Errorf("a call: %s; want a result or a tool error overloaded (or knowledge_unavailable)", e)
	}
	peak := vmHWM(t, p.cmd.Process.Pid)
	t.Logf("%d answers, %d overloaded, %d knowledge_unavailable; peak resident %.1f MiB (bound %d MiB)",
		ok.Load(), overloaded.Load(), unavailable.Load(), float64(peak)/(1<<20), bound>>20)
	if ok.Load() < sessions*workers {
		t.Errorf("%d calls answered; want at least %d (the budget refuses only past itself)", ok.Load(), sessions*workers)
	}
	if overloaded.Load() == 0 {
		t.Errorf("no call was refused overloaded; want the flood past the answer budget")
	}
	if peak > bound {
		t.Errorf("peak resident memory %d MiB; want under %d MiB", peak>>20, bound>>20)
	}
}

// vmHWM is the peak resident set of process pid (bytes), from /proc.
func vmHWM(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		t.Fatalf("peak memory: %v", err)
	}
	for l := range strings.Lines(string(b)) {
		if v, found := strings.CutPrefix(l, "VmHWM:"); found {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				t.Fatalf("peak memory: %q", l)
			}
			return kb << 10
		}
	}
	t.Fatal("peak memory: no VmHWM in /proc/PID/status")
	return 0
}
