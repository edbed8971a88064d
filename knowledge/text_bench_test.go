package knowledge

import (
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/bailinghub/knowledge-sidecar/internal/testkit"
)

// DESIGN 14 side-by-side benchmarks of speed-only text code: the fast
// routine against its plain version, on the 32 KiB page texts of
// jsonBenchTexts, reporting process CPU per operation; the request it sits
// in is BenchmarkSearchNormalized (docs/performance.md, "DESIGN 14 review").

// stripSpacePlain is stripSpace as the standard library writes it:
// strings.Map drops each JavaScript whitespace rune, turns each invalid
// byte into U+FFFD and returns s itself when nothing changes.
func stripSpacePlain(s string) string {
	return strings.Map(func(r rune) rune {
		if r < utf8.RuneSelf && !asciiKept[r] || r >= utf8.RuneSelf && isSpaceRune(r) {
			return -1
		}
		return r
	}, s)
}

func TestStripSpacePlainAgrees(t *testing.T) {
	for _, tt := range jsonBenchTexts() {
		if got, want := stripSpacePlain(tt.text), stripSpace(tt.text); got != want {
			t.Errorf("%s: plain and fast stripSpace differ", tt.name)
		}
	}
	for _, s := range []string{"", "a", " a\u3000b\ufeff", "a\xffb \xc3", "\u0085x"} {
		if got, want := stripSpacePlain(s), stripSpace(s); got != want {
			t.Errorf("%q: plain %q, fast %q", s, got, want)
		}
	}
}

// BenchmarkStripSpace: stripSpace against strings.Map over a 32 KiB page
// text, the size of the documents a search re-check normalizes when its
// shortcut does not apply (a document with "图" or an image).
func BenchmarkStripSpace(b *testing.B) {
	for _, tt := range jsonBenchTexts() {
		for _, f := range []struct {
			name string
			fn   func(string) string
		}{{"fast", stripSpace}, {"plain", stripSpacePlain}} {
			b.Run(tt.name+"/"+f.name, func(b *testing.B) {
				b.SetBytes(int64(len(tt.text)))
				b.ReportAllocs()
				cpu0 := testkit.ProcessCPU(b)
				for b.Loop() {
					if f.fn(tt.text) == "" {
						b.Fatal("empty")
					}
				}
				reportCPU(b, cpu0)
			})
		}
	}
}

// reportCPU reports the process's CPU time (getrusage, GC included) per
// operation since cpu0: steadier than ns/op on a shared machine.
func reportCPU(b *testing.B, cpu0 time.Duration) {
	b.ReportMetric(float64(testkit.ProcessCPU(b)-cpu0)/float64(b.N), "cpu-ns/op")
}
