package knowledge

import (
	"testing"
	"unicode/utf8"

	"github.com/bailinghub/knowledge-sidecar/internal/testkit"
)

// DESIGN 14 side-by-side benchmark of the eight-byte run skipping
// (plainEnd) against a byte loop; the request it sits in is a read
// (BenchmarkAnswerBuffer; docs/performance.md, "DESIGN 14 review").

// plainEndPlain is plainEnd one byte at a time.
func plainEndPlain(s string, i int) int {
	for i < len(s) && s[i] < utf8.RuneSelf && asciiEscLen[s[i]] == 1 {
		i++
	}
	return i
}

func TestPlainEndPlainAgrees(t *testing.T) {
	for _, tt := range jsonBenchTexts() {
		s := tt.text
		for i := 0; i < len(s); i++ {
			if s[i] < utf8.RuneSelf && asciiEscLen[s[i]] == 1 {
				// plainEnd may stop short of the run's end only within the
				// last seven bytes, which its callers finish byte by byte.
				if got, want := plainEnd(s, i), plainEndPlain(s, i); got != want && (got > want || len(s)-got >= 8) {
					t.Fatalf("%s at %d: plainEnd %d, plain %d", tt.name, i, got, want)
				}
			}
		}
	}
}

// BenchmarkPlainEnd: the eight-byte run skipping of the three text passes
// (FitPrefix, JSONStringLen, AppendJSONString) against a byte loop, as one
// walk over a 32 KiB page text taking each run of plain bytes in one call
// and every other byte alone. A read page makes three such walks.
func BenchmarkPlainEnd(b *testing.B) {
	for _, tt := range jsonBenchTexts() {
		for _, f := range []struct {
			name string
			fn   func(string, int) int
		}{{"fast", plainEnd}, {"plain", plainEndPlain}} {
			b.Run(tt.name+"/"+f.name, func(b *testing.B) {
				s := tt.text
				b.SetBytes(int64(len(s)))
				cpu0 := testkit.ProcessCPU(b)
				for b.Loop() {
					runs := 0
					for i := 0; i < len(s); {
						if c := s[i]; c < utf8.RuneSelf && asciiEscLen[c] == 1 {
							i = f.fn(s, i)
							runs++
							continue
						}
						i++
					}
					if runs == 0 {
						b.Fatal("no run")
					}
				}
				reportCPU(b, cpu0)
			})
		}
	}
}
