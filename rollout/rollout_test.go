package rollout

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
)

func TestParseValid(t *testing.T) {
	tests := []struct {
		spec, wantString, wantMode string
		on, off                    []string
	}{
		{"off", "off", "off", nil, []string{"order-assistant"}},
		{"  off\n", "off", "off", nil, []string{"order-assistant"}},
		{"all", "all", "all", []string{"order-assistant", "hr"}, nil},
		{"allow:order-assistant", "allow:order-assistant", "allow", []string{"order-assistant"}, []string{"hr-bot"}},
		{"allow: zz-b , aa_a ,m1", "allow:aa_a,m1,zz-b", "allow", []string{"zz-b", "aa_a", "m1"}, []string{"aa", "zz"}},
		{" deny : hr-bot,finance ", "deny:finance,hr-bot", "deny", []string{"order-assistant"}, []string{"hr-bot", "finance"}},
		{"percent:0", "percent:0", "percent", nil, []string{"order-assistant", "hr-bot"}},
		{"percent:100", "percent:100", "percent", []string{"order-assistant", "hr-bot"}, nil},
		{"percent: 25", "percent:25", "percent", nil, nil},
		{"percent:007", "percent:7", "percent", nil, nil},
	}
	for _, tc := range tests {
		t.Run(tc.spec, func(t *testing.T) {
			p, err := Parse(tc.spec)
			if err != nil {
				t.Fatalf("Parse(%q): got error %v; want nil", tc.spec, err)
			}
			if got := p.String(); got != tc.wantString {
				t.Errorf("String() = %q; want %q", got, tc.wantString)
			}
			if got := p.Mode(); got != tc.wantMode {
				t.Errorf("Mode() = %q; want %q", got, tc.wantMode)
			}
			for _, r := range tc.on {
				if !p.Enabled(r) {
					t.Errorf("Enabled(%q) = false; want true", r)
				}
			}
			for _, r := range tc.off {
				if p.Enabled(r) {
					t.Errorf("Enabled(%q) = true; want false", r)
				}
			}
			// The canonical spec parses back to the same policy.
			q, err := Parse(p.String())
			if err != nil {
				t.Fatalf("Parse(String()): %v", err)
			}
			if q.String() != p.String() || q.Mode() != p.Mode() || q.Percent() != p.Percent() ||
				!slices.Equal(q.Routes(), p.Routes()) {
				t.Errorf("round trip: got %q; want %q", q.String(), p.String())
			}
		})
	}
}

func TestParseInvalid(t *testing.T) {
	tests := []struct{ spec, wantErr string }{
		{"", "rollout: spec is empty; want off, all, allow:<routes>, deny:<routes> or percent:<0-100>"},
		{"   ", "rollout: spec is empty; want off, all, allow:<routes>, deny:<routes> or percent:<0-100>"},
		{"on", `rollout: unknown spec "on"; want off, all, allow:<routes>, deny:<routes> or percent:<0-100>`},
		{"ALL", `rollout: unknown spec "ALL"; want off, all, allow:<routes>, deny:<routes> or percent:<0-100>`},
		{"allow", `rollout: unknown spec "allow"; want off, all, allow:<routes>, deny:<routes> or percent:<0-100>`},
		{"only:a1", `rollout: unknown mode "only"; want allow, deny or percent before ':'`},
		{"off:x", `rollout: unknown mode "off"; want allow, deny or percent before ':'`},
		{"allow:", "rollout: allow: route list is empty"},
		{"deny:  ", "rollout: deny: route list is empty"},
		{"allow:ab,,cd", "rollout: allow: route 2 is empty"},
		{"allow:ab,", "rollout: allow: route 2 is empty"},
		{"allow:a", `rollout: allow: route "a" does not match ^[a-z0-9][a-z0-9_-]{1,63}$`},
		{"deny:Order", `rollout: deny: route "Order" does not match ^[a-z0-9][a-z0-9_-]{1,63}$`},
		{"allow:-ab", `rollout: allow: route "-ab" does not match ^[a-z0-9][a-z0-9_-]{1,63}$`},
		{"allow:a b", `rollout: allow: route "a b" does not match ^[a-z0-9][a-z0-9_-]{1,63}$`},
		{"allow:" + strings.Repeat("a", 65), `rollout: allow: route "` + strings.Repeat("a", 65) + `" does not match ^[a-z0-9][a-z0-9_-]{1,63}$`},
		{"deny:ab,cd,ab", `rollout: deny: route "ab" is listed twice`},
		{"percent:", "rollout: percent: value is empty; want an integer 0-100"},
		{"percent:101", "rollout: percent: 101 is out of range 0-100"},
		{"percent:1000", `rollout: percent: "1000" is out of range 0-100`},
		{"percent:-1", `rollout: percent: "-1" is not an integer 0-100`},
		{"percent:+5", `rollout: percent: "+5" is not an integer 0-100`},
		{"percent:12.5", `rollout: percent: "12.5" is not an integer 0-100`},
		{"percent:25%", `rollout: percent: "25%" is not an integer 0-100`},
		{"percent:1 0", `rollout: percent: "1 0" is not an integer 0-100`},
	}
	for _, tc := range tests {
		t.Run(tc.spec, func(t *testing.T) {
			p, err := Parse(tc.spec)
			if err == nil {
				t.Fatalf("Parse(%q) = %q; want error %q", tc.spec, p, tc.wantErr)
			}
			if err.Error() != tc.wantErr {
				t.Fatalf("Parse(%q) error = %q; want %q", tc.spec, err, tc.wantErr)
			}
			if p.Mode() != ModeOff {
				t.Fatalf("Parse(%q) policy on error = %q; want off", tc.spec, p.Mode())
			}
		})
	}
}

