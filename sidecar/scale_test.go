package sidecar

import (
	"strings"
	"testing"

	"github.com/bailinghub/knowledge-sidecar/config"
)

// TestRedisURLChecksPerMode: check-config reads ledger.redis_url in the
// form of ledger.redis_mode and never shows it; a CA file that cannot be
// used is named.
func TestRedisURLChecksPerMode(t *testing.T) {
	const pw = "s3cretPW"
	cases := []struct {
		mode, url, ca string
		want          string // "" = valid
	}{
		{"single", "redis://:" + pw + "@redis:6379/0", "", ""},
		{"cluster", "redis://:" + pw + "@r1:6379?addr=r2:6379&addr=r3:6379", "", ""},
		{"sentinel", "redis://:" + pw + "@s1:26379?master_name=mymaster&addr=s2:26379", "", ""},
		{"cluster", "redis://:" + pw + "@r1:6379?addr=r2:6379&nonsense=1", "", "ledger.redis_url: is not a valid Redis Cluster URL"},
		{"sentinel", "redis://:" + pw + "@s1:26379?addr=s2:26379", "", "ledger.redis_url: is not a valid Sentinel URL"},
		{"single", "redis://:" + pw + "@redis:6379/x", "", "ledger.redis_url: is not a valid Redis URL"},
		{"cluster", "rediss://:" + pw + "@r1:6379?addr=r2:6379", "/nonexistent/ca.pem", `ledger.redis_ca_file: "/nonexistent/ca.pem": cannot be read`},
	}
	for _, tc := range cases {
		cfg := config.Defaults()
		cfg.Core.URL = "http://core:3000"
		cfg.Ledger.RedisMode, cfg.Ledger.RedisURL, cfg.Ledger.RedisCAFile = tc.mode, tc.url, tc.ca
		err := cfg.Validate(ExtraChecks...)
		if tc.want == "" {
			if err != nil {
				t.Errorf("%s: %v", tc.mode, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v; want %q", tc.mode, err, tc.want)
			continue
		}
		if strings.Contains(err.Error(), pw) || strings.Contains(err.Error(), "r2:6379") || strings.Contains(err.Error(), "s2:") {
			t.Errorf("%s: the message shows the URL: %v", tc.mode, err)
		}
	}
}
