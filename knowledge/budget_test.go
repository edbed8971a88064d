package knowledge

import (
	"encoding/json"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/bailinghub/knowledge-sidecar/hostclient"
	"github.com/bailinghub/knowledge-sidecar/protocol"
)

// Adversarial text: everything JSON must escape, multi-byte characters of
// every width, HTML-sensitive characters and line separators.
var nastyPieces = []string{
	`"`, `\`, "\x00", "\x01", "\b", "\f", "\n", "\r", "\t", "\x1f", "\x7f",
	"\u2028", "\u2029", "<", ">", "&", "😀", "𝄞", "退", "款", "é", "a", "Z", " ", "  ",
	"\\u0000", "</script>", "![图](u)", "\ufeff", "\ufffd",
}

func nastyString(r *rand.Rand, n int) string {
	var b strings.Builder
	for b.Len() < n {
		b.WriteString(nastyPieces[r.IntN(len(nastyPieces))])
	}
	return b.String()
}

func decodeJSONString(t testing.TB, b []byte) string {
	t.Helper()
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatalf("not a JSON string: %v: %q", err, b)
	}
	return s
}

func TestAppendJSONString(t *testing.T) {
	tests := []struct{ in, want string }{
		{"", `""`},
		{"plain", `"plain"`},
		{`"\`, `"\"\\"`},
		{"\n\r\t\b\f", `"\n\r\t\b\f"`},
		{"\x00\x01\x1f", `"\u0000\u0001\u001f"`},
		{"\u2028\u2029", `"\u2028\u2029"`},
		{"<>&", `"<>&"`},
		{"退😀", `"退😀"`},
		{"a\xffb", `"a\ufffdb"`},
		{"\x7f", "\"\x7f\""},
	}
	for _, tc := range tests {
		t.Run(tc.want, func(t *testing.T) {
			got := string(AppendJSONString(nil, tc.in))
			if got != tc.want {
				t.Fatalf("got %s; want %s", got, tc.want)
			}
			if n := JSONStringLen(tc.in); n != len(got) {
				t.Fatalf("JSONStringLen got %d; want %d", n, len(got))
			}
		})
	}
	r := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 2000; i++ {
		s := nastyString(r, r.IntN(200))
		out := AppendJSONString(nil, s)
		if len(out) != JSONStringLen(s) {
			t.Fatalf("JSONStringLen(%q) = %d; want %d", s, JSONStringLen(s), len(out))
		}
		if got := decodeJSONString(t, out); got != s {
			t.Fatalf("round trip of %q: got %q", s, got)
		}
	}
}

func TestFitPrefix(t *testing.T) {
	tests := []struct {
		s           string
		budget      int
		wantN, wEsc int
	}{
		{"abc", 2, 2, 2},
		{"abc", 10, 3, 3},
		{"退款", 4, 3, 3},      // never splits a 3-byte character
		{"😀x", 3, 0, 0},      // 4-byte emoji does not fit in 3
		{`a"b`, 2, 1, 1},     // the quote needs 2
		{"\x01z", 5, 0, 0},   // \u0001 needs 6
		{"\u2028z", 6, 3, 6}, // 3 source bytes, 6 escaped
		{"a\xffb", 7, 2, 7},  // invalid byte escapes to \ufffd
		{"anything", -1, 0, 0},
	}
	for _, tc := range tests {
		n, esc := FitPrefix(tc.s, tc.budget)
		if n != tc.wantN || esc != tc.wEsc {
			t.Errorf("FitPrefix(%q, %d) = %d, %d; want %d, %d", tc.s, tc.budget, n, esc, tc.wantN, tc.wEsc)
		}
	}
	r := rand.New(rand.NewPCG(3, 4))
	for i := 0; i < 3000; i++ {
		s := nastyString(r, r.IntN(300))
		budget := r.IntN(400)
		n, esc := FitPrefix(s, budget)
		if !utf8.ValidString(s[:n]) && utf8.ValidString(s) {
			t.Fatalf("FitPrefix(%q, %d) split a character at %d", s, budget, n)
		}
		if got := JSONStringLen(s[:n]) - 2; got != esc || esc > budget {
			t.Fatalf("FitPrefix(%q, %d): escaped %d (reported %d); want ≤ budget and equal", s, budget, got, esc)
		}
		if n < len(s) {
			_, size := utf8.DecodeRuneInString(s[n:])
			if JSONStringLen(s[:n+size])-2 <= budget {
				t.Fatalf("FitPrefix(%q, %d) = %d; one more character still fits", s, budget, n)
			}
		}
	}
}

