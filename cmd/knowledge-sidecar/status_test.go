package main

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"reflect"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bailinghub/knowledge-sidecar/config"
	"github.com/bailinghub/knowledge-sidecar/internal/testkit/testdb"
	"github.com/bailinghub/knowledge-sidecar/rollout"
	"github.com/bailinghub/knowledge-sidecar/sidecar"
)

// adminGet fetches an admin listener path and returns its status and body.
func adminGet(t *testing.T, url string) (int, []byte) {
	t.Helper()
	res, err := (&http.Client{Timeout: 10 * time.Second}).Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return res.StatusCode, b
}

func fetchStatus(t *testing.T, adminURL string) (sidecar.Status, string) {
	t.Helper()
	code, body := adminGet(t, adminURL+"/-/status")
	if code != http.StatusOK {
		t.Fatalf("/-/status: got %d %s; want 200", code, body)
	}
	var st sidecar.Status
	if err := json.Unmarshal(body, &st); err != nil {
		t.Fatalf("/-/status: %v\n%s", err, body)
	}
	return st, string(body)
}

func fetchExplain(t *testing.T, adminURL, route string) sidecar.Explanation {
	t.Helper()
	code, body := adminGet(t, adminURL+"/-/explain?route="+route)
	if code != http.StatusOK {
		t.Fatalf("/-/explain?route=%s: got %d %s; want 200", route, code, body)
	}
	var ex sidecar.Explanation
	if err := json.Unmarshal(body, &ex); err != nil {
		t.Fatalf("/-/explain: %v\n%s", err, body)
	}
	return ex
}

