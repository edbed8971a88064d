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

// stripSpace removes every whitespace character. The fragment re-check
// compares texts with whitespace collapsed; collapsing it to nothing also
// tolerates Core's chunker joining sentence pieces with "\n" where the
// document had no whitespace at all.
func stripSpace(s string) string {
	var b strings.Builder
	b.Grow(len(s))
	for _, r := range s {
		if !unicode.IsSpace(r) {
			b.WriteRune(r)
		}
	}
	return b.String()
}

// collapseSpace replaces every run of whitespace with one space and trims
// the ends.
func collapseSpace(s string) string {
	var b strings.Builder
	b.Grow(len(s))
	space := false
	for _, r := range s {
		if unicode.IsSpace(r) {
			space = b.Len() > 0
			continue
		}
		if space {
			b.WriteByte(' ')
			space = false
		}
		if r == utf8.RuneError {
			b.WriteRune(utf8.RuneError)
			continue
		}
		b.WriteRune(r)
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