func TestBoundaryAtOrBefore(t *testing.T) {
	s := "a退😀\xffb"
	want := map[int]int{0: 0, 1: 1, 2: 1, 3: 1, 4: 4, 5: 4, 6: 4, 7: 4, 8: 8, 9: 9, 10: 10, 99: 10}
	for i, w := range want {
		if got := boundaryAtOrBefore(s, i); got != w {
			t.Errorf("boundaryAtOrBefore(%q, %d) = %d; want %d", s, i, got, w)
		}
	}
}

func TestAppendJSONFloat(t *testing.T) {
	for f, want := range map[float64]string{0.757: "0.757", 1: "1", 0: "0", 0.1: "0.1", 1e-7: "1e-7", -0.5: "-0.5", 1e21: "1e+21"} {
		if got := string(appendJSONFloat(nil, f)); got != want {
			t.Errorf("appendJSONFloat(%v) = %s; want %s", f, got, want)
		}
		var back float64
		if err := json.Unmarshal(appendJSONFloat(nil, f), &back); err != nil || back != f {
			t.Errorf("appendJSONFloat(%v) does not round-trip: %v %v", f, back, err)
		}
	}
}

// randomSearchBody builds a body with realistic refs and adversarial text.
func randomSearchBody(r *rand.Rand, k *Keyring) SearchBody {
	b := SearchBody{Route: routeKey, ScopeRevision: strings.Repeat("a", 64), Status: protocol.StatusOK}
	if r.IntN(2) == 0 {
		b.RunID = runA
	}
	n := r.IntN(protocol.SearchMaxResults + 1)
	for i := 0; i < n; i++ {
		c := sampleClaims()
		c.DocID = int64(r.IntN(1<<40) + 1)
		c.KBID = strings.Repeat("k", 1+r.IntN(maxKBIDLen)) // refs of every length, the longest included
		ref, _ := k.SealRef(c)
		titleLen := r.IntN(191)
		if r.IntN(10) == 0 {
			titleLen = 2000 // pathological: a title that cannot fit at all
		}
		b.Hints = append(b.Hints, Hint{
			Ref: ref, Title: nastyString(r, titleLen), Summary: nastyString(r, r.IntN(SummaryMaxBytes+1)),
			Revision: strings.Repeat("b", 64), Score: float64(r.IntN(1000)) / 1000, ExpiresAt: t0.Add(protocol.ReferenceTTL),
		})
	}
	return b
}

func checkFit(t testing.TB, orig SearchBody) {
	t.Helper()
	fitted := orig
	fitted.Hints = append([]Hint(nil), orig.Hints...)
	fitted.Fit(protocol.SearchMaxBytes)
	body := fitted.AppendJSON(nil)
	if len(body) > protocol.SearchMaxBytes {
		t.Fatalf("body %d bytes; want ≤ %d", len(body), protocol.SearchMaxBytes)
	}
	var decoded struct {
		Hints []struct {
			Ref, Title, Summary string
		}
		Truncated bool
	}
	if err := json.Unmarshal(body, &decoded); err != nil {
		t.Fatalf("body is not JSON: %v", err)
	}
	changed := len(fitted.Hints) != len(orig.Hints)
	j := 0
	for _, h := range fitted.Hints {
		for j < len(orig.Hints) && orig.Hints[j].Ref != h.Ref {
			j++
		}
		if j == len(orig.Hints) {
			t.Fatalf("hints reordered or invented")
		}
		o := orig.Hints[j]
		if !strings.HasPrefix(o.Summary, h.Summary) || o.Title != h.Title {
			t.Fatalf("summary %q is not a prefix of %q, or title changed", h.Summary, o.Summary)
		}
		if h.Summary != o.Summary {
			changed = true
		}
		j++
	}
	if fitted.Truncated != changed {
		t.Fatalf("truncated %v; want %v (anything shortened or dropped)", fitted.Truncated, changed)
	}
	if decoded.Truncated != fitted.Truncated {
		t.Fatalf("decoded truncated %v; want %v", decoded.Truncated, fitted.Truncated)
	}
}

