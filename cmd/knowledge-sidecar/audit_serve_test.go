package main

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bailinghub/knowledge-sidecar/internal/testkit/testdb"
)

// The disclosure audit of the real binary: `serve` with the audit on a pipe
// whose reader has gone, and on a file rotated under SIGHUP.

// newAuditWorld is a serve world with the disclosure audit enabled (audit
// holds the audit section's other settings, indented for it), the refund
// document in the FAQ base and the multi route allowed.
func newAuditWorld(t *testing.T, seed, audit string) *serveWorld {
	t.Helper()
	w := newServeWorld(t, seed, "audit:\n  enabled: true\n  "+audit+"\n")
	w.core.AddKB(testdb.KBFAQ)
	w.core.AddDoc(testdb.KBFAQ, testdb.DocRefund, testdb.DocRefundTitle, testdb.DocRefundContent)
	w.writeCfg("allow:" + testdb.RouteMulti)
	return w
}

// refundSearch is a search of the multi route, as w's agent, that finds the
// refund document.
func (w *serveWorld) refundSearch(p *serveProc) *http.Request {
	req, _ := http.NewRequest("POST", p.url+"/agent-api/v1/workspaces/"+testdb.RouteMulti+"/knowledge/search",
		strings.NewReader(`{"query":"refunds accepted within 30 days"}`))
	req.Header.Set("Authorization", "Bearer "+w.token)
	req.Header.Set("Content-Type", "application/json")
	return req
}

// TestServeAuditPipeReaderGone runs `serve` with the disclosure audit on
// standard output, a pipe whose reader has gone (a collector that exited):
// the process is not killed by SIGPIPE; each event that cannot be written
// takes the audit.on_failure path — continue: the answer is sent, counted
// in audit_failures_total and logged; refuse: 503 knowledge_unavailable —
// and the sidecar goes on serving (issue 39, finding 6).
func TestServeAuditPipeReaderGone(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	for _, tc := range []struct {
		policy string
		status int
	}{{"continue", http.StatusOK}, {"refuse", http.StatusServiceUnavailable}} {
		t.Run(tc.policy, func(t *testing.T) {
			w := newAuditWorld(t, "audit-pipe-"+tc.policy, "file: \"-\"\n  on_failure: "+tc.policy)
			r, pw, err := os.Pipe()
			if err != nil {
				t.Fatal(err)
			}
			p := startServeWith(t, w.bin, w.env, pw)
			pw.Close()
			r.Close() // the only reader is gone: a write to the pipe is EPIPE (and SIGPIPE)

			c := &http.Client{Timeout: 10 * time.Second}
			search := func() (int, string) {
				t.Helper()
				res, err := c.Do(w.refundSearch(p))
				if err != nil {
					t.Fatalf("search: %v (exit: %v)\n%s", err, exitOf(p), p.logs())
				}
				defer res.Body.Close()
				b, _ := io.ReadAll(res.Body)
				return res.StatusCode, string(b)
			}
			for i := 1; i <= 2; i++ {
				code, body := search()
				if code != tc.status {
					t.Fatalf("search %d: got %d %.200s; want %d", i, code, body, tc.status)
				}
				if code == http.StatusServiceUnavailable && !strings.Contains(body, `"error":"knowledge_unavailable"`) {
					t.Errorf("search %d: got %s; want knowledge_unavailable", i, body)
				}
			}
			if got := metricLine(t, p.adminURL, "knowledge_sidecar_audit_failures_total"); got != "2" {
				t.Errorf("audit_failures_total: got %q; want 2", got)
			}
			if logs := p.logs(); !strings.Contains(logs, `"msg":"audit: event not written"`) {
				t.Errorf("no log line for the unwritten event:\n%s", logs)
			}
			// Pass-through is still served (Core's own 404 for an unknown path).
			res, err := c.Get(p.url + "/no-such-path")
			if err != nil {
				t.Fatalf("pass-through after the broken pipe: %v (exit: %v)", err, exitOf(p))
			}
			res.Body.Close()
			p.terminate(t)
		})
	}
}

// exitOf is how the process exited (a failed request waits a moment for
// it), or "running".
func exitOf(p *serveProc) any {
	select {
	case <-p.done:
		return p.exitErr
	case <-time.After(5 * time.Second):
		return "running"
	}
}

// TestServeSIGHUPReopensAudit is logrotate against the real binary: `serve`
// writes the disclosure audit to a file, the file is renamed, the process
// gets SIGHUP; the next search's event is in a new file at the configured
// path and the earlier one stays in the renamed file (SPEC §11).
// (test/audit_test.go covers POST /-/reload and calls App.Reload for SIGHUP.)
func TestServeSIGHUPReopensAudit(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	file := filepath.Join(t.TempDir(), "audit.jsonl")
	w := newAuditWorld(t, "audit-hup", "file: "+file)
	p := startServe(t, w.bin, w.env)

	c := &http.Client{}
	search := func() string {
		t.Helper()
		res, err := c.Do(w.refundSearch(p))
		if err != nil {
			t.Fatalf("search: %v", err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != 200 || !strings.Contains(string(body), `"ref":"kr2.`) {
			t.Fatalf("search: got %d %.300s; want 200 with a hint\n%s", res.StatusCode, body, p.logs())
		}
		return res.Header.Get("X-Request-Id")
	}
	// requestIDs reads the audit events of one file; each must name the
	// disclosed document.
	requestIDs := func(path string) []string {
		t.Helper()
		f, err := os.Open(path)
		if err != nil {
			t.Fatalf("audit file: %v", err)
		}
		defer f.Close()
		var ids []string
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			var ev struct {
				RequestID string `json:"request_id"`
				Documents []struct {
					DocID json.Number `json:"doc_id"`
				} `json:"documents"`
			}
			if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
				t.Fatalf("%s: not JSON: %v: %s", path, err, sc.Bytes())
			}
			if len(ev.Documents) != 1 || ev.Documents[0].DocID.String() != "101" {
				t.Errorf("%s: event %s documents %+v; want doc 101", path, ev.RequestID, ev.Documents)
			}
			ids = append(ids, ev.RequestID)
		}
		return ids
	}

	before := search()
	rotated := file + ".1"
	if err := os.Rename(file, rotated); err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	// The signal is handled asynchronously; the reload's counter is its
	// acknowledgement (the audit file is reopened by that reload).
	waitMetric(t, p.adminURL, `knowledge_sidecar_config_reloads_total{result="ok"}`, "1")
	after := search()

	if got := requestIDs(rotated); len(got) != 1 || got[0] != before {
		t.Errorf("rotated file: request ids %q; want only the search before SIGHUP %q", got, before)
	}
	if got := requestIDs(file); len(got) != 1 || got[0] != after {
		t.Errorf("new file: request ids %q; want only the search after SIGHUP %q", got, after)
	}
	p.terminate(t)
}
