package main

import (
	"bufio"
	"context"
	"database/sql"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bailinghub/knowledge-sidecar/internal/testkit"
	"github.com/bailinghub/knowledge-sidecar/internal/testkit/testdb"
)

// rehearsalProc is a running `knowledge-sidecar demo --sql`.
type rehearsalProc struct {
	cmd      *exec.Cmd
	stderr   *testkit.Buffer
	done     chan struct{}
	exitErr  error
	text     string            // everything printed up to the last check
	exports  map[string]string // the printed `export K=V` lines, unquoted
	checks   []string          // the printed `knowledge-sidecar …` lines
	addr     string            // the proxy listener, host:port
	token    string
	database string
	user     string
	admin    *sql.DB // the test server's admin account
}

// adminDSN is KS_TEST_MYSQL_DSN (or testdb's default) once the server
// answers; unreachable: t.Fatal when CI=true, else t.Skip.
func adminDSN(t *testing.T) (string, *sql.DB) {
	t.Helper()
	dsn := os.Getenv("KS_TEST_MYSQL_DSN")
	if dsn == "" {
		dsn = testdb.DefaultDSN
	}
	db, err := sql.Open("mysql", dsn)
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err = db.PingContext(ctx)
		cancel()
	}
	if err != nil {
		testkit.RequireService(t, "MySQL/MariaDB at KS_TEST_MYSQL_DSN", err)
	}
	t.Cleanup(func() { db.Close() })
	return dsn, db
}

// shellUnquote undoes shellWord (and leaves an unquoted word as it is).
func shellUnquote(s string) string {
	if len(s) >= 2 && s[0] == '\'' && s[len(s)-1] == '\'' {
		return strings.ReplaceAll(s[1:len(s)-1], `'\''`, "'")
	}
	return s
}

// startRehearsalProc runs the binary's demo --sql against the test server
// on port 0 listeners and reads its walkthrough up to the operator's checks.
func startRehearsalProc(t *testing.T, bin string) *rehearsalProc {
	t.Helper()
	dsn, admin := adminDSN(t)
	p := &rehearsalProc{stderr: &testkit.Buffer{}, done: make(chan struct{}), exports: map[string]string{}, admin: admin}
	p.cmd = exec.Command(bin, "demo", "--sql", "--sql-dsn", dsn, "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0")
	p.cmd.Stderr = p.stderr
	out, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
		_, _ = io.Copy(io.Discard, out)
		p.exitErr = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		for range lines {
		}
		<-p.done
	})
	var b strings.Builder
	deadline := time.After(60 * time.Second)
	for !strings.Contains(b.String(), "knowledge-sidecar conformance --url") {
		select {
		case line, ok := <-lines:
			if !ok {
				t.Fatalf("demo --sql ended before its checks\nstdout:\n%s\nstderr:\n%s", b.String(), p.stderr.String())
			}
			b.WriteString(line + "\n")
			l := strings.TrimSpace(line)
			if kv, ok := strings.CutPrefix(l, "export "); ok {
				k, v, _ := strings.Cut(kv, "=")
				p.exports[k] = shellUnquote(v)
			}
			if strings.HasPrefix(line, "  knowledge-sidecar ") { // a command, indented as the walkthrough's
				p.checks = append(p.checks, l)
			}
			if a, ok := strings.CutPrefix(l, "sidecar   http://"); ok {
				p.addr = strings.Fields(a)[0]
			}
			if tok, ok := strings.CutPrefix(l, "token     "); ok {
				p.token = tok
			}
			if f := strings.Fields(l); len(f) > 1 && f[0] == "database" {
				p.database = f[1]
			}
			if f := strings.Fields(l); len(f) > 1 && f[0] == "user" {
				p.user = f[1]
			}
		case <-deadline:
			t.Fatalf("demo --sql printed no checks\nstdout:\n%s\nstderr:\n%s", b.String(), p.stderr.String())
		}
	}
	go func() {
		for range lines {
		}
	}()
	p.text = b.String()
	if p.addr == "" || p.token == "" || p.database == "" || p.user == "" {
		t.Fatalf("walkthrough lacks the address, token, database or user:\n%s", p.text)
	}
	return p
}

// env is the environment of a command run after the printed exports:
// the test's own without any KNOWLEDGE_SIDECAR_ or BAILING_ variable, then
// the exports except those named in drop.
func (p *rehearsalProc) env(drop ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "KNOWLEDGE_SIDECAR_") && !strings.HasPrefix(kv, "BAILING_") {
			env = append(env, kv)
		}
	}
	for k, v := range p.exports {
		if !slices.Contains(drop, k) {
			env = append(env, k+"="+v)
		}
	}
	return env
}

// exists reports whether the rehearsal's database and user are on the server.
func (p *rehearsalProc) exists(t *testing.T) (database, user bool) {
	t.Helper()
	var n int
	if err := p.admin.QueryRow("SELECT COUNT(*) FROM information_schema.schemata WHERE schema_name = ?", p.database).Scan(&n); err != nil {
		t.Fatal(err)
	}
	database = n == 1
	if err := p.admin.QueryRow("SELECT COUNT(*) FROM mysql.user WHERE user = ?", p.user).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return database, n == 1
}

