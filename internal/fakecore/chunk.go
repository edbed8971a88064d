package fakecore

import (
	"bytes"
	"encoding/json"
	"math"
	"os"
	"regexp"
	"strings"
	"unicode"
	"unicode/utf16"
)

// ChunkMax is Core's CHUNK_MAX: chunk length in UTF-16 code units
// (JavaScript's String length), not characters.
const ChunkMax = 700

var (
	imagePattern = regexp.MustCompile(`!\[([^\]]*)\]\([^)]*\)`)
	manyNewlines = regexp.MustCompile(`\n{3,}`)
)

// StripImages is the text Core chunks (stripImagesForEmbedding, then the
// newline collapse and trim of embedDoc): Markdown images ![alt](url) become
// [图：alt] (nothing when alt is empty; the URL ends at the first ")"), runs of
// three or more newlines become one blank line, and the text is trimmed with
// JavaScript's trim (JSTrim).
func StripImages(content string) string {
	s := imagePattern.ReplaceAllStringFunc(content, func(m string) string {
		alt := imagePattern.FindStringSubmatch(m)[1]
		if alt == "" {
			return ""
		}
		return "[图：" + alt + "]"
	})
	s = manyNewlines.ReplaceAllString(s, "\n\n")
	return JSTrim(s)
}

// Chunks cuts a stored document body exactly as Core 0.3.4 does before
// embedding (embedDoc → chunkText(text, 700), chunk-vectors.json), and returns
// the chunk texts as Core stores and returns them:
//
//   - the text is StripImages(content); CRLF pairs become LF;
//   - paragraphs are split at every run of two or more LF and at a single LF
//     followed by 1–6 '#' and a whitespace character; each is JSTrim'med and
//     empty ones dropped;
//   - a one-line heading (1–6 '#' and whitespace) that is not the last
//     paragraph is glued to the next paragraph with one LF, whatever it is;
//   - paragraphs of at most ChunkMax units are packed, joined by one LF, while
//     the buffer stays within ChunkMax; a packed buffer is emitted trimmed;
//   - a longer paragraph flushes the buffer, is split after 。！？!?；; and LF,
//     and its sentences are concatenated while they fit and emitted trimmed; a
//     sentence over ChunkMax is cut into ChunkMax-unit slices emitted as they
//     are (untrimmed), the last shorter one on its own;
//   - all lengths are UTF-16 code units: a cut may split a surrogate pair, and
//     each lone half is stored (and returned by /kb/search) as U+FFFD.
func Chunks(content string) []string {
	text := utf16.Encode([]rune(StripImages(content)))
	text = replaceCRLF(text)
	if len(text) == 0 {
		return nil
	}
	paras := splitParagraphs(text)
	var glued [][]uint16
	for i := 0; i < len(paras); i++ {
		p := paras[i]
		if i+1 < len(paras) && isHeadingLine(p) {
			p = concat16(p, []uint16{'\n'}, paras[i+1])
			i++
		}
		glued = append(glued, p)
	}

	var out [][]uint16
	emitTrimmed := func(b []uint16) {
		if t := trim16(b); len(t) > 0 {
			out = append(out, t)
		}
	}
	var buf []uint16
	for _, p := range glued {
		if len(p) > ChunkMax {
			emitTrimmed(buf)
			buf = nil
			for _, s := range sentences16(p) {
				switch {
				case len(s) > ChunkMax:
					emitTrimmed(buf)
					buf = nil
					for len(s) > 0 {
						n := min(len(s), ChunkMax)
						out = append(out, s[:n])
						s = s[n:]
					}
				case len(buf)+len(s) <= ChunkMax:
					buf = concat16(buf, s)
				default:
					emitTrimmed(buf)
					buf = concat16(s)
				}
			}
			emitTrimmed(buf)
			buf = nil
			continue
		}
		switch {
		case len(buf) == 0:
			buf = concat16(p)
		case len(buf)+1+len(p) <= ChunkMax:
			buf = concat16(buf, []uint16{'\n'}, p)
		default:
			emitTrimmed(buf)
			buf = concat16(p)
		}
	}
	emitTrimmed(buf)

	chunks := make([]string, len(out))
	for i, c := range out {
		chunks[i] = string(utf16.Decode(c)) // a lone surrogate decodes to U+FFFD, as mysql2 stores it
	}
	return chunks
}

