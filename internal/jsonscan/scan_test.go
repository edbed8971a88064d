package jsonscan

import (
	"encoding/binary"
	"math/rand/v2"
	"testing"
)

// TestPlain8 checks the eight-byte test against the byte table: every
// byte value at every position of words whose other bytes are random, and
// words of random bytes.
func TestPlain8(t *testing.T) {
	r := rand.New(rand.NewPCG(6, 6))
	ref := func(w [8]byte) bool {
		for _, c := range w {
			if !plainByte[c] {
				return false
			}
		}
		return true
	}
	check := func(w [8]byte) {
		t.Helper()
		if got, want := plain8(binary.LittleEndian.Uint64(w[:])), ref(w); got != want {
			t.Fatalf("plain8(%q) = %v; want %v", w[:], got, want)
		}
	}
	for c := range 256 {
		for pos := range 8 {
			for range 64 {
				var w [8]byte
				for i := range w {
					w[i] = byte(0x20 + r.IntN(256-0x20)) // mostly plain
				}
				w[pos] = byte(c)
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
