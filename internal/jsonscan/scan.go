// Package jsonscan is the module's one byte-level JSON scanner, as pure
// functions over bytes: the same grammar and nesting limit as
// encoding/json.Valid, and one string decoder (Unquote) that gives exactly
// what encoding/json decodes. It finds where values are without building
// them, so callers can splice bytes (turn) or decode the few members they
// need in one pass without reflection (coreclient's /kb/search answer).
//
// Positions are indexes into the caller's slice, which is never modified.
// Depths count containers the way encoding/json does: a top-level object is
// at depth 1, and a value "at depth d" is held by a container at depth d.
package jsonscan

import (
	"bytes"
	"errors"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// ErrSyntax: the bytes are not valid JSON (or not the value asked for).
var ErrSyntax = errors.New("invalid json")

// ErrDeep: the JSON nests beyond encoding/json's limit, so encoding/json
// refuses it as well; callers may tell it from other syntax errors.
var ErrDeep = errors.New("json nests too deeply")

// maxDepth is encoding/json's nesting limit, so the scanner accepts exactly
// what json.Valid accepts.
const maxDepth = 10000

// Member locates one object member: b[KeyStart:KeyEnd] is the key's JSON
// string including quotes (KeyEsc: it holds an escape), b[ValStart:ValEnd]
// its value.
type Member struct {
	KeyStart, KeyEnd int
	KeyEsc           bool
	ValStart, ValEnd int
}

// KeyIs reports whether the member's key, unescaped, equals name.
func (m Member) KeyIs(b []byte, name string) bool {
	raw := b[m.KeyStart+1 : m.KeyEnd-1]
	if !m.KeyEsc {
		return string(raw) == name
	}
	s, ok := Unquote(b[m.KeyStart:m.KeyEnd])
	return ok && s == name
}

// SkipWS returns the index of the first byte at or after i that is not
// JSON whitespace (len(b) if none).
func SkipWS(b []byte, i int) int {
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

// Object scans the object starting at b[i] == '{', which is at nesting
// depth depth, and returns the index just after its closing '}'.
//
// value scans each member's value: it is called, in order, with the key's
// fields and ValStart set (ValEnd is zero; ValStart may be len(b)), must scan exactly the one value
// starting at b[ValStart] (held at depth depth: SkipValue(b, ValStart,
// depth), or Object / Array at depth+1) and returns the index just after
// it; its error ends the scan and is returned. A nil value skips every
// value, which is how the scanner validates nested objects.
func Object(b []byte, i, depth int, value func(Member) (int, error)) (int, error) {
	i, done, err := open(b, i, depth, '}')
	if done || err != nil {
		return i, err
	}
	for {
		if i >= len(b) || b[i] != '"' {
			return 0, ErrSyntax
		}
		var m Member
		m.KeyStart = i
		end, esc, err := String(b, i)
		if err != nil {
			return 0, err
		}
		m.KeyEnd, m.KeyEsc = end, esc
		i = SkipWS(b, end)
		if i >= len(b) || b[i] != ':' {
			return 0, ErrSyntax
		}
		m.ValStart = SkipWS(b, i+1)
		if value != nil {
			i, err = value(m)
		} else {
			i, err = SkipValue(b, m.ValStart, depth)
		}
		if err != nil {
			return 0, err
		}
		var done bool
		if i, done, err = next(b, i, '}'); done || err != nil {
			return i, err
		}
	}
}

// Array scans the array starting at b[i] == '[', which is at nesting depth
// depth, and returns the index just after its closing ']'. elem scans each
// element the way Object's value scans a member's value: it is called with
// the index of the element's first byte (maybe len(b)), the element being
// held at depth depth, and returns the index just after it. A nil elem
// skips the elements.
func Array(b []byte, i, depth int, elem func(int) (int, error)) (int, error) {
	i, done, err := open(b, i, depth, ']')
	if done || err != nil {
		return i, err
	}
	for {
		if elem != nil {
			i, err = elem(i)
		} else {
			i, err = SkipValue(b, i, depth)
		}
		if err != nil {
			return 0, err
		}
		var done bool
		if i, done, err = next(b, i, ']'); done || err != nil {
			return i, err
		}
	}
}

// open scans the opening byte at b[i] of a container at nesting depth
// depth: done with the index just after it when the container is empty
// (its closing byte follows), else the index of its first member's or
// element's first byte.
func open(b []byte, i, depth int, closing byte) (j int, done bool, err error) {
	if depth > maxDepth {
		return 0, false, ErrDeep
	}
	i = SkipWS(b, i+1)
	if i < len(b) && b[i] == closing {
		return i + 1, true, nil
	}
	return i, false, nil
}

// next scans what follows a member or an element ending before b[i]: a
// comma (more follows: the index of the next one's first byte) or the
// container's closing byte (done: the index just after it).
func next(b []byte, i int, closing byte) (j int, done bool, err error) {
	i = SkipWS(b, i)
	switch {
	case i >= len(b):
		return 0, false, ErrSyntax
	case b[i] == ',':
		return SkipWS(b, i+1), false, nil
	case b[i] == closing:
		return i + 1, true, nil
	default:
		return 0, false, ErrSyntax
	}
}

// SkipValue returns the index just after the value starting at b[i];
// depth is the nesting depth of the container holding it (0 for a
// top-level value).
func SkipValue(b []byte, i, depth int) (int, error) {
	if i >= len(b) {
		return 0, ErrSyntax
	}
	switch c := b[i]; {
	case c == '{':
		return Object(b, i, depth+1, nil)
	case c == '[':
		return Array(b, i, depth+1, nil)
	case c == '"':
		end, _, err := String(b, i)
		return end, err
	case c == '-' || (c >= '0' && c <= '9'):
		return Number(b, i)
	case c == 't':
		return literal(b, i, "true")
	case c == 'f':
		return literal(b, i, "false")
	case c == 'n':
		return literal(b, i, "null")
	default:
		return 0, ErrSyntax
	}
}

// String scans the string starting at b[i] == '"' and returns the
// index after its closing quote and whether it contains escapes. Like
// encoding/json it rejects raw control characters and bad escapes and does
// not check UTF-8.
//
// Plain bytes (anything but '"', '\\' and controls) are skipped by a table
// look-up up to the next byte that needs a decision; the switch below only
// sees those. (Skipping eight at a time saved ~3 % of a 256 KiB turn, under
// 1 % of a search: below DESIGN 14's bar, so the plain loop it is.)
func String(b []byte, i int) (int, bool, error) {
	i++
	esc := false
	for i < len(b) {
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
				return 0, false, ErrSyntax
			}
			switch b[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if i+6 > len(b) {
					return 0, false, ErrSyntax
				}
				for _, h := range b[i+2 : i+6] {
					if !isHex(h) {
						return 0, false, ErrSyntax
					}
				}
				i += 6
			default:
				return 0, false, ErrSyntax
			}
		case c < 0x20:
			return 0, false, ErrSyntax
		default:
			i++
		}
	}
	return 0, false, ErrSyntax
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

// Number scans the number starting at b[i] (a '-' or a digit):
// -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?, and returns the index
// just after it.
func Number(b []byte, i int) (int, error) {
	if b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && b[i] >= '1' && b[i] <= '9':
		i = digits(b, i)
	default:
		return 0, ErrSyntax
	}
	if i < len(b) && b[i] == '.' {
		j := digits(b, i+1)
		if j == i+1 {
			return 0, ErrSyntax
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
			return 0, ErrSyntax
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
		return 0, ErrSyntax
	}
	return i + len(lit), nil
}

// Unquote is the module's one JSON string decoder: v is a string literal,
// quotes included, already passed by String (escapes and controls
// checked), decoded exactly as encoding/json decodes it without its
// reflection: escapes undone, a surrogate pair joined, a lone surrogate
// (\ud800 alone, or followed by anything but a low one) U+FFFD, and each
// byte of invalid UTF-8 U+FFFD, so "\xe6" and "\xe6\n" agree on what the
// byte is. The raw bytes are the value only when there is no escape and
// they are valid UTF-8. ok is false when v is not a string literal.
//
// A string with escapes is written once, into a strings.Builder whose
// buffer becomes the string: one allocation and one copy, where building
// a []byte and converting it took two of each (chunk texts are kilobytes).
func Unquote(v []byte) (string, bool) {
	if len(v) < 2 || v[0] != '"' {
		return "", false
	}
	raw := v[1 : len(v)-1]
	valid := utf8.Valid(raw)
	k := bytes.IndexByte(raw, '\\')
	if k < 0 && valid {
		return string(raw), true
	}
	var out strings.Builder
	out.Grow(len(raw)) // escapes only shrink; invalid bytes grow it
	for {
		if k < 0 {
			writeText(&out, raw, valid)
			return out.String(), true
		}
		writeText(&out, raw[:k], valid) // a backslash never cuts a valid sequence
		raw = raw[k:]
		if len(raw) < 2 || raw[1] == 'u' && len(raw) < 6 {
			return "", false // not scanned
		}
		n := 2
		switch raw[1] {
		case '"', '\\', '/':
			out.WriteByte(raw[1])
		case 'b':
			out.WriteByte('\b')
		case 'f':
			out.WriteByte('\f')
		case 'n':
			out.WriteByte('\n')
		case 'r':
			out.WriteByte('\r')
		case 't':
			out.WriteByte('\t')
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
			out.WriteRune(r)
		default:
			return "", false // not scanned
		}
		raw = raw[n:]
		k = bytes.IndexByte(raw, '\\')
	}
}

// writeText writes s, unless valid (the whole string is valid UTF-8) each
// byte of invalid UTF-8 in it as U+FFFD (what encoding/json makes of it).
func writeText(out *strings.Builder, s []byte, valid bool) {
	if valid || utf8.Valid(s) {
		out.Write(s)
		return
	}
	for len(s) > 0 {
		r, size := utf8.DecodeRune(s)
		if r == utf8.RuneError && size == 1 {
			out.WriteRune(utf8.RuneError)
		} else {
			out.Write(s[:size])
		}
		s = s[size:]
	}
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
