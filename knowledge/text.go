package knowledge

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// Text normalization shared by the search re-check and summaries.

// replaceImages rewrites Markdown images the way Core does before chunking
// (CORE_FACTS addendum): ![alt](url) becomes [图：alt], or disappears when
// alt is empty (the pattern is !\[([^\]]*)\]\(([^)]*)\)).
func replaceImages(s string) string {
	if !strings.Contains(s, "![") {
		return s
	}
	var b strings.Builder
	b.Grow(len(s))
	for {
		i := strings.Index(s, "![")
		if i < 0 {
			b.WriteString(s)
			return b.String()
		}
		b.WriteString(s[:i])
		rest := s[i+2:]
		altEnd := strings.IndexByte(rest, ']')
		if altEnd < 0 || !strings.HasPrefix(rest[altEnd:], "](") {
			b.WriteString("![")
			s = rest
			continue
		}
		alt := rest[:altEnd]
		urlPart := rest[altEnd+2:]
		urlEnd := strings.IndexByte(urlPart, ')')
		if urlEnd < 0 {
			b.WriteString("![")
			s = rest
			continue
		}
		if alt != "" {
			b.WriteString("[图：")
			b.WriteString(alt)
			b.WriteString("]")
		}
		s = urlPart[urlEnd+1:]
	}
}

// stripSpace removes every whitespace character (unicode.IsSpace). The
// fragment re-check compares texts with whitespace collapsed; collapsing it
// to nothing also tolerates Core's chunker joining sentence pieces with "\n"
// where the document had no whitespace at all. Like ranging over the string,
// each byte of invalid UTF-8 becomes U+FFFD.
//
// It runs over whole documents, so it copies runs of kept bytes at once and
// returns s itself when nothing changes.
func stripSpace(s string) string {
	var b strings.Builder
	start := 0 // first byte of the run of kept bytes not yet copied
	cut := func(i, next int, repl string) {
		if b.Cap() == 0 {
			b.Grow(len(s))
		}
		b.WriteString(s[start:i])
		b.WriteString(repl)
		start = next
	}
	for i := 0; i < len(s); {
		for i < len(s) && asciiKept[s[i]] {
			i++
		}
		if i == len(s) {
			break
		}
		if s[i] < utf8.RuneSelf { // ASCII whitespace
			cut(i, i+1, "")
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			cut(i, i+1, string(utf8.RuneError))
		case isSpaceRune(r):
			cut(i, i+size, "")
		}
		i += size
	}
	if b.Cap() == 0 {
		return s
	}
	b.WriteString(s[start:])
	return b.String()
}

// asciiKept[c] is true for the ASCII bytes that are not whitespace.
var asciiKept = func() (t [256]bool) {
	for c := 0; c < utf8.RuneSelf; c++ {
		t[c] = !unicode.IsSpace(rune(c))
	}
	return t
}()

// isSpaceRune is unicode.IsSpace for a non-ASCII rune, without its table
// search for the common letters: above Latin-1, every white space code point
// is in U+1680..U+3000.
func isSpaceRune(r rune) bool {
	if r > 0xFF && (r < 0x1680 || r > 0x3000) {
		return false
	}
	return unicode.IsSpace(r)
}

// collapseSpace replaces every run of whitespace (unicode.IsSpace) with one
// space and trims the ends; each byte of invalid UTF-8 becomes U+FFFD. Runs
// of kept bytes are copied at once.
func collapseSpace(s string) string {
	var b strings.Builder
	b.Grow(len(s))
	space := false // whitespace seen since the last kept character
	for i := 0; i < len(s); {
		run := i
		for i < len(s) {
			if c := s[i]; c < utf8.RuneSelf {
				if !asciiKept[c] {
					break
				}
				i++
				continue
			}
			r, size := utf8.DecodeRuneInString(s[i:])
			if r == utf8.RuneError && size == 1 || isSpaceRune(r) {
				break
			}
			i += size
		}
		if i > run {
			if space && b.Len() > 0 {
				b.WriteByte(' ')
			}
			space = false
			b.WriteString(s[run:i])
		}
		if i == len(s) {
			break
		}
		if s[i] < utf8.RuneSelf { // ASCII whitespace
			space = true
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			if space && b.Len() > 0 {
				b.WriteByte(' ')
			}
			space = false
			b.WriteRune(utf8.RuneError)
		} else {
			space = true
		}
		i += size
	}
	return b.String()
}

