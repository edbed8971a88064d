package knowledge

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/bailinghub/knowledge-sidecar/protocol"
)

// FuzzJSONString: the budget's byte arithmetic is the serializer's. For
// any string (invalid UTF-8 included), AppendJSONString gives one valid
// JSON string that decodes to the input with each invalid byte as U+FFFD,
// holds no raw U+2028/U+2029 (a script-embedding hazard) and is exactly
// JSONStringLen bytes; FitPrefix cuts on a character boundary, within the
// budget, and takes every character that still fits. All three give exactly
// what their byte-at-a-time oracles give.
func FuzzJSONString(f *testing.F) {
	for _, s := range []string{"", "plain", "\"\\\x00\x1f\x7f", "\u2028\u2029", "😀退款", "a\xffb\xc3", "\xed\xa0\x80", "\xf4\x90\x80\x80", "\xe2\x80",
		"eight by\tsixteen bytes\"", "a long plain run, then\nnewlines\n\nand 退款 and a \\ and \u2028 at odd places"} {
		f.Add(s, uint16(0))
		f.Add(s, uint16(7))
	}
	f.Fuzz(func(t *testing.T, s string, budget uint16) {
		checkTextPasses(t, s)
		checkFitPrefix(t, s, int(budget))
		out := AppendJSONString([]byte("x"), s)[1:]
		if len(out) != JSONStringLen(s) {
			t.Fatalf("%q: %d bytes; JSONStringLen says %d", s, len(out), JSONStringLen(s))
		}
		var got string
		if err := json.Unmarshal(out, &got); err != nil {
			t.Fatalf("%q: %s is not a JSON string: %v", s, out, err)
		}
		var want strings.Builder
		for _, r := range s { // range yields U+FFFD for each invalid byte
			want.WriteRune(r)
		}
		if got != want.String() {
			t.Fatalf("%q decodes to %q; want %q", s, got, want.String())
		}
		if bytes.Contains(out, []byte("\u2028")) || bytes.Contains(out, []byte("\u2029")) || !utf8.Valid(out) {
			t.Fatalf("%q: %q holds a raw line separator or invalid UTF-8", s, out)
		}

		n, esc := FitPrefix(s, int(budget))
		if n < 0 || n > len(s) || boundaryAtOrBefore(s, n) != n {
			t.Fatalf("FitPrefix(%q, %d) = %d: not a character boundary", s, budget, n)
		}
		if esc != JSONStringLen(s[:n])-2 || esc > int(budget) {
			t.Fatalf("FitPrefix(%q, %d) = %d, %d; the prefix escapes to %d", s, budget, n, esc, JSONStringLen(s[:n])-2)
		}
		if n < len(s) {
			_, size := utf8.DecodeRuneInString(s[n:])
			if JSONStringLen(s[:n+size])-2 <= int(budget) {
				t.Fatalf("FitPrefix(%q, %d) = %d; the next character fits too", s, budget, n)
			}
		}
	})
}

// FuzzPlan: the one-scan Plan chooses exactly the page the two-scan oracle
// chooses, for any document, offset, served count, body size and cursor
// length (not only the ones a real chain produces).
func FuzzPlan(f *testing.F) {
	f.Add("hello world", "title", uint32(0), uint32(0), uint16(400), uint8(150))
	f.Add(strings.Repeat("plain text\n", 60), "t", uint32(13), uint32(40), uint16(500), uint8(2))
	f.Add(strings.Repeat("\"\\\x01\u2028😀退", 30), "\u2029<>&", uint32(7), uint32(300), uint16(700), uint8(3))
	f.Add("\xff\xfe\xfd", "x\x00", uint32(1), uint32(protocol.ReadChainMaxBytes), uint16(0), uint8(0))
	f.Fuzz(func(t *testing.T, content, title string, offset, servedBack uint32, extra uint16, cursorLen uint8) {
		p := ReadPage{Route: routeKey, RunID: runA, ScopeRevision: strings.Repeat("a", 64), Ref: "ref",
			Revision: strings.Repeat("b", 64), Title: title, Content: content}
		p.Offset = boundaryAtOrBefore(content, int(offset%uint32(len(content)+1)))
		// Served close to the chain budget (or past it), so that short
		// documents meet it too.
		p.Served = protocol.ReadChainMaxBytes - int(servedBack%uint32(2*len(content)+16)) + 8
		checkPlan(t, p, p.fixedLen()+int(extra)-100, int(cursorLen))
		p.Served = 0
		checkPlan(t, p, p.fixedLen()+int(extra)-100, int(cursorLen))
	})
}
