package knowledge

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/bailinghub/knowledge-sidecar/corefacts/jsstring"
	"github.com/bailinghub/knowledge-sidecar/internal/fakecore"
)

// The search re-check against what Core's real chunker produces
// (chunk-vectors.json: Core 0.3.4's chunkText run unmodified, its chunks read
// back through /kb/search) and against random documents cut by the fake
// Core's chunker, which reproduces every vector exactly.

type coreChunkCase struct {
	name, doc string
	chunks    []string
}

func loadCoreChunkCases(t *testing.T) []coreChunkCase {
	t.Helper()
	vs, err := fakecore.LoadChunkVectors("../internal/fakecore/testdata/chunk-vectors.json")
	if err != nil || len(vs) < 30 {
		t.Fatalf("got %d cases, %v; want the whole vector file", len(vs), err)
	}
	out := make([]coreChunkCase, 0, len(vs))
	for _, v := range vs {
		out = append(out, coreChunkCase{name: v.Name, doc: v.Stored(), chunks: v.Chunks}) // the catalog reads the stored content
	}
	return out
}

// recheck is the re-check of rank (containsHit); it fails the test when
// that disagrees with the plain definition, contains(normalizeForMatch).
func recheck(doc, chunk string) bool {
	want := newDocMatch(doc).contains(normalizeForMatch(chunk))
	if got := newDocMatch(doc).containsHit(chunk); got != want {
		panic(fmt.Sprintf("containsHit(%.80q) against %.80q: got %v; want %v as contains(normalizeForMatch)", chunk, doc, got, want))
	}
	return want
}

// TestContainsHitProperty: containsHit agrees with
// contains(normalizeForMatch(hit)) on random documents and hits: chunks,
// pieces of the document with whitespace moved, random nasty strings.
func TestContainsHitProperty(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 17))
	found := 0
	spaces := []string{" ", "\n", "\t", "\u3000", "\u00a0", "\ufeff", "", ""}
	for i := 0; i < 3000; i++ {
		doc := nastyString(r, r.IntN(300))
		if i%2 == 0 {
			doc = strings.ReplaceAll(strings.ReplaceAll(doc, "![图](u)", "x"), "\ufffd", "y")
		}
		var hits []string
		if len(doc) > 0 {
			a := r.IntN(len(doc))
			b := a + r.IntN(len(doc)-a+1)
			piece := doc[a:b]
			var moved strings.Builder
			for _, c := range piece {
				moved.WriteRune(c)
				moved.WriteString(spaces[r.IntN(len(spaces))])
			}
			hits = append(hits, piece, moved.String(), " "+piece+"\n")
		}
		hits = append(hits, nastyString(r, r.IntN(20)), "", " \t ")
		for _, h := range hits {
			want := newDocMatch(doc).contains(normalizeForMatch(h))
			if got := newDocMatch(doc).containsHit(h); got != want {
				t.Fatalf("doc %q hit %q: containsHit got %v; want %v", doc, h, got, want)
			}
			if want {
				found++
			}
		}
	}
	if found < 3000 {
		t.Errorf("got %d hits found; want most pieces found (the generator must exercise matches)", found)
	}
}

// TestRecheckAcceptsEveryCoreChunk: every chunk Core stored for a document
// passes the re-check against that document (BOMs trimmed from paragraph
// starts, U+FFFD halves of emoji cut at 700 UTF-16 units, untrimmed hard
// slices, CRLF, images, headings glued).
func TestRecheckAcceptsEveryCoreChunk(t *testing.T) {
	n := 0
	for _, c := range loadCoreChunkCases(t) {
		for i, ch := range c.chunks {
			n++
			if !recheck(c.doc, ch) {
				t.Errorf("%s chunk %d %.80q: got rejected; want accepted", c.name, i, ch)
			}
		}
	}
	if n < 60 {
		t.Errorf("got %d chunks checked; want every chunk of the file", n)
	}
}

// nonSpaceRunes counts the characters of a normalized fragment.
func nonSpaceRunes(s string) int { return utf8.RuneCountInString(stripSpace(s)) }

// insertEvery puts mark after every n-th non-whitespace character of s: an
// edit that touches every stretch of text longer than n characters.
func insertEvery(s string, n int, mark string) string {
	var b strings.Builder
	k := 0
	for _, r := range s {
		b.WriteRune(r)
		if !jsstring.IsSpace(r) {
			if k++; k%n == 0 {
				b.WriteString(mark)
			}
		}
	}
	return b.String()
}

// withoutAstral replaces every character above U+FFFF with "X": the emoji
// are gone, the rest of the text is the same.
func withoutAstral(s string) string {
	return strings.Map(func(r rune) rune {
		if r > 0xFFFF {
			return 'X'
		}
		return r
	}, s)
}

