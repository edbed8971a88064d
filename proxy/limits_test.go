package proxy

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// TestFramingScan: every split of the stream into reads finds an ambiguous
// header block exactly where one ends, and nothing in clean traffic.
func TestFramingScan(t *testing.T) {
	cases := []struct {
		name, raw string
		want      bool
	}{
		{"CL and TE", "POST /t HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n", true},
		{"TE then CL, mixed case", "POST /t HTTP/1.1\r\nHost: a\r\ntRaNsFeR-eNcOdInG: chunked\r\ncontent-LENGTH: 3\r\n\r\n", true},
		{"TE on HTTP/1.0", "POST /t HTTP/1.0\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n", true},
		{"TE on HTTP/1.0, bare LF", "POST /t HTTP/1.0\nHost: a\nTransfer-Encoding: chunked\n\n", true},
		{"second request of a pipeline", "GET / HTTP/1.1\r\nHost: a\r\n\r\nPOST /t HTTP/1.1\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n", true},
		{"chunked only", "POST /t HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n", false},
		{"length only", "POST /t HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nhello", false},
		{"HTTP/1.0 with length", "POST /t HTTP/1.0\r\nContent-Length: 5\r\n\r\nhello", false},
		{"folded line is not a field", "POST /t HTTP/1.1\r\nContent-Length: 5\r\nX-Pad: a\r\n Transfer-Encoding: chunked\r\n\r\nhello", false},
		{"fields in two requests", "POST /a HTTP/1.1\r\nContent-Length: 0\r\n\r\nPOST /b HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", false},
		{"HTTP/1.0 in a path is no version", "GET /HTTP/1.0 HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for split := 1; split <= len(tc.raw); split++ {
				var s framingScan
				got := false
				for i := 0; i < len(tc.raw); i += split {
					if s.feed([]byte(tc.raw[i:min(i+split, len(tc.raw))])) {
						got = true
					}
				}
				if got != tc.want {
					t.Fatalf("reads of %d bytes: got %v; want %v", split, got, tc.want)
				}
			}
		})
	}
}

func TestWithNoStore(t *testing.T) {
	const goErr = "HTTP/1.1 431 Request Header Fields Too Large\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n431 Request Header Fields Too Large"
	got, ok := withNoStore([]byte(goErr))
	want := "HTTP/1.1 431 Request Header Fields Too Large\r\nCache-Control: no-store\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n431 Request Header Fields Too Large"
	if !ok || string(got) != want {
		t.Errorf("got %q %v; want %q", got, ok, want)
	}
	for _, p := range []string{
		"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n",
		"HTTP/1.1 400 Bad Request\r\nCache-Control: private\r\n\r\n",
		"hello",
		"HTTP/1.1 4",
	} {
		if _, ok := withNoStore([]byte(p)); ok {
			t.Errorf("%q: rewritten; want it left alone", p)
		}
	}
}

func TestLoggedPath(t *testing.T) {
	if got := loggedPath("/a/b"); got != "/a/b" {
		t.Errorf("short path: got %q", got)
	}
	long := "/" + strings.Repeat("é", 200*1024)
	got := loggedPath(long)
	if len(got) > maxLoggedPath || !utf8.ValidString(got) || !strings.HasPrefix(long, strings.TrimSuffix(got, "…")) {
		t.Errorf("got %d bytes, valid UTF-8 %v; want at most %d bytes of the path's start", len(got), utf8.ValidString(got), maxLoggedPath)
	}
}

// BenchmarkFramingScan: the cost of watching a body go by (32 KiB reads of
// text with a line break every 80 bytes, the scanner's worst ordinary case).
func BenchmarkFramingScan(b *testing.B) {
	line := strings.Repeat("x", 79) + "\n"
	buf := []byte(strings.Repeat(line, (32<<10)/len(line)))
	b.SetBytes(int64(len(buf)))
	var s framingScan
	for b.Loop() {
		s.feed(buf)
	}
}
