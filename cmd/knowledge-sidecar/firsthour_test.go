package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/bailinghub/knowledge-sidecar/internal/testkit"
)

// commands is every command of the CLI, as the top-level usage lists them.
var commands = []string{"serve", "demo", "check-config", "keygen", "version", "mcp", "conformance", "help"}

// TestHelpOfEveryCommand: `COMMAND --help` prints that command's usage and
// exits 0, for every command; the top-level usage names every command on a
// line of its own.
func TestHelpOfEveryCommand(t *testing.T) {
	for _, name := range commands {
		for _, flag := range []string{"--help", "-h"} {
			t.Run(name+" "+flag, func(t *testing.T) {
				t.Setenv(tokenEnv, "")
				code, stdout, stderr := runCLI(name, flag)
				out := stdout + stderr
				if code != 0 {
					t.Errorf("exit %d; want 0 (output %q)", code, out)
				}
				if !strings.Contains(strings.ToLower(out), "usage") {
					t.Errorf("output %q; want a usage text", out)
				}
				if name == "version" && strings.Contains(out, "revision:") {
					t.Errorf("version --help printed the version: %q", out)
				}
			})
		}
	}
	_, usageText, _ := runCLI("help")
	for _, name := range commands {
		if !regexp.MustCompile(`(?m)^  ` + regexp.QuoteMeta(name) + `\s{2,}\S`).MatchString(usageText) {
			t.Errorf("top-level usage has no one-line entry for %q:\n%s", name, usageText)
		}
	}
	if code, _, stderr := runCLI(); code != 2 || !strings.Contains(stderr, "  mcp ") {
		t.Errorf("no command: exit %d, stderr %q; want 2 with the usage", code, stderr)
	}
}

// TestVersionsAgree: mcp's serverInfo.version is what `version` prints.
func TestVersionsAgree(t *testing.T) {
	_, out, _ := runCLI("version")
	first, _, _ := strings.Cut(out, "\n")
	v, ok := strings.CutPrefix(first, "knowledge-sidecar ")
	if !ok || v == "" {
		t.Fatalf("version printed %q", out)
	}
	d := startSamples(t, nil)
	p := startMCP(t, "--url", d.base, "--route", demoRoute, "--token-file", writeTokenFile(t, d.token))
	defer p.stop(t)
	if got := p.session.InitializeResult().ServerInfo.Version; got != v {
		t.Errorf("serverInfo.version %q; version says %q", got, v)
	}
}

// TestMCPSchemaErrorsInPlainEnglish: a tool call outside the input schema
// is told what is wrong in words, integers as integers.
func TestMCPSchemaErrorsInPlainEnglish(t *testing.T) {
	d := startSamples(t, nil)
	p := startMCP(t, "--url", d.base, "--route", demoRoute, "--token-file", writeTokenFile(t, d.token))
	defer p.stop(t)
	for _, tc := range []struct {
		tool string
		args map[string]any
		want string
	}{
		{"knowledge_search", map[string]any{"query": "refund", "limit": 7}, "limit must be between 1 and 3 (got 7)"},
		{"knowledge_search", map[string]any{"query": "refund", "limit": 1.5}, "limit must be a whole number"},
		{"knowledge_search", map[string]any{"limit": 2}, "query is required"},
		{"knowledge_search", map[string]any{"query": ""}, "query must not be empty"},
		{"knowledge_search", map[string]any{"query": "x", "top_k": 3}, "top_k is not an argument of this tool (it takes limit, query, run_id)"},
		{"knowledge_search", map[string]any{"query": "x", "run_id": "run-1"}, "run_id must be a UUID"},
		{"knowledge_read", map[string]any{"ref": "r", "max_bytes": 100}, "max_bytes must be between 4096 and 32768 (got 100)"},
	} {
		res := p.call(t, tc.tool, tc.args)
		got := text(res)
		if !res.IsError || !strings.Contains(got, tc.want) {
			t.Errorf("%s %v: %q; want an error saying %q", tc.tool, tc.args, got, tc.want)
		}
		if strings.Contains(got, ".000000") || strings.Contains(got, "/1 ") {
			t.Errorf("%s %v: %q reads like a validator's internals", tc.tool, tc.args, got)
		}
	}
}

// turnHint makes an on_demand turn on the demo and returns its run_id and
// its first same-run hint's ref and title.
func turnHint(t *testing.T, d *runningDemo, id, input string) (runID, ref, title string) {
	t.Helper()
	body, _ := json.Marshal(map[string]string{"client_conversation_id": "c-" + id, "client_turn_id": "t-" + id,
		"user_message_id": "m-" + id, "user_input": input, "knowledge_delivery": "on_demand"})
	code, raw := d.do(t, "POST", d.ws+"/turns", string(body))
	var res struct {
		RunID    string `json:"run_id"`
		Delivery struct {
			Hints []demoHint `json:"hints"`
		} `json:"knowledge_delivery"`
	}
	if code != 200 || json.Unmarshal(raw, &res) != nil || len(res.Delivery.Hints) == 0 {
		t.Fatalf("turn: %d %.300s", code, raw)
	}
	return res.RunID, res.Delivery.Hints[0].Ref, res.Delivery.Hints[0].Title
}

