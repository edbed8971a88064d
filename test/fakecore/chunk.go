package fakecore

import (
	"math"
	"regexp"
	"strings"
	"unicode"
	"unicode/utf16"
)

// ChunkMax is Core's CHUNK_MAX: chunk length in characters (UTF-16 code units,
// like JavaScript's String length).
const ChunkMax = 700

var (
	imagePattern   = regexp.MustCompile(`!\[([^\]]*)\]\([^)]*\)`)
	manyNewlines   = regexp.MustCompile(`\n{3,}`)
	blankLine      = regexp.MustCompile(`\n[ \t]*\n`)
	headingPattern = regexp.MustCompile(`^#{1,6}\s`)
)

// StripImages replaces Markdown images ![alt](url) with [图：alt] (nothing when
// alt is empty), collapses runs of three or more newlines to one blank line
// and trims: the text Core chunks (CORE_FACTS addendum).
func StripImages(content string) string {
	s := strings.ReplaceAll(content, "\r\n", "\n")
	s = imagePattern.ReplaceAllStringFunc(s, func(m string) string {
		alt := strings.TrimSpace(imagePattern.FindStringSubmatch(m)[1])
		if alt == "" {
			return ""
		}
		return "[图：" + alt + "]"
	})
	s = manyNewlines.ReplaceAllString(s, "\n\n")
	return strings.TrimSpace(s)
}

// Chunks cuts a document body the way Core does before embedding: images
// stripped (StripImages), paragraphs split at blank lines and before Markdown
// headings, a one-line heading glued to the paragraph after it, paragraphs
// packed up to ChunkMax characters joined by "\n", longer paragraphs split
// after sentence punctuation (。！？!?；; or a newline), and sentences longer
// than ChunkMax cut every ChunkMax characters.
func Chunks(content string) []string {
	text := StripImages(content)
	if text == "" {
		return nil
	}
	var paras []string
	for _, block := range blankLine.Split(text, -1) {
		paras = append(paras, splitHeadings(block)...)
	}
	// Glue one-line headings to the next paragraph.
	var glued []string
	for i := 0; i < len(paras); i++ {
		p := paras[i]
		if headingPattern.MatchString(p) && !strings.Contains(p, "\n") && i+1 < len(paras) {
			p = p + "\n" + paras[i+1]
			i++
		}
		glued = append(glued, p)
	}

	var chunks []string
	cur := ""
	flush := func() {
		if t := strings.TrimSpace(cur); t != "" {
			chunks = append(chunks, t)
		}
		cur = ""
	}
	for _, p := range glued {
		switch {
		case jsLen(p) > ChunkMax:
			flush()
			for _, s := range sentences(p) {
				if cur != "" && jsLen(cur)+jsLen(s) > ChunkMax {
					flush()
				}
				for jsLen(s) > ChunkMax {
					head := cutUTF16(s, ChunkMax)
					if head == "" { // a lone astral rune at the boundary
						head = string([]rune(s)[:1])
					}
					flush()
					cur = head
					flush()
					s = s[len(head):]
				}
				cur += s
			}
			flush()
		case cur == "":
			cur = p
		case jsLen(cur)+1+jsLen(p) <= ChunkMax:
			cur += "\n" + p
		default:
			flush()
			cur = p
		}
	}
	flush()
	return chunks
}

// splitHeadings splits a block before every Markdown heading line.
func splitHeadings(block string) []string {
	block = strings.TrimSpace(block)
	if block == "" {
		return nil
	}
	var out []string
	var cur []string
	for _, line := range strings.Split(block, "\n") {
		if headingPattern.MatchString(line) && len(cur) > 0 {
			out = append(out, strings.Join(cur, "\n"))
			cur = nil
		}
		cur = append(cur, line)
	}
	return append(out, strings.Join(cur, "\n"))
}

// sentences splits after 。！？!?；; and newlines, keeping the delimiters.
func sentences(p string) []string {
	var out []string
	start := 0
	for i, r := range p {
		if strings.ContainsRune("。！？!?；;\n", r) {
			end := i + len(string(r))
			out = append(out, p[start:end])
			start = end
		}
	}
	if start < len(p) {
		out = append(out, p[start:])
	}
	return out
}

// jsLen is the JavaScript length of s (UTF-16 code units).
func jsLen(s string) int { return len(utf16.Encode([]rune(s))) }

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
func Score(query, text string) float64 {
	q := map[string]bool{}
	for _, t := range Tokens(query) {
		q[t] = true
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