// The fake Core's JavaScript string rules (IsJSSpace, JSTrim, its UTF-16
// counting and cuts) are its own copy on purpose, not the sidecar's
// corefacts/jsstring: the fake Core is the independent oracle the sidecar is
// tested against (written from CORE_FACTS, checked against Core's own chunk
// vectors), so a mistake in the sidecar's copy cannot hide in both.

// IsJSSpace reports whether u is removed by JavaScript's String.prototype.trim
// and matched by \s: ECMAScript WhiteSpace (tab, VT, FF, space, U+00A0,
// U+FEFF, the other Zs characters) and LineTerminator (LF, CR, U+2028,
// U+2029). Unlike unicode.IsSpace it includes U+FEFF and excludes U+0085.
func IsJSSpace(u rune) bool {
	switch {
	case u >= 0x09 && u <= 0x0D, u == 0x20, u == 0xA0, u == 0x1680,
		u >= 0x2000 && u <= 0x200A, u == 0x2028, u == 0x2029, u == 0x202F,
		u == 0x205F, u == 0x3000, u == 0xFEFF:
		return true
	}
	return false
}

// JSTrim is JavaScript's String.prototype.trim. Every trim and whitespace
// test of the fake goes through it or IsJSSpace (ids, user_input, kb ids,
// Number(string)), never strings.TrimSpace, whose set differs (U+0085 in,
// U+FEFF out).
func JSTrim(s string) string { return strings.TrimFunc(s, IsJSSpace) }

// jsonTrim removes JSON's whitespace (RFC 8259 §2, JSON.parse: space, tab,
// LF, CR) around a JSON text, and nothing else: JSON.parse refuses a body
// that starts with a form feed or U+00A0.
func jsonTrim(b []byte) []byte { return bytes.Trim(b, " \t\n\r") }

func trim16(s []uint16) []uint16 {
	for len(s) > 0 && IsJSSpace(rune(s[0])) {
		s = s[1:]
	}
	for len(s) > 0 && IsJSSpace(rune(s[len(s)-1])) {
		s = s[:len(s)-1]
	}
	return s
}

