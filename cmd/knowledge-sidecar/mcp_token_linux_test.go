package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/bailinghub/knowledge-sidecar/hostclient"
	"github.com/bailinghub/knowledge-sidecar/internal/testkit"
)

// vmRSS is this process's resident set in bytes (/proc/self/status).
func vmRSS(t *testing.T) int64 {
	t.Helper()
	raw, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatal("no VmRSS in /proc/self/status")
	return 0
}

// boundedSearch is a knowledge_search that must answer with a tool result
// within 10 s.
func boundedSearch(t *testing.T, p *mcpProc) *mcp.CallToolResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := p.session.CallTool(ctx, &mcp.CallToolParams{Name: "knowledge_search", Arguments: map[string]any{"query": "refund"}})
	if err != nil {
		t.Fatalf("knowledge_search: %v; want a tool result within 10 s", err)
	}
	return res
}

// TestMCPTokenFileBad: the token file replaced mid-session by a FIFO, a link
// to /dev/zero, a file over the size bound or an empty file: every call is
// still answered at once with the last good token, memory stays bounded, each
// bad file is one warning, and a good file is used again.
func TestMCPTokenFileBad(t *testing.T) {
	d := startSamples(t, nil)
	base, seen := recordBearers(t, d.base)
	dir := t.TempDir()
	path := filepath.Join(dir, "token")
	if err := os.WriteFile(path, []byte(d.token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p := startMCP(t, "--url", base, "--route", demoRoute, "--token-file", path)
	searchOK(t, p)
	// The process's RSS holds whatever the tests before this one left in it
	// (under -race, several hundred MiB): what counts is the growth while
	// the bad files are read. An unbounded read of /dev/zero grows it by GiBs.
	before := vmRSS(t)

	bad := []struct {
		name   string
		create func(tmp string) error
	}{
		{"fifo", func(tmp string) error { return syscall.Mkfifo(tmp, 0o600) }},
		{"link to /dev/zero", func(tmp string) error { return os.Symlink("/dev/zero", tmp) }},
		{"too large", func(tmp string) error {
			return os.WriteFile(tmp, bytes.Repeat([]byte("a"), hostclient.MaxTokenFileBytes+1), 0o600)
		}},
		{"empty", func(tmp string) error { return os.WriteFile(tmp, nil, 0o600) }},
	}
	for i, b := range bad {
		t.Run(b.name, func(t *testing.T) {
			tmp := filepath.Join(dir, "next"+strconv.Itoa(i))
			if err := b.create(tmp); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(tmp, path); err != nil {
				t.Fatal(err)
			}
			for range 3 {
				n := seen.len()
				var out struct {
					Status string `json:"status"`
				}
				structured(t, boundedSearch(t, p), &out)
				if got := seen.since(n); out.Status != "ok" || len(got) != 1 || got[0].token != d.token {
					t.Errorf("status %q, requests %d; want ok, sent once with the last good token", out.Status, len(got))
				}
			}
		})
	}
	if grew := vmRSS(t) - before; grew > 256<<20 {
		t.Errorf("VmRSS grew %d MiB while the bad token files were read; want well under 256 MiB", grew>>20)
	}
	if n := strings.Count(p.stderr.String(), "token file cannot be read; keeping the last token"); n != len(bad) {
		t.Errorf("%d warnings for %d bad files; want one each\n%s", n, len(bad), p.stderr.String())
	}

	// A good file again: its token is sent (the old one still works too).
	second := randomToken("bha_")
	rotate(d, d.token, second)
	replaceTokenFile(t, path, second+"\n")
	n := seen.len()
	searchOK(t, p)
	if got := seen.since(n); len(got) != 1 || got[0].token != second {
		t.Errorf("after a good file came back: %d requests; want one with its token", len(got))
	}
	p.stopClean(t)
	if strings.Contains(p.stderr.String(), d.token) || strings.Contains(p.stderr.String(), second) {
		t.Error("stderr shows a token")
	}
}

// TestMCPTokenCommandKilledOnExit: a token command run after a 401 hangs,
// having started a long-lived child; when the host closes stdin, mcp exits
// and the child does not outlive it.
func TestMCPTokenCommandKilledOnExit(t *testing.T) {
	d := startSamples(t, nil)
	state := t.TempDir()
	pidFile := filepath.Join(state, "pid")
	// The first run prints the token; every later run hangs on its child.
	command := "if [ -e '" + filepath.Join(state, "ran") + "' ]; then sleep 300 & echo $! > '" + pidFile + "'; wait; " +
		"else touch '" + filepath.Join(state, "ran") + "'; cat '" + filepath.Join(state, "token") + "'; fi"
	if err := os.WriteFile(filepath.Join(state, "token"), []byte(d.token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p := startMCP(t, "--url", d.base, "--route", demoRoute, "--token-command", command)
	searchOK(t, p)

	rotate(d, d.token, randomToken("bha_")) // the next call is answered 401 and runs the command again
	called := make(chan struct{})
	go func() {
		defer close(called)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		_, _ = p.session.CallTool(ctx, &mcp.CallToolParams{Name: "knowledge_search", Arguments: map[string]any{"query": "refund"}})
	}()
	child := testkit.ChildPID(t, pidFile, "the hanging token command wrote its child's pid")

	p.stopClean(t)
	testkit.Eventually(t, 5*time.Second, "the token command's child is gone after mcp exited", func() bool { return testkit.ProcessGone(child) })
	<-called
}
