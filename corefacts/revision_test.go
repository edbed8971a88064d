package corefacts

import "testing"

func TestRevision(t *testing.T) {
	cases := []struct{ title, content, want string }{
		// printf 'a\0b' | sha256sum
		{"a", "b", "59b271ae1bbcb1d31d41929817f4b16fb439eb4f31520b5ad1d5ce98920a7138"},
		// printf '\0' | sha256sum
		{"", "", "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d"},
		{"Refund window", "Refunds are accepted within 30 days of delivery.", "30f003f90e9ba74a206c9635f20b60ceb3d96be1042b31eddcba79c125e8a9c6"},
	}
	for _, tc := range cases {
		if got := Revision(tc.title, tc.content); got != tc.want {
			t.Errorf("Revision(%q, %q): got %s; want %s", tc.title, tc.content, got, tc.want)
		}
	}
	if Revision("ab", "") == Revision("a", "b") {
		t.Errorf("got equal revisions for (ab, \"\") and (a, b); want the NUL separator to tell them apart")
	}
}
