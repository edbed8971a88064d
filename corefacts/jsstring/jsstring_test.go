package jsstring_test

import (
	"testing"
	"unicode"
	"unicode/utf8"

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

func TestUTF16Len(t *testing.T) {
	tests := []struct {
		in   string
		want int
	}{
		{"", 0}, {"abc", 3}, {"退款", 2}, {"😀", 2}, {"a😀b", 4}, {"\xff", 1}, {"\xf0\x9f\x98", 3},
	}
	for _, tt := range tests {
		if got := jsstring.UTF16Len(tt.in); got != tt.want {
			t.Errorf("UTF16Len(%q): got %d; want %d", tt.in, got, tt.want)
		}
	}
}

func TestCutUTF8(t *testing.T) {
	tests := []struct {
		in   string
		n    int
		want string
	}{
		{"abc", 5, "abc"}, {"abc", 3, "abc"}, {"abc", 2, "ab"}, {"abc", 0, ""},
		{"a退", 3, "a"}, {"a退", 4, "a退"}, {"退款", 5, "退"}, {"😀", 3, ""},
	}
	for _, tt := range tests {
		got := jsstring.CutUTF8(tt.in, tt.n)
		if got != tt.want || len(got) > tt.n || !utf8.ValidString(got) {
			t.Errorf("CutUTF8(%q, %d): got %q; want %q", tt.in, tt.n, got, tt.want)
		}
	}
}
