package test

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// The request-smuggling corpus: ambiguous or malformed framing sent over a
// raw socket. Every case must be refused by the sidecar (a 4xx, or 501 for a
// transfer coding it does not implement, and the connection closed) or reach
// Core as exactly the well-framed request(s) the sidecar itself parsed — the
// client gets one answer per request Core saw, so the two never disagree
// about where a request ends.

// smuggleUpstream records each request with whether its body arrived whole.
type smuggleUpstream struct {
	mu   sync.Mutex
	seen []smuggleSeen
}

type smuggleSeen struct {
	method, uri, body string
	complete          bool
	header            http.Header
}

func (s *smuggleUpstream) handler(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/early" {
		// Answers before reading the body, as Core does for a refused turn.
		s.mu.Lock()
		n := len(s.seen)
		s.seen = append(s.seen, smuggleSeen{method: r.Method, uri: r.RequestURI, complete: true, header: r.Header.Clone()})
		s.mu.Unlock()
		rc := http.NewResponseController(w)
		rc.EnableFullDuplex()
		w.Header().Set("X-Seq", strconv.Itoa(n))
		w.Header().Set("Content-Length", "5")
		io.WriteString(w, "early")
		rc.Flush()
		return
	}
	b, err := io.ReadAll(r.Body)
	s.mu.Lock()
	n := len(s.seen)
	s.seen = append(s.seen, smuggleSeen{method: r.Method, uri: r.RequestURI, body: string(b), complete: err == nil, header: r.Header.Clone()})
	s.mu.Unlock()
	w.Header().Set("X-Seq", strconv.Itoa(n))
	io.WriteString(w, "ok")
}

func (s *smuggleUpstream) take() []smuggleSeen {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := s.seen
	s.seen = nil
	return out
}

type wantReq struct{ method, uri, body string }

const sentinel = "GET /sentinel HTTP/1.1\r\nHost: ks.example\r\nConnection: close\r\n\r\n"

