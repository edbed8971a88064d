package main

import (
	"errors"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/bailinghub/knowledge-sidecar/catalog"
	"github.com/bailinghub/knowledge-sidecar/config"
	"github.com/bailinghub/knowledge-sidecar/corefacts"
	"github.com/bailinghub/knowledge-sidecar/hostclient/hostclienttest"
	"github.com/bailinghub/knowledge-sidecar/internal/fakecore"
	"github.com/bailinghub/knowledge-sidecar/internal/testkit"
	"github.com/bailinghub/knowledge-sidecar/internal/testkit/testdb"
)

// closedAddr is host:port where nothing listens: a port bound for the
// test's life and never listened on, so no other process takes it meanwhile.
func closedAddr(t *testing.T) string {
	t.Helper()
	return strings.TrimPrefix(hostclienttest.RefusedURL(t), "http://")
}

// parseProbe maps each "probe NAME VERDICT detail" line to its verdict.
func parseProbe(out string) map[string]string {
	got := map[string]string{}
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) >= 3 && f[0] == "probe" && !strings.HasSuffix(f[1], ":") {
			got[f[1]] = f[2]
		}
	}
	return got
}

// TestCheckConfigProbe runs `check-config --probe` against the fake Core, a
// fresh MariaDB catalog with the read-only user and the test Redis, then
// breaks one dependency per case: every line's verdict and the exit code are
// checked, and no secret may appear in the output.
// overlay is a copy of m with the key, value pairs kv set.
func overlay(m map[string]string, kv ...string) map[string]string {
	out := maps.Clone(m)
	for i := 0; i+1 < len(kv); i += 2 {
		out[kv[i]] = kv[i+1]
	}
	return out
}

