package config

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func noEnv(string) (string, bool) { return "", false }

func envOf(m map[string]string) LookupEnv {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

// TestFixtures pairs each testdata/*.yaml with its exact error (*.err), or
// with no error when there is no .err file.
func TestFixtures(t *testing.T) {
	files, err := filepath.Glob("testdata/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no fixtures: %v", err)
	}
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".yaml")
		t.Run(name, func(t *testing.T) {
			want := ""
			if raw, err := os.ReadFile(strings.TrimSuffix(f, ".yaml") + ".err"); err == nil {
				want = strings.TrimRight(string(raw), "\n")
			}
			cfg, err := Load(f, noEnv)
			var ce *Error
			if err == nil || errors.As(err, &ce) { // reported together, as check-config does
				err = Join(err, cfg.Validate())
			}
			got := ""
			if err != nil {
				got = err.Error()
				got = strings.TrimPrefix(got, "config: "+f+": ")
			}
			if got != want {
				t.Errorf("got error\n%s\nwant\n%s", got, want)
			}
		})
	}
}

func TestGoodFileValues(t *testing.T) {
	cfg, err := Load("testdata/good.yaml", noEnv)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Listen != ":8081" || cfg.Core.Timeout != 2*time.Second || cfg.Core.Retrieval.Failures != 3 {
		t.Errorf("got %+v; file values not applied", cfg)
	}
	// Fields the file does not name keep their defaults.
	if cfg.Core.Identity != Defaults().Core.Identity || cfg.Ledger.TTL != 24*time.Hour || !cfg.TurnHints {
		t.Errorf("got identity breaker %+v ttl %s turn_hints %v; want defaults", cfg.Core.Identity, cfg.Ledger.TTL, cfg.TurnHints)
	}
}

func TestEnvOverridesFileAndDefaults(t *testing.T) {
	env := envOf(map[string]string{
		"KNOWLEDGE_SIDECAR_LISTEN":                             ":7000",
		"KNOWLEDGE_SIDECAR_ADMIN_LISTEN":                       "127.0.0.1:7001",
		"KNOWLEDGE_SIDECAR_CORE_URL":                           "http://127.0.0.1:3000",
		"KNOWLEDGE_SIDECAR_CORE_TOKEN":                         "svc-token-123",
		"KNOWLEDGE_SIDECAR_CATALOG_DSN":                        "ro:pw@tcp(db:3306)/bz",
		"KNOWLEDGE_SIDECAR_SIGNING_KEYS":                       "k1:c2VjcmV0",
		"KNOWLEDGE_SIDECAR_ROLLOUT":                            "percent:25",
		"KNOWLEDGE_SIDECAR_LEDGER_REDIS_URL":                   "redis://127.0.0.1:6379/2",
		"KNOWLEDGE_SIDECAR_CORE_RETRIEVAL_BREAKER_FAILURES":    "9",
		"KNOWLEDGE_SIDECAR_PROXY_TRUSTED_PROXIES":              "10.0.0.0/8, 192.168.1.1",
		"KNOWLEDGE_SIDECAR_PROXY_PRESERVE_HOST":                "false",
		"KNOWLEDGE_SIDECAR_RATE_LIMIT_RPS":                     "2.5",
		"KNOWLEDGE_SIDECAR_SHUTDOWN_DRAIN_DELAY":               "1s",
		"KNOWLEDGE_SIDECAR_TURN_HINTS":                         "false",
		"KNOWLEDGE_SIDECAR_PROXY_CLIENT_ADDRESS_HEADERS_EXTRA": "X-Akamai-Edge-IP, X-Corp-*",
		"KNOWLEDGE_SIDECAR_TRACING_TRUST_INBOUND":              "all",
	})
	cfg, err := Load("testdata/good.yaml", env)
	if err != nil {
		t.Fatal(err)
	}
	checks := []struct {
		name      string
		got, want any
	}{
		{"listen", cfg.Listen, ":7000"},
		{"admin_listen", cfg.AdminListen, "127.0.0.1:7001"},
		{"core.url", cfg.Core.URL, "http://127.0.0.1:3000"},
		{"core.token", cfg.Core.Token, "svc-token-123"},
		{"catalog.dsn", cfg.Catalog.DSN, "ro:pw@tcp(db:3306)/bz"},
		{"signing.keys", cfg.Signing.Keys, "k1:c2VjcmV0"},
		{"rollout", cfg.Rollout, "percent:25"},
		{"ledger.redis_url", cfg.Ledger.RedisURL, "redis://127.0.0.1:6379/2"},
		{"ledger backend", cfg.LedgerBackend(), "redis"},
		{"retrieval failures", cfg.Core.Retrieval.Failures, uint32(9)},
		{"trusted proxies", strings.Join(cfg.Proxy.TrustedProxies, "|"), "10.0.0.0/8|192.168.1.1"},
		{"preserve_host", cfg.Proxy.PreserveHost, false},
		{"rps", cfg.RateLimit.RPS, 2.5},
		{"drain", cfg.Shutdown.DrainDelay, time.Second},
		{"turn_hints", cfg.TurnHints, false},
		{"client_address_headers_extra", strings.Join(cfg.Proxy.ClientAddressHeadersExtra, "|"), "X-Akamai-Edge-IP|X-Corp-*"},
		{"tracing.trust_inbound", cfg.Tracing.TrustInbound, "all"},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s: got %v; want %v", c.name, c.got, c.want)
		}
	}
	if err := cfg.Validate(); err != nil {
		t.Errorf("Validate: %v", err)
	}
}