// normalizeForMatch is the form both a hit fragment and the current document
// are compared in.
// An image marker left empty by whitespace stripping ("[图： ]") is removed
// too, so a blank alt text matches whether or not Core trims it.
func normalizeForMatch(s string) string {
	return strings.ReplaceAll(stripSpace(replaceImages(s)), "[图：]", "")
}

// cutBytes returns the longest prefix of s of at most n bytes that ends on a
// character boundary.
func cutBytes(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:boundaryAtOrBefore(s, n)]
}

// docMatch answers, for one document's current content, whether hit
// fragments occur in it, i.e. strings.Contains(normalizeForMatch(content),
// frag) for a normalized frag (normalizeForMatch output). It builds the
// normalized document only when the shortcut below cannot decide.
//
// The shortcut: when content has no Markdown image ("![") and no "图",
// neither the image rewrite nor the "[图：]" removal changes anything, so
// the normalized document is stripSpace(content). If frag has no U+FFFD
// (which stripSpace also makes of invalid bytes), each occurrence of frag
// there starts at a raw occurrence of frag's first rune in content: those
// are found with strings.Index and tried one by one, skipping whitespace
// while comparing. The tries are bounded by the content's length in total;
// past that, or when the shortcut does not apply, the normalized document
// is built (once) and searched.
type docMatch struct {
	content string
	simple  bool   // normalizeForMatch(content) == stripSpace(content)
	norm    string // normalizeForMatch(content) once built
	built   bool
}

func newDocMatch(content string) *docMatch {
	return &docMatch{
		content: content,
		simple:  !strings.Contains(content, "![") && !strings.Contains(content, "图"),
	}
}

func (d *docMatch) contains(frag string) bool {
	if d.simple && !strings.ContainsRune(frag, utf8.RuneError) {
		if found, ok := strippedContains(d.content, frag); ok {
			return found
		}
	}
	if !d.built {
		d.norm, d.built = normalizeForMatch(d.content), true
	}
	return strings.Contains(d.norm, frag)
}

// strippedContains reports whether frag (valid UTF-8 without whitespace or
// U+FFFD) occurs in stripSpace(s). ok is false when it gave up after
// looking at about len(s) bytes in failed tries.
func strippedContains(s, frag string) (found, ok bool) {
	if frag == "" {
		return true, true
	}
	_, n := utf8.DecodeRuneInString(frag)
	first := frag[:n]
	budget := len(s) + len(frag)
	for from := 0; ; {
		k := strings.Index(s[from:], first)
		if k < 0 {
			return false, true
		}
		p := from + k
		match, looked := strippedHasPrefix(s[p:], frag)
		if match {
			return true, true
		}
		if budget -= looked; budget < 0 {
			return false, false
		}
		from = p + n
	}
}

// strippedHasPrefix reports whether stripSpace(s) starts with frag (valid
// UTF-8 without U+FFFD), and how many bytes of s it looked at. s must start
// on a rune boundary.
func strippedHasPrefix(s, frag string) (match bool, looked int) {
	i, j := 0, 0
	for j < len(frag) {
		if i >= len(s) {
			return false, i
		}
		if c := s[i]; c < utf8.RuneSelf {
			if asciiKept[c] {
				if frag[j] != c {
					return false, i + 1
				}
				j++
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if !isSpaceRune(r) {
			// An invalid byte would be U+FFFD, which frag does not hold.
			if r == utf8.RuneError && size == 1 || !strings.HasPrefix(frag[j:], s[i:i+size]) {
				return false, i + size
			}
			j += size
		}
		i += size
	}
	return true, i
}
