package knowledge

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/bailinghub/knowledge-sidecar/protocol"
)

// Oracles for the text passes and the one-scan Plan: the fast code must
// give exactly their results (TestTextPassesMatchRef, TestPlanMatchesRef).
// The text passes are written again from the escaping rules, a character at
// a time over the standard library's UTF-8 decoder, sharing nothing with the
// fast code's tables; Plan is the two-scan version the one scan replaced.

// escapeRef is the escaped form of the character at the start of s (an
// invalid byte is a character of its own, written \ufffd) and its size in s.
func escapeRef(s string) (escaped string, size int) {
	r, size := utf8.DecodeRuneInString(s)
	switch {
	case r == utf8.RuneError && size == 1:
		return `\ufffd`, 1
	case r == '"' || r == '\\':
		return `\` + string(r), 1
	case r == '\n':
		return `\n`, 1
	case r == '\r':
		return `\r`, 1
	case r == '\t':
		return `\t`, 1
	case r == '\b':
		return `\b`, 1
	case r == '\f':
		return `\f`, 1
	case r < 0x20, r == '\u2028', r == '\u2029':
		return fmt.Sprintf(`\u%04x`, r), size
	}
	return s[:size], size
}

// appendJSONStringRef is AppendJSONString a character at a time.
func appendJSONStringRef(dst []byte, s string) []byte {
	dst = append(dst, '"')
	for i := 0; i < len(s); {
		e, size := escapeRef(s[i:])
		dst = append(dst, e...)
		i += size
	}
	return append(dst, '"')
}

// jsonStringLenRef is JSONStringLen a character at a time.
func jsonStringLenRef(s string) int {
	return len(appendJSONStringRef(nil, s))
}

// fitPrefixRef is FitPrefix a character at a time.
func fitPrefixRef(s string, budget int) (n, escaped int) {
	for n < len(s) {
		e, size := escapeRef(s[n:])
		if escaped+len(e) > budget {
			break
		}
		escaped += len(e)
		n += size
	}
	return n, escaped
}

// planRef is Plan with up to two scans of the rest: one for the final
// page, then one for a page that continues.
func (p *ReadPage) planRef(maxBytes, cursorLen int) (plan PagePlan, ok bool) {
	rest := p.Content[p.Offset:]
	chainRoom := protocol.ReadChainMaxBytes - p.Served
	fixed := p.fixedLen()
	if len(rest) <= chainRoom {
		// The final page: the whole rest, with next_cursor null.
		room := maxBytes - fixed - len("null") - len("false") - len("false")
		if room >= 0 {
			if n, _ := fitPrefixRef(rest, room); n == len(rest) {
				return PagePlan{End: len(p.Content)}, true
			}
		}
	}
	limit := boundaryAtOrBefore(p.Content, p.Offset+min(len(rest), max(chainRoom, 0))) - p.Offset
	room := maxBytes - fixed - (cursorLen + 2) - len("true") - len("false")
	n := 0
	if room >= 0 {
		n, _ = fitPrefixRef(rest[:limit], room)
	}
	// The chain budget, not the body, ends this page when the content fits
	// up to the chain's limit; its body has next_cursor null.
	exhausted := n == limit && limit < len(rest)
	switch {
	case exhausted && maxBytes-fixed-len("null")-len("true")-len("true") >= 0:
		return PagePlan{End: p.Offset + n, BudgetExhausted: true}, true
	case !exhausted && n > 0:
		return PagePlan{End: p.Offset + n, More: true}, true
	}
	return PagePlan{}, false
}

// TestPlainBytes8 checks the eight-byte test against the byte table: every
// byte value at every position of words whose other bytes are random (all
// plain, or anything), and words of random bytes. Only the answer up to the
// first byte that is not plain is promised.
func TestPlainBytes8(t *testing.T) {
	r := rand.New(rand.NewPCG(8, 8))
	plain := func(c byte) bool { return c < utf8.RuneSelf && asciiEscLen[c] == 1 }
	check := func(w [8]byte) {
		t.Helper()
		got := plainBytes8(binary.LittleEndian.Uint64(w[:]))
		for i, c := range w {
			if bit := got>>(8*i+7)&1 == 1; bit != plain(c) {
				t.Fatalf("plainBytes8(%q): byte %d is %v; want %v", w[:], i, bit, plain(c))
			}
			if !plain(c) {
				break
			}
		}
		if got&^swarHi != 0 {
			t.Fatalf("plainBytes8(%q) = %#x: bits other than the high ones", w[:], got)
		}
	}
	for c := range 256 {
		for pos := range 8 {
			for range 32 {
				var w [8]byte
				for i := range w {
					w[i] = byte(0x20 + r.IntN(0x60)) // plain but for '"' and '\\'
				}
				w[pos] = byte(c)
				check(w)
				for i := range w {
					if i != pos {
						w[i] = byte(r.IntN(256))
					}
				}
				check(w)
			}
		}
	}
	for range 1 << 16 {
		var w [8]byte
		binary.LittleEndian.PutUint64(w[:], r.Uint64())
		check(w)
	}
}

// checkTextPasses compares the three text passes with their oracles on s,
// with budgets around every size a prefix of s escapes to.
func checkTextPasses(t *testing.T, s string) {
	t.Helper()
	want := appendJSONStringRef([]byte("x"), s)
	if got := AppendJSONString([]byte("x"), s); !bytes.Equal(got, want) {
		t.Fatalf("AppendJSONString(%q) = %q; want %q", s, got[1:], want[1:])
	}
	if got, want := JSONStringLen(s), jsonStringLenRef(s); got != want {
		t.Fatalf("JSONStringLen(%q) = %d; want %d", s, got, want)
	}
	for _, budget := range []int{-1, 0, 1, 5, 6, 7, 8, 9, len(want) - 4, len(want) - 3, len(want) - 2, math.MaxInt} {
		checkFitPrefix(t, s, budget)
	}
}

func checkFitPrefix(t *testing.T, s string, budget int) {
	t.Helper()
	gn, ge := FitPrefix(s, budget)
	wn, we := fitPrefixRef(s, budget)
	if gn != wn || ge != we {
		t.Fatalf("FitPrefix(%q, %d) = %d, %d; want %d, %d", s, budget, gn, ge, wn, we)
	}
}

// TestTextPassesMatchRef: plain runs of every length up to three words,
// ended (and started) by every byte value, so that the byte that needs a
// decision falls at every position of a word and in the tail; every budget
// on a run with escapes; and random adversarial text.
func TestTextPassesMatchRef(t *testing.T) {
	const run = "abcdefghijklmnopqrstuvwx" // 24 plain bytes
	for n := 0; n <= len(run); n++ {
		for c := range 256 {
			checkTextPasses(t, run[:n]+string(rune(c))+run[n:])
			checkTextPasses(t, run[:n]+string([]byte{byte(c)})+run)
			checkTextPasses(t, run[:n]+string([]byte{byte(c)}))
		}
		checkTextPasses(t, run[:n]+"\u2028"+run)
		checkTextPasses(t, run[:n]+"\xe2\x80"+run)
	}
	mixed := "plain \"quoted\" back\\slash\n\n## 退款窗口 \u2028\xff" + run + "😀\x01"
	for budget := -2; budget <= JSONStringLen(mixed); budget++ {
		checkFitPrefix(t, mixed, budget)
	}
	r := rand.New(rand.NewPCG(21, 22))
	for range 3000 {
		s := nastyString(r, r.IntN(80))
		if r.IntN(2) == 0 {
			s = strings.Repeat(run[:r.IntN(len(run))], r.IntN(4)) + s + run[:r.IntN(len(run))]
		}
		checkTextPasses(t, s)
		checkFitPrefix(t, s, r.IntN(JSONStringLen(s)))
	}
}

// checkPlan compares Plan with the two-scan oracle.
func checkPlan(t *testing.T, p ReadPage, maxBytes, cursorLen int) {
	t.Helper()
	gp, gok := p.Plan(maxBytes, cursorLen)
	wp, wok := p.planRef(maxBytes, cursorLen)
	if gp != wp || gok != wok {
		t.Fatalf("Plan(%d, %d) at offset %d, served %d of %d bytes = %+v, %v; want %+v, %v",
			maxBytes, cursorLen, p.Offset, p.Served, len(p.Content), gp, gok, wp, wok)
	}
}

// TestPlanMatchesRef covers the final page, a page that continues, the
// chain budget ending the read and refusals: documents shorter and longer
// than one page, served counts near the chain budget, cursor lengths below
// and above the three bytes where the final page's room stops being the
// larger one, and bodies too small for anything.
func TestPlanMatchesRef(t *testing.T) {
	r := rand.New(rand.NewPCG(31, 32))
	base := ReadPage{Route: routeKey, RunID: runA, ScopeRevision: strings.Repeat("a", 64), Ref: "ref",
		Revision: strings.Repeat("b", 64), Title: "标题 \"t\""}
	fixed := base.fixedLen()
	for range 4000 {
		p := base
		p.Content = nastyString(r, r.IntN(400))
		if r.IntN(3) == 0 {
			p.Content = strings.Repeat("plain text\n", r.IntN(40)) + p.Content
		}
		p.Offset = boundaryAtOrBefore(p.Content, r.IntN(len(p.Content)+1))
		p.Served = protocol.ReadChainMaxBytes - r.IntN(2*len(p.Content)+8) + 4
		maxBytes := fixed + r.IntN(2*JSONStringLen(p.Content)+40) - 20
		checkPlan(t, p, maxBytes, r.IntN(8))
		checkPlan(t, p, maxBytes, r.IntN(300))
		p.Served = 0
		checkPlan(t, p, maxBytes, r.IntN(8))
	}
}
