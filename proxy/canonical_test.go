package proxy

import (
	"net/http"
	"slices"
	"testing"
)

func TestClassifyPath(t *testing.T) {
	cases := []struct {
		raw  string
		want pathVerdict
	}{
		{"/agent-api/v1/workspaces/order-assistant/turns", pathExact},
		{"/agent-api/v1/workspaces/order-assistant/knowledge/search", pathExact},
		{"/agent-api/v1/workspaces/ORDER/turns", pathExact}, // the handler judges the key: 404
		{"/agent-api/v1/workspaces/or%64er/turns", pathExact},
		{"/agent-api/v1/workspaces/order-assistant/%74urns", pathNonCanon},
		{"/agent-api/v1/workspaces/order-assistant%2Fturns", pathNonCanon},
		{"/agent-api/v1/workspaces/order-assistant\\turns", pathNonCanon},
		{"/agent-api/v1/workspaces/order-assistant/./turns", pathNonCanon},
		{"/agent-api/v1/workspaces/order-assistant/turns/", pathNonCanon},
		{"/agent-api/v1/workspaces/order-assistant/turns;a", pathNonCanon},
		{"//agent-api/v1/workspaces/order-assistant/turns", pathNonCanon},
		{"/Agent-API/v1/workspaces/order-assistant/turns", pathNonCanon},
		{"/agent-api/v1/workspaces/order-assistant/%2574urns", pathNonCanon},
		{"/agent-api/v1/workspaces/order-assistant/knowledge%2Fread", pathNonCanon},
		// Undecoded, these are turns paths of the route "order%2fassistant" (a
		// router that matches before decoding, like Express); decoded, they are
		// not. Either routing is possible, so they are refused.
		{"/agent-api/v1/workspaces/order%2fassistant/turns", pathNonCanon},
		{"/agent-api/v1/workspaces/x%5Cturns/turns", pathNonCanon},
		// One decoding gives /%2F/turns (route "%2F"), two give ///turns.
		{"/agent-api/v1/workspaces/%252F/%74urns", pathNonCanon},
		// A bad escape does not stop a lenient decoder from decoding %74.
		{"/agent-api/v1/workspaces/%zz/%74urns", pathNonCanon},
		{"/agent-api/v1/workspaces/a%zz/tools/%74urns", pathOther},
		{"/agent-api/v1/workspaces/x%2F..%2Fy/turns", pathNonCanon},
		// Core's URL parser (WHATWG) ends the path at '#' or '?', removes tabs
		// and newlines and trims controls and spaces, raw or decoded.
		{"/agent-api/v1/workspaces/order-assistant/turns#x", pathNonCanon},
		{"/agent-api/v1/workspaces/order-assistant/turns#", pathNonCanon},
		{"/agent-api/v1/workspaces/order-assistant/turns%23x", pathNonCanon},
		{"/agent-api/v1/workspaces/order-assistant/turns%2523x", pathNonCanon},
		{"/agent-api/v1/workspaces/order-assistant/turns%3Fx", pathNonCanon},
		{"/agent-api/v1/workspaces/order-assistant/knowledge/search#/x", pathNonCanon},
		{"/agent-api/v1/workspaces/order-assistant/tu%09rns", pathNonCanon},
		{"/agent-api/v1/workspaces/order-assistant/turns%0D%0A", pathNonCanon},
		{"/agent-api/v1/workspaces/order-assistant/turns%20", pathNonCanon},
		{"/agent-api/v1/workspaces/order#x/turns", pathNonCanon}, // echo routes it as route "order#x"
		{"/agent-api/v1/workspaces/order%23x/turns", pathExact},  // an encoded route: the handler's 404
		{"/agent-api/v1/workspaces/order-assistant/tools#/turns", pathOther},
		{"/agent-api/v1/workspaces/order-assistant/tools/x", pathOther},
		{"/agent-api/v1/workspaces/order-assistant/turns/x", pathOther},
		{"/agent-api/v1/workspaces/../turns", pathOther},
		{"/agent-api/v1/workspaces", pathOther},
		{"/files/a%2Fb\\c", pathOther},
		{"/", pathOther},
	}
	for _, tc := range cases {
		if got := classifyPath(tc.raw); got != tc.want {
			t.Errorf("classifyPath(%q) = %d; want %d", tc.raw, got, tc.want)
		}
	}
}

// TestClassifyPathFollowsRouteTable: a row added to the route table is an
// intercepted path at once, in every spelling, with nothing else changed:
// the canonical checks read their paths from the table.
func TestClassifyPathFollowsRouteTable(t *testing.T) {
	extra := route{method: http.MethodPost, path: "/agent-api/v1/workspaces/:route/knowledge/summarize"}
	other := route{method: http.MethodGet, path: "/agent-api/v2/:route/status"}
	rows := append(slices.Clip(routes), extra, other)
	table, ref := newPathTable(rows), newPathRef(rows)
	cases := []struct {
		raw           string
		before, after pathVerdict
	}{
		{"/agent-api/v1/workspaces/order-assistant/knowledge/summarize", pathOther, pathExact},
		{"/agent-api/v1/workspaces/order-assistant/knowledge/%73ummarize", pathOther, pathNonCanon},
		{"/agent-api/v1/workspaces/order-assistant/knowledge%2Fsummarize", pathOther, pathNonCanon},
		{"/agent-api/v1/workspaces/order-assistant/Knowledge/summarize", pathOther, pathNonCanon},
		{"/agent-api/v1/workspaces/order-assistant/knowledge/summarize/", pathOther, pathNonCanon},
		{"/agent-api/v1/workspaces/a/x/../knowledge/summarize", pathOther, pathNonCanon},
		{"/agent-api/v2/order-assistant/status", pathOther, pathExact},
		{"/agent-api/v2/order-assistant/%73tatus", pathOther, pathNonCanon},
		{"/agent-api/v2/order%2Fassistant/status", pathOther, pathNonCanon},
		{"/agent-api/v2/status", pathOther, pathOther},
		// The table's own rows are judged as before.
		{"/agent-api/v1/workspaces/order-assistant/turns", pathExact, pathExact},
		{"/agent-api/v1/workspaces/order-assistant/%74urns", pathNonCanon, pathNonCanon},
	}
	for _, tc := range cases {
		if got := classifyPath(tc.raw); got != tc.before {
			t.Errorf("classifyPath(%q) = %d; want %d", tc.raw, got, tc.before)
		}
		if got := table.classify(tc.raw); got != tc.after {
			t.Errorf("with the extra rows, classify(%q) = %d; want %d", tc.raw, got, tc.after)
		}
		if got := ref.classify(tc.raw); got != tc.after {
			t.Errorf("with the extra rows, the reference says %d for %q; want %d", got, tc.raw, tc.after)
		}
	}
}

func TestEncodedRoute(t *testing.T) {
	for seg, want := range map[string]bool{"kb-multi": false, "KB-MULTI": false, "kb%2Dmulti": true, "%6Bb-multi": true, "kb%zz": true} {
		if got := encodedRoute(seg); got != want {
			t.Errorf("encodedRoute(%q) = %v; want %v", seg, got, want)
		}
	}
}

func BenchmarkClassifyPathPassThrough(b *testing.B) {
	for b.Loop() {
		classifyPath("/agent-api/v1/workspaces/order-assistant/tools/lookup")
	}
}

func BenchmarkClassifyPathIntercepted(b *testing.B) {
	for b.Loop() {
		classifyPath("/agent-api/v1/workspaces/order-assistant/knowledge/search")
	}
}