// effectiveConfig loads the file and environment a serve process runs with,
// as it does (for the expected configuration fingerprint).
func effectiveConfig(t *testing.T, w *serveWorld) config.Config {
	t.Helper()
	env := map[string]string{}
	for _, kv := range w.env {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
	}
	cfg, _, err := config.LoadWithWarnings(w.cfgPath, func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// TestServeStatusAndExplain runs `serve` and checks GET /-/status field by
// field (version agreeing with `version`, build_info and the start-up line;
// the configuration's fingerprint; rollout; verdict; breakers; catalog;
// ledger; tracing; last reload), `status --admin` printing it, and
// GET /-/explain for a served, an unserved, a percent-bucketed and a
// malformed route.
func TestServeStatusAndExplain(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	w := newServeWorld(t, "status-test", "")
	w.writeCfg("allow:" + testdb.RouteMulti)
	before := time.Now()
	p := startServe(t, w.bin, w.env)

	st, raw := fetchStatus(t, p.adminURL)

	// One version everywhere: `version`, build_info, the start-up line.
	out, err := exec.Command(w.bin, "version").Output()
	if err != nil {
		t.Fatal(err)
	}
	cliVersion := strings.TrimPrefix(strings.SplitN(string(out), "\n", 2)[0], "knowledge-sidecar ")
	if st.Version != cliVersion || st.Version == "" {
		t.Errorf("status version: got %q; want %q (the version command)", st.Version, cliVersion)
	}
	if !strings.Contains(string(out), "revision: "+st.Revision+"\n") {
		t.Errorf("status revision %q is not the version command's\n%s", st.Revision, out)
	}
	if line := metricLine(t, p.adminURL, `knowledge_sidecar_build_info{goversion="`+runtime.Version()+`",version="`+cliVersion+`"}`); line != "1" {
		t.Errorf("build_info with version %q: got %q; want 1\n%s", cliVersion, line, grepMetric(t, p.adminURL, "build_info"))
	}
	if !strings.Contains(p.logs(), `"msg":"starting knowledge-sidecar","version":"`+cliVersion+`"`) {
		t.Errorf("the start-up line does not carry version %q\n%s", cliVersion, p.logs())
	}

	if st.StartedAt.Before(before.Add(-time.Second)) || st.StartedAt.After(time.Now()) {
		t.Errorf("started_at: got %s; want between %s and now", st.StartedAt, before)
	}
	if want := effectiveConfig(t, w).Fingerprint(); st.ConfigSHA256 != want {
		t.Errorf("config_sha256: got %s; want %s", st.ConfigSHA256, want)
	}
	if !st.Knowledge || st.Rollout != "allow:"+testdb.RouteMulti {
		t.Errorf("got knowledge %v rollout %q; want true, allow:%s", st.Knowledge, st.Rollout, testdb.RouteMulti)
	}
	if st.NativeDetection != (sidecar.NativeStatus{Mode: "never", Verdict: "legacy"}) {
		t.Errorf("native detection: got %+v; want never, legacy", st.NativeDetection)
	}
	for _, fam := range []string{"identity", "retrieval", "catalog"} {
		if st.Breakers[fam] != "closed" {
			t.Errorf("breaker %s: got %q; want closed (all: %v)", fam, st.Breakers[fam], st.Breakers)
		}
	}
	if st.Catalog.Schema != "ok" || !strings.Contains(" absent partial enforced ", " "+st.Catalog.TaskControl+" ") {
		t.Errorf("catalog: got %+v; want schema ok and a task-control state", st.Catalog)
	}
	if st.Ledger != (sidecar.LedgerStatus{Backend: "memory", Reachable: true}) || st.Tracing || st.Audit || st.LastReload != nil {
		t.Errorf("got ledger %+v tracing %v audit %v last reload %v; want memory reachable, off, off, none", st.Ledger, st.Tracing, st.Audit, st.LastReload)
	}
	for _, secret := range []string{w.serviceToken, w.db.ReadOnlyDSN} {
		if strings.Contains(raw, secret) {
			t.Errorf("the status document shows a secret")
		}
	}

	// status prints it for a person.
	var so, se bytes.Buffer
	if code := cmdStatus([]string{"--admin", p.adminURL}, &so, &se, time.Now); code != 0 {
		t.Fatalf("status: exit %d\n%s", code, se.String())
	}
	for _, want := range []string{
		"version:          " + cliVersion, "config sha256:    " + st.ConfigSHA256, "rollout:          allow:" + testdb.RouteMulti,
		"native detection: never, verdict legacy", "breakers:         catalog closed, identity closed, retrieval closed",
		"catalog:          schema ok", "ledger:           memory, reachable", "tracing:          off", "last reload:      none since start",
	} {
		if !strings.Contains(so.String(), want) {
			t.Errorf("status output lacks %q:\n%s", want, so.String())
		}
	}

	// Served: rolled out, found in the catalog with its knowledge bases.
	ex := fetchExplain(t, p.adminURL, testdb.RouteMulti)
	if !ex.Served || !ex.Rollout.Enabled || !ex.Catalog.Found || !ex.Catalog.KnowledgeConfigured || len(ex.Catalog.KBs) == 0 {
		t.Errorf("served route: got %+v", ex)
	}
	kbs := map[string]sidecar.KBState{}
	for _, kb := range ex.Catalog.KBs {
		kbs[kb.ID] = kb
	}
	if !kbs["faq"].Enabled || kbs["kb-disabled"].Enabled || kbs["kb-missing"].Exists {
		t.Errorf("kbs: got %+v; want faq enabled, kb-disabled disabled, kb-missing deleted", ex.Catalog.KBs)
	}
	// Its one document longer than the read chain is listed.
	wantBig := []sidecar.OversizedDocument{{DocID: testdb.DocBig, Title: testdb.DocBigTitle, Bytes: int64(len(testdb.BigDocContent()))}}
	if ex.OversizedCount == nil || *ex.OversizedCount != 1 || !reflect.DeepEqual(ex.OversizedDocuments, wantBig) {
		t.Errorf("oversized documents: got %v %+v; want 1, %+v", ex.OversizedCount, ex.OversizedDocuments, wantBig)
	}
	// Unserved: another route under the allow list.
	ex = fetchExplain(t, p.adminURL, testdb.RouteLegacy)
	if ex.Served || ex.Rollout.Enabled || !strings.Contains(ex.Reason, "not in the allow list") || !ex.Catalog.Found {
		t.Errorf("unserved route: got %+v", ex)
	}
	// A malformed key is refused.
	if code, body := adminGet(t, p.adminURL+"/-/explain?route=Not%20A%20Route"); code != http.StatusBadRequest || !strings.Contains(string(body), "is not a route key") {
		t.Errorf("bad route: got %d %s; want 400", code, body)
	}

	// Percent: the route is served exactly from its threshold on; the
	// reload shows in last_reload and moves the fingerprint.
	from := int(rollout.Bucket(testdb.RouteMulti)/100 + 1)
	for _, tc := range []struct {
		percent int
		served  bool
	}{{from, true}, {from - 1, false}} {
		spec := "percent:" + strconv.Itoa(tc.percent)
		w.writeCfg(spec)
		if code, body := postReload(t, p.adminURL); code != http.StatusOK {
			t.Fatalf("reload %s: got %d %s", spec, code, body)
		}
		ex := fetchExplain(t, p.adminURL, testdb.RouteMulti)
		if ex.Served != tc.served || ex.Rollout.Rule != spec || ex.Rollout.Bucket == nil ||
			*ex.Rollout.Bucket != rollout.Bucket(testdb.RouteMulti) || *ex.Rollout.MinPercent != uint64(from) {
			t.Errorf("%s: got served %v rollout %+v; want served %v, bucket %d, from %d", spec, ex.Served, ex.Rollout, tc.served, rollout.Bucket(testdb.RouteMulti), from)
		}
	}
	st2, _ := fetchStatus(t, p.adminURL)
	if st2.LastReload == nil || st2.LastReload.Result != "ok" || st2.Rollout != "percent:"+strconv.Itoa(from-1) ||
		st2.ConfigSHA256 == st.ConfigSHA256 || st2.ConfigSHA256 != effectiveConfig(t, w).Fingerprint() {
		t.Errorf("after reload: got last reload %+v rollout %q sha %s; want ok, the new rollout, the new file's fingerprint", st2.LastReload, st2.Rollout, st2.ConfigSHA256)
	}
	if err := os.WriteFile(w.cfgPath, []byte("rollout: \"percent:200\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, _ := postReload(t, p.adminURL); code != http.StatusBadRequest {
		t.Fatalf("invalid reload: got %d; want 400", code)
	}
	st3, _ := fetchStatus(t, p.adminURL)
	if st3.LastReload == nil || st3.LastReload.Result != "rejected" || st3.LastReload.Problems == 0 || st3.ConfigSHA256 != st2.ConfigSHA256 {
		t.Errorf("after a rejected reload: got %+v sha %s; want rejected with problems, the running fingerprint kept", st3.LastReload, st3.ConfigSHA256)
	}
	p.terminate(t)
}

func postReload(t *testing.T, adminURL string) (int, string) {
	t.Helper()
	res, err := (&http.Client{Timeout: 10 * time.Second}).Post(adminURL+"/-/reload", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

// grepMetric returns the exposition lines that contain name (for messages).
func grepMetric(t *testing.T, adminURL, name string) string {
	t.Helper()
	_, body := adminGet(t, adminURL+"/metrics")
	var out []string
	for _, l := range strings.Split(string(body), "\n") {
		if strings.Contains(l, name) && !strings.HasPrefix(l, "#") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// TestStatusReloadProblems: the last reload's line counts its problems in
// words that agree with the number ("1 problem", "2 problems").
func TestStatusReloadProblems(t *testing.T) {
	at := time.Date(2026, 12, 6, 3, 0, 0, 0, time.UTC)
	for n, want := range map[int]string{1: "(1 problem;", 2: "(2 problems;"} {
		var b bytes.Buffer
		printStatus(&b, sidecar.Status{LastReload: &sidecar.ReloadStatus{At: at, Result: "rejected", Problems: n}}, at)
		if !strings.Contains(b.String(), want) {
			t.Errorf("%d problems: got\n%s\nwant it to contain %q", n, b.String(), want)
		}
	}
}
