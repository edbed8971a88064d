package test

// Turn bodies are read as Core reads them (SPEC §8.3, CORE_FACTS Addendum
// 3): the raw bytes parsed as JSON, Content-Encoding ignored. A compressed
// body is not JSON to Core, so no field in it can act: it goes to Core as
// sent and Core's answer comes back byte for byte, whatever the label. A
// plain JSON body with an encoding label is the JSON Core parses: it is
// intercepted like any turn. The sidecar never decodes a turn body, so it
// never answers 415, never holds a decoded copy and no label lets
// knowledge_delivery reach Core unstripped.

import (
	"bytes"
	"compress/gzip"
	"compress/zlib"
	"io"
	"testing"

	"github.com/bailinghub/knowledge-sidecar/internal/testkit/testdb"
)

// gzipBytes is b gzip-compressed.
func gzipBytes(t testing.TB, b []byte) []byte {
	return compress(t, b, func(w io.Writer) io.WriteCloser { return gzip.NewWriter(w) })
}

// zlibBytes is b zlib-compressed (Content-Encoding: deflate).
func zlibBytes(t testing.TB, b []byte) []byte {
	return compress(t, b, func(w io.Writer) io.WriteCloser { return zlib.NewWriter(w) })
}

func compress(t testing.TB, b []byte, writer func(io.Writer) io.WriteCloser) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := writer(&buf)
	if _, err := zw.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestTurnEncodedBodies(t *testing.T) {
	w, tap, side, c := tappedWorld(t)
	route := testdb.RouteMulti
	rev := scopeRevision(t, c, side, route, w.TokenA)
	field := func(mode string) string {
		if mode == "" {
			return ""
		}
		return modeJSON(mode)
	}

	// Compressed bodies, with and without the field, under every label:
	// Core gets the client's bytes and header, the client Core's answer.
	for _, tc := range []struct {
		name, label string
		encode      func(testing.TB, []byte) []byte
	}{
		{"gzip", "gzip", gzipBytes},
		{"x-gzip", "x-gzip", gzipBytes},
		{"deflate", "deflate", zlibBytes},
		{"gzip_unlabelled", "", gzipBytes},
		{"gzip_labelled_br", "br", gzipBytes},
		{"stacked", "gzip, gzip", func(t testing.TB, b []byte) []byte { return gzipBytes(t, gzipBytes(t, b)) }},
		{"gzip_members", "gzip", func(t testing.TB, b []byte) []byte {
			cut := bytes.Index(b, []byte(`"user_input"`))
			return append(gzipBytes(t, b[:cut]), gzipBytes(t, b[cut:])...)
		}},
		{"corrupt_gzip", "gzip", func(testing.TB, []byte) []byte { return []byte("\x1f\x8b\x08\x00garbage") }},
		{"zip_bomb", "gzip", func(t testing.TB, _ []byte) []byte {
			// 8 MiB of blanks inside a JSON object, a few KiB on the wire:
			// nothing of it is ever inflated here.
			big := append([]byte(`{"knowledge_delivery":"on_demand",`), bytes.Repeat([]byte(" "), 8<<20)...)
			return gzipBytes(t, append(big, `"user_input":"x"}`...))
		}},
	} {
		for _, mode := range []string{"on_demand", "inline", ""} {
			t.Run("compressed/"+tc.name+"/"+mode, func(t *testing.T) {
				sent := tc.encode(t, newTurn("enc-"+tc.name+"-"+mode).body(field(mode)))
				var hdr map[string]string
				if tc.label != "" {
					hdr = map[string]string{"Content-Encoding": tc.label}
				}
				r, e := tap.post(t, c, turnsURL(side, route), w.TokenA, sent, hdr)
				if !bytes.Equal(e.ReqBody, sent) || e.ReqHeader.Get("Content-Encoding") != tc.label {
					t.Fatalf("Core received %d bytes (Content-Encoding %q); want the client's %d bytes and label %q",
						len(e.ReqBody), e.ReqHeader.Get("Content-Encoding"), len(sent), tc.label)
				}
				checkRelayed(t, r, e)
				if r.Status != 400 {
					t.Errorf("Core's answer to a body that is not JSON: got %d; want Core's 400", r.Status)
				}
				sameAnswer(t, r, send(t, c, "POST", w.CoreURL+turnsPath(route), w.TokenA, sent, hdr))
			})
		}
	}

	// Plain JSON under an encoding label is what Core parses: intercepted.
	for _, label := range []string{"gzip", "deflate", "br", "zstd", "gzip, gzip", "identity"} {
		for _, mode := range []string{"on_demand", "inline"} {
			t.Run("labelled/"+label+"/"+mode, func(t *testing.T) {
				ti := newTurn("lab-" + label + "-" + mode)
				n := tap.count()
				r := send(t, c, "POST", turnsURL(side, route), w.TokenA, ti.body(modeJSON(mode)),
					map[string]string{"Content-Encoding": label})
				e := tap.oneSince(t, n)
				if want := ti.body(""); !bytes.Equal(e.ReqBody, want) {
					t.Fatalf("Core received %q; want the body without the field %q", e.ReqBody, want)
				}
				if r.Status != 200 {
					t.Fatalf("got %d %s; want 200", r.Status, r.Body)
				}
				checkRewrite(t, e.RespBody, r.Body, mode, "partial", rev)
			})
		}
		t.Run("labelled/"+label+"/absent", func(t *testing.T) {
			sent := newTurn("lab-absent-" + label).body("")
			hdr := map[string]string{"Content-Encoding": label}
			r, e := tap.post(t, c, turnsURL(side, route), w.TokenA, sent, hdr)
			if !bytes.Equal(e.ReqBody, sent) || e.ReqHeader.Get("Content-Encoding") != label {
				t.Fatalf("Core received %q (Content-Encoding %q); want the client's bytes and header", e.ReqBody, e.ReqHeader.Get("Content-Encoding"))
			}
			checkRelayed(t, r, e)
		})
	}
}
