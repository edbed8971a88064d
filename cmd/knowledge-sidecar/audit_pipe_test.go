package main

import (
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/bailinghub/knowledge-sidecar/internal/testkit/testdb"
)

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
			w := newServeWorld(t, "audit-pipe-"+tc.policy, "audit:\n  enabled: true\n  file: \"-\"\n  on_failure: "+tc.policy+"\n")
			w.core.AddKB(testdb.KBFAQ)
			w.core.AddDoc(testdb.KBFAQ, testdb.DocRefund, testdb.DocRefundTitle, testdb.DocRefundContent)
			w.writeCfg("allow:" + testdb.RouteMulti)
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
				req, _ := http.NewRequest("POST", p.url+"/agent-api/v1/workspaces/"+testdb.RouteMulti+"/knowledge/search",
					strings.NewReader(`{"query":"refunds accepted within 30 days"}`))
				req.Header.Set("Authorization", "Bearer "+w.token)
				req.Header.Set("Content-Type", "application/json")
				res, err := c.Do(req)
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