func TestSearchFitProperty(t *testing.T) {
	keys := []*Keyring{testKeys(t), mustKeyring(t, strings.Repeat("Z", maxKeyIDLen)+":"+secret('w'), "")}
	r := rand.New(rand.NewPCG(5, 6))
	for i := 0; i < 1500; i++ {
		checkFit(t, randomSearchBody(r, keys[i%2]))
	}
}

func TestSearchFitPolicy(t *testing.T) {
	k := testKeys(t)
	ref, _ := k.SealRef(sampleClaims())
	hint := func(title, summary string) Hint {
		return Hint{Ref: ref, Title: title, Summary: summary, Revision: strings.Repeat("b", 64), Score: 0.5, ExpiresAt: t0}
	}
	t.Run("small body untouched", func(t *testing.T) {
		b := SearchBody{Route: routeKey, Status: protocol.StatusOK, Hints: []Hint{hint("t", "short")}}
		b.Fit(protocol.SearchMaxBytes)
		if b.Truncated || b.Hints[0].Summary != "short" {
			t.Fatalf("got truncated=%v summary=%q; want untouched", b.Truncated, b.Hints[0].Summary)
		}
	})
	t.Run("summaries shortened before any hint is dropped", func(t *testing.T) {
		long := strings.Repeat("\x01", 600) // 3600 escaped bytes each
		b := SearchBody{Route: routeKey, Status: protocol.StatusOK, Hints: []Hint{hint("a", long), hint("b", long), hint("c", long)}}
		b.Fit(protocol.SearchMaxBytes)
		if len(b.Hints) != 3 || !b.Truncated {
			t.Fatalf("got %d hints truncated=%v; want 3 shortened hints", len(b.Hints), b.Truncated)
		}
		if n := len(b.AppendJSON(nil)); n > protocol.SearchMaxBytes || n < protocol.SearchMaxBytes-3*6-1 {
			t.Fatalf("body %d bytes; want close to but not over %d", n, protocol.SearchMaxBytes)
		}
	})
	t.Run("lowest-ranked hint dropped when titles leave no room", func(t *testing.T) {
		title := strings.Repeat("\x01", 191) // 1146 escaped bytes
		b := SearchBody{Route: routeKey, Status: protocol.StatusOK, Hints: []Hint{hint(title+"1", "x"), hint(title+"2", "y"), hint(title+"3", "z")}}
		b.Fit(protocol.SearchMaxBytes)
		if len(b.Hints) != 2 || !strings.HasSuffix(b.Hints[1].Title, "2") || !b.Truncated {
			t.Fatalf("got %d hints (last %q); want the two best", len(b.Hints), b.Hints[len(b.Hints)-1].Title[191:])
		}
	})
	t.Run("longest refs and titles keep every hint", func(t *testing.T) {
		// Version 2 refs are the longest tokens: three of them with the
		// longest titles Core stores (VARCHAR(191)) still leave room for
		// summaries; only the summaries are shortened.
		long := mustKeyring(t, strings.Repeat("Z", maxKeyIDLen)+":"+secret('w'), "")
		c := sampleClaims()
		c.KBID = strings.Repeat("k", maxKBIDLen)
		b := SearchBody{Route: strings.Repeat("r", 64), RunID: runA, ScopeRevision: strings.Repeat("a", 64), Status: protocol.StatusPartial}
		for i := 0; i < protocol.SearchMaxResults; i++ {
			ref, _ := long.SealRef(c)
			if len(ref) != maxRefLen {
				t.Fatalf("ref %d bytes; want the longest, %d", len(ref), maxRefLen)
			}
			b.Hints = append(b.Hints, Hint{Ref: ref, Title: strings.Repeat("t", 191), Summary: strings.Repeat("s", SummaryMaxBytes),
				Revision: strings.Repeat("b", 64), Score: 0.123456789, ExpiresAt: t0})
		}
		b.Fit(protocol.SearchMaxBytes)
		if len(b.Hints) != protocol.SearchMaxResults || !b.Truncated {
			t.Fatalf("got %d hints truncated=%v; want %d shortened hints", len(b.Hints), b.Truncated, protocol.SearchMaxResults)
		}
		for i, h := range b.Hints {
			if len(h.Summary) < SummaryMaxBytes/2 {
				t.Errorf("hint %d summary %d bytes; want ≥ %d", i, len(h.Summary), SummaryMaxBytes/2)
			}
		}
		if n := len(b.AppendJSON(nil)); n > protocol.SearchMaxBytes {
			t.Fatalf("body %d bytes; want ≤ %d", n, protocol.SearchMaxBytes)
		}
	})
	t.Run("a title that alone cannot fit drops only that hint", func(t *testing.T) {
		b := SearchBody{Route: routeKey, Status: protocol.StatusOK, Hints: []Hint{hint("ok1", "s"), hint(strings.Repeat("\x01", 700), "s"), hint("ok3", "s")}}
		b.Fit(protocol.SearchMaxBytes)
		if len(b.Hints) != 2 || b.Hints[0].Title != "ok1" || b.Hints[1].Title != "ok3" || !b.Truncated {
			t.Fatalf("got %d hints; want ok1 and ok3", len(b.Hints))
		}
	})
}

