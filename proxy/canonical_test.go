package proxy

import (
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
