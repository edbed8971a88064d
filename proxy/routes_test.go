package proxy

import (
	"slices"
	"strings"
	"testing"
)

// TestClaimPrefixes: every path of the route table starts with one of
// claimPrefixes (a request without one skips echo's router, so a row outside
// them would never be served), one prefix per first segment, each stopping
// at the shortest fixed part of its rows.
func TestClaimPrefixes(t *testing.T) {
	want := []string{"/agent-api/v1/workspaces/", "/.well-known/oauth-", "/oauth/"}
	if !slices.Equal(claimPrefixes, want) {
		t.Errorf("claimPrefixes %q; want %q", claimPrefixes, want)
	}
	for _, rt := range routes {
		if !slices.ContainsFunc(claimPrefixes, func(p string) bool { return strings.HasPrefix(rt.path, p) }) {
			t.Errorf("route %s %s is outside claimPrefixes %q", rt.method, rt.path, claimPrefixes)
		}
	}
	got := claimPrefixesOf([]route{{path: "/a/bc/:x/d"}, {path: "/z/:y"}, {path: "/a/b/:y"}, {path: "/a/bcd"}})
	if !slices.Equal(got, []string{"/a/b", "/z/"}) {
		t.Errorf("claimPrefixesOf: got %q; want [/a/b /z/]", got)
	}
}
