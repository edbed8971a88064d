package main

import (
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/bailinghub/knowledge-sidecar/config"
	"github.com/bailinghub/knowledge-sidecar/internal/testkit"
	"github.com/bailinghub/knowledge-sidecar/internal/testkit/testdb"
)

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
			p := &prober{cfg: cfg, timeout: 5 * time.Second}
			p.redis(t.Context())
			if len(p.lines) != 1 {
				t.Fatalf("lines: %+v", p.lines)
			}
			l := p.lines[0]
			if l.verdict != verdictOK {
				t.Fatalf("redis line %+v; want ok", l)
			}
			for _, w := range tc.want {
				if !strings.Contains(l.detail, w) {
					t.Errorf("redis line %q lacks %q", l.detail, w)
				}
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