// stop sends SIGINT (Ctrl-C) and wants exit 0, bounded.
func (p *rehearsalProc) stop(t *testing.T) {
	t.Helper()
	signalExit(t, "demo --sql", p.cmd, syscall.SIGINT, 30*time.Second, p.done, &p.exitErr, p.stderr.String)
}

// TestDemoSQLRehearsal runs `demo --sql` end to end against the test
// MariaDB: it creates a database and a read-only user, the operator's
// printed checks pass as printed (check-config --probe with every GRANT,
// status with the SQL catalog's schema ok, check-config --route, conformance),
// the walkthrough's capabilities, search, read and turn hint work through the
// SQL catalog, and Ctrl-C drops the database and the user.
func TestDemoSQLRehearsal(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	bin := buildBinary(t)
	p := startRehearsalProc(t, bin)
	if db, user := p.exists(t); !db || !user {
		t.Fatalf("while running: database %s exists %v, user %s exists %v; want both", p.database, db, p.user, user)
	}
	if !strings.HasPrefix(p.exports["KNOWLEDGE_SIDECAR_CATALOG_DSN"], p.user+":") {
		t.Errorf("the printed catalog DSN is not the read-only user's: %q", p.exports["KNOWLEDGE_SIDECAR_CATALOG_DSN"])
	}

	// The operator's checks, exactly as printed, with the binary.
	wantChecks := map[string][]string{
		"check-config --probe": {"probe catalog-grants ok", "probe catalog-schema ok", "probe core-token     ok", "probe system-info    ok", "probe: every check passed"},
		"status --admin":       {"catalog:          schema ok", "rollout:          allow:demo", "knowledge:        on"},
		"check-config --route": {"served:           true", "catalog:          route found, enabled true; knowledge bases: demo-kb enabled"},
		"conformance --url":    {" 0 failed"},
	}
	if len(p.checks) != len(wantChecks) {
		t.Errorf("printed checks %q; want %d", p.checks, len(wantChecks))
	}
	for _, line := range p.checks {
		args := strings.Fields(strings.TrimPrefix(line, "knowledge-sidecar "))
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		cmd := exec.CommandContext(ctx, bin, args...)
		cmd.Env = p.env()
		out, err := cmd.CombinedOutput()
		cancel()
		if err != nil {
			t.Errorf("%s: %v\n%s", line, err, out)
			continue
		}
		for key, wants := range wantChecks {
			if !strings.HasPrefix(strings.Join(args, " "), key) {
				continue
			}
			for _, want := range wants {
				if !strings.Contains(string(out), want) {
					t.Errorf("%s: output lacks %q\n%s", line, want, out)
				}
			}
		}
	}

	// The walkthrough, on the SQL catalog.
	d := &runningDemo{base: "http://" + p.addr, token: p.token, client: &http.Client{Timeout: 30 * time.Second}}
	d.ws = d.base + "/agent-api/v1/workspaces/" + demoRoute
	if code, raw := d.do(t, "GET", d.ws+"/knowledge/capabilities", ""); code != 200 || !strings.Contains(string(raw), `"enabled":true`) {
		t.Errorf("capabilities: got %d %s; want 200 enabled", code, raw)
	}
	hints := d.search(t, "What happens if the refund window is set to 0?", 3)
	if len(hints) == 0 || hints[0].Title != "Refund policy" {
		t.Fatalf("search: hints %+v; want the refund policy first", hints)
	}
	body, _ := json.Marshal(map[string]any{"ref": hints[0].Ref, "max_bytes": 4096})
	var page struct {
		Title   string `json:"title"`
		Content string `json:"content"`
	}
	if code, raw := d.do(t, "POST", d.ws+"/knowledge/read", string(body)); code != 200 || json.Unmarshal(raw, &page) != nil ||
		page.Title != "Refund policy" || !strings.Contains(page.Content, "refund") {
		t.Errorf("read: got %d %.300s; want the refund policy's first page", code, raw)
	}
	// A turn's run is recorded in the database, so its hint reads with the run.
	runID, ref, _ := turnHint(t, d, "sql", "Can I get a refund?")
	body, _ = json.Marshal(map[string]string{"ref": ref, "run_id": runID})
	if code, raw := d.do(t, "POST", d.ws+"/knowledge/read", string(body)); code != 200 {
		t.Errorf("reading the turn hint with its run: got %d %.300s; want 200", code, raw)
	}

	p.stop(t)
	if !strings.Contains(p.stderr.String(), "demo --sql: dropped database "+p.database+" and user "+p.user) {
		t.Errorf("stderr does not say what was dropped:\n%s", p.stderr.String())
	}
	if db, user := p.exists(t); db || user {
		t.Errorf("after Ctrl-C: database %s exists %v, user %s exists %v; want neither", p.database, db, p.user, user)
	}
}
