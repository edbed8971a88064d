// Package jsstring holds the string rules of Core's JavaScript that the
// sidecar must apply the same way: what counts as whitespace, trim(), a
// string's length in UTF-16 code units, and the cut of a UTF-8 string to a
// byte budget without splitting a character. It is the one copy, used by
// coreclient, catalog, knowledge, turn and the MCP server; the fake Core in
// internal/fakecore keeps its own on purpose, as an independent oracle.
package jsstring

import (
	"strings"
	"unicode/utf8"
)

// IsSpace reports whether r is whitespace to Core's JavaScript
// (String.prototype.trim, the regular expression \s): ECMAScript WhiteSpace
// (tab, VT, FF, space, U+00A0, U+1680, U+2000..U+200A, U+202F, U+205F,
// U+3000, U+FEFF) and LineTerminator (LF, CR, U+2028, U+2029). Unlike
// unicode.IsSpace it includes U+FEFF and excludes U+0085 (CORE_FACTS
// Addendum 2).
func IsSpace(r rune) bool {
	switch {
	case r <= ' ':
		return r == ' ' || r >= '\t' && r <= '\r'
	case r < 0x1680:
		return r == 0xA0
	case r <= 0x3000:
		return r == 0x1680 || r >= 0x2000 && r <= 0x200A || r == 0x2028 || r == 0x2029 ||
			r == 0x202F || r == 0x205F || r == 0x3000
	default:
		return r == 0xFEFF
	}
}

// Trim is JavaScript's String.prototype.trim: what Core applies to a query
// before deciding it is empty, to KB ids and to ids in a turn.
func Trim(s string) string { return strings.TrimFunc(s, IsSpace) }

// UTF16Len is the length of s in UTF-16 code units, JavaScript's String
// length (what Core's limits count): a character above U+FFFF counts 2, an
// invalid byte 1 (it decodes to U+FFFD).
func UTF16Len(s string) int {
	n := 0
	for _, r := range s {
		n++
		if r > 0xFFFF {
			n++
		}
	}
	return n
}

// CutUTF8 is the longest prefix of s of at most n bytes that does not end
// inside a UTF-8 sequence (s itself when it fits).
func CutUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:max(n, 0)]
}
