package turn

// The byte-level JSON scanner under both turn directions (request.go,
// answer.go), as pure functions over bytes.
//
// Both directions splice byte ranges instead of re-marshaling: a small JSON
// scanner (same grammar and nesting limit as encoding/json.Valid) finds the
// exact bytes of the members it needs, and everything else is copied as is,
// so memory, tool schemas and every other field keep their exact encoding,
// key order and whitespace. Only top-level members (and the members of the
// response's top-level "context" object) are ever looked at; a
// "knowledge_delivery" key nested anywhere else is ordinary data. Keys are
// compared after JSON unescaping, so "knowledge\u005fdelivery" is the field.

import (
	"bytes"
	"encoding/binary"
	"errors"
	"unicode/utf16"
	"unicode/utf8"
)

// errJSON marks invalid JSON inside the scanner; it never leaves this package.
var errJSON = errors.New("invalid json")

// errDeep marks nesting beyond maxDepth inside the scanner.
var errDeep = errors.New("json nests too deeply")

// maxDepth is encoding/json's nesting limit, so the scanner accepts exactly
// what json.Valid accepts.
const maxDepth = 10000

// member locates one object member: b[keyStart:keyEnd] is the key's JSON
// string including quotes, b[valStart:valEnd] its value.
type member struct {
	keyStart, keyEnd int
	keyEsc           bool
	valStart, valEnd int
}

// keyIs reports whether the member's key, unescaped, equals name.
func (m member) keyIs(b []byte, name string) bool {
	raw := b[m.keyStart+1 : m.keyEnd-1]
	if !m.keyEsc {
		return string(raw) == name
	}
	s, ok := unquote(b[m.keyStart:m.keyEnd])
	return ok && s == name
}

