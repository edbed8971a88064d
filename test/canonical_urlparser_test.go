package test

import (
	"bytes"
	"testing"

	"github.com/bailinghub/knowledge-sidecar/internal/fakecore"
	"github.com/bailinghub/knowledge-sidecar/internal/testkit/testdb"
)

// TestFragmentAndURLParserSpellings: Core routes on
// new URL(req.url).pathname (a WHATWG URL parser), which ends the path at
// '#' or '?', removes tabs and newlines and trims controls and spaces. Go
// keeps a raw '#' in the path, so `…/turns#x` was no turn to the edge and
// the turn to Core (issue 39, finding 4: one turn in two modes). Each such
// spelling, raw on the socket or produced by decoding, is refused at the
// edge before Core sees anything.
func TestFragmentAndURLParserSpellings(t *testing.T) {
	w := NewWorld(t, WorldOptions{Core: fakecore.Options{SystemInfo: true}})
	tap := newCoreTap(t, w.Core)
	side := StartSidecar(t, SidecarOptions{CoreURL: tap.URL, Features: w.Features(t, FeatureOptions{})})
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
