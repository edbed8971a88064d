package corefacts

import (
	"strings"
	"testing"
)

func TestBearerAcceptable(t *testing.T) {
	tok := "bha_" + strings.Repeat("A", 43) // Core's shape: bha_ + base64url of 32 bytes
	for _, tc := range []struct {
		v    string
		want bool
	}{
		{"Bearer " + tok, true},
		{"bearer " + tok, true},
		{"BEARER " + tok, true},
		{"Bearer " + tok[:AccessTokenMinLen], true},
		{"Bearer " + tok[:AccessTokenMinLen-1], false},
		{"Bearer " + tok + strings.Repeat("a", MaxAuthorizationBytes-len("Bearer ")-len(tok)), true},
		{"Bearer " + tok + strings.Repeat("a", MaxAuthorizationBytes-len("Bearer ")-len(tok)+1), false},
		{"", false},
		{"Bearer", false},
		{"Bearer ", false},
		{"Bearer  " + tok, false},
		{"Bearer\t" + tok, false},
		{"Basic " + tok, false},
		{"Bearer bhr_" + tok[4:], false},
		{"Bearer " + tok + " x", false},
		{"Bearer " + tok + "\x00", false},
		{"Bearer " + tok + "\u00a0", false},
		{"Bearer " + tok + "é", false},
	} {
		if got := BearerAcceptable(tc.v); got != tc.want {
			t.Errorf("BearerAcceptable(%.60q…): got %v; want %v", tc.v, got, tc.want)
		}
	}
}