func TestRequestSmuggling(t *testing.T) {
	up := &smuggleUpstream{}
	u := startUpstream(t, func(_ *upstream, w http.ResponseWriter, r *http.Request) { up.handler(w, r) })
	sc := StartSidecar(t, SidecarOptions{CoreURL: u.URL})

	const h = "Host: ks.example\r\n"
	cases := []struct {
		name string
		raw  string
		want []wantReq // nil: refused
		// closes: RFC 9112 §6.1, the connection ends after the answer to
		// the last wanted request; nothing after it (the sentinel) is read.
		closes bool
	}{
		{name: "CL+TE: chunked wins, Content-Length dropped, connection closed",
			raw:  "POST /t HTTP/1.1\r\n" + h + "Content-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
			want: []wantReq{{"POST", "/t", "hello"}}, closes: true},
		{name: "TE+CL with a hidden prefix: only the chunked request, then closed",
			raw: "POST /t HTTP/1.1\r\n" + h + "Transfer-Encoding: chunked\r\nContent-Length: 48\r\n\r\n0\r\n\r\n" +
				"GET /second HTTP/1.1\r\n" + h + "\r\n",
			want: []wantReq{{"POST", "/t", ""}}, closes: true},
		{name: "CL+TE in lower case, closed",
			raw:  "POST /t HTTP/1.1\r\n" + h + "content-length: 3\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
			want: []wantReq{{"POST", "/t", "hello"}}, closes: true},
		// The edge sees framing as it arrives, not per request: an ambiguous
		// request already on the wire behind a clean one ends the
		// connection after the clean one's answer (the client re-sends).
		{name: "CL+TE pipelined behind a clean request: the clean one is answered, then closed",
			raw: "GET /first HTTP/1.1\r\n" + h + "\r\n" +
				"POST /t HTTP/1.1\r\n" + h + "Content-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
			want: []wantReq{{"GET", "/first", ""}}, closes: true},
		{name: "conflicting Content-Length",
			raw: "POST /t HTTP/1.1\r\n" + h + "Content-Length: 5\r\nContent-Length: 6\r\n\r\nhello!"},
		{name: "Content-Length list",
			raw: "POST /t HTTP/1.1\r\n" + h + "Content-Length: 5, 6\r\n\r\nhello!"},
		{name: "Content-Length with sign",
			raw: "POST /t HTTP/1.1\r\n" + h + "Content-Length: +5\r\n\r\nhello"},
		{name: "identical duplicate Content-Length is one",
			raw:  "POST /t HTTP/1.1\r\n" + h + "Content-Length: 5\r\nContent-Length: 5\r\n\r\nhello",
			want: []wantReq{{"POST", "/t", "hello"}}},
		{name: "obs-fold hiding Transfer-Encoding is unfolded into the value",
			raw:  "POST /t HTTP/1.1\r\n" + h + "Content-Length: 5\r\nX-Pad: a\r\n Transfer-Encoding: chunked\r\n\r\nhello",
			want: []wantReq{{"POST", "/t", "hello"}}},
		{name: "obs-fold continuing Transfer-Encoding",
			raw: "POST /t HTTP/1.1\r\n" + h + "Transfer-Encoding:\r\n chunked\r\nContent-Length: 5\r\n\r\nhello"},
		{name: "bare LF after chunk size",
			raw: "POST /t HTTP/1.1\r\n" + h + "Transfer-Encoding: chunked\r\n\r\n5\nhello\r\n0\r\n\r\n"},
		{name: "chunk size with junk",
			raw: "POST /t HTTP/1.1\r\n" + h + "Transfer-Encoding: chunked\r\n\r\n5x\r\nhello\r\n0\r\n\r\n"},
		{name: "chunk size overflow",
			raw: "POST /t HTTP/1.1\r\n" + h + "Transfer-Encoding: chunked\r\n\r\nfffffffffffffffff\r\nhello\r\n0\r\n\r\n"},
		{name: "space before the colon",
			raw: "POST /t HTTP/1.1\r\n" + h + "Transfer-Encoding : chunked\r\nContent-Length: 5\r\n\r\nhello"},
		{name: "chunked, identity",
			raw: "POST /t HTTP/1.1\r\n" + h + "Transfer-Encoding: chunked, identity\r\n\r\n5\r\nhello\r\n0\r\n\r\n"},
		{name: "identity, chunked",
			raw: "POST /t HTTP/1.1\r\n" + h + "Transfer-Encoding: identity, chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"},
		{name: "two Transfer-Encoding fields",
			raw: "POST /t HTTP/1.1\r\n" + h + "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"},
		{name: "xchunked",
			raw: "POST /t HTTP/1.1\r\n" + h + "Transfer-Encoding: xchunked\r\nContent-Length: 5\r\n\r\nhello"},
		{name: "NUL in a header value",
			raw: "GET /t HTTP/1.1\r\n" + h + "X-A: a\x00b\r\n\r\n"},
		{name: "bare CR in a header value",
			raw: "GET /t HTTP/1.1\r\n" + h + "X-A: a\rTransfer-Encoding: chunked\r\n\r\n"},
		{name: "two Host fields",
			raw: "GET /t HTTP/1.1\r\n" + h + "Host: other.example\r\n\r\n"},
		{name: "HTTP/1.0 ignores Transfer-Encoding, and the connection closes",
			raw:  "POST /t HTTP/1.0\r\n" + h + "Connection: keep-alive\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\nhello",
			want: []wantReq{{"POST", "/t", "hello"}}, closes: true},
		{name: "HTTP/1.0 with Transfer-Encoding only: the chunks are never parsed as a request",
			raw:  "POST /t HTTP/1.0\r\n" + h + "Connection: keep-alive\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
			want: []wantReq{{"POST", "/t", ""}}, closes: true},
		{name: "HTTP/1.0 keep-alive without Transfer-Encoding stays open",
			raw:  "POST /t HTTP/1.0\r\n" + h + "Connection: keep-alive\r\nContent-Length: 5\r\n\r\nhello",
			want: []wantReq{{"POST", "/t", "hello"}}},
		{name: "pipelined requests stay separate",
			raw: "GET /p1 HTTP/1.1\r\n" + h + "\r\n" +
				"POST /p2 HTTP/1.1\r\n" + h + "Content-Length: 5\r\n\r\nhello" +
				"POST /p3 HTTP/1.1\r\n" + h + "Transfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n" +
				"DELETE /p4 HTTP/1.1\r\n" + h + "\r\n",
			want: []wantReq{{"GET", "/p1", ""}, {"POST", "/p2", "hello"}, {"POST", "/p3", "abc"}, {"DELETE", "/p4", ""}}},
	}
	t.Run("malformed body after an early answer", func(t *testing.T) {
		// Core answers before the body is complete; the body then breaks.
		// The bytes after the break must not become a request of their own.
		up.take()
		conn, err := net.Dial("tcp", sc.Addr)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		conn.SetDeadline(time.Now().Add(15 * time.Second))
		io.WriteString(conn, "POST /early HTTP/1.1\r\n"+h+"Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n")
		br := bufio.NewReader(conn)
		readOK(t, br, "early answer")
		io.WriteString(conn, "zz\r\nGET /smuggled HTTP/1.1\r\n"+h+"\r\n"+sentinel)
		var more []int
		for {
			res, err := http.ReadResponse(br, nil)
			if err != nil {
				break
			}
			drainClose(res.Body)
			more = append(more, res.StatusCode)
		}
		for _, s := range up.take() {
			if s.uri != "/early" {
				t.Errorf("Core received %s %s after a malformed body; want the connection closed", s.method, s.uri)
			}
		}
		if len(more) != 0 {
			t.Errorf("answers after the malformed body: got %v; want none (connection closed)", more)
		}
	})
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			// Each case's /t carries its own tag, so a request an earlier
			// case left in flight (a refused request's headers already
			// streamed to Core, its body cut short) and recorded late is
			// told apart from this case's requests rather than taken as one.
			tag := "/t?case=" + strconv.Itoa(i)
			up.take()
			responses, err := exchangeRaw(sc.Addr, strings.ReplaceAll(c.raw, " /t ", " "+tag+" ")+sentinel)
			var seen []smuggleSeen
			for _, s := range up.take() {
				if strings.HasPrefix(s.uri, "/t?case=") && s.uri != tag {
					continue // an earlier case's straggler
				}
				seen = append(seen, s)
			}
			if err != nil {
				t.Fatalf("%v (responses %v)", err, statuses(responses))
			}
			// No desync: the client got an answer for every complete request
			// Core saw. (A request whose body turns out malformed has its
			// headers streamed to Core already; Core then sees the body cut
			// short, exactly as when a client hangs up mid-upload.)
			fromCore, complete := 0, 0
			for _, r := range responses {
				if r.Header.Get("X-Seq") != "" {
					fromCore++
				}
			}
			for _, s := range seen {
				if s.complete {
					complete++
				}
			}
			if fromCore != complete {
				t.Fatalf("Core saw %d complete requests (%v) but the client got %d answers from Core (%v)", complete, uris(seen), fromCore, statuses(responses))
			}
			if c.want == nil {
				if len(responses) == 0 {
					t.Fatal("no response; want a refusal")
				}
				if st := responses[0].StatusCode; !(st >= 400 && st < 500 || st == http.StatusNotImplemented) {
					t.Errorf("status: got %d; want a 4xx or 501 refusal", st)
				}
				for _, s := range seen {
					if s.complete {
						t.Errorf("Core received a complete request %s %s %q; want none", s.method, s.uri, s.body)
					}
				}
				if len(responses) != 1 {
					t.Errorf("responses: got %v; want the refusal only and the connection closed", statuses(responses))
				}
				return
			}
			want := append([]wantReq(nil), c.want...)
			if !c.closes {
				want = append(want, wantReq{"GET", "/sentinel", ""})
			}
			for j := range want {
				if want[j].uri == "/t" {
					want[j].uri = tag
				}
			}
			if len(seen) != len(want) {
				t.Fatalf("Core saw %v; want %v", uris(seen), want)
			}
			for i, w := range want {
				s := seen[i]
				if s.method != w.method || s.uri != w.uri || s.body != w.body || !s.complete {
					t.Errorf("request %d: got %s %s %q (complete %v); want %s %s %q", i, s.method, s.uri, s.body, s.complete, w.method, w.uri, w.body)
				}
				if s.header.Get("Content-Length") != "" && s.header.Get("Transfer-Encoding") != "" {
					t.Errorf("request %d reached Core with both Content-Length and Transfer-Encoding", i)
				}
				if v := s.header.Values("X-Pad"); len(v) > 0 && (len(v) != 1 || strings.ContainsAny(v[0], "\r\n")) {
					t.Errorf("request %d: folded header reached Core as %q", i, v)
				}
			}
			for i, r := range responses {
				if r.StatusCode != http.StatusOK {
					t.Errorf("response %d: got %d; want 200", i, r.StatusCode)
				}
			}
			if c.closes {
				if len(responses) != len(c.want) {
					t.Errorf("responses: got %v; want %d and the connection closed", statuses(responses), len(c.want))
				} else if last := responses[len(responses)-1]; !last.Close {
					t.Errorf("last answer lacks Connection: close")
				}
			}
		})
	}
	// Malformed client framing is the client's fault, never Core's.
	if n := upstreamErrors(t, sc.Registry); n != 0 {
		t.Errorf("upstream_errors_total: got %v; want 0", n)
	}
}