// TestMCPRunID: --run-id (or BAILING_RUN_ID) binds every call to a run: a
// turn's hint reads without the model copying run_id, and another run_id
// is refused.
func TestMCPRunID(t *testing.T) {
	d := startSamples(t, nil)
	runID, ref, title := turnHint(t, d, "1", "Can I get a refund?")
	if title != "Refund policy" {
		t.Errorf("turn hint %q; want the refund policy", title)
	}
	tf := writeTokenFile(t, d.token)
	for _, how := range []string{"flag", "env"} {
		t.Run(how, func(t *testing.T) {
			args := []string{"--url", d.base, "--route", demoRoute, "--token-file", tf}
			if how == "flag" {
				args = append(args, "--run-id", runID)
			} else {
				t.Setenv(runIDEnv, runID)
			}
			p := startMCP(t, args...)
			defer p.stop(t)
			res := p.call(t, "knowledge_read", map[string]any{"ref": ref})
			var page struct {
				Title string `json:"title"`
				RunID string `json:"run_id"`
			}
			if res.IsError {
				t.Fatalf("reading a turn hint without run_id: %q; want the bound run used", text(res))
			}
			structured(t, res, &page)
			if page.Title != "Refund policy" || page.RunID != runID {
				t.Errorf("page %+v; want the refund policy read in run %s", page, runID)
			}
			res = p.call(t, "knowledge_search", map[string]any{"query": "refund", "run_id": "00000000-0000-4000-8000-000000000000"})
			if !res.IsError || !strings.Contains(text(res), "this server is bound to run "+runID) {
				t.Errorf("another run_id: %q; want invalid_request naming the bound run", text(res))
			}
			if res := p.call(t, "knowledge_search", map[string]any{"query": "refund", "run_id": strings.ToUpper(runID)}); res.IsError {
				t.Errorf("the bound run_id in upper case: %q; want it accepted", text(res))
			}
		})
	}
	// Without the binding the same read needs the run_id (the protocol's rule).
	p := startMCP(t, "--url", d.base, "--route", demoRoute, "--token-file", tf)
	defer p.stop(t)
	if res := p.call(t, "knowledge_read", map[string]any{"ref": ref}); !res.IsError || !strings.Contains(text(res), "knowledge_reference_invalid") {
		t.Errorf("unbound read of a turn hint without run_id: %q; want knowledge_reference_invalid", text(res))
	}
}

// hostEnv is the environment the official MCP SDKs' stdio transports (and
// the MCP Inspector) give a server they start: HOME, PATH, SHELL and TERM.
func hostEnv(t *testing.T) []string {
	env := []string{"HOME=" + t.TempDir(), "PATH=" + os.Getenv("PATH"), "SHELL=/bin/sh", "TERM=xterm-256color"}
	return env
}

// TestMCPInHostEnvironment starts the built binary as an MCP host does,
// with only HOME, PATH, SHELL and TERM: with a token file it serves (and
// the demo's answer to "Can I get a refund?" is the refund policy); with the
// token only exported in the test's own environment it exits 2 saying how
// to give the token.
func TestMCPInHostEnvironment(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	bin := buildBinary(t)
	d := startSamples(t, nil)
	t.Setenv(tokenEnv, d.token) // exported in "the shell": a host does not pass it on

	t.Run("token file", func(t *testing.T) {
		cmd := exec.Command(bin, "mcp", "--url", d.base, "--route", demoRoute, "--token-file", writeTokenFile(t, d.token+"\n"))
		cmd.Env = hostEnv(t)
		var stderr testkit.Buffer
		cmd.Stderr = &stderr
		client := mcp.NewClient(&mcp.Implementation{Name: "host-env-test", Version: "1"}, nil)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		s, err := client.Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
		if err != nil {
			t.Fatalf("connect: %v (stderr %s)", err, stderr.String())
		}
		defer s.Close()
		res, err := s.CallTool(ctx, &mcp.CallToolParams{Name: "knowledge_search", Arguments: map[string]any{"query": "Can I get a refund?"}})
		if err != nil || res.IsError {
			t.Fatalf("search: %v %+v (stderr %s)", err, res, stderr.String())
		}
		var out struct {
			Hints []demoHint `json:"hints"`
		}
		structured(t, res, &out)
		if len(out.Hints) == 0 || out.Hints[0].Title != "Refund policy" {
			t.Errorf("hints %+v; want the refund policy first", out.Hints)
		}
	})

	t.Run("exported variable only", func(t *testing.T) {
		cmd := exec.Command(bin, "mcp", "--url", d.base, "--route", demoRoute)
		cmd.Env = hostEnv(t)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		cmd.Stdin = strings.NewReader("")
		err := cmd.Run()
		var ee *exec.ExitError
		if !errorsAs(err, &ee) || ee.ExitCode() != 2 {
			t.Fatalf("exit: %v; want 2", err)
		}
		for _, want := range []string{"MCP hosts start the server with only HOME, PATH, SHELL and TERM", "--token-file", "--token-command", `"env" block`} {
			if !strings.Contains(stderr.String(), want) {
				t.Errorf("stderr %q; want it to say %q", stderr.String(), want)
			}
		}
		if strings.Contains(stderr.String(), d.token) {
			t.Error("stderr shows the token")
		}
	})
}

