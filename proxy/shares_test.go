package proxy

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bailinghub/knowledge-sidecar/internal/testkit"

	"github.com/bailinghub/knowledge-sidecar/corefacts"
)

func ck(s string) clientKey { return keyOf(netip.MustParseAddr(s)) }

func TestShares(t *testing.T) {
	s := newShares(10, 4)
	a, b := ck("192.0.2.1"), ck("192.0.2.2")
	step := func(c clientKey, k int64, wantOK, wantGlobal bool) {
		t.Helper()
		if ok, global := s.acquire(c, k); ok != wantOK || (!ok && global != wantGlobal) {
			t.Fatalf("acquire(%v, %d): got ok=%v global=%v; want ok=%v global=%v", c, k, ok, global, wantOK, wantGlobal)
		}
	}
	step(a, 4, true, false)
	step(a, 1, false, false) // a's share is full
	step(b, 4, false, false) // two clients active: each share is 10 ÷ 3 = 3
	step(b, 3, true, false)
	c, d, e := ck("192.0.2.3"), ck("192.0.2.4"), ck("192.0.2.5")
	step(c, 3, false, false) // three: 10 ÷ 4 = 2
	step(c, 2, true, false)
	step(d, 1, true, false) // four: 10 ÷ 5 = 2; the cap is full now
	step(e, 1, false, true) // five: a share of 1 (the floor), but no room
	if !s.belowShare(d) || s.belowShare(a) || s.belowShare(b) {
		t.Fatalf("belowShare: d %v, a %v, b %v; want d below its share, a and b not", s.belowShare(d), s.belowShare(a), s.belowShare(b))
	}
	s.release(a, 4)
	if ok, _ := s.acquireUnshared(a, 2); !ok {
		t.Fatal("acquireUnshared within the global cap: refused")
	}
	s.release(a, 2)
	if c, all := s.held(a); c != 0 || all != 6 {
		t.Fatalf("after release: a holds %d of %d; want 0 of 6", c, all)
	}
	if len(s.by) != 3 {
		t.Fatalf("%d clients tracked; want 3 (a client holding nothing is forgotten)", len(s.by))
	}
	none := newShares(0, 0)
	if ok, _ := none.acquire(a, 1<<40); !ok {
		t.Fatal("no caps: refused")
	}
}

// TestSharesFloor: a crowd of small holders shrinks the shares, but never
// below the floor — a client holding nothing still gets room for one whole
// item while the budget has it.
func TestSharesFloor(t *testing.T) {
	const item = 512
	s := newShares(64<<10, 16<<10).withFloor(item)
	for i := range 200 {
		if ok, _ := s.acquire(ck(netip.AddrFrom4([4]byte{198, 51, 100, byte(i)}).String()), 1); !ok {
			t.Fatalf("small holder %d refused", i)
		}
	}
	if ok, global := s.acquire(ck("192.0.2.9"), item); !ok {
		t.Fatalf("one whole item with %d of %d held: refused (global %v); want the floor's room", 200, 64<<10, global)
	}
	if ok, _ := s.acquire(ck("192.0.2.9"), 1); ok {
		t.Fatal("past the floor with 201 clients active: accepted; want the shrunk share")
	}
	if got := newShares(100, 10).withFloor(50).floor; got != 10 {
		t.Fatalf("floor above the configured share: %d; want the share, 10", got)
	}
}

func TestPerClient(t *testing.T) {
	for _, tc := range []struct{ per, total, want int64 }{
		{0, 1024, 256}, {0, 3, 1}, {0, 0, 0}, {0, -1, 0}, {-1, 1024, 0}, {100, 1024, 100}, {2000, 1024, 2000},
	} {
		if got := perClient(tc.per, tc.total); got != tc.want {
			t.Errorf("perClient(%d, %d): got %d; want %d", tc.per, tc.total, got, tc.want)
		}
	}
}

func TestKeyOf(t *testing.T) {
	if ck("2001:db8::1") != ck("2001:db8::ffff:1") {
		t.Error("two addresses of one /64: different keys; want one")
	}
	if ck("2001:db8:0:1::1") == ck("2001:db8::1") {
		t.Error("two /64s: one key; want two")
	}
	if keyOf(netip.MustParseAddr("::ffff:192.0.2.1")) != ck("192.0.2.1") {
		t.Error("an IPv4-mapped address: not its IPv4 key")
	}
}

