package testkit

import "github.com/bailinghub/knowledge-sidecar/corefacts"

// RouteKey is the route segment s as the edge parses it: the zero key when s
// is no route key (a test of the refusals passes one on purpose).
func RouteKey(s string) corefacts.RouteKey {
	k, _ := corefacts.ParseRouteKey(s)
	return k
}