func TestZeroPolicyIsOff(t *testing.T) {
	var p Policy
	if p.Mode() != "off" || p.String() != "off" || p.Enabled("order-assistant") {
		t.Fatalf("zero Policy: got mode %q, spec %q, enabled %v; want off, off, false", p.Mode(), p.String(), p.Enabled("order-assistant"))
	}
}

// goldenBucket is the documented formula written the way an operator would
// apply it by hand: the first 16 hex digits of sha256(route) as an unsigned
// number, modulo 10000.
func goldenBucket(t *testing.T, route string) uint64 {
	t.Helper()
	sum := sha256.Sum256([]byte(route))
	n, err := strconv.ParseUint(hex.EncodeToString(sum[:])[:16], 16, 64)
	if err != nil {
		t.Fatal(err)
	}
	return n % 10000
}

func generatedRoutes(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("workspace-%04d", i)
	}
	return out
}

func TestPercentMatchesDocumentedFormula(t *testing.T) {
	routes := append([]string{"order-assistant", "hr-bot", "finance", "a1", "zz_top"}, generatedRoutes(200)...)
	for _, pct := range []int{0, 1, 7, 25, 50, 99, 100} {
		p, err := Parse("percent:" + strconv.Itoa(pct))
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range routes {
			want := goldenBucket(t, r) < uint64(pct)*100
			if got := p.Enabled(r); got != want {
				t.Fatalf("percent:%d Enabled(%q) = %v; want %v (bucket %d)", pct, r, got, want, goldenBucket(t, r))
			}
		}
	}
}

func TestPercentMonotone(t *testing.T) {
	routes := generatedRoutes(2000)
	prev := make([]bool, len(routes))
	for pct := 0; pct <= 100; pct++ {
		p, err := Parse(fmt.Sprintf("percent:%d", pct))
		if err != nil {
			t.Fatal(err)
		}
		for i, r := range routes {
			on := p.Enabled(r)
			if prev[i] && !on {
				t.Fatalf("route %q enabled at percent:%d but not at percent:%d", r, pct-1, pct)
			}
			if pct == 0 && on {
				t.Fatalf("percent:0 enables %q", r)
			}
			if pct == 100 && !on {
				t.Fatalf("percent:100 does not enable %q", r)
			}
			prev[i] = on
		}
	}
}

func TestPercentRoughlyUniform(t *testing.T) {
	routes := generatedRoutes(2000)
	tests := []struct{ pct, minPct, maxPct int }{
		{10, 5, 15},
		{50, 40, 60},
		{90, 85, 95},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprintf("percent:%d", tc.pct), func(t *testing.T) {
			p, err := Parse(fmt.Sprintf("percent:%d", tc.pct))
			if err != nil {
				t.Fatal(err)
			}
			n := 0
			for _, r := range routes {
				if p.Enabled(r) {
					n++
				}
			}
			if n*100 < tc.minPct*len(routes) || n*100 > tc.maxPct*len(routes) {
				t.Fatalf("got %d of %d routes enabled; want between %d%% and %d%%", n, len(routes), tc.minPct, tc.maxPct)
			}
		})
	}
}

func TestAllowDenyAreComplements(t *testing.T) {
	listed := []string{"order-assistant", "hr-bot"}
	allow, err := Parse("allow:" + strings.Join(listed, ","))
	if err != nil {
		t.Fatal(err)
	}
	deny, err := Parse("deny:" + strings.Join(listed, ","))
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range append(generatedRoutes(50), listed...) {
		if allow.Enabled(r) == deny.Enabled(r) {
			t.Fatalf("route %q: allow %v, deny %v; want opposite decisions", r, allow.Enabled(r), deny.Enabled(r))
		}
		want := slices.Contains(listed, r)
		if got := allow.Enabled(r); got != want {
			t.Fatalf("allow Enabled(%q) = %v; want %v", r, got, want)
		}
	}
}

func TestRoutesIsACopy(t *testing.T) {
	p, err := Parse("allow:bb,aa")
	if err != nil {
		t.Fatal(err)
	}
	rs := p.Routes()
	rs[0] = "zz"
	if got := p.String(); got != "allow:aa,bb" {
		t.Fatalf("String() after mutating Routes() = %q; want %q", got, "allow:aa,bb")
	}
}
