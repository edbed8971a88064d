package main

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	"github.com/bailinghub/knowledge-sidecar/config"
	"github.com/bailinghub/knowledge-sidecar/knowledge"
)

func runCLI(args ...string) (code int, stdout, stderr string) {
	var o, e bytes.Buffer
	code = run(args, &o, &e)
	return code, o.String(), e.String()
}

// cliCase is a subcommand's command line run with BAILING_AGENT_TOKEN set
// to token: the exit code it wants and a text its standard error holds.
type cliCase struct {
	name   string
	args   []string
	token  string
	want   int
	stderr string
}

// runCLICases runs each case through cmd (a subcommand's arguments, stdout
// and stderr to its exit code) in a subtest of its own; stdout, when not
// nil, checks what the case wrote to standard output.
func runCLICases(t *testing.T, cases []cliCase, cmd func(args []string, stdout, stderr io.Writer) int, stdout func(t *testing.T, out string)) {
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(tokenEnv, tc.token)
			var o, e bytes.Buffer
			code := cmd(tc.args, &o, &e)
			if code != tc.want || !strings.Contains(e.String(), tc.stderr) {
				t.Errorf("got exit %d, stderr %q; want %d with %q", code, e.String(), tc.want, tc.stderr)
			}
			if stdout != nil {
				stdout(t, o.String())
			}
		})
	}
}

// writeFile writes body to dir/name (0600) and returns its path.
func writeFile(t *testing.T, dir, name, body string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestCommands(t *testing.T) {
	cases := []struct {
		name       string
		args       []string
		code       int
		stdout     string // substring
		stderr     string // substring
		stdoutOnly bool   // stderr must be empty
	}{
		{"version", []string{"version"}, 0, "knowledge-sidecar " + readBuildInfo().Version + "\n  revision: ", "", true},
		{"--version", []string{"--version"}, 0, "\n  go:       " + runtime.Version() + "\n", "", true},
		{"help", []string{"help"}, 0, "usage:", "", true},
		{"--help", []string{"--help"}, 0, "usage:", "", true},
		{"serve --help", []string{"serve", "--help"}, 0, "", "-config", false},
		{"check-config --help", []string{"check-config", "-h"}, 0, "", "-probe", false},
		{"demo --help", []string{"demo", "--help"}, 0, "", "-docs", false},
		{"keygen --help", []string{"keygen", "--help"}, 0, "", "-id", false},
		{"keygen bad id", []string{"keygen", "--id", "no spaces allowed"}, 2, "", "--id must be", false},
		{"no command", nil, 2, "", "usage:", false},
		{"unknown command", []string{"frobnicate"}, 2, "", `unknown command "frobnicate"`, false},
		{"unknown check-config flag", []string{"check-config", "--frob"}, 2, "", "flag provided but not defined", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			code, stdout, stderr := runCLI(tc.args...)
			if code != tc.code {
				t.Errorf("exit: got %d; want %d", code, tc.code)
			}
			if !strings.Contains(stdout, tc.stdout) {
				t.Errorf("stdout: got %q; want it to contain %q", stdout, tc.stdout)
			}
			if !strings.Contains(stderr, tc.stderr) {
				t.Errorf("stderr: got %q; want it to contain %q", stderr, tc.stderr)
			}
			if tc.stdoutOnly && stderr != "" {
				t.Errorf("stderr: got %q; want nothing", stderr)
			}
			if tc.code == 2 && tc.name == "unknown command" && !strings.Contains(stderr, "usage:") {
				t.Errorf("stderr: got %q; want the usage too", stderr)
			}
		})
	}
}

// cleanEnv removes every variable the configuration reads, so the test's
// own settings are the only ones (restored at cleanup).
func cleanEnv(t *testing.T) {
	t.Helper()
	names := []string{"KNOWLEDGE_SIDECAR_CONFIG"}
	for env := range config.EnvNames() {
		names = append(names, env)
	}
	for _, n := range names {
		t.Setenv(n, "")
		if err := os.Unsetenv(n); err != nil {
			t.Fatal(err)
		}
	}
}

// envOf returns the environment variable of a field path.
func envOf(t *testing.T, path string) string {
	t.Helper()
	for env, p := range config.EnvNames() {
		if p == path {
			return env
		}
	}
	t.Fatalf("no environment variable for %s", path)
	return ""
}

