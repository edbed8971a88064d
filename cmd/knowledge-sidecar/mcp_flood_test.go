package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bailinghub/knowledge-sidecar/corefacts"
	"github.com/bailinghub/knowledge-sidecar/internal/fakecore"
	"github.com/bailinghub/knowledge-sidecar/internal/testkit"
	"github.com/bailinghub/knowledge-sidecar/internal/testkit/testdb"
)

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
