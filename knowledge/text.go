package knowledge

import (
	"strings"
	"unicode/utf8"

	"github.com/bailinghub/knowledge-sidecar/corefacts/jsstring"
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

// stripSpace removes every whitespace character (isSpaceRune, Core's
// JavaScript whitespace). The
// fragment re-check compares texts with whitespace collapsed; collapsing it
// to nothing also tolerates Core's chunker joining sentence pieces with "\n"
// where the document had no whitespace at all. Like ranging over the string,
// each byte of invalid UTF-8 becomes U+FFFD.
//
// It runs over whole documents, so it copies runs of kept bytes at once and
// returns s itself when nothing changes. BenchmarkStripSpace: against strings.Map
// it saves ~0.5 ms of a ~1 ms search that normalizes four 40 KiB documents
// (BenchmarkSearchNormalized; DESIGN 14 review, docs/performance.md).
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
		size, space, invalid := nextRune(s[i:])
		switch {
		case invalid:
			cut(i, i+1, string(utf8.RuneError))
		case space:
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

// asciiKept[c] is true for the ASCII bytes that are not whitespace (tab, LF,
// VT, FF, CR and space are, in Go and in JavaScript alike).
var asciiKept = func() (t [256]bool) {
	for c := 0; c < utf8.RuneSelf; c++ {
		t[c] = !jsstring.IsSpace(rune(c))
	}
	return t
}()

// isSpaceRune reports whether a non-ASCII rune is whitespace as Core's
// JavaScript sees it (jsstring.IsSpace). It differs from unicode.IsSpace
// in U+FEFF (a BOM that Core's trim removes from a paragraph's start) and
// U+0085 (kept by Core, so kept here).
func isSpaceRune(r rune) bool { return jsstring.IsSpace(r) }

// nextRune returns the size of the non-ASCII character (or invalid byte,
// size 1) at the start of s, whether it is whitespace (isSpaceRune) and
// whether it is an invalid byte: what utf8.DecodeRuneInString and
// isSpaceRune say, faster. The character is validated without being decoded
// (runeEscLen); only the lead bytes that start a non-ASCII JavaScript
// whitespace character (U+00A0 C2, U+1680 E1, U+2000–U+205F E2, U+3000 E3,
// U+FEFF EF) are decoded. The texts it scans are mostly CJK.
func nextRune(s string) (size int, space, invalid bool) {
	if _, size = runeEscLen(s); size == 1 {
		return 1, false, true
	}
	switch s[0] {
	case 0xC2, 0xE1, 0xE2, 0xE3, 0xEF:
		r, _ := utf8.DecodeRuneInString(s[:size])
		return size, isSpaceRune(r), false
	}
	return size, false, false
}

// collapseSpace replaces every run of whitespace (JavaScript's) with one
// space and trims the ends; each byte of invalid UTF-8 becomes U+FFFD. Runs
// of kept bytes are copied at once. It stops once the result holds at least
// max bytes (max < 0: no limit), so the caller that keeps only a prefix of
// that length does not collapse the rest.
func collapseSpace(s string, max int) string {
	var b strings.Builder
	if max < 0 || max > len(s) {
		b.Grow(len(s))
	} else {
		b.Grow(max + utf8.UTFMax)
	}
	space := false // whitespace seen since the last kept character
	for i := 0; i < len(s) && (max < 0 || b.Len() < max); {
		run := i
		for i < len(s) {
			if c := s[i]; c < utf8.RuneSelf {
				if !asciiKept[c] {
					break
				}
				i++
				continue
			}
			size, space, invalid := nextRune(s[i:])
			if invalid || space {
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
		size, _, invalid := nextRune(s[i:])
		if invalid {
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

// containsHit is contains(normalizeForMatch(hit)) for a raw hit text
// (Core's chunk). When the shortcut of contains applies and hit holds no
// image markup, no "图", no U+FFFD and no invalid UTF-8, normalizeForMatch(hit)
// is stripSpace(hit), and it is compared without being built
// (strippedContains skips whitespace on both sides): no allocation per hit.
func (d *docMatch) containsHit(hit string) bool {
	if d.simple && !strings.Contains(hit, "![") && !strings.Contains(hit, "图") &&
		!strings.ContainsRune(hit, utf8.RuneError) && utf8.ValidString(hit) {
		if found, ok := strippedContains(d.content, hit); ok {
			return found
		}
	}
	return d.contains(normalizeForMatch(hit))
}

// A U+FFFD at the start or end of frag is half of a character Core's chunker
// cut in two (see cutHalves); it matches one character outside the BMP (or a
// U+FFFD) of the document at that place.
func (d *docMatch) contains(frag string) bool {
	core, lead, trail := cutHalves(frag)
	if !lead && !trail && d.simple && !strings.ContainsRune(frag, utf8.RuneError) {
		if found, ok := strippedContains(d.content, frag); ok {
			return found
		}
	}
	if !d.built {
		d.norm, d.built = normalizeForMatch(d.content), true
	}
	if !lead && !trail {
		return strings.Contains(d.norm, frag)
	}
	return containsBetweenHalves(d.norm, core, lead, trail)
}

// cutHalves splits a normalized hit fragment into its core and the halves of
// cut characters at its edges. Core's chunker counts in UTF-16 code units and
// cuts an over-long sentence every 700 units, even between the two halves of
// a surrogate pair (an emoji, any character above U+FFFF); each lone half is
// stored and returned as U+FFFD, so the chunk before the cut ends with one
// and the chunk after it starts with one (CORE_FACTS Addendum 2).
func cutHalves(frag string) (core string, lead, trail bool) {
	const fffd = string(utf8.RuneError)
	if strings.HasPrefix(frag, fffd) {
		frag, lead = frag[len(fffd):], true
	}
	if strings.HasSuffix(frag, fffd) {
		frag, trail = frag[:len(frag)-len(fffd)], true
	}
	return frag, lead, trail
}

// cutRune reports whether r can be what a U+FFFD half stands for: a
// character outside the BMP, or a U+FFFD the document itself holds.
func cutRune(r rune) bool { return r > 0xFFFF || r == utf8.RuneError }

// containsBetweenHalves reports whether core occurs in norm preceded (lead)
// and/or followed (trail) by a cutRune.
func containsBetweenHalves(norm, core string, lead, trail bool) bool {
	for from := 0; from <= len(norm); {
		k := strings.Index(norm[from:], core)
		if k < 0 {
			return false
		}
		p := from + k
		before, _ := utf8.DecodeLastRuneInString(norm[:p])
		after, _ := utf8.DecodeRuneInString(norm[p+len(core):])
		if (!lead || p > 0 && cutRune(before)) && (!trail || p+len(core) < len(norm) && cutRune(after)) {
			return true
		}
		// Next candidate: one character further.
		_, n := utf8.DecodeRuneInString(norm[p:])
		if n == 0 {
			return false
		}
		from = p + n
	}
	return false
}

// strippedContains reports whether stripSpace(hit) occurs in stripSpace(s),
// for hit valid UTF-8 without U+FFFD, without building either (whitespace is
// skipped on both sides while comparing). ok is false when it gave up after
// looking at about len(s) bytes in failed tries.
func strippedContains(s, hit string) (found, ok bool) {
	j := skipSpace(hit, 0)
	if j == len(hit) {
		return true, true
	}
	hit = hit[j:]
	_, n := utf8.DecodeRuneInString(hit)
	first := hit[:n]
	budget := len(s) + len(hit)
	for from := 0; ; {
		k := strings.Index(s[from:], first)
		if k < 0 {
			return false, true
		}
		p := from + k
		match, looked := strippedHasPrefix(s[p:], hit)
		if match {
			return true, true
		}
		if budget -= looked; budget < 0 {
			return false, false
		}
		from = p + n
	}
}

// skipSpace returns the index of the first non-whitespace character of s
// at or after i (len(s) if none). s must be valid UTF-8 from i.
func skipSpace(s string, i int) int {
	for i < len(s) {
		if c := s[i]; c < utf8.RuneSelf {
			if asciiKept[c] {
				return i
			}
			i++
			continue
		}
		size, space, _ := nextRune(s[i:])
		if !space {
			return i
		}
		i += size
	}
	return i
}

// strippedHasPrefix reports whether stripSpace(s) starts with stripSpace(hit)
// (hit valid UTF-8 without U+FFFD, whitespace skipped on both sides), and
// how many bytes of s it looked at. s must start on a rune boundary.
func strippedHasPrefix(s, hit string) (match bool, looked int) {
	i, j := 0, 0
	for {
		if j = skipSpace(hit, j); j >= len(hit) {
			return true, i
		}
		if i >= len(s) {
			return false, i
		}
		if c := s[i]; c < utf8.RuneSelf {
			if asciiKept[c] {
				if hit[j] != c {
					return false, i + 1
				}
				j++
			}
			i++
			continue
		}
		size, space, invalid := nextRune(s[i:])
		if !space {
			if invalid || !strings.HasPrefix(hit[j:], s[i:i+size]) {
				return false, i + size
			}
			j += size
		}
		i += size
	}
}