// readPages walks a document page by page through Plan/AppendJSON, checking
// every page, and returns the concatenated content.
func readPages(t testing.TB, content, title string, maxBytes int, k *Keyring) string {
	t.Helper()
	ref, _ := k.SealRef(sampleClaims())
	p := ReadPage{Route: routeKey, RunID: runA, ScopeRevision: strings.Repeat("a", 64), Ref: ref, Revision: strings.Repeat("b", 64), Title: title, Content: content}
	var got strings.Builder
	for pages := 0; ; pages++ {
		if pages > len(content)+2 {
			t.Fatalf("no progress")
		}
		plan, ok := p.Plan(maxBytes, k.cursorLen())
		if !ok {
			t.Fatalf("Plan refused a %d-byte title at max_bytes %d", len(title), maxBytes)
		}
		cursor := ""
		if plan.More {
			cursor, _ = k.SealCursor(CursorClaims{Expiry: t0, RefDigest: RefDigest(ref), NextOffset: int64(plan.End), Served: int64(p.Served + plan.End - p.Offset)})
		}
		body := p.AppendJSON(nil, plan, cursor)
		if len(body) > maxBytes {
			t.Fatalf("page at %d: body %d bytes; want ≤ %d", p.Offset, len(body), maxBytes)
		}
		var d hostclient.ReadAnswer
		if err := json.Unmarshal(body, &d); err != nil {
			t.Fatalf("page at %d is not JSON: %v", p.Offset, err)
		}
		want := content[p.Offset:plan.End]
		if utf8.ValidString(content) && d.Content != want {
			t.Fatalf("page at %d: decoded content differs from the document slice", p.Offset)
		}
		if d.TotalContentBytes != int64(len(content)) {
			t.Fatalf("total_content_bytes %d; want %d", d.TotalContentBytes, len(content))
		}
		got.WriteString(want)
		served := p.Served + plan.End - p.Offset
		if served > protocol.ReadChainMaxBytes {
			t.Fatalf("served %d; want ≤ %d", served, protocol.ReadChainMaxBytes)
		}
		switch {
		case plan.More:
			if d.NextCursor == nil || *d.NextCursor != cursor || !d.Truncated || d.BudgetExhausted {
				t.Fatalf("non-final page: got cursor=%v truncated=%v exhausted=%v; want cursor, true, false", d.NextCursor, d.Truncated, d.BudgetExhausted)
			}
			// Longest continuation: one more character would not fit.
			_, size := utf8.DecodeRuneInString(content[plan.End:])
			bigger := plan
			bigger.End += size
			if bigger.End-p.Offset+p.Served <= protocol.ReadChainMaxBytes && len(p.AppendJSON(nil, bigger, cursor)) <= maxBytes {
				t.Fatalf("page at %d ends at %d but one more character fits", p.Offset, plan.End)
			}
			p.Offset, p.Served = plan.End, served
		case plan.BudgetExhausted:
			if d.NextCursor != nil || !d.Truncated || !d.BudgetExhausted || plan.End >= len(content) {
				t.Fatalf("exhausted page: got cursor=%v truncated=%v exhausted=%v", d.NextCursor, d.Truncated, d.BudgetExhausted)
			}
			_, size := utf8.DecodeRuneInString(content[plan.End:])
			if served+size <= protocol.ReadChainMaxBytes {
				t.Fatalf("budget_exhausted with %d bytes served; the next character still fits the chain", served)
			}
			return got.String()
		default:
			if d.NextCursor != nil || d.Truncated || d.BudgetExhausted || plan.End != len(content) {
				t.Fatalf("final page: got cursor=%v truncated=%v exhausted=%v end=%d; want null,false,false,%d", d.NextCursor, d.Truncated, d.BudgetExhausted, plan.End, len(content))
			}
			return got.String()
		}
	}
}

