package knowledge

import (
	"math/rand/v2"
	"strings"
	"testing"
)

func BenchmarkSealRef(b *testing.B) {
	k := testKeys(b)
	c := sampleClaims()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := k.SealRef(c); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkOpenRef(b *testing.B) {
	k := testKeys(b)
	ref, _ := k.SealRef(sampleClaims())
	b.ReportAllocs()
	for b.Loop() {
		if _, err := k.OpenRef(ref); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkSearchAssembly(b *testing.B) {
	k := testKeys(b)
	r := rand.New(rand.NewPCG(1, 1))
	ref, _ := k.SealRef(sampleClaims())
	var hints []Hint
	for i := 0; i < 3; i++ {
		hints = append(hints, Hint{Ref: ref, Title: nastyString(r, 190), Summary: nastyString(r, SummaryMaxBytes),
			Revision: strings.Repeat("b", 64), Score: 0.8, ExpiresAt: t0})
	}
	b.ReportAllocs()
	for b.Loop() {
		body := SearchBody{Route: routeKey, RunID: runA, ScopeRevision: strings.Repeat("a", 64), Status: StatusOK,
			Hints: append([]Hint(nil), hints...)}
		body.Fit(SearchMaxBytes)
		if out := body.AppendJSON(make([]byte, 0, SearchMaxBytes)); len(out) > SearchMaxBytes {
			b.Fatal("over budget")
		}
	}
}

// BenchmarkReadPage32K plans and writes one 32 KiB page of an adversarial
// 300 000-character document (target: well under 100 µs).
func BenchmarkReadPage32K(b *testing.B) {
	k := testKeys(b)
	r := rand.New(rand.NewPCG(2, 2))
	content := string([]rune(nastyString(r, 1_200_000))[:300_000])
	ref, _ := k.SealRef(sampleClaims())
	cursor, _ := k.SealCursor(CursorClaims{Expiry: t0})
	p := ReadPage{Route: routeKey, RunID: runA, ScopeRevision: strings.Repeat("a", 64), Ref: ref,
		Revision: strings.Repeat("b", 64), Title: "标题", Content: content, Offset: 50_000, Served: 50_000}
	p.Offset = boundaryAtOrBefore(content, p.Offset)
	buf := make([]byte, 0, ReadMaxBytes)
	b.ReportAllocs()
	b.SetBytes(ReadMaxBytes)
	for b.Loop() {
		plan, ok := p.Plan(ReadMaxBytes, k.cursorLen())
		if !ok {
			b.Fatal("no plan")
		}
		if out := p.AppendJSON(buf[:0], plan, cursor); len(out) > ReadMaxBytes {
			b.Fatal("over budget")
		}
	}
}