func concat16(parts ...[]uint16) []uint16 {
	n := 0
	for _, p := range parts {
		n += len(p)
	}
	out := make([]uint16, 0, n)
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

// replaceCRLF turns every CR LF pair into LF (a lone CR stays).
func replaceCRLF(s []uint16) []uint16 {
	out := s[:0:0]
	for i := 0; i < len(s); i++ {
		if s[i] == '\r' && i+1 < len(s) && s[i+1] == '\n' {
			continue
		}
		out = append(out, s[i])
	}
	return out
}

// headingAt reports whether s[i:] starts with 1–6 '#' and a whitespace unit.
func headingAt(s []uint16, i int) bool {
	n := 0
	for i+n < len(s) && s[i+n] == '#' && n < 6 {
		n++
	}
	return n > 0 && i+n < len(s) && IsJSSpace(rune(s[i+n]))
}

func isHeadingLine(p []uint16) bool {
	for _, u := range p {
		if u == '\n' {
			return false
		}
	}
	return headingAt(p, 0)
}

// splitParagraphs splits at runs of 2+ LF and at an LF before a heading,
// trims each piece and drops empty ones.
func splitParagraphs(s []uint16) [][]uint16 {
	var out [][]uint16
	add := func(p []uint16) {
		if t := trim16(p); len(t) > 0 {
			out = append(out, t)
		}
	}
	start := 0
	for i := 0; i < len(s); {
		if s[i] != '\n' {
			i++
			continue
		}
		j := i
		for j < len(s) && s[j] == '\n' {
			j++
		}
		if j-i >= 2 || headingAt(s, j) {
			add(s[start:i])
			start = j
		}
		i = j
	}
	add(s[start:])
	return out
}

// sentences16 splits after 。！？!?；; and LF, keeping each delimiter with the
// sentence before it.
func sentences16(p []uint16) [][]uint16 {
	var out [][]uint16
	start := 0
	for i, u := range p {
		switch u {
		case '。', '！', '？', '!', '?', '；', ';', '\n':
			out = append(out, p[start:i+1])
			start = i + 1
		}
	}
	if start < len(p) {
		out = append(out, p[start:])
	}
	return out
}

// Tokens is the fake's CJK-friendly tokenization: lowercase runs of letters
// and digits form words; every CJK character (Han, kana, Hangul) is a token.
func Tokens(s string) []string {
	var out []string
	var word strings.Builder
	flush := func() {
		if word.Len() > 0 {
			out = append(out, word.String())
			word.Reset()
		}
	}
	for _, r := range strings.ToLower(s) {
		switch {
		case unicode.In(r, unicode.Han, unicode.Hiragana, unicode.Katakana, unicode.Hangul):
			flush()
			out = append(out, string(r))
		case unicode.IsLetter(r) || unicode.IsDigit(r):
			word.WriteRune(r)
		default:
			flush()
		}
	}
	flush()
	return out
}

// Score is the fake's lexical relevance in 0..1: the share of the query's
// distinct tokens that occur in text, rounded to 3 decimals like Core.
// Common English and Chinese stop-words of the query do not count (a query
// of stop-words only keeps them all), so "Can I get a refund?" is about
// "refund", not "can", "i", "get" and "a".
func Score(query, text string) float64 {
	q := map[string]bool{}
	all := map[string]bool{}
	for _, t := range Tokens(query) {
		all[t] = true
		if !IsStopWord(t) {
			q[t] = true
		}
	}
	if len(q) == 0 {
		q = all
	}
	if len(q) == 0 {
		return 0
	}
	have := map[string]bool{}
	for _, t := range Tokens(text) {
		have[t] = true
	}
	n := 0
	for t := range q {
		if have[t] {
			n++
		}
	}
	return math.Round(float64(n)/float64(len(q))*1000) / 1000
}

// ChunkVector is one case of chunk-vectors.json: a document as sent to Core,
// its stored content when Core's ingest changed it, and the chunks Core's
// own chunker stored for it (identical to /kb/search hit content).
type ChunkVector struct {
	Name          string   `json:"name"`
	Document      string   `json:"document"`
	StoredContent *string  `json:"stored_content"`
	Chunks        []string `json:"chunks"`
}

// Stored is the content the catalog reads (bz_kb_docs.content) and Chunks takes.
func (v ChunkVector) Stored() string {
	if v.StoredContent != nil {
		return *v.StoredContent
	}
	return v.Document
}

// LoadChunkVectors reads the cases of a chunk-vectors.json file (this
// package's testdata/chunk-vectors.json: Core 0.3.4's chunker run unmodified).
func LoadChunkVectors(path string) ([]ChunkVector, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var v struct {
		Cases []ChunkVector `json:"cases"`
	}
	if err := json.Unmarshal(raw, &v); err != nil {
		return nil, err
	}
	return v.Cases, nil
}

// stopWords are common English words and Chinese function characters (the
// fake tokenizes CJK text character by character) that carry no topic.
var stopWords = func() map[string]bool {
	m := map[string]bool{}
	for _, w := range strings.Fields(`a an and are as at be been but by can could did do does for from get got
		had has have how i if in into is it its may me might my no not of on or our please should so
		some than that the their them then there these they this those to us was we were what when
		where which who whom why will with would you your
		的 了 是 在 我 你 他 她 它 们 吗 呢 吧 啊 和 与 及 或 也 就 都 而 又 把 被 让 给 对 从 向 这 那 有 个 之 么 什 怎 能 可 以 会 要 请`) {
		m[w] = true
	}
	return m
}()

// IsStopWord reports whether a token (see Tokens) is one of the stop-words
// Score ignores in a query.
func IsStopWord(token string) bool { return stopWords[token] }