func TestReadPagesProperty(t *testing.T) {
	k := testKeys(t)
	r := rand.New(rand.NewPCG(7, 8))
	sizes := []int{0, 1, 100, 4000, 20000, 70000, 140000}
	for i := 0; i < 60; i++ {
		content := nastyString(r, sizes[r.IntN(len(sizes))])
		title := nastyString(r, r.IntN(191))
		maxBytes := protocol.ReadMinBytes + r.IntN(protocol.ReadMaxBytes-protocol.ReadMinBytes+1)
		got := readPages(t, content, title, maxBytes, k)
		if !strings.HasPrefix(content, got) {
			t.Fatalf("pages do not concatenate to a prefix of the document")
		}
		if len(content) <= protocol.ReadChainMaxBytes && got != content {
			t.Fatalf("document of %d bytes read as %d bytes; want all of it", len(content), len(got))
		}
		if len(content) > protocol.ReadChainMaxBytes && len(got) < protocol.ReadChainMaxBytes-utf8.UTFMax {
			t.Fatalf("long document: chain served %d bytes; want about %d", len(got), protocol.ReadChainMaxBytes)
		}
	}
}

func TestReadPages300kDocument(t *testing.T) {
	k := testKeys(t)
	r := rand.New(rand.NewPCG(9, 10))
	doc := []rune(nastyString(r, 1_200_000))[:300_000] // 300 000 characters
	content := string(doc)
	for _, maxBytes := range []int{protocol.ReadMinBytes, protocol.ReadDefaultBytes, protocol.ReadMaxBytes} {
		got := readPages(t, content, "标题 \"quoted\" \u2028", maxBytes, k)
		if !strings.HasPrefix(content, got) || len(got) > protocol.ReadChainMaxBytes || len(got) < protocol.ReadChainMaxBytes-utf8.UTFMax {
			t.Fatalf("max_bytes %d: served %d bytes; want the first ≈%d bytes", maxBytes, len(got), protocol.ReadChainMaxBytes)
		}
	}
}

func TestPlanRefusesImpossibleTitle(t *testing.T) {
	p := ReadPage{Route: routeKey, Title: strings.Repeat("\x01", 1000), Content: "abc"}
	if _, ok := p.Plan(protocol.ReadMinBytes, 150); ok {
		t.Fatalf("got ok; want refusal when not even one character fits")
	}
}

