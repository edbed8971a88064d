package jsstring_test

import (
	"testing"
	"unicode"

	"github.com/bailinghub/knowledge-sidecar/corefacts/jsstring"
)

// IsSpace is ECMAScript's WhiteSpace + LineTerminator: unicode.IsSpace
// plus U+FEFF, minus U+0085 (checked over the whole BMP).
func TestIsSpace(t *testing.T) {
	for r := rune(0); r <= 0xFFFF; r++ {
		want := unicode.IsSpace(r) && r != 0x85 || r == 0xFEFF
		if got := jsstring.IsSpace(r); got != want {
			t.Errorf("U+%04X: got %v; want %v", r, got, want)
		}
	}
	tests := []struct{ in, want string }{
		{"\ufeff\u3000 query\u00a0\n", "query"},
		{"\u0085query\u200b", "\u0085query\u200b"},
		{"\ufeff", ""},
	}
	for _, tt := range tests {
		if got := jsstring.Trim(tt.in); got != tt.want {
			t.Errorf("Trim(%q): got %q; want %q", tt.in, got, tt.want)
		}
	}
}
