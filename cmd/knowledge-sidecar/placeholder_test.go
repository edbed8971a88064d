package main

import (
	"strings"
	"testing"
)

// TestCheckConfigRefusesPlaceholders: secrets from the environment that are
// still an example's placeholders (the old Kubernetes Secret's
// "<Core client token …>", changeme, REPLACE_ME) fail check-config, each
// named by its field alone — no other check's message about the same field,
// never the value.
func TestCheckConfigRefusesPlaceholders(t *testing.T) {
	for _, tc := range []struct{ field, value string }{
		{"core.token", "<Core client token from the Core admin console>"},
		{"catalog.dsn", "ro:changeme@tcp(db:3306)/bailinghub"},
		{"signing.keys", "k1:Replace_Me"},
		{"ledger.redis_url", "redis://:<password>@redis:6379/0"},
		{"core.url", "http://<core-host>:3000"},
	} {
		t.Run(tc.field, func(t *testing.T) {
			cleanEnv(t)
			t.Setenv(envOf(t, "core.url"), "http://core.internal:3000")
			t.Setenv(envOf(t, "core.token"), "svc_placeholder-test-token-0123456789")
			t.Setenv(envOf(t, tc.field), tc.value)
			code, stdout, stderr := runCLI("check-config")
			want := tc.field + ": is still a placeholder (<…>, changeme or REPLACE_ME); set the real value"
			if code != 1 || !strings.Contains(stderr, want) {
				t.Fatalf("got exit %d, stderr %q; want 1 and %q", code, stderr, want)
			}
			if n := strings.Count(stderr, tc.field+":"); n != 1 {
				t.Errorf("%s is named %d times; want once:\n%s", tc.field, n, stderr)
			}
			out := strings.ReplaceAll(stdout+stderr, "(<…>, changeme or REPLACE_ME)", "") // the message's own words
			for _, part := range []string{tc.value, "changeme", "Replace_Me", "<password>", "<core-host>"} {
				if strings.Contains(out, part) {
					t.Errorf("the output shows the value (%q):\n%s", part, stderr)
				}
			}
		})
	}
}
