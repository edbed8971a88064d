package config

import (
	"strings"
	"testing"
)

// TestValidateNamesValuesNotSecrets: a message quotes the offending value of
// a non-secret setting, but never a secret (core.url credentials, query and
// fragment included; ledger.redis_url), and cuts a long value.
func TestValidateNamesValuesNotSecrets(t *testing.T) {
	cfg := Defaults()
	cfg.Core.URL = "https://ops:hunter2@core.internal/x?access_token=s3cr3t#f1"
	cfg.Ledger.RedisURL = "http://:r3dispw@redis:6379/0"
	cfg.Log.Level = "verbose"
	cfg.Listen = ":99999"
	cfg.Proxy.TrustedProxies = []string{strings.Repeat("x", 200)}
	err := cfg.Validate()
	if err == nil {
		t.Fatal("no error")
	}
	msg := err.Error()
	for _, want := range []string{
		`log.level: "verbose" is not one of debug, info, warn, error`,
		`listen: port 99999 is out of range`,
		`core.url: "https://xxxxx@core.internal/x?…#…" must not contain credentials`,
		`ledger.redis_url: is not a redis:// or rediss:// URL (value not shown)`,
		`proxy.trusted_proxies[0]: "` + strings.Repeat("x", quoteMax) + `"… is not an IP address`,
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("missing %q in\n%s", want, msg)
		}
	}
	for _, secret := range []string{"hunter2", "ops:", "s3cr3t", "access_token", "f1", "r3dispw"} {
		if strings.Contains(msg, secret) {
			t.Errorf("the message shows %q:\n%s", secret, msg)
		}
	}
	if strings.Contains(msg, strings.Repeat("x", quoteMax+1)) {
		t.Errorf("a long value is quoted whole")
	}
}