func skipWS(b []byte, i int) int {
	for i < len(b) {
		switch b[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}

// scanObject scans the object starting at b[i] == '{' at nesting depth
// depth, calls fn (if not nil) for every member in order, and returns the
// index just after the closing '}'. When a member's value is invalid, fn is
// still called for it, with valEnd == -1, before the error is returned.
func scanObject(b []byte, i, depth int, fn func(member)) (int, error) {
	return scanMembers(b, i, depth, fn, nil, nil)
}

// scanMembers is scanObject that can also look one level down in the
// same pass: when into is not nil it is called (with the key fields of m set)
// for every member whose value is an object, and when it answers true, sub
// gets that object's members the way fn gets this object's.
func scanMembers(b []byte, i, depth int, fn func(member), into func(member) bool, sub func(member)) (int, error) {
	if depth > maxDepth {
		return 0, errDeep
	}
	i = skipWS(b, i+1)
	if i < len(b) && b[i] == '}' {
		return i + 1, nil
	}
	for {
		if i >= len(b) || b[i] != '"' {
			return 0, errJSON
		}
		var m member
		m.keyStart = i
		end, esc, err := scanString(b, i)
		if err != nil {
			return 0, err
		}
		m.keyEnd, m.keyEsc = end, esc
		i = skipWS(b, end)
		if i >= len(b) || b[i] != ':' {
			return 0, errJSON
		}
		i = skipWS(b, i+1)
		m.valStart = i
		if into != nil && i < len(b) && b[i] == '{' && into(m) {
			i, err = scanObject(b, i, depth+1, sub)
		} else {
			i, err = skipValue(b, i, depth)
		}
		if err != nil {
			if fn != nil {
				// Report the key even though its value is broken, so a caller
				// can tell that the member was there.
				m.valEnd = -1
				fn(m)
			}
			return 0, err
		}
		m.valEnd = i
		if fn != nil {
			fn(m)
		}
		i = skipWS(b, i)
		if i >= len(b) {
			return 0, errJSON
		}
		switch b[i] {
		case ',':
			i = skipWS(b, i+1)
		case '}':
			return i + 1, nil
		default:
			return 0, errJSON
		}
	}
}

// skipValue returns the index just after the value starting at b[i];
// depth is the nesting depth of the container holding it.
func skipValue(b []byte, i, depth int) (int, error) {
	if i >= len(b) {
		return 0, errJSON
	}
	switch c := b[i]; {
	case c == '{':
		return scanObject(b, i, depth+1, nil)
	case c == '[':
		return scanArray(b, i, depth+1)
	case c == '"':
		end, _, err := scanString(b, i)
		return end, err
	case c == '-' || (c >= '0' && c <= '9'):
		return scanNumber(b, i)
	case c == 't':
		return literal(b, i, "true")
	case c == 'f':
		return literal(b, i, "false")
	case c == 'n':
		return literal(b, i, "null")
	default:
		return 0, errJSON
	}
}

func scanArray(b []byte, i, depth int) (int, error) {
	if depth > maxDepth {
		return 0, errDeep
	}
	i = skipWS(b, i+1)
	if i < len(b) && b[i] == ']' {
		return i + 1, nil
	}
	for {
		var err error
		if i, err = skipValue(b, i, depth); err != nil {
			return 0, err
		}
		i = skipWS(b, i)
		if i >= len(b) {
			return 0, errJSON
		}
		switch b[i] {
		case ',':
			i = skipWS(b, i+1)
		case ']':
			return i + 1, nil
		default:
			return 0, errJSON
		}
	}
}

// scanString scans the string starting at b[i] == '"' and returns the
// index after its closing quote and whether it contains escapes. Like
// encoding/json it rejects raw control characters and bad escapes and does
// not check UTF-8.
//
// Plain bytes (anything but '"', '\\' and controls) are skipped eight at a
// time (plain8), then one at a time up to the next byte that needs a
// decision; the byte-by-byte switch below only sees those.
func scanString(b []byte, i int) (int, bool, error) {
	i++
	esc := false
	for i < len(b) {
		for i+8 <= len(b) && plain8(binary.LittleEndian.Uint64(b[i:])) {
			i += 8
		}
		for i < len(b) && plainByte[b[i]] {
			i++
		}
		if i >= len(b) {
			break
		}
		c := b[i]
		switch {
		case c == '"':
			return i + 1, esc, nil
		case c == '\\':
			esc = true
			if i+1 >= len(b) {
				return 0, false, errJSON
			}
			switch b[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if i+6 > len(b) {
					return 0, false, errJSON
				}
				for _, h := range b[i+2 : i+6] {
					if !isHex(h) {
						return 0, false, errJSON
					}
				}
				i += 6
			default:
				return 0, false, errJSON
			}
		case c < 0x20:
			return 0, false, errJSON
		default:
			i++
		}
	}
	return 0, false, errJSON
}

const (
	sWARLo = 0x0101010101010101
	sWARHi = 0x8080808080808080
)

// plain8 reports whether none of the eight bytes packed in x is '"',
// '\\' or a control character (< 0x20). It uses the exact "has a zero byte"
// and "has a byte less than n" word tests (n ≤ 128), so it has no false
// answers in either direction.
func plain8(x uint64) bool {
	q := x ^ (sWARLo * '"')
	s := x ^ (sWARLo * '\\')
	special := (x - sWARLo*0x20) &^ x
	special |= (q - sWARLo) &^ q
	special |= (s - sWARLo) &^ s
	return special&sWARHi == 0
}

// plainByte[c] is true for the bytes a JSON string may hold as they are
// and that do not end or escape it.
var plainByte = func() (t [256]bool) {
	for c := 0x20; c < 256; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

func isHex(c byte) bool {
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F')
}

// scanNumber scans -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?.
func scanNumber(b []byte, i int) (int, error) {
	if b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && b[i] >= '1' && b[i] <= '9':
		i = digits(b, i)
	default:
		return 0, errJSON
	}
	if i < len(b) && b[i] == '.' {
		j := digits(b, i+1)
		if j == i+1 {
			return 0, errJSON
		}
		i = j
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		j := digits(b, i)
		if j == i {
			return 0, errJSON
		}
		i = j
	}
	return i, nil
}

func digits(b []byte, i int) int {
	for i < len(b) && b[i] >= '0' && b[i] <= '9' {
		i++
	}
	return i
}

func literal(b []byte, i int, lit string) (int, error) {
	if len(b)-i < len(lit) || string(b[i:i+len(lit)]) != lit {
		return 0, errJSON
	}
	return i + len(lit), nil
}

// valueBytes is member m's value (nil for a zero member).
func valueBytes(b []byte, m member) []byte {
	if m.valEnd <= m.valStart {
		return nil
	}
	return b[m.valStart:m.valEnd]
}

// stringOf decodes member m's value if it is a JSON string (unquote).
func stringOf(b []byte, m member) (string, bool) { return unquote(valueBytes(b, m)) }

// unquote is the package's one JSON string decoder: v is a string literal,
// quotes included, already passed by scanString (escapes and controls
// checked), decoded exactly as encoding/json decodes it without its
// reflection: escapes undone, a surrogate pair joined, a lone surrogate
// (\ud800 alone, or followed by anything but a low one) U+FFFD, and each
// byte of invalid UTF-8 U+FFFD, so "\xe6" and "\xe6\n" agree on what the
// byte is. The raw bytes are the value only when there is no escape and
// they are valid UTF-8. ok is false when v is not a string literal.
func unquote(v []byte) (string, bool) {
	if len(v) < 2 || v[0] != '"' {
		return "", false
	}
	raw := v[1 : len(v)-1]
	valid := utf8.Valid(raw)
	k := bytes.IndexByte(raw, '\\')
	if k < 0 && valid {
		return string(raw), true
	}
	out := make([]byte, 0, len(raw)+8)
	for {
		if k < 0 {
			return string(appendText(out, raw, valid)), true
		}
		out = appendText(out, raw[:k], valid) // a backslash never cuts a valid sequence
		raw = raw[k:]
		if len(raw) < 2 || raw[1] == 'u' && len(raw) < 6 {
			return "", false // not scanned
		}
		n := 2
		switch raw[1] {
		case '"', '\\', '/':
			out = append(out, raw[1])
		case 'b':
			out = append(out, '\b')
		case 'f':
			out = append(out, '\f')
		case 'n':
			out = append(out, '\n')
		case 'r':
			out = append(out, '\r')
		case 't':
			out = append(out, '\t')
		case 'u':
			r := hex4(raw[2:6])
			n = 6
			if utf16.IsSurrogate(r) {
				r2 := rune(-1)
				if len(raw) >= 12 && raw[6] == '\\' && raw[7] == 'u' {
					r2 = hex4(raw[8:12])
				}
				if d := utf16.DecodeRune(r, r2); d != utf8.RuneError {
					r, n = d, 12
				} else {
					r = utf8.RuneError
				}
			}
			out = utf8.AppendRune(out, r)
		default:
			return "", false // not scanned
		}
		raw = raw[n:]
		k = bytes.IndexByte(raw, '\\')
	}
}

// appendText appends s, unless valid (the whole string is valid UTF-8) each
// byte of invalid UTF-8 in it as U+FFFD (what encoding/json makes of it).
func appendText(out, s []byte, valid bool) []byte {
	if valid || utf8.Valid(s) {
		return append(out, s...)
	}
	for len(s) > 0 {
		r, size := utf8.DecodeRune(s)
		if r == utf8.RuneError && size == 1 {
			out = utf8.AppendRune(out, utf8.RuneError)
		} else {
			out = append(out, s[:size]...)
		}
		s = s[size:]
	}
	return out
}

// hex4 decodes four hex digits (validated by the scanner).
func hex4(h []byte) rune {
	var r rune
	for _, c := range h {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c -= 'a' - 10
		default:
			c -= 'A' - 10
		}
		r = r<<4 | rune(c)
	}
	return r
}

// Rewrite rewrites the scanned 2xx bailing.agent-turn-context.v1 answer
