package proxy

import (
	"strings"
	"testing"
)

// TestClaimPrefix: every path of the route table starts with claimPrefix
// (a request without it skips echo's router, so a row outside it would
// never be served), and commonPrefix stops at the shortest fixed part.
func TestClaimPrefix(t *testing.T) {
	if claimPrefix != "/agent-api/v1/workspaces/" {
		t.Errorf("claimPrefix %q; want /agent-api/v1/workspaces/", claimPrefix)
	}
	for _, rt := range routes {
		if !strings.HasPrefix(rt.path, claimPrefix) {
			t.Errorf("route %s %s is outside claimPrefix %q", rt.method, rt.path, claimPrefix)
		}
	}
	got := commonPrefix([]route{{path: "/a/bc/:x/d"}, {path: "/a/b/:y"}, {path: "/a/bcd"}})
	if got != "/a/b" {
		t.Errorf("commonPrefix: got %q; want /a/b", got)
	}
}