// TestCheckConfig: exit 0 for a valid configuration, 1 with every problem
// listed, and never a secret in the output.
func TestCheckConfig(t *testing.T) {
	const (
		coreToken  = "core-token-zzz-must-not-leak"
		dsnPass    = "dsn-password-must-not-leak"
		keySecret  = "c2hvcnQtc2lnbmluZy1zZWNyZXQ" // base64 of 20 bytes: too short
		redisPass  = "redis-pass-must-not-leak"
		goodDSN    = "ro:" + dsnPass + "@tcp(db.internal:3306)/bailinghub"
		badRedis   = "http://:" + redisPass + "@redis.internal:6379/0"
		configFile = "sidecar.yaml"
	)
	secrets := []string{coreToken, dsnPass, keySecret, redisPass}
	dir := t.TempDir()
	write := func(name, body string) string { return writeFile(t, dir, name, body) }
	unknownKey := write("unknown.yaml", "core:\n  url: http://core:8000\n  tokn: x\n")
	secretInFile := write("secret.yaml", "core:\n  url: http://core:8000\n  token: "+coreToken+"\nrollout: \"off\"\n")
	emptyFile := write("empty.yaml", "# nothing yet\n")
	noRollout := write("norollout.yaml", "core:\n  url: http://core:8000\n")
	rolloutNoCatalog := write(configFile, "core:\n  url: http://core:8000\nrollout: all\n")

	cases := []struct {
		name   string
		env    map[string]string // by field path, or by variable name (KNOWLEDGE_SIDECAR_…)
		args   []string
		code   int
		stdout string
		stderr []string // every one must appear
	}{
		{
			name: "valid with knowledge",
			env: map[string]string{"core.url": "http://core.internal:8000", "core.token": coreToken,
				"catalog.dsn": goodDSN, "rollout": "all"},
			code: 0, stdout: "configuration is valid\n",
		},
		{
			name: "valid pass-through only",
			env:  map[string]string{"core.url": "http://core.internal:8000"},
			code: 0, stdout: "knowledge features are off",
		},
		{
			name: "every problem at once",
			env: map[string]string{
				"core.url": "ftp://core.internal", "core.token": coreToken, "catalog.dsn": goodDSN,
				"signing.keys": "k1:" + keySecret, "rate_limit.rps": "0", "log.level": "loud",
				"listen": ":8080", "admin_listen": ":8080", "KNOWLEDGE_SIDECAR_LEDGER_REDIS_URL": badRedis, "native_detection": "sometimes",
			},
			code: 1,
			stderr: []string{`core.url: "ftp://core.internal" is not an absolute http(s) URL`, "rate_limit.rps: 0 is out of range", `log.level: "loud" is not one of`,
				`admin_listen: ":8080" must differ from listen`, "signing.keys:", "ledger.redis_url:", `native_detection: "sometimes" is not one of`},
		},
		{
			name:   "unparseable environment value",
			env:    map[string]string{"core.url": "http://core:8000", "rate_limit.burst": "many", "core.timeout": "soon"},
			code:   1,
			stderr: []string{envOfPath("rate_limit.burst"), envOfPath("core.timeout")},
		},
		{
			name: "missing core url",
			env:  map[string]string{"core.token": coreToken},
			code: 1, stderr: []string{"core.url: is required"},
		},
		{
			name: "unknown key in the file",
			args: []string{"--config", unknownKey},
			code: 1, stderr: []string{"core.tokn: line 3: unknown setting"},
		},
		{
			name: "file named by the environment",
			env:  map[string]string{"KNOWLEDGE_SIDECAR_CONFIG": rolloutNoCatalog},
			code: 1, stderr: []string{"rolls the protocol out"},
		},
		{
			name:   "port out of range",
			env:    map[string]string{"core.url": "http://core:8000", "listen": ":99999"},
			code:   1,
			stderr: []string{"listen: port 99999 is out of range"},
		},
		{
			name: "unparsable DSN and Redis URL, never echoed",
			env: map[string]string{"core.url": "http://core:8000", "core.token": coreToken,
				"catalog.dsn": "ro:" + dsnPass + "@tcpx(db.internal", "KNOWLEDGE_SIDECAR_LEDGER_REDIS_URL": "redis://:" + redisPass + "@redis.internal:6379/zero"},
			code:   1,
			stderr: []string{"catalog.dsn: is not a valid go-sql-driver/mysql DSN", "ledger.redis_url: is not a valid Redis URL"},
		},
		{
			name:   "unknown environment variable",
			env:    map[string]string{"core.url": "http://core:8000", "KNOWLEDGE_SIDECAR_ROLLOUTS": "all"},
			code:   1,
			stderr: []string{"KNOWLEDGE_SIDECAR_ROLLOUTS: unknown environment variable (did you mean KNOWLEDGE_SIDECAR_ROLLOUT?)"},
		},
		{
			name:   "secret in the file",
			args:   []string{"--config", secretInFile},
			code:   1,
			stderr: []string{"core.token: line 3: secrets are not accepted in the file; set KNOWLEDGE_SIDECAR_CORE_TOKEN or core.token_file"},
		},
		{
			name: "empty file warns",
			args: []string{"--config", emptyFile},
			env:  map[string]string{"core.url": "http://core:8000"},
			code: 0, stdout: "warning: the file is empty",
		},
		{
			name: "file without rollout warns",
			args: []string{"--config", noRollout},
			code: 0, stdout: "warning: rollout: not set in the file",
		},
		{
			name: "missing file",
			args: []string{"--config", filepath.Join(dir, "absent.yaml")},
			code: 1, stderr: []string{"absent.yaml"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cleanEnv(t)
			for key, v := range tc.env {
				name := key
				if !strings.HasPrefix(key, config.EnvPrefix) {
					name = envOf(t, key)
				}
				t.Setenv(name, v)
			}
			code, stdout, stderr := runCLI(append([]string{"check-config"}, tc.args...)...)
			if code != tc.code {
				t.Errorf("exit: got %d; want %d (stdout %q, stderr %q)", code, tc.code, stdout, stderr)
			}
			if !strings.Contains(stdout, tc.stdout) {
				t.Errorf("stdout: got %q; want it to contain %q", stdout, tc.stdout)
			}
			for _, want := range tc.stderr {
				if !strings.Contains(stderr, want) {
					t.Errorf("stderr: got %q; want it to list %q", stderr, want)
				}
			}
			for _, s := range secrets {
				if strings.Contains(stdout+stderr, s) {
					t.Errorf("output echoes a secret (%.8s…)", s)
				}
			}
		})
	}
}

