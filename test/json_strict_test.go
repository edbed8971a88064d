package test

import (
	"encoding/json"
	"strconv"
	"testing"

	"github.com/bailinghub/knowledge-sidecar/internal/fakecore"
	"github.com/bailinghub/knowledge-sidecar/internal/testkit/testdb"
)

// TestKnowledgeJSONStrictEndToEnd: through the real edge, a search or read
// body wrapped in anything but JSON whitespace, or holding an unpaired
// UTF-16 surrogate escape or bytes that are not UTF-8, is 400
// invalid_request and Core is asked nothing for it (SPEC §2: never silently
// fixed, so no U+FFFD query reaches /kb/search). A paired escape is
// accepted and reaches Core as the character it encodes.
func TestKnowledgeJSONStrictEndToEnd(t *testing.T) {
	kw := newKWorld(t, fakecore.Options{SystemInfo: true})
	sc := kw.start(t, kopts{})
	route := testdb.RouteMulti
	search := sc.WS(route) + "/knowledge/search"
	read := sc.WS(route) + "/knowledge/read"
	q := `{"query":"` + refundQuery + `"}`

	bad := []struct{ name, url, body string }{
		{"lone high surrogate in query", search, `{"query":"refund \ud800"}`},
		{"lone low surrogate in query", search, `{"query":"\udc00 refund"}`},
		{"reversed pair in query", search, `{"query":"\ude00\ud83d"}`},
		{"lone surrogate in a key", search, `{"query":"refund","\ud800":1}`},
		{"lone surrogate in ref", read, `{"ref":"kr2.\udbff"}`},
		{"raw invalid UTF-8 in query", search, "{\"query\":\"refund \xff\"}"},
		{"UTF-8-encoded surrogate in query", search, "{\"query\":\"refund \xed\xa0\x80\"}"},
	}
	for _, ws := range []string{"\v", "\f", "\u00a0", "\u0085", "\u2000", "\u3000", "\ufeff"} {
		name := strconv.QuoteToASCII(ws)
		bad = append(bad,
			struct{ name, url, body string }{"search led by " + name, search, ws + q},
			struct{ name, url, body string }{"search followed by " + name, search, q + ws},
			struct{ name, url, body string }{"read wrapped in " + name, read, ws + `{"ref":"kr2.k1.x"}` + ws})
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			m := kw.rec.mark()
			r := kw.call(t, "POST", tc.url, kw.TokenA, tc.body)
			wantError(t, tc.name, r, 400, "invalid_request")
			if n := len(kw.rec.since(m, "/kb/search")); n != 0 {
				t.Errorf("%s: Core got %d /kb/search calls; want none", tc.name, n)
			}
		})
	}

	t.Run("JSON whitespace and a paired escape are accepted", func(t *testing.T) {
		m := kw.rec.mark()
		r := kw.call(t, "POST", search, kw.TokenA, " \t\r\n"+`{"query":"`+refundQuery+` \ud83d\ude00"}`+"\r\n \t")
		if r.Status != 200 {
			t.Fatalf("got %d %s; want 200", r.Status, clip(string(r.Body)))
		}
		calls := kw.rec.since(m, "/kb/search")
		if len(calls) == 0 {
			t.Fatal("Core got no /kb/search call")
		}
		for _, c := range calls {
			var b struct {
				Query string `json:"query"`
			}
			if err := json.Unmarshal(c.Body, &b); err != nil || b.Query != refundQuery+" 😀" {
				t.Errorf("/kb/search query %q (%v); want %q", b.Query, err, refundQuery+" 😀")
			}
		}
	})
}
