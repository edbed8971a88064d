package corefacts

import (
	"regexp"
	"strings"
	"testing"
)

// TestValidRouteKey agrees with Core's regular expression on edge cases and
// on every two-byte key.
func TestValidRouteKey(t *testing.T) {
	core := regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{1,63}$`)
	cases := []string{"", "a", "ab", "a-", "-a", "_a", "a_b", "Ab", "aB", "a.b", "a b", "a%2f", "é1",
		strings.Repeat("a", 64), strings.Repeat("a", 65), "order-assistant", "kb_multi-2"}
	for c := 0; c < 256; c++ {
		for d := 0; d < 256; d += 7 {
			cases = append(cases, string([]byte{byte(c), byte(d)}))
		}
	}
	for _, s := range cases {
		if got, want := ValidRouteKey(s), core.MatchString(s); got != want {
			t.Errorf("ValidRouteKey(%q) = %v; Core's pattern says %v", s, got, want)
		}
	}
}
