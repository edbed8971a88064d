package test

// Turn bodies with a Content-Encoding (issue 25 item 7): gzip and deflate
// are decoded and intercepted like any turn, bounded to Core's turn limit
// once decoded; other codings are refused 415. A body is never forwarded
// with knowledge_delivery unstripped.

import (
	"bytes"
	"compress/gzip"
	"compress/zlib"
	"net/http"
	"testing"

	"github.com/bailinghub/knowledge-sidecar/internal/testkit"
	"github.com/bailinghub/knowledge-sidecar/test/testdb"
)

func gzipBytes(t testing.TB, b []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	if _, err := zw.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func zlibBytes(t testing.TB, b []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := zlib.NewWriter(&buf)
	if _, err := zw.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestTurnEncodedBodies(t *testing.T) {
	w := NewWorld(t, WorldOptions{})
	tap := newCoreTap(t, w.Core)
	side := StartSidecar(t, SidecarOptions{CoreURL: tap.URL, Features: w.Features(t, FeatureOptions{})})
	c := newClient(t)
	route := testdb.RouteMulti
	rev := scopeRevision(t, c, side, route, w.TokenA)

	for _, enc := range []struct {
		name   string
		encode func(testing.TB, []byte) []byte
	}{{"gzip", gzipBytes}, {"x-gzip", gzipBytes}, {"deflate", zlibBytes}} {
		for _, mode := range []string{"on_demand", "inline"} {
			t.Run(enc.name+"/"+mode, func(t *testing.T) {
				ti := newTurn("enc-" + enc.name + "-" + mode)
				n := tap.count()
				r := send(t, c, "POST", turnsURL(side, route), w.TokenA, enc.encode(t, ti.body(modeJSON(mode))),
					map[string]string{"Content-Encoding": enc.name})
				e := tap.oneSince(t, n)
				if want := ti.body(""); !bytes.Equal(e.ReqBody, want) {
					t.Fatalf("Core received %q; want the decoded body without the field %q", e.ReqBody, want)
				}
				if ce := e.ReqHeader.Values("Content-Encoding"); len(ce) != 0 {
					t.Errorf("Core's Content-Encoding: got %q; want none (the body is decoded)", ce)
				}
				if r.Status != 200 {
					t.Fatalf("got %d %s; want 200", r.Status, r.Body)
				}
				checkRewrite(t, e.RespBody, r.Body, mode, "partial", rev)
			})
		}
		t.Run(enc.name+"/absent", func(t *testing.T) {
			// An old client's encoded turn goes to Core as sent, and Core's
			// answer (whatever it makes of the encoding) comes back.
			sent := enc.encode(t, newTurn("enc-absent-"+enc.name).body(""))
			hdr := map[string]string{"Content-Encoding": enc.name}
			n := tap.count()
			r := send(t, c, "POST", turnsURL(side, route), w.TokenA, sent, hdr)
			e := tap.oneSince(t, n)
			if !bytes.Equal(e.ReqBody, sent) || e.ReqHeader.Get("Content-Encoding") != enc.name {
				t.Fatalf("Core received %q (Content-Encoding %q); want the client's bytes and header", e.ReqBody, e.ReqHeader.Get("Content-Encoding"))
			}
			checkRelayed(t, r, e)
			sameAnswer(t, r, send(t, c, "POST", w.CoreURL+turnsPath(route), w.TokenA, sent, hdr))
		})
	}

	t.Run("gzip_members", func(t *testing.T) {
		// The field in the second of two gzip members is found and
		// stripped: the body is decoded as a whole, as Core would.
		ti := newTurn("enc-members")
		full := ti.body(`"on_demand"`)
		cut := bytes.Index(full, []byte(`"knowledge_delivery"`))
		sent := append(gzipBytes(t, full[:cut]), gzipBytes(t, full[cut:])...)
		n := tap.count()
		r := send(t, c, "POST", turnsURL(side, route), w.TokenA, sent, map[string]string{"Content-Encoding": "gzip"})
		e := tap.oneSince(t, n)
		if !bytes.Equal(e.ReqBody, ti.body("")) {
			t.Fatalf("Core received %q; want the decoded body without the field", e.ReqBody)
		}
		if answerMode(r) != "on_demand" {
			t.Fatalf("got %d %s; want 200 on_demand", r.Status, r.Body)
		}
	})

	refused := []struct {
		name, enc string
		body      func() []byte
		status    int
		code      string
	}{
		{"br", "br", func() []byte { return newTurn("enc-br").body(`"on_demand"`) }, http.StatusUnsupportedMediaType, "unsupported_media_type"},
		{"br_absent", "br", func() []byte { return newTurn("enc-br-absent").body("") }, http.StatusUnsupportedMediaType, "unsupported_media_type"},
		{"stacked", "gzip, gzip", func() []byte { return gzipBytes(t, gzipBytes(t, newTurn("enc-stacked").body(`"on_demand"`))) }, http.StatusUnsupportedMediaType, "unsupported_media_type"},
		{"corrupt_gzip", "gzip", func() []byte { return []byte("\x1f\x8b\x08\x00garbage") }, http.StatusBadRequest, "invalid_request"},
		{"gzip_trailing_garbage", "gzip", func() []byte { return append(gzipBytes(t, newTurn("enc-tail").body("")), "garbage"...) }, http.StatusBadRequest, "invalid_request"},
		{"truncated_gzip", "gzip", func() []byte { b := gzipBytes(t, newTurn("enc-trunc").body(`"on_demand"`)); return b[:len(b)-6] }, http.StatusBadRequest, "invalid_request"},
		{"zip_bomb", "gzip", func() []byte {
			// 8 MiB of blanks inside a JSON object, a few KiB on the wire.
			big := append([]byte(`{"knowledge_delivery":"on_demand",`), bytes.Repeat([]byte(" "), 8<<20)...)
			return gzipBytes(t, append(big, `"user_input":"x"}`...))
		}, http.StatusRequestEntityTooLarge, "payload_too_large"},
	}
	for _, tc := range refused {
		t.Run("refused/"+tc.name, func(t *testing.T) {
			n := tap.count()
			r := send(t, c, "POST", turnsURL(side, route), w.TokenA, tc.body(), map[string]string{"Content-Encoding": tc.enc})
			checkErrorJSON(t, r, tc.status, tc.code)
			if tap.count() != n {
				t.Errorf("the turn reached Core")
			}
		})
	}
	testkit.WaitMetric(t, side.Registry, "knowledge_sidecar_turns_total", map[string]string{"mode": "unknown", "outcome": "unsupported_encoding"}, 3)
}