func TestClientOf(t *testing.T) {
	fw := forwarding{trusted: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}}
	for _, tc := range []struct {
		name, peer string
		xff        []string
		want       string
	}{
		{"untrusted peer, its XFF ignored", "192.0.2.9:1234", []string{"198.51.100.1"}, "192.0.2.9"},
		{"trusted peer without XFF", "10.0.0.1:1234", nil, "10.0.0.1"},
		{"trusted peer, one hop", "10.0.0.1:1234", []string{"198.51.100.1"}, "198.51.100.1"},
		{"the rightmost untrusted entry, not what the client wrote", "10.0.0.1:1", []string{"6.6.6.6, 198.51.100.1"}, "198.51.100.1"},
		{"trusted hops skipped", "10.0.0.1:1", []string{"198.51.100.1, 10.0.0.7", "10.0.0.8"}, "198.51.100.1"},
		{"all trusted: the first hop", "10.0.0.1:1", []string{"10.0.0.5, 10.0.0.6"}, "10.0.0.5"},
		{"a malformed hop: the last trusted address", "10.0.0.1:1", []string{"198.51.100.1, garbage, 10.0.0.2"}, "10.0.0.2"},
		{"IPv6 client through a trusted proxy", "10.0.0.1:1", []string{"2001:db8::5"}, "2001:db8::"},
		{"mapped peer", "[::ffff:192.0.2.9]:1", nil, "192.0.2.9"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodGet, "/", nil)
			r.RemoteAddr = tc.peer
			for _, v := range tc.xff {
				r.Header.Add("X-Forwarded-For", v)
			}
			if got := fw.clientOf(r); got != ck(tc.want) {
				t.Fatalf("got %v; want %v", got.a, tc.want)
			}
		})
	}
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.RemoteAddr = "@unix"
	if got := fw.clientOf(r); got != (clientKey{}) {
		t.Fatalf("an unparsable peer: got %v; want the zero key", got.a)
	}
}

// turnReadServer is a Server with only the turn body budget set, and a
// request state (as the edge makes one) for client.
func turnReadServer(t *testing.T, budget, share int64) (*Server, *reqState) {
	t.Helper()
	s, err := New(Options{CoreURL: &url.URL{Scheme: "http", Host: "127.0.0.1:1"}, Limits: Limits{TurnBodyBudget: budget, TurnBodyPerClient: share}})
	if err != nil {
		t.Fatal(err)
	}
	return s, &reqState{client: ck("192.0.2.1")}
}

func turnRequest(st *reqState, body io.Reader, size int64) *http.Request {
	r := httptest.NewRequest(http.MethodPost, "/t", body)
	r.ContentLength = size
	st.Context = r.Context()
	return r.WithContext(st)
}

// bodySplits are the ways a body's reads split its data: as it comes, a
// byte at a time, half of each read, and the data with io.EOF on the last
// read.
var bodySplits = []bodySplit{
	{"plain", func(r io.Reader) io.Reader { return r }},
	{"one-byte", iotest.OneByteReader},
	{"half", iotest.HalfReader},
	{"data-err", iotest.DataErrReader},
}

type bodySplit struct {
	name string
	fn   func(io.Reader) io.Reader
}

