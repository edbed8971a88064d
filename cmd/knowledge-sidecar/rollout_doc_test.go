package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// rolloutWalkthrough is the ```sh block under the heading "### The
// walkthrough (tested)" of docs/rollout.md, one command per line (blank
// lines dropped).
func rolloutWalkthrough(t *testing.T) []string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "..", "docs", "rollout.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(raw), "\n### The walkthrough (tested)\n")
	if !ok {
		t.Fatal(`docs/rollout.md has no heading "### The walkthrough (tested)"`)
	}
	_, rest, ok = strings.Cut(rest, "```sh\n")
	if !ok {
		t.Fatal("docs/rollout.md: no ```sh block under the walkthrough's heading")
	}
	block, _, ok := strings.Cut(rest, "```")
	if !ok {
		t.Fatal("docs/rollout.md: the walkthrough's block is not closed")
	}
	var lines []string
	for _, l := range strings.Split(block, "\n") {
		if strings.TrimSpace(l) != "" {
			lines = append(lines, l)
		}
	}
	return lines
}

// TestRolloutRehearsal runs docs/rollout.md's walkthrough as written, line by
// line in sh, with the binary built here first on PATH: against `demo --sql`
// (its Core double and throwaway catalog, its printed environment) and a
// `serve` started as the doc's set-up says, on port 0 listeners. Every line
// must exit 0; explain and status must show the workspace off, served, off
// again; the probe, the offline route check and conformance must pass.
func TestRolloutRehearsal(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	lines := rolloutWalkthrough(t)
	bin := buildBinary(t)
	p := startRehearsalProc(t, bin)

	// The doc's set-up: the rollout comes from the file, the token from a file.
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "rehearsal.yaml"), []byte("rollout: \"off\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "agent-token"), []byte(p.exports["BAILING_AGENT_TOKEN"]+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	env := p.env("KNOWLEDGE_SIDECAR_ROLLOUT")
	s := startServe(t, bin, append(env[:len(env):len(env)],
		"KNOWLEDGE_SIDECAR_CONFIG="+filepath.Join(dir, "rehearsal.yaml"),
		"KNOWLEDGE_SIDECAR_LISTEN=127.0.0.1:0", "KNOWLEDGE_SIDECAR_ADMIN_LISTEN=127.0.0.1:0",
		"KNOWLEDGE_SIDECAR_SHUTDOWN_DRAIN_DELAY=0s"))
	env = append(env, "SIDECAR="+s.url, "ADMIN="+s.adminURL, "PATH="+filepath.Dir(bin)+string(os.PathListSeparator)+os.Getenv("PATH"))

	var explains []bool
	var rollouts []string
	for _, line := range lines {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		cmd := exec.CommandContext(ctx, "sh", "-c", line)
		cmd.Dir, cmd.Env = dir, env
		out, err := cmd.CombinedOutput()
		cancel()
		if err != nil {
			t.Fatalf("%s\n%v\n%s\nserve's log:\n%s", line, err, out, s.logs())
		}
		cmdText, _, _ := strings.Cut(line, "#")
		switch {
		case strings.Contains(cmdText, "/-/explain"):
			var ex struct {
				Served *bool `json:"served"`
			}
			if json.Unmarshal(out, &ex) != nil || ex.Served == nil {
				t.Fatalf("%s: not an explanation: %s", line, out)
			}
			explains = append(explains, *ex.Served)
		case strings.Contains(cmdText, "status --admin"):
			for _, l := range strings.Split(string(out), "\n") {
				if v, ok := strings.CutPrefix(l, "rollout:"); ok {
					rollouts = append(rollouts, strings.TrimSpace(v))
				}
			}
		case strings.Contains(cmdText, "--probe"):
			if !strings.Contains(string(out), "probe: every check passed") || !strings.Contains(string(out), "probe catalog-grants ok") {
				t.Errorf("%s: want every check passed, the catalog's GRANTs ok\n%s", line, out)
			}
		case strings.Contains(cmdText, "--route demo") && strings.Contains(cmdText, "check-config"):
			if !strings.Contains(string(out), "served:           true") {
				t.Errorf("%s: want served: true from the file\n%s", line, out)
			}
		case strings.Contains(cmdText, "conformance"):
			if !strings.Contains(string(out), " 0 failed") {
				t.Errorf("%s: want 0 failed\n%s", line, out)
			}
		}
	}
	if got, want := fmt.Sprint(explains), "[false true false]"; got != want {
		t.Errorf("explain served, in order: got %s; want %s", got, want)
	}
	if got, want := strings.Join(rollouts, " | "), "off | allow:demo | off"; got != want {
		t.Errorf("status rollout, in order: got %s; want %s", got, want)
	}
	s.terminate(t)
	p.stop(t)
}
