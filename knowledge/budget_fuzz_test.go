package knowledge

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzJSONString: the budget's byte arithmetic is the serializer's. For
// any string (invalid UTF-8 included), AppendJSONString gives one valid
// JSON string that decodes to the input with each invalid byte as U+FFFD,
// holds no raw U+2028/U+2029 (a script-embedding hazard) and is exactly
// JSONStringLen bytes; FitPrefix cuts on a character boundary, within the
// budget, and takes every character that still fits.
func FuzzJSONString(f *testing.F) {
	for _, s := range []string{"", "plain", "\"\\\x00\x1f\x7f", "\u2028\u2029", "😀退款", "a\xffb\xc3", "\xed\xa0\x80", "\xf4\x90\x80\x80", "\xe2\x80"} {
		f.Add(s, uint16(0))
		f.Add(s, uint16(7))
	}
	f.Fuzz(func(t *testing.T, s string, budget uint16) {
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