func FuzzReadPage(f *testing.F) {
	f.Add("hello world", "title", uint16(0))
	f.Add(strings.Repeat("\"\\\x01\u2028😀退", 3000), "\u2029<>&", uint16(100))
	f.Add(strings.Repeat("a", 140000), "", uint16(28000))
	f.Add("\xff\xfe\xfd", "x\x00", uint16(7))
	k := testKeys(f)
	f.Fuzz(func(t *testing.T, content, title string, extra uint16) {
		if len(title) > 800 {
			title = title[:800]
		}
		maxBytes := protocol.ReadMinBytes + int(extra)%(protocol.ReadMaxBytes-protocol.ReadMinBytes+1)
		got := readPages(t, content, title, maxBytes, k)
		if !strings.HasPrefix(content, got) {
			t.Fatalf("pages are not a prefix of the document")
		}
	})
}

func FuzzSearchFit(f *testing.F) {
	f.Add("title", "summary", "t2", "s2", uint8(2))
	f.Add(strings.Repeat("\x01", 191), strings.Repeat("\u2028", 200), "😀", strings.Repeat(`"`, 600), uint8(3))
	k := testKeys(f)
	ref, _ := k.SealRef(sampleClaims())
	f.Fuzz(func(t *testing.T, t1, s1, t2, s2 string, n uint8) {
		b := SearchBody{Route: routeKey, RunID: runA, ScopeRevision: strings.Repeat("a", 64), Status: protocol.StatusPartial}
		pairs := [][2]string{{t1, s1}, {t2, s2}, {t1 + t2, s2 + s1}}
		for i := 0; i < int(n)%4; i++ {
			b.Hints = append(b.Hints, Hint{Ref: ref, Title: pairs[i][0], Summary: pairs[i][1], Revision: strings.Repeat("c", 64), Score: 0.9, ExpiresAt: t0.Add(time.Minute)})
		}
		checkFit(t, b)
	})
}

// TestRuneEscLenMatchesUTF8 checks the hand-inlined validator against
// unicode/utf8 on every two-byte prefix and on random longer sequences.
func TestRuneEscLenMatchesUTF8(t *testing.T) {
	ref := func(s string) (int, int) {
		r, size := utf8.DecodeRuneInString(s)
		switch {
		case r == utf8.RuneError && size == 1:
			return 6, 1
		case r == '\u2028' || r == '\u2029':
			return 6, 3
		default:
			return size, size
		}
	}
	check := func(s string) {
		ge, gs := runeEscLen(s)
		we, ws := ref(s)
		if ge != we || gs != ws {
			t.Fatalf("runeEscLen(% x) = %d,%d; want %d,%d", s, ge, gs, we, ws)
		}
	}
	for a := 0x80; a <= 0xFF; a++ {
		check(string([]byte{byte(a)}))
		for b := 0; b <= 0xFF; b++ {
			check(string([]byte{byte(a), byte(b)}))
			check(string([]byte{byte(a), byte(b), 0x80, 0x80}))
			check(string([]byte{byte(a), byte(b), 0xA8, 0xBF}))
			check(string([]byte{byte(a), byte(b), 0xA9}))
		}
	}
	r := rand.New(rand.NewPCG(13, 14))
	for i := 0; i < 200000; i++ {
		b := []byte{byte(0x80 + r.IntN(0x80)), byte(r.IntN(256)), byte(r.IntN(256)), byte(r.IntN(256))}
		check(string(b[:1+r.IntN(4)]))
	}
}

// TestPlanAllocatesNothing: Plan measures the body's fixed part on the
// stack, for the longest reference and a long title.
func TestPlanAllocatesNothing(t *testing.T) {
	k := testKeys(t)
	p := ReadPage{Route: routeKey, RunID: runA, ScopeRevision: strings.Repeat("a", 64), Ref: strings.Repeat("r", maxRefLen),
		Revision: strings.Repeat("b", 64), Title: strings.Repeat("标题", 20), Content: strings.Repeat("plain text\n", 4000)}
	if n := testing.AllocsPerRun(10, func() { p.Plan(protocol.ReadMaxBytes, k.cursorLen()) }); n != 0 {
		t.Fatalf("Plan: %v allocations; want 0", n)
	}
}