func TestEveryFieldHasAnEnvName(t *testing.T) {
	names := EnvNames()
	for _, want := range []string{
		"KNOWLEDGE_SIDECAR_LISTEN", "KNOWLEDGE_SIDECAR_ADMIN_LISTEN", "KNOWLEDGE_SIDECAR_CORE_URL",
		"KNOWLEDGE_SIDECAR_CORE_TOKEN", "KNOWLEDGE_SIDECAR_CATALOG_DSN", "KNOWLEDGE_SIDECAR_SIGNING_KEYS",
		"KNOWLEDGE_SIDECAR_ROLLOUT", "KNOWLEDGE_SIDECAR_LEDGER_REDIS_URL", "KNOWLEDGE_SIDECAR_CORE_TOKEN_FILE",
	} {
		if _, ok := names[want]; !ok {
			t.Errorf("env %s is not read", want)
		}
	}
	cfg := Defaults()
	if got, want := len(names), len(fields(&cfg)); got != want {
		t.Errorf("got %d distinct env names for %d fields; names collide", got, want)
	}
}

func TestSecretsNeverInErrorsOrYAML(t *testing.T) {
	const secret = "s3cr3t-value-that-must-not-leak"
	// A bad secret value is reported without echoing it.
	_, err := Load("", envOf(map[string]string{"KNOWLEDGE_SIDECAR_PROXY_MAX_HEADER_BYTES": "x", "KNOWLEDGE_SIDECAR_CORE_TOKEN": secret}))
	if err == nil || strings.Contains(err.Error(), secret) {
		t.Fatalf("got %v; want an error without the secret", err)
	}
	// Secrets cannot be put in the YAML file.
	dir := t.TempDir()
	f := filepath.Join(dir, "c.yaml")
	os.WriteFile(f, []byte("core:\n  url: http://core:1\n  token: "+secret+"\n"), 0o600)
	if _, err := Load(f, noEnv); err == nil || strings.Contains(err.Error(), secret) {
		t.Fatalf("got %v; want a strict-decoding error without the secret", err)
	}
	// Redis URL with a password: invalid scheme error does not echo it.
	cfg := Defaults()
	cfg.Core.URL = "http://core:1"
	cfg.Ledger.RedisURL = "http://user:" + secret + "@x"
	if err := cfg.Validate(); err == nil || strings.Contains(err.Error(), secret) {
		t.Fatalf("got %v; want an error without the secret", err)
	}
}

func TestSecretFiles(t *testing.T) {
	dir := t.TempDir()
	tok := filepath.Join(dir, "token")
	os.WriteFile(tok, []byte("from-file\n"), 0o600)
	cfg, err := Load("", envOf(map[string]string{"KNOWLEDGE_SIDECAR_CORE_TOKEN_FILE": tok}))
	if err != nil || cfg.Core.Token != "from-file" {
		t.Fatalf("got %q, %v; want the file's token", cfg.Core.Token, err)
	}
	_, err = Load("", envOf(map[string]string{"KNOWLEDGE_SIDECAR_CORE_TOKEN_FILE": tok, "KNOWLEDGE_SIDECAR_CORE_TOKEN": "x"}))
	if err == nil || !strings.Contains(err.Error(), "core.token_file: set either") {
		t.Fatalf("got %v; want a both-set error", err)
	}
}

func TestKnowledgeEnabled(t *testing.T) {
	cfg := Defaults()
	cfg.Core.URL = "http://core:1"
	if ok, reason := cfg.KnowledgeEnabled(); ok || reason == "" {
		t.Fatalf("only core.url: got %v %q; want disabled with a reason", ok, reason)
	}
	cfg.Catalog.DSN = "ro@tcp(db)/bz"
	cfg.Core.Token = "tok"
	if ok, _ := cfg.KnowledgeEnabled(); !ok {
		t.Fatal("got disabled; want enabled with DSN and token")
	}
}

func TestExtraChecks(t *testing.T) {
	cfg := Defaults()
	cfg.Core.URL = "http://core:1"
	err := cfg.Validate(func(*Config) (string, error) { return "signing.keys", errString("bad key k1") })
	if err == nil || err.Error() != "invalid configuration:\n  signing.keys: bad key k1" {
		t.Fatalf("got %v", err)
	}
}

type errString string

func (e errString) Error() string { return string(e) }