// TestReadTurn: the same bytes as io.ReadAll over a LimitReader of limit+1
// however the body is split and whatever length was announced, and the
// budget charged with the buffer actually held — never the announced
// length before the bytes arrive.
func TestReadTurn(t *testing.T) {
	const limit = 20000
	for _, n := range []int{0, 1, 4095, 4096, 4097, 19999, 20000, 20001, 30000} {
		data := bytes.Repeat([]byte("0123456789abcdef"), n/16+1)[:n]
		for _, size := range []int64{-1, int64(n)} {
			for _, wrap := range bodySplits {
				t.Run(fmt.Sprintf("%d/%d/%s", n, size, wrap.name), func(t *testing.T) {
					s, st := turnReadServer(t, 1<<20, -1)
					want, _ := io.ReadAll(io.LimitReader(bytes.NewReader(data), limit+1))
					got, err := s.readTurn(turnRequest(st, wrap.fn(bytes.NewReader(data)), size), limit)
					if err != nil || !bytes.Equal(got, want) {
						t.Fatalf("got %d bytes, %v; want %d bytes", len(got), err, len(want))
					}
					if st.turnBytes != int64(cap(got)) {
						t.Fatalf("charged %d bytes for a buffer of %d; want the buffer", st.turnBytes, cap(got))
					}
					if c, _ := s.lim.turnBody.held(st.client); c != st.turnBytes {
						t.Fatalf("the client's share holds %d; want %d", c, st.turnBytes)
					}
					if cap(got) > max(2*len(got), turnReadFirst)+1 {
						t.Fatalf("a buffer of %d bytes for %d read; want at most twice what arrived", cap(got), len(got))
					}
				})
			}
		}
	}
	t.Run("announced but not sent", func(t *testing.T) {
		s, st := turnReadServer(t, 1<<20, -1)
		pr, pw := io.Pipe()
		errc := make(chan error, 1)
		go func() {
			_, err := s.readTurn(turnRequest(st, pr, corefacts.TurnBodyMax), corefacts.TurnBodyMax)
			errc <- err
		}()
		if _, err := pw.Write([]byte("{")); err != nil { // the reader is past its first growth
			t.Fatal(err)
		}
		_, all := s.lim.turnBody.held(st.client)
		if all != turnReadFirst {
			t.Errorf("a 512 KiB Content-Length with 1 byte sent holds %d bytes of the budget; want %d", all, turnReadFirst)
		}
		pw.CloseWithError(errors.New("client gone"))
		if err := <-errc; !errors.Is(err, errBodyUnreadable) {
			t.Errorf("a failed body: got %v; want errBodyUnreadable", err)
		}
	})
	t.Run("over the client's share", func(t *testing.T) {
		s, st := turnReadServer(t, 1<<20, 10000)
		_, err := s.readTurn(turnRequest(st, strings.NewReader(strings.Repeat("x", 20000)), -1), limit)
		if !errors.Is(err, errOverloaded) {
			t.Fatalf("got %v; want errOverloaded", err)
		}
		if got := testkit.Metric(t, s.registry, "knowledge_sidecar_client_share_rejections_total", map[string]string{"limit": limitTurnBody}); got != 1 {
			t.Errorf("client_share_rejections_total{limit=turn_body_budget}: got %v; want 1", got)
		}
	})
}

// TestConnectionShareTrustedProxyExempt: a peer's connections past its
// share are refused, unless the peer is a trusted proxy (its connections
// carry many clients): then only the global cap applies.
func TestConnectionShareTrustedProxyExempt(t *testing.T) {
	for _, tc := range []struct {
		name    string
		trusted []netip.Prefix
		want    int // connections accepted of 3, with a share of 1 and a cap of 4
	}{
		{"untrusted peer", nil, 1},
		{"trusted proxy", []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			raw, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			ln := newLimitListener(raw, 4, 1, forwarding{trusted: tc.trusted}, newLimitMetrics(prometheus.NewRegistry()))
			defer ln.Close()
			accepted := make(chan net.Conn, 3)
			go func() {
				for {
					c, err := ln.Accept()
					if err != nil {
						return
					}
					accepted <- c
				}
			}()
			got := 0
			for range 3 {
				c, err := net.Dial("tcp", raw.Addr().String())
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				// Each connection is either accepted or answered the raw 503
				// (bytes the client can read): wait for whichever comes.
				refused := make(chan struct{})
				go func() {
					if _, err := c.Read(make([]byte, 1)); err == nil {
						close(refused)
					}
				}()
				select {
				case <-accepted:
					got++
				case <-refused:
				case <-time.After(10 * time.Second): // a bound, not a synchronization
					t.Fatal("a connection was neither accepted nor refused")
				}
			}
			if got != tc.want {
				t.Fatalf("accepted %d of 3 connections from one peer; want %d", got, tc.want)
			}
		})
	}
}

// TestShareFloor: a share shrinks with the active clients but not below
// its floor, and never above the configured share.
func TestShareFloor(t *testing.T) {
	s := newShares(100, 40)
	s.floor = 30
	for i := range 9 {
		if ok, _ := s.acquire(ck(fmt.Sprintf("192.0.2.%d", i+1)), 1); !ok {
			t.Fatalf("client %d: refused", i)
		}
	}
	// Ten active: 100 ÷ 11 = 9, raised to the floor 30.
	x := ck("192.0.2.200")
	s.mu.Lock()
	got := s.shareLocked(x)
	s.mu.Unlock()
	if got != 30 {
		t.Fatalf("share with ten active: got %d; want the floor 30", got)
	}
	if l := newEdgeLimits(Limits{}, nil); l.turnBody.floor != 2*corefacts.TurnBodyMax {
		t.Errorf("turn body share floor: got %d; want %d", l.turnBody.floor, 2*corefacts.TurnBodyMax)
	}
}
