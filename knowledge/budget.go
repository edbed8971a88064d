package knowledge

import (
	"encoding/binary"
	"math"
	"math/bits"
	"strconv"
	"unicode/utf8"
)

// The JSON writer of this package. Response bodies are assembled by hand with
// AppendJSONString so that their exact size on the wire is known while they
// are being fitted into a byte budget; encoding/json is never used for them.
//
// Escaping rules (a strict subset of what RFC 8259 allows, chosen so the
// output is also safe to embed in JavaScript):
//
//	"  → \"        \  → \\
//	\n \r \t \b \f → two-byte escapes
//	other C0 controls (U+0000–U+001F) → \u00XX
//	U+2028, U+2029 → \u2028, \u2029
//	each byte of invalid UTF-8 → \ufffd
//	everything else, including < > & and non-ASCII, is written verbatim.

// asciiEscLen[b] is the escaped size of ASCII byte b.
var asciiEscLen = func() (t [utf8.RuneSelf]uint8) {
	for i := range t {
		t[i] = 1
	}
	for i := 0; i < 0x20; i++ {
		t[i] = 6
	}
	for _, c := range []byte{'"', '\\', '\n', '\r', '\t', '\b', '\f'} {
		t[c] = 2
	}
	return t
}()

const hexDigits = "0123456789abcdef"

// Most of a page is runs of plain bytes: ASCII that is written as it is
// (asciiEscLen 1). The three passes over a page (FitPrefix, JSONStringLen,
// AppendJSONString) skip such runs eight bytes at a time.

const (
	swarLo = 0x0101010101010101
	swarHi = 0x8080808080808080
)

// plainBytes8 sets the high bit of each byte of x (eight bytes, packed
// little-endian) that is plain: at least 0x20, below 0x80, neither '"' nor
// '\\'. For a byte b below 0x80 each test is an addition that cannot carry
// into the next byte: b+0x60 reaches 0x80 exactly when b >= 0x20, and
// q+0x7F exactly when q (b with '"' or '\\' xored out) is not zero. A byte
// of 0x80 or more fails one of the first two tests (b+0x60 wraps for
// b >= 0xA0, and q+0x7F for the others, whose q is 0xA0..0xBF), and its
// carry may spoil the answers above it. So the answers are exact up to and
// including the first byte that is not plain, which is all plainEnd
// needs: the word is all plain when the result is swarHi, and otherwise its
// lowest clear high bit marks the first byte that needs a decision.
func plainBytes8(x uint64) uint64 {
	q := x ^ (swarLo * '"')
	s := x ^ (swarLo * '\\')
	return (x + swarLo*(0x80-0x20)) & (q + swarLo*0x7F) & (s + swarLo*0x7F) & swarHi
}

// plainEnd returns the end of the run of plain bytes that starts at s[i],
// which is plain. Whole words are tested in a loop whose next load does not
// wait for the test (only a predictable branch does), so a long run costs
// about an eighth of a byte-at-a-time loop; the first byte that is not plain
// is found in the word that holds it. Fewer than eight bytes before the end
// of s are left to the caller's byte-at-a-time loop. BenchmarkPlainEnd:
// ~11 µs saved per pass over a 32 KiB Markdown page, ~33 µs of an ~80 µs
// read with a byte loop (40 %); nothing on CJK text (DESIGN 14 review,
// docs/performance.md).
func plainEnd(s string, i int) int {
	j := i
	for ; j+8 <= len(s); j += 8 {
		// The conversion does not copy: the compiler loads the eight bytes
		// of the string directly.
		if m := ^plainBytes8(binary.LittleEndian.Uint64([]byte(s[j:j+8]))) & swarHi; m != 0 {
			return j + bits.TrailingZeros64(m)/8
		}
	}
	return max(j, i+1)
}

// appendStringMember appends key, the literal before a member's value
// (such as `,"ref":`), then s as a JSON string.
func appendStringMember(b []byte, key, s string) []byte {
	return AppendJSONString(append(b, key...), s)
}

