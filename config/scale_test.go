package config

import (
	"strings"
	"testing"
)

// TestValidateScaleSettings: ledger.redis_mode, ledger.redis_ca_file,
// ledger.redis_wait_replicas and rate_limit.backend are checked, quoting
// the offending non-secret value and never the Redis URL.
func TestValidateScaleSettings(t *testing.T) {
	const pw = "r3dispw"
	cfg := Defaults()
	cfg.Core.URL = "http://core:3000"
	cfg.Ledger.RedisURL = "redis://:" + pw + "@redis:6379/0"
	cfg.Ledger.RedisMode = "galaxy"
	cfg.Ledger.RedisCAFile = "/etc/ca.pem"
	cfg.Ledger.RedisWaitReplicas = -1
	cfg.RateLimit.Backend = "etcd"
	err := cfg.Validate()
	if err == nil {
		t.Fatal("no error")
	}
	msg := err.Error()
	for _, want := range []string{
		`ledger.redis_mode: "galaxy" is not one of single, cluster, sentinel`,
		`ledger.redis_ca_file: "/etc/ca.pem" is set but ledger.redis_url is not a rediss:// URL`,
		`ledger.redis_wait_replicas: -1 is out of range: must be from 0 (off) to 16`,
		`rate_limit.backend: "etcd" is not one of local, redis`,
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("missing %q in\n%s", want, msg)
		}
	}
	if strings.Contains(msg, pw) || strings.Contains(msg, "redis:6379") {
		t.Errorf("the message shows the Redis URL:\n%s", msg)
	}

	cfg = Defaults()
	cfg.Core.URL = "http://core:3000"
	cfg.RateLimit.Backend = "redis"
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), `rate_limit.backend: "redis" needs the ledger's Redis`) {
		t.Errorf("redis rate limit without a Redis URL: %v", err)
	}
}

// TestRateLimitBackendDefault: redis whenever a ledger Redis URL is set,
// else local; an explicit choice wins.
func TestRateLimitBackendDefault(t *testing.T) {
	cfg := Defaults()
	if got := cfg.RateLimitBackend(); got != "local" {
		t.Errorf("without Redis: %q; want local", got)
	}
	cfg.Ledger.RedisURL = "redis://redis:6379/0"
	if got := cfg.RateLimitBackend(); got != "redis" {
		t.Errorf("with a Redis URL: %q; want redis", got)
	}
	cfg.Ledger.Backend = "memory" // the ledger in memory does not change the limit's default
	if got := cfg.RateLimitBackend(); got != "redis" {
		t.Errorf("memory ledger, Redis URL: %q; want redis", got)
	}
	cfg.RateLimit.Backend = "local"
	if got := cfg.RateLimitBackend(); got != "local" {
		t.Errorf("explicit local: %q", got)
	}
	if d := Defaults(); d.Ledger.RedisMode != "single" || d.Ledger.RedisWaitReplicas != 0 || d.RateLimit.Backend != "" {
		t.Errorf("defaults: mode %q wait %d backend %q", d.Ledger.RedisMode, d.Ledger.RedisWaitReplicas, d.RateLimit.Backend)
	}
}

// TestScaleSettingsFromEnv: the new settings take their environment
// overrides like every other.
func TestScaleSettingsFromEnv(t *testing.T) {
	env := map[string]string{
		"KNOWLEDGE_SIDECAR_CORE_URL":                   "http://core:3000",
		"KNOWLEDGE_SIDECAR_LEDGER_REDIS_URL":           "rediss://redis:6379?addr=redis2:6379",
		"KNOWLEDGE_SIDECAR_LEDGER_REDIS_MODE":          "cluster",
		"KNOWLEDGE_SIDECAR_LEDGER_REDIS_CA_FILE":       "/etc/redis-ca.pem",
		"KNOWLEDGE_SIDECAR_LEDGER_REDIS_WAIT_REPLICAS": "1",
		"KNOWLEDGE_SIDECAR_RATE_LIMIT_BACKEND":         "local",
	}
	cfg, err := Load("", func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	if err != nil {
		t.Fatal(err)
	}
	l := cfg.Ledger
	if l.RedisMode != "cluster" || l.RedisCAFile != "/etc/redis-ca.pem" || l.RedisWaitReplicas != 1 || cfg.RateLimit.Backend != "local" {
		t.Errorf("from env: %+v, rate limit %q", l, cfg.RateLimit.Backend)
	}
}
