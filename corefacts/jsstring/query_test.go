package jsstring

import (
	"strings"
	"testing"
)

// TestCheckQuery: the query rule counts and trims like JavaScript.
func TestCheckQuery(t *testing.T) {
	cases := []struct {
		q    string
		want string // a word of the refusal, "" for none
	}{
		{"refunds", ""},
		{"\ufeff \u3000", "empty"},         // trim() removes U+FEFF and Zs
		{strings.Repeat("😀", 5), "exceed"}, // 10 UTF-16 units > 9
		{strings.Repeat("a", 9), ""},
		{"a\tb\nc\r", ""},
		{"bell\a", "control"},
	}
	for _, tc := range cases {
		got := CheckQuery(tc.q, 9)
		if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
			t.Errorf("CheckQuery(%q) = %q; want one containing %q", tc.q, got, tc.want)
		}
	}
}