func TestCheckConfigProbe(t *testing.T) {
	const serviceToken = "svc_probe-test-service-token-0123456789abcdef"
	good := testdb.New(t)
	broken := testdb.New(t)
	// The broken catalog: a column GRANT revoked, a required migration
	// missing, and Core 0.8's task migration recorded without readable tables.
	ro, err := mysql.ParseDSN(broken.ReadOnlyDSN)
	if err != nil {
		t.Fatal(err)
	}
	broken.Exec(t, "REVOKE SELECT (content) ON `"+broken.Name+"`.bz_kb_docs FROM '"+ro.User+"'@'%'")
	broken.Exec(t, "DELETE FROM bz_schema_migrations WHERE filename = '056_agent_client_runtime.sql'")
	broken.Exec(t, "INSERT INTO bz_schema_migrations (filename) VALUES ('"+catalog.TaskMigration+"')")
	// Core 0.8 with task control, granted as documented; and the same with
	// one task column not granted.
	tasks := testdb.New(t)
	tasks.InstallTaskControl(t)
	tasksUngranted := testdb.New(t)
	tasksUngranted.InstallTaskControl(t)
	tro, err := mysql.ParseDSN(tasksUngranted.ReadOnlyDSN)
	if err != nil {
		t.Fatal(err)
	}
	tasksUngranted.Exec(t, "REVOKE SELECT (policy_json) ON `"+tasksUngranted.Name+"`.bz_agent_tasks FROM '"+tro.User+"'@'%'")
	redisURL := testdb.RedisURL(t)
	// Without Core's schema: no migration recorded. And one whose catalog
	// queries mostly fail (tables dropped): more failures than the breaker's
	// threshold, none of which may turn a later line into "circuit open".
	noSchema := testdb.New(t)
	noSchema.Exec(t, "DELETE FROM bz_schema_migrations")
	manyFail := testdb.New(t)
	for _, table := range []string{"bz_kb_docs", "bz_kb_bases", "bz_agent_client_runs", "bz_clients"} {
		manyFail.Exec(t, "DROP TABLE "+table)
	}
	ungrantedDB := *ro
	ungrantedDB.DBName = ro.DBName + "_no_such_db"
	// The test's admin user may see every database: MariaDB then says the
	// database is unknown (to others it says access denied, error 1044).
	adminDSN := os.Getenv("KS_TEST_MYSQL_DSN")
	if adminDSN == "" {
		adminDSN = testdb.DefaultDSN
	}
	unknownDB, err := mysql.ParseDSN(adminDSN)
	if err != nil {
		t.Fatal(err)
	}
	unknownDB.DBName = "ks_test_no_such_db_probe"
	wrongPassword := *ro
	wrongPassword.Passwd = "wrong-password-must-not-leak"
	refused := closedAddr(t)
	coreDown := closedAddr(t)

	agentToken := fakecore.Token("probe-agent")
	newCore := func(systemInfo bool) string {
		core := fakecore.New(fakecore.Options{ServiceToken: serviceToken, SystemInfo: systemInfo})
		srv := httptest.NewServer(core)
		t.Cleanup(func() { core.Close(); srv.Close() })
		core.SetRoute(testdb.RouteMulti, fakecore.GateAllowed)
		core.AddSession(agentToken, corefacts.Session{
			SessionID: testdb.SessionA, ClientAppID: testdb.AppA,
			Principal: corefacts.Principal{ID: "user-42"}, AllowedRoutes: []string{testdb.RouteMulti},
			ExpiresAt: time.Now().Add(15 * time.Minute),
		})
		core.AddAuthClient(fakecore.AuthClient{AppID: "mcp-hosts", AuthorizeURL: "https://business.example/consent",
			AllowedRoutes: []string{testdb.RouteMulti}})
		return srv.URL
	}
	coreURL, core07URL := newCore(false), newCore(true)
	notACore := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("hello from some other service"))
	}))
	t.Cleanup(notACore.Close)

	base := map[string]string{
		"core.url": coreURL, "core.token": serviceToken, "catalog.dsn": good.ReadOnlyDSN,
		"KNOWLEDGE_SIDECAR_LEDGER_REDIS_URL": redisURL, "rollout": "all",
	}
	with := func(kv ...string) map[string]string { return overlay(base, kv...) }
	allOK := map[string]string{
		"core": "ok", "core-token": "ok", "system-info": "skip", "catalog": "ok", "catalog-schema": "ok",
		"catalog-grants": "ok", "task-control": "ok", "redis": "ok", "signing-keys": "ok", "mcp-oauth": "skip",
	}
	except := func(kv ...string) map[string]string { return overlay(allOK, kv...) }
	const wrongToken = "svc_wrong-token-wrong-token-wrong-token-0000"
	type probeCase struct {
		name string
		env  map[string]string
		code int
		want map[string]string
		says []string // substrings of the output
	}
	cases := []probeCase{
		{"everything works", base, 0, allOK, []string{"task-control   ok    absent", "probe: every check passed"}},
		{"system-info present (Core 0.7)", with("core.url", core07URL, probeAgentTokenEnv, agentToken), 0, except("system-info", "ok"),
			[]string{"system-info    ok    present (Core ≥ 0.7)"}},
		{"system-info absent (Core 0.6)", with(probeAgentTokenEnv, agentToken), 0, except("system-info", "ok"),
			[]string{"system-info    ok    absent (Core < 0.7)"}},
		{"Agent token refused", with(probeAgentTokenEnv, fakecore.Token("nobody")), 1, except("system-info", "FAIL"), nil},
		{"wrong service token", with("core.token", wrongToken), 1, except("core-token", "FAIL"), nil},
		{"short token as signing secret", with("core.token", "short"), 1, except("core-token", "FAIL", "signing-keys", "FAIL"), nil},
		{"Core down", with("core.url", "http://"+coreDown), 1, except("core", "FAIL", "core-token", "skip"),
			[]string{"core           FAIL  connection refused (tried http://" + coreDown + ")", "core-token     skip  Core is not reachable"}},
		{"not a Core", with("core.url", notACore.URL), 1, except("core", "FAIL", "core-token", "skip"), nil},
		{"catalog down", with("catalog.dsn", "ro:pw-must-not-leak@tcp("+refused+")/bz"), 1,
			except("catalog", "FAIL", "catalog-schema", "skip", "catalog-grants", "skip", "task-control", "skip"),
			[]string{"catalog        FAIL  connection refused at " + refused}},
		{"unknown database", with("catalog.dsn", unknownDB.FormatDSN()), 1,
			except("catalog", "FAIL", "catalog-schema", "skip", "catalog-grants", "skip", "task-control", "skip"),
			[]string{`catalog        FAIL  unknown database "` + unknownDB.DBName + `"`}},
		{"database not granted", with("catalog.dsn", ungrantedDB.FormatDSN()), 1,
			except("catalog", "FAIL", "catalog-schema", "skip", "catalog-grants", "skip", "task-control", "skip"),
			[]string{`may not use database "` + ungrantedDB.DBName + `", or it does not exist`}},
		{"wrong password", with("catalog.dsn", wrongPassword.FormatDSN()), 1,
			except("catalog", "FAIL", "catalog-schema", "skip", "catalog-grants", "skip", "task-control", "skip"),
			[]string{`catalog        FAIL  access denied for user "` + ro.User + `"`, "wrong user or password"}},
		{"no Core schema", with("catalog.dsn", noSchema.ReadOnlyDSN), 1,
			except("catalog-schema", "FAIL", "catalog-grants", "skip", "task-control", "skip"),
			[]string{"no Core schema in database", "catalog-grants skip  no Core schema in this database"}},
		{"many failing queries do not open the breaker", with("catalog.dsn", manyFail.ReadOnlyDSN), 1,
			except("catalog-grants", "FAIL"),
			[]string{"catalog client query failed: schema mismatch; catalog kb_ready query failed: schema mismatch", "task-control   ok    absent"}},
		{"missing grant, migration and task tables", with("catalog.dsn", broken.ReadOnlyDSN), 1,
			except("catalog-schema", "FAIL", "catalog-grants", "FAIL", "task-control", "FAIL"),
			[]string{"missing Core migrations: 056_agent_client_runtime.sql", "catalog doc_body query failed: access denied",
				"partial: 0 of 6 task tables readable"}},
		{"task control present", with("catalog.dsn", tasks.ReadOnlyDSN), 0, allOK,
			[]string{"task-control   ok    present: all 6 task tables and the task query's columns are readable"}},
		{"task control present, a task column not granted", with("catalog.dsn", tasksUngranted.ReadOnlyDSN), 1,
			except("task-control", "FAIL"), []string{"present, but the task query fails"}},
		{"Redis down", with("KNOWLEDGE_SIDECAR_LEDGER_REDIS_URL", "redis://"+closedAddr(t)+"/0"), 1, except("redis", "FAIL"), nil},
		{"pass-through only", map[string]string{"core.url": coreURL}, 0, map[string]string{
			"core": "ok", "core-token": "skip", "system-info": "skip", "catalog": "skip", "catalog-schema": "skip",
			"catalog-grants": "skip", "task-control": "skip", "redis": "skip", "signing-keys": "skip", "mcp-oauth": "skip"}, nil},
		{"MCP hosts sign in through Core", with("mcp.oauth.client_app_id", "mcp-hosts", "mcp.public_url", "https://agents.example.com",
			"rollout", "allow:"+testdb.RouteMulti), 0, except("mcp-oauth", "ok"),
			[]string{`mcp-oauth      ok    client "mcp-hosts" can sign hosts in for ` + testdb.RouteMulti}},
		{"Core refuses the sign-in client", with("mcp.oauth.client_app_id", "nobody", "mcp.public_url", "https://agents.example.com",
			"rollout", "allow:"+testdb.RouteMulti), 1, except("mcp-oauth", "FAIL"),
			[]string{`mcp-oauth      FAIL  Core refuses client "nobody"`}},
	}
	secrets := []string{serviceToken, wrongToken, agentToken, "pw-must-not-leak", "wrong-password-must-not-leak", ro.Passwd}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cleanEnv(t)
			t.Setenv(probeAgentTokenEnv, "")
			for key, v := range tc.env {
				name := key
				if !strings.HasPrefix(key, "KNOWLEDGE_SIDECAR_") {
					name = envOf(t, key)
				}
				t.Setenv(name, v)
			}
			code, stdout, stderr := runCLI("check-config", "--probe", "--probe-timeout", "3s")
			if code != tc.code {
				t.Errorf("exit: got %d; want %d\n%s%s", code, tc.code, stdout, stderr)
			}
			got := parseProbe(stdout)
			for name, want := range tc.want {
				if got[name] != want {
					t.Errorf("probe %s: got %q; want %q\n%s", name, got[name], want, stdout)
				}
			}
			for _, want := range tc.says {
				if !strings.Contains(stdout, want) {
					t.Errorf("stdout: got\n%s\nwant it to contain %q", stdout, want)
				}
			}
			if len(got) != len(tc.want) {
				t.Errorf("got %d probe lines; want %d\n%s", len(got), len(tc.want), stdout)
			}
			for _, s := range secrets {
				if strings.Contains(stdout+stderr, s) {
					t.Errorf("output echoes a secret (%.6s…)", s)
				}
			}
			// Addresses of the operator's own configuration are named (the
			// cause needs them); credentials never are (secrets above).
			if strings.Contains(stdout+stderr, "circuit open") {
				t.Errorf("a probe line reports the probe's own breaker:\n%s", stdout)
			}
		})
	}
}

