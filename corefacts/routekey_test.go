package corefacts

import (
	"regexp"
	"strings"
	"testing"
)

// TestParseRouteKey agrees with Core's regular expression on edge cases and
// on every two-byte key, and keeps the spelling it accepted.
func TestParseRouteKey(t *testing.T) {
	pattern := regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{1,63}$`)
	cases := []string{"", "a", "ab", "a-", "-a", "_a", "a_b", "Ab", "aB", "a.b", "a b", "a%2f", "é1",
		strings.Repeat("a", 64), strings.Repeat("a", 65), "order-assistant", "kb_multi-2"}
	for c := 0; c < 256; c++ {
		for d := 0; d < 256; d += 7 {
			cases = append(cases, string([]byte{byte(c), byte(d)}))
		}
	}
	for _, s := range cases {
		k, ok := ParseRouteKey(s)
		if want := pattern.MatchString(s); ok != want {
			t.Errorf("ParseRouteKey(%q): ok %v; Core's pattern says %v", s, ok, want)
		}
		switch {
		case ok && (k.String() != s || k.IsZero()):
			t.Errorf("ParseRouteKey(%q) = %q (zero %v); want the same spelling, not zero", s, k.String(), k.IsZero())
		case !ok && !k.IsZero():
			t.Errorf("ParseRouteKey(%q) refused but gave %q; want the zero key", s, k.String())
		}
	}
}

func TestMustRouteKey(t *testing.T) {
	if got := MustRouteKey("orders").String(); got != "orders" {
		t.Errorf("MustRouteKey(orders) = %q; want orders", got)
	}
	defer func() {
		if recover() == nil {
			t.Error("MustRouteKey(Orders): got no panic; want one")
		}
	}()
	MustRouteKey("Orders")
}