// exchangeRaw writes raw on a fresh connection and reads responses until the
// server closes it. It never half-closes: net/http reads a client's EOF as
// "gone" and would cancel the request under test.
func exchangeRaw(addr, raw string) ([]*http.Response, error) {
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(15 * time.Second))
	if _, err := io.WriteString(conn, raw); err != nil {
		return nil, err
	}
	br := bufio.NewReader(conn)
	var out []*http.Response
	for {
		res, err := http.ReadResponse(br, nil)
		if err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) || isReset(err) {
				return out, nil
			}
			return out, fmt.Errorf("reading response %d: %w", len(out)+1, err)
		}
		body, err := io.ReadAll(res.Body)
		res.Body.Close()
		if err != nil {
			return out, fmt.Errorf("reading body %d: %w", len(out)+1, err)
		}
		res.Body = io.NopCloser(strings.NewReader(string(body)))
		out = append(out, res)
	}
}

func isReset(err error) bool {
	var oe *net.OpError
	return errors.As(err, &oe) && !oe.Timeout()
}

func statuses(rs []*http.Response) []int {
	var out []int
	for _, r := range rs {
		out = append(out, r.StatusCode)
	}
	return out
}

func uris(ss []smuggleSeen) []string {
	var out []string
	for _, s := range ss {
		out = append(out, fmt.Sprintf("%s %s complete=%v", s.method, s.uri, s.complete))
	}
	return out
}