// AppendJSONString appends s to dst as a JSON string literal, quotes
// included, using the escaping rules above.
func AppendJSONString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		b := s[i]
		if b < utf8.RuneSelf {
			if asciiEscLen[b] == 1 {
				i = plainEnd(s, i) // copied with the rest of the run below
				continue
			}
			dst = append(dst, s[start:i]...)
			switch b {
			case '"', '\\':
				dst = append(dst, '\\', b)
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			case '\b':
				dst = append(dst, '\\', 'b')
			case '\f':
				dst = append(dst, '\\', 'f')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[b>>4], hexDigits[b&0xf])
			}
			i++
			start = i
			continue
		}
		escaped, size := runeEscLen(s[i:])
		if escaped == size {
			i += size
			continue
		}
		dst = append(dst, s[start:i]...)
		if size == 1 {
			dst = append(dst, `\ufffd`...)
		} else { // U+2028 is E2 80 A8, U+2029 is E2 80 A9
			dst = append(dst, '\\', 'u', '2', '0', '2', "89"[s[i+2]-0xA8])
		}
		i += size
		start = i
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// JSONStringLen is len(AppendJSONString(nil, s)): the size of s as a JSON
// string literal, quotes included.
func JSONStringLen(s string) int {
	n := 2
	for i := 0; i < len(s); {
		b := s[i]
		if b < utf8.RuneSelf {
			if asciiEscLen[b] == 1 {
				j := plainEnd(s, i)
				n += j - i
				i = j
				continue
			}
			n += int(asciiEscLen[b])
			i++
			continue
		}
		w, size := runeEscLen(s[i:])
		n += w
		i += size
	}
	return n
}

// runeEscLen returns the escaped size and the source size of the
// non-ASCII character (or invalid byte) at the start of s. It is a
// hand-inlined UTF-8 validator (same acceptance as utf8.DecodeRuneInString)
// because it runs once per character of every read page.
func runeEscLen(s string) (escaped, size int) {
	c := s[0]
	switch {
	case c >= 0xC2 && c <= 0xDF:
		if len(s) >= 2 && s[1]&0xC0 == 0x80 {
			return 2, 2
		}
	case c >= 0xE0 && c <= 0xEF:
		if len(s) >= 3 && s[1]&0xC0 == 0x80 && s[2]&0xC0 == 0x80 &&
			(c != 0xE0 || s[1] >= 0xA0) && (c != 0xED || s[1] <= 0x9F) {
			if c == 0xE2 && s[1] == 0x80 && (s[2] == 0xA8 || s[2] == 0xA9) {
				return 6, 3 // U+2028, U+2029
			}
			return 3, 3
		}
	case c >= 0xF0 && c <= 0xF4:
		if len(s) >= 4 && s[1]&0xC0 == 0x80 && s[2]&0xC0 == 0x80 && s[3]&0xC0 == 0x80 &&
			(c != 0xF0 || s[1] >= 0x90) && (c != 0xF4 || s[1] <= 0x8F) {
			return 4, 4
		}
	}
	return 6, 1 // invalid byte → \ufffd
}

// FitPrefix returns the length in bytes of the longest prefix of s that ends
// on a character boundary and whose escaped JSON size (quotes excluded) is at
// most budget, together with that escaped size. It never splits a UTF-8
// character; an invalid byte counts as one character.
func FitPrefix(s string, budget int) (n, escaped int) {
	for n < len(s) {
		b := s[n]
		w, size := 0, 1
		switch {
		case b >= utf8.RuneSelf:
			w, size = runeEscLen(s[n:])
		case asciiEscLen[b] == 1:
			// Plain bytes cost one each: take the run, as far as the budget
			// goes, in one step.
			room := budget - escaped
			if room <= 0 {
				return n, escaped
			}
			k := plainEnd(s[:n+min(len(s)-n, room)], n) - n
			n += k
			escaped += k
			continue
		default:
			w = int(asciiEscLen[b])
		}
		if escaped+w > budget {
			return n, escaped
		}
		escaped += w
		n += size
	}
	return n, escaped
}

// boundaryAtOrBefore returns the largest character boundary of s that is
// ≤ i, where an invalid byte counts as a one-byte character (the same
// segmentation FitPrefix and AppendJSONString use).
func boundaryAtOrBefore(s string, i int) int {
	if i >= len(s) {
		return len(s)
	}
	if i <= 0 {
		return 0
	}
	for j := i; j >= 0 && j > i-utf8.UTFMax; j-- {
		if !utf8.RuneStart(s[j]) {
			continue
		}
		if j == i {
			return i
		}
		r, size := utf8.DecodeRuneInString(s[j:])
		if (r != utf8.RuneError || size > 1) && j+size > i {
			return j
		}
		return i
	}
	return i
}

// appendJSONFloat writes f the way encoding/json does (shortest
// representation, exponent only for very small or very large values).
// Callers never pass NaN or infinities.
func appendJSONFloat(dst []byte, f float64) []byte {
	abs := math.Abs(f)
	format := byte('f')
	if abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	dst = strconv.AppendFloat(dst, f, format, -1, 64)
	if format == 'e' {
		// clean up e-09 to e-9, as encoding/json does
		n := len(dst)
		if n >= 4 && dst[n-4] == 'e' && dst[n-3] == '-' && dst[n-2] == '0' {
			dst[n-2] = dst[n-1]
			dst = dst[:n-1]
		}
	}
	return dst
}

func appendBool(dst []byte, b bool) []byte {
	if b {
		return append(dst, "true"...)
	}
	return append(dst, "false"...)
}
