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
	tap, side := w.startTapped(t, FeatureOptions{})
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

// TestFragmentAndURLParserSpellings: Core routes on
// new URL(req.url).pathname (a WHATWG URL parser), which ends the path at
// '#' or '?', removes tabs and newlines and trims controls and spaces. Go
// keeps a raw '#' in the path, so `…/turns#x` was no turn to the edge and
// the turn to Core (issue 39, finding 4: one turn in two modes). Each such
// spelling, raw on the socket or produced by decoding, is refused at the
// edge before Core sees anything.
func TestFragmentAndURLParserSpellings(t *testing.T) {
	w := NewWorld(t, WorldOptions{Core: fakecore.Options{SystemInfo: true}})
	tap, side := w.startTapped(t, FeatureOptions{})
	ws := "/agent-api/v1/workspaces/" + testdb.RouteMulti
	for _, target := range []string{
		ws + "/turns#x",
		ws + "/turns#",
		ws + "/turns%23x",
		ws + "/turns%2523x",
		ws + "/turns%3Fx",
		ws + "/tu%09rns",
		ws + "/turns%0D%0A",
		ws + "/turns%20",
		ws + "/knowledge/search#/x",
	} {
		t.Run(target, func(t *testing.T) {
			for _, body := range [][]byte{newTurn("frag").body(modeJSON("on_demand")), newTurn("frag").body("")} {
				n := tap.count()
				conn := dialRaw(t, side.Addr)
				conn.send(t, postRaw(target, side.Addr, w.TokenA, body, ""))
				res, raw := conn.response(t)
				if res.StatusCode != 400 || errorCode(raw) != "invalid_request" {
					t.Errorf("got %d %s; want 400 invalid_request", res.StatusCode, raw)
				}
				for _, e := range tap.since(n) {
					t.Errorf("Core received %s %s (knowledge_delivery in body: %v)", e.Method, e.Path, bytes.Contains(e.ReqBody, []byte("knowledge_delivery")))
				}
			}
		})
	}
	// A '#' after a path that is no intercepted one still passes through.
	n := tap.count()
	conn := dialRaw(t, side.Addr)
	conn.send(t, postRaw(ws+"/tools#/turns", side.Addr, w.TokenA, []byte(`{}`), ""))
	if res, _ := conn.response(t); res.StatusCode == 400 {
		t.Errorf("tools#/turns: got 400; want it passed to Core")
	}
	if got := len(tap.since(n)); got != 1 {
		t.Errorf("tools#/turns: Core received %d requests; want 1", got)
	}
}
