package test

import (
	"bytes"
	"strings"
	"testing"

	"github.com/bailinghub/knowledge-sidecar/internal/fakecore"
	"github.com/bailinghub/knowledge-sidecar/internal/testkit/testdb"
)

// TestPathSpellingsAtEveryDecodingDepth: the spellings FuzzClassifyPath
// found are refused at the edge, raw bytes on the socket, before Core sees
// anything. Each is an intercepted path to some server in a chain: after
// one decoding (%252F → %2F), to a router that matches before decoding (%2f
// in the route), or after a lenient decoding that skips a bad escape (%zz).
func TestPathSpellingsAtEveryDecodingDepth(t *testing.T) {
	w := NewWorld(t, WorldOptions{Core: fakecore.Options{SystemInfo: true}})
	tap := newCoreTap(t, w.Core)
	side := StartSidecar(t, SidecarOptions{CoreURL: tap.URL, Features: w.Features(t, FeatureOptions{})})
	for _, target := range []string{
		"/agent-api/v1/workspaces/%252F/%74urns",
		"/agent-api/v1/workspaces/%zz/%74urns",
		"/agent-api/v1/workspaces/" + testdb.RouteMulti + "%2fx/turns",
		"/agent-api/v1/workspaces/%zz/knowledge/%73earch",
	} {
		t.Run(target, func(t *testing.T) {
			n := tap.count()
			conn := dialRaw(t, side.Addr)
			conn.send(t, postRaw(target, side.Addr, w.TokenA, newTurn("depth").body(modeJSON("on_demand")), ""))
			res, body := conn.response(t)
			// net/http itself refuses a target with a bad escape (a plain
			// 400 before any handler), so the lenient-decoding rule is
			// defence in depth behind it.
			wantCode := "invalid_request"
			if strings.Contains(target, "%zz") {
				wantCode = ""
			}
			if res.StatusCode != 400 || wantCode != "" && errorCode(body) != wantCode {
				t.Errorf("got %d %s; want 400 invalid_request", res.StatusCode, body)
			}
			for _, e := range tap.since(n) {
				t.Errorf("Core received %s %s (knowledge_delivery in body: %v)", e.Method, e.Path, bytes.Contains(e.ReqBody, []byte("knowledge_delivery")))
			}
		})
	}
}
