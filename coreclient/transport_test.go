package coreclient_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/bailinghub/knowledge-sidecar/coreclient"
	"github.com/bailinghub/knowledge-sidecar/corefacts"
)

const sessionJSON = `{"session_id":"s-1","client_app_id":"app-1","principal":{"id":"u-1"}}`

// countingServer is an httptest server that counts the connections it accepted.
func countingServer(t *testing.T, h http.Handler) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	var conns atomic.Int64
	srv := httptest.NewUnstartedServer(h)
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	return srv, &conns
}

func defaultClient(t *testing.T, url string, timeout time.Duration) *coreclient.Client {
	t.Helper()
	c, err := coreclient.NewClient(coreclient.Options{BaseURL: url, ServiceToken: testServiceToken, Timeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// The default transport keeps one connection to Core alive across calls,
// with plain and chunked answers alike, and forwards the caller's header.
func TestCoreTransportKeepAlive(t *testing.T) {
	var chunked atomic.Bool
	srv, conns := countingServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != aliceAuth {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		if chunked.Load() {
			w.Write([]byte(sessionJSON[:10]))
			w.(http.Flusher).Flush()
			w.Write([]byte(sessionJSON[10:]))
			return
		}
		w.Header().Set("Content-Length", fmt.Sprint(len(sessionJSON)))
		w.Write([]byte(sessionJSON))
	}))
	c := defaultClient(t, srv.URL, 0)
	for i := range 20 {
		chunked.Store(i%2 == 1)
		s, err := c.Session(t.Context(), aliceAuth)
		if err != nil || s.SessionID != "s-1" {
			t.Fatalf("call %d: got %+v, %v; want session s-1", i, s, err)
		}
	}
	if _, err := c.Session(t.Context(), "Bearer other"); !errors.Is(err, corefacts.ErrUnauthorized) {
		t.Fatalf("other bearer: got %v; want ErrUnauthorized", err)
	}
	if got := conns.Load(); got != 1 {
		t.Errorf("connections: got %d; want 1 (keep-alive)", got)
	}
}

// Core closing an idle connection (without Connection: close) costs the next
// call nothing: it is retried once on a new connection, GETs and the
// /kb/search POST alike.
func TestCoreTransportServerClosedIdle(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	var accepted atomic.Int64
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			go func() { // one exchange per connection, then close it silently
				defer c.Close()
				req, err := http.ReadRequest(bufio.NewReader(c))
				if err != nil {
					return
				}
				body := sessionJSON
				if req.URL.Path == "/kb/search" {
					body = `{"kb_ids":["faq"],"hits":[]}`
				}
				fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
			}()
		}
	}()
	c := defaultClient(t, "http://"+ln.Addr().String(), 0)
	for i := range 3 {
		if _, err := c.Session(t.Context(), aliceAuth); err != nil {
			t.Fatalf("session %d: %v", i, err)
		}
		if _, err := c.SearchKB(t.Context(), "faq", "refund", 4); err != nil {
			t.Fatalf("search %d: %v", i, err)
		}
	}
	if got := accepted.Load(); got < 6 {
		t.Errorf("connections: got %d; want one per call (each was closed by the server)", got)
	}
}

// A call whose deadline passes while Core is silent fails as a timeout; its
// connection is not reused and the next call succeeds.
func TestCoreTransportDeadline(t *testing.T) {
	release := make(chan struct{})
	var hang atomic.Bool
	srv, conns := countingServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if hang.Load() {
			select {
			case <-release:
			case <-r.Context().Done():
			}
			return
		}
		w.Write([]byte(sessionJSON))
	}))
	defer close(release)
	c := defaultClient(t, srv.URL, 100*time.Millisecond)
	if _, err := c.Session(t.Context(), aliceAuth); err != nil {
		t.Fatal(err)
	}
	hang.Store(true)
	_, err := c.Session(t.Context(), aliceAuth)
	if !errors.Is(err, corefacts.ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("silent Core: got %v; want ErrUnavailable and DeadlineExceeded", err)
	}
	hang.Store(false)
	if _, err := c.Session(t.Context(), aliceAuth); err != nil {
		t.Fatalf("after the timeout: %v", err)
	}
	if got := conns.Load(); got != 2 {
		t.Errorf("connections: got %d; want 2 (the timed-out one is not reused)", got)
	}

	// A caller that gives up ends the exchange too.
	hang.Store(true)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { _, err := c.Session(ctx, aliceAuth); done <- err }()
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("cancelled caller: got %v; want a context error", err)
	}
}

// An answer left unread (too large) closes its connection instead of
// handing back one with bytes still pending.
func TestCoreTransportUnreadBodyClosesConnection(t *testing.T) {
	var big atomic.Bool
	srv, conns := countingServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if big.Load() {
			w.Write([]byte(`{"session_id":"` + strings.Repeat("x", 100<<10) + `"}`))
			return
		}
		w.Write([]byte(sessionJSON))
	}))
	c := defaultClient(t, srv.URL, 0)
	big.Store(true)
	if _, err := c.Session(t.Context(), aliceAuth); !errors.Is(err, corefacts.ErrUnavailable) {
		t.Fatalf("oversized answer: got %v; want ErrUnavailable", err)
	}
	big.Store(false)
	for range 3 {
		if _, err := c.Session(t.Context(), aliceAuth); err != nil {
			t.Fatal(err)
		}
	}
	if got := conns.Load(); got != 2 {
		t.Errorf("connections: got %d; want 2 (the cut answer's is closed, the next one kept)", got)
	}
}

// BenchmarkCoreSession is one identity call to an in-process Core double
// over the default transport (coreTransport) and over net/http's tuned
// Transport: cpu-µs/op is the whole process's user + system time per call
// (the double's share included, the same in both).
func BenchmarkCoreSession(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(sessionJSON))
	}))
	defer srv.Close()
	for _, tc := range []struct {
		name string
		rt   http.RoundTripper
	}{{"default", nil}, {"net-http", coreclient.DefaultTransport()}} {
		b.Run(tc.name, func(b *testing.B) {
			c, err := coreclient.NewClient(coreclient.Options{BaseURL: srv.URL, ServiceToken: testServiceToken, Transport: tc.rt})
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			b.ReportAllocs()
			c0 := rusageCPU()
			for b.Loop() {
				if _, err := c.Session(ctx, aliceAuth); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64((rusageCPU()-c0).Microseconds())/float64(b.N), "cpu-µs/op")
		})
	}
}

func rusageCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