// TestRecheckRejectsWhatTheDocumentNoLongerHolds: chunks of Core's vectors
// against edited documents, and chunks of the edited documents against the
// originals.
func TestRecheckRejectsWhatTheDocumentNoLongerHolds(t *testing.T) {
	cases := loadCoreChunkCases(t)
	halves := 0
	for _, c := range cases {
		edited := insertEvery(c.doc, 40, "✎")
		for i, ch := range c.chunks {
			if nonSpaceRunes(normalizeForMatch(ch)) >= 80 && recheck(edited, ch) {
				t.Errorf("%s chunk %d against the edited document: got accepted; want rejected", c.name, i)
			}
			if _, lead, trail := cutHalves(ch); lead || trail {
				halves++
				// The text around the cut is unchanged, the emoji is gone:
				// U+FFFD must not match an ordinary character.
				if recheck(withoutAstral(c.doc), ch) {
					t.Errorf("%s chunk %d (cut emoji) against the document without emoji: got accepted; want rejected", c.name, i)
				}
			}
		}
		for i, ch := range fakecore.Chunks(edited) {
			if !recheck(edited, ch) {
				t.Errorf("%s edited chunk %d against the edited document: got rejected; want accepted", c.name, i)
			}
			if strings.Contains(ch, "✎") && recheck(c.doc, ch) {
				t.Errorf("%s edited chunk %d against the original: got accepted; want rejected", c.name, i)
			}
		}
	}
	if halves < 8 {
		t.Errorf("got %d chunks with U+FFFD halves; want the vectors' split emoji", halves)
	}
	// Chunks of one document against another: rejected unless the text is
	// really there (two vectors share the same English prose).
	for _, a := range cases {
		for _, b := range cases {
			if a.name == b.name {
				continue
			}
			for i, ch := range a.chunks {
				core, _, _ := cutHalves(normalizeForMatch(ch))
				if recheck(b.doc, ch) && !strings.Contains(normalizeForMatch(b.doc), core) {
					t.Errorf("%s chunk %d against %s: got accepted; want rejected", a.name, i, b.name)
				}
			}
		}
	}
}

// randomDoc mixes what breaks naive re-checks: emoji (a cut can split them),
// ZWJ sequences, flags, BOMs at paragraph edges and inside, CJK with and
// without sentence punctuation, and long English paragraphs without any
// split point (hard-cut every 700 UTF-16 units).
func randomDoc(r *rand.Rand) string {
	pieces := []string{
		"😀", "🎉", "👩\u200d👩\u200d👧\u200d👦", "🇨🇳", "👍🏽", "❤️", "1️⃣", "𝐀",
		"\ufeff", "退款窗口为三十天", "，", "。", "！", "；", "\u3000", "\u00a0",
		"The refund window is thirty days, counted from delivery", ". ", ", ", " ",
		"\n", "\n\n", "## Heading ", "![图](a.png)", "![](b.png)", "\r\n", "\t",
	}
	var b strings.Builder
	paras := 1 + r.IntN(6)
	for p := 0; p < paras; p++ {
		if r.IntN(3) == 0 {
			b.WriteString("\ufeff")
		}
		n := r.IntN(400)
		for i := 0; i < n; i++ {
			piece := pieces[r.IntN(len(pieces))]
			if strings.Contains(piece, "\n") && r.IntN(4) != 0 {
				piece = " "
			}
			b.WriteString(piece)
		}
		if r.IntN(2) == 0 { // a long English run without split points
			for i := r.IntN(120); i > 0; i-- {
				b.WriteString("lorem ipsum dolor sit amet 😀 ")
			}
		}
		b.WriteString("\ufeff\n\n")
	}
	return b.String()
}

// TestRecheckProperty: for random documents, every chunk the (Core-exact)
// fake chunker produces passes the re-check, summaries never show a U+FFFD
// half, and after an edit inside a chunk's text the chunk no longer passes.
func TestRecheckProperty(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 29))
	split := 0
	for i := 0; i < 300; i++ {
		doc := randomDoc(r)
		chunks := fakecore.Chunks(doc)
		edited := insertEvery(doc, 40, "✎")
		for j, ch := range chunks {
			if !recheck(doc, ch) {
				t.Fatalf("doc %d chunk %d %.80q: got rejected; want accepted", i, j, ch)
			}
			if _, lead, trail := cutHalves(ch); lead || trail {
				split++
			}
			if s := summarize([]string{ch}); strings.ContainsRune(s, utf8.RuneError) {
				t.Fatalf("doc %d chunk %d: summary %q shows a U+FFFD half", i, j, s)
			}
			if nonSpaceRunes(normalizeForMatch(ch)) >= 80 && recheck(edited, ch) {
				t.Fatalf("doc %d chunk %d against the edited document: got accepted; want rejected", i, j)
			}
		}
	}
	if split == 0 {
		t.Errorf("got no chunk with a cut emoji in 300 random documents; want some (the generator must exercise them)")
	}
}

// TestSummaryCutsHalves: the U+FFFD halves at a chunk's edges are cut off.
func TestSummaryCutsHalves(t *testing.T) {
	tests := []struct {
		in   []string
		want string
	}{
		{[]string{"\ufffd after the cut"}, "after the cut"},
		{[]string{"before the cut \ufffd"}, "before the cut"},
		{[]string{"\ufffd both \ufffd", "\ufffd"}, "both"},
		{[]string{"a\ufffdb"}, "a\ufffdb"}, // inside: the document's own character
	}
	for _, tt := range tests {
		if got := summarize(tt.in); got != tt.want {
			t.Errorf("summarize(%q): got %q; want %q", tt.in, got, tt.want)
		}
	}
}