// envOfPath is envOf without a test, for table literals.
func envOfPath(path string) string {
	for env, p := range config.EnvNames() {
		if p == path {
			return env
		}
	}
	return "no environment variable for " + path
}

// TestCheckConfigAliases: SPEC §9 names a --check-config flag; the top-level
// flag and `serve --check-config` behave exactly like `check-config`, and an
// unparseable environment value is listed together with validation problems.
func TestCheckConfigAliases(t *testing.T) {
	for _, args := range [][]string{{"check-config"}, {"--check-config"}, {"serve", "--check-config"}} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			cleanEnv(t)
			t.Setenv(envOf(t, "core.url"), "http://core.internal:8000")
			code, stdout, stderr := runCLI(args...)
			if code != 0 || !strings.Contains(stdout, "knowledge features are off") {
				t.Fatalf("valid: got exit %d, stdout %q, stderr %q; want 0 and the pass-through note", code, stdout, stderr)
			}
			t.Setenv(envOf(t, "core.url"), "ftp://core")
			t.Setenv(envOf(t, "rate_limit.burst"), "many")
			code, _, stderr = runCLI(args...)
			if code != 1 || !strings.Contains(stderr, `core.url: "ftp://core" is not an absolute http(s) URL`) ||
				!strings.Contains(stderr, envOf(t, "rate_limit.burst")) {
				t.Fatalf("invalid: got exit %d, stderr %q; want 1 listing the URL and the burst problems", code, stderr)
			}
		})
	}
}

// TestKeygen: the printed key is accepted by the keyring as the signing key,
// with the requested or date-based id, and two runs never print the same key.
func TestKeygen(t *testing.T) {
	now := func() time.Time { return time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC) }
	cases := []struct {
		name   string
		args   []string
		wantID string
	}{
		{"default id", nil, "k20260304"},
		{"given id", []string{"--id", "blue-2"}, "blue-2"},
	}
	seen := map[string]bool{}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var o, e bytes.Buffer
			if code := cmdKeygen(tc.args, &o, &e, now); code != 0 {
				t.Fatalf("exit: got %d; want 0 (%s)", code, e.String())
			}
			line := strings.TrimSuffix(o.String(), "\n")
			if strings.Contains(line, "\n") {
				t.Fatalf("got %q; want one line", o.String())
			}
			keys, err := knowledge.NewKeyring(line, "")
			if err != nil {
				t.Fatalf("keyring rejects the generated key: %v", err)
			}
			if got := keys.SigningKeyID(); got != tc.wantID {
				t.Errorf("key id: got %q; want %q", got, tc.wantID)
			}
			if seen[line] {
				t.Errorf("the same key was printed twice")
			}
			seen[line] = true
		})
	}
}

func TestBuildInfo(t *testing.T) {
	vcs := func(kv ...string) *debug.BuildInfo {
		bi := &debug.BuildInfo{GoVersion: "go1.99", Main: debug.Module{Version: "v1.2.3"}}
		for i := 0; i+1 < len(kv); i += 2 {
			bi.Settings = append(bi.Settings, debug.BuildSetting{Key: kv[i], Value: kv[i+1]})
		}
		return bi
	}
	cases := []struct {
		name             string
		bi               *debug.BuildInfo
		version, builtAt string
		want             buildInfo
	}{
		{"no build info", nil, "dev", "", buildInfo{"dev", "unknown", "unknown", ""}},
		{"module version, clean tree", vcs("vcs.revision", "abc123", "vcs.time", "2026-01-02T03:04:05Z", "vcs.modified", "false"), "dev", "",
			buildInfo{"v1.2.3", "abc123", "2026-01-02T03:04:05Z (commit time)", "go1.99"}},
		{"dirty tree", vcs("vcs.revision", "abc123", "vcs.modified", "true"), "dev", "",
			buildInfo{"v1.2.3", "abc123+dirty", "unknown", "go1.99"}},
		{"ldflags win", vcs("vcs.revision", "abc123", "vcs.time", "2026-01-02T03:04:05Z"), "1.4.0", "2026-02-03T00:00:00Z",
			buildInfo{"1.4.0", "abc123", "2026-02-03T00:00:00Z", "go1.99"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := buildInfoFrom(tc.bi, tc.version, tc.builtAt); got != tc.want {
				t.Errorf("got %+v; want %+v", got, tc.want)
			}
		})
	}
}
