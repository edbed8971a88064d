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

	"github.com/bailinghub/knowledge-sidecar/internal/testkit/testdb"
)

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
	w := newServeWorld(t, "audit-hup", "audit:\n  enabled: true\n  file: "+file+"\n")
	w.core.AddKB(testdb.KBFAQ)
	w.core.AddDoc(testdb.KBFAQ, testdb.DocRefund, testdb.DocRefundTitle, testdb.DocRefundContent)
	w.writeCfg("allow:" + testdb.RouteMulti)
	p := startServe(t, w.bin, w.env)

	c := &http.Client{}
	search := func() string {
		t.Helper()
		req, _ := http.NewRequest("POST", p.url+"/agent-api/v1/workspaces/"+testdb.RouteMulti+"/knowledge/search",
			strings.NewReader(`{"query":"refunds accepted within 30 days"}`))
		req.Header.Set("Authorization", "Bearer "+w.token)
		req.Header.Set("Content-Type", "application/json")
		res, err := c.Do(req)
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