// TestProbeRedisModes: the probe's redis line names the mode and what it
// found — the cluster's primaries and replicas, the sentinels' primary —
// that the scripts load, and the rate-limit backend; never the URL's
// password.
func TestProbeRedisModes(t *testing.T) {
	cases := []struct {
		mode, env string
		want      []string
	}{
		{"single", "", []string{"mode single; reachable; the ledger's Lua scripts load (rate limit: redis)"}},
		{"cluster", "KS_TEST_REDIS_CLUSTER_URL", []string{"mode cluster, 3 primaries (127.0.0.1:", "3 replicas; reachable; the ledger's Lua scripts load"}},
		{"sentinel", "KS_TEST_REDIS_SENTINEL_URL", []string{"mode sentinel, master 127.0.0.1:", "the ledger's Lua scripts load"}},
	}
	for _, tc := range cases {
		t.Run(tc.mode, func(t *testing.T) {
			url := testdb.RedisURL(t)
			if tc.env != "" {
				if url = os.Getenv(tc.env); url == "" {
					testkit.RequireService(t, "the Redis Cluster/Sentinel set of "+tc.env, errors.New("not set: scripts/test.sh starts it"))
				}
			}
			cfg := config.Defaults()
			cfg.Ledger.RedisURL, cfg.Ledger.RedisMode = url, tc.mode
			// The Cluster and the Sentinel set are shared with ./test, whose
			// failover tests may be moving a primary or holding one stopped
			// right now (go test runs packages side by side): the probe is
			// asked again, for up to a minute, until it finds the set whole.
			var l probeLine
			whole := func() bool {
				p := &prober{cfg: cfg, timeout: 5 * time.Second}
				p.redis(t.Context())
				if len(p.lines) != 1 {
					t.Fatalf("lines: %+v", p.lines)
				}
				l = p.lines[0]
				if l.verdict != verdictOK {
					return false
				}
				for _, w := range tc.want {
					if !strings.Contains(l.detail, w) {
						return false
					}
				}
				return true
			}
			if !testkit.Poll(time.Minute, whole) {
				t.Fatalf("redis line %+v; want ok, naming %q", l, tc.want)
			}
		})
	}
	// The wrong mode for the URL fails, naming no password.
	cfg := config.Defaults()
	cfg.Ledger.RedisURL, cfg.Ledger.RedisMode = "redis://:pw-must-not-leak@127.0.0.1:1?addr=127.0.0.1:2", "sentinel"
	p := &prober{cfg: cfg, timeout: time.Second}
	p.redis(t.Context())
	if len(p.lines) != 1 || p.lines[0].verdict != verdictFail || strings.Contains(p.lines[0].detail, "pw-must-not-leak") {
		t.Errorf("sentinel URL without master_name: %+v", p.lines)
	}
}