// TestExampleConfigMinimalEnvironment runs the README's command that
// validates deploy/knowledge-sidecar.example.yaml with its minimal
// environment, as written (the binary on PATH); without that environment
// check-config names both missing prerequisites of the rollout in one run.
func TestExampleConfigMinimalEnvironment(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	var line string
	sc := bufio.NewScanner(bytes.NewReader(readme))
	for sc.Scan() {
		if l := strings.TrimSpace(sc.Text()); strings.HasPrefix(l, "env -i ") && strings.HasSuffix(l, "check-config --config deploy/knowledge-sidecar.example.yaml") {
			line = l
		}
	}
	if line == "" {
		t.Fatal("README has no `env -i … knowledge-sidecar check-config --config deploy/knowledge-sidecar.example.yaml` line")
	}
	bin := buildBinary(t)
	path := filepath.Dir(bin) + string(os.PathListSeparator) + os.Getenv("PATH")
	sh := func(script string) (int, string) {
		cmd := exec.Command("/bin/sh", "-c", script)
		cmd.Dir = "../.."
		cmd.Env = []string{"PATH=" + path}
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		if errorsAs(err, &ee) {
			return ee.ExitCode(), string(out)
		}
		if err != nil {
			t.Fatal(err)
		}
		return 0, string(out)
	}
	if code, out := sh(line); code != 0 || strings.TrimSpace(out) != "configuration is valid" {
		t.Errorf("README's line %q: exit %d, %q; want 0 and \"configuration is valid\"", line, code, out)
	}
	code, out := sh(`env -i PATH="$PATH" knowledge-sidecar check-config --config deploy/knowledge-sidecar.example.yaml`)
	if code != 1 || !strings.Contains(out, "KNOWLEDGE_SIDECAR_CATALOG_DSN") || !strings.Contains(out, "KNOWLEDGE_SIDECAR_CORE_TOKEN") {
		t.Errorf("empty environment: exit %d, %q; want 1 naming the DSN and the Core token in the same run", code, out)
	}
}

func errorsAs(err error, target **exec.ExitError) bool { return errors.As(err, target) }

// TestWalkthroughSaysWhatItNeeds: the printed walkthrough says jq is
// needed (steps 3–4 use jq -r) and how to stop a backgrounded demo.
func TestWalkthroughSaysWhatItNeeds(t *testing.T) {
	docs, _ := mustLoadDocs(t, "")
	var b bytes.Buffer
	printWalkthrough(&b, "127.0.0.1:1", "127.0.0.1:2", "bha_x", docs, walkthroughQueries(docs, false), "")
	text := b.String()
	if strings.Contains(text, "jq -r") && !strings.Contains(text, "needs curl and jq") {
		t.Errorf("the walkthrough uses jq -r but does not say jq is needed:\n%s", text)
	}
	if !strings.Contains(text, "kill %1") || strings.Contains(text, "%!") {
		t.Errorf("the walkthrough does not say how to stop a backgrounded demo (or a format verb broke):\n%s", text)
	}
}

// TestCheckConfigMessages: every missing prerequisite of a rollout in one
// run, no doubled prefix, and no message suggesting a setting the file
// refuses (core.token is a secret: environment or core.token_file only).
func TestCheckConfigMessages(t *testing.T) {
	cleanEnv(t)
	t.Setenv("KNOWLEDGE_SIDECAR_CORE_URL", "http://user:pw@core:3000")
	t.Setenv("KNOWLEDGE_SIDECAR_ROLLOUT", "sometimes")
	code, stdout, stderr := runCLI("check-config")
	out := stdout + stderr
	if code != 1 {
		t.Fatalf("exit %d; want 1\n%s", code, out)
	}
	for _, want := range []string{
		`core.url: "http://xxxxx@core:3000" must not contain credentials; give the token in KNOWLEDGE_SIDECAR_CORE_TOKEN or core.token_file`,
		`rollout: unknown spec "sometimes"`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "rollout: rollout:") || strings.Contains(out, "use core.token") {
		t.Errorf("doubled prefix or a refused setting suggested:\n%s", out)
	}
	if strings.Contains(out, "pw@") {
		t.Errorf("the URL's password is echoed:\n%s", out)
	}
	t.Setenv("KNOWLEDGE_SIDECAR_CORE_URL", "http://core:3000")
	t.Setenv("KNOWLEDGE_SIDECAR_ROLLOUT", "all")
	_, stdout, stderr = runCLI("check-config")
	out = stdout + stderr
	if !strings.Contains(out, "no catalog DSN (KNOWLEDGE_SIDECAR_CATALOG_DSN)") || !strings.Contains(out, "no Core service token (KNOWLEDGE_SIDECAR_CORE_TOKEN") {
		t.Errorf("a rollout without DSN and token: want both reported in the same run:\n%s", out)
	}
}
