package coreclient_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
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
func TestTransportKeepAlive(t *testing.T) {
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

// rawCore is a Core double on a bare listener that answers the requests of
// each connection with answer (session or search by path) until keep of
// them were answered; the next request on the connection is read whole and
// then the connection is closed without a byte of answer (keep 1: Core's
// keep-alive timer firing just as the request arrived; keep 0: never
// answered at all). It records each request's path and body.
type rawCore struct {
	addr     string
	accepted atomic.Int64
	mu       sync.Mutex
	got      []string // "path body", in arrival order
}

func newRawCore(t *testing.T, keep int, closeAfter bool) *rawCore {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	rc := &rawCore{addr: "http://" + ln.Addr().String()}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			rc.accepted.Add(1)
			go rc.serve(c, keep, closeAfter)
		}
	}()
	return rc
}

func (rc *rawCore) serve(c net.Conn, keep int, closeAfter bool) {
	defer c.Close()
	br := bufio.NewReader(c)
	for n := 0; ; n++ {
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		body, _ := io.ReadAll(req.Body)
		rc.mu.Lock()
		entry := req.URL.Path + " " + string(body)
		if _, ok := req.Header["Idempotency-Key"]; ok {
			entry += " (with an Idempotency-Key header)"
		}
		rc.got = append(rc.got, entry)
		rc.mu.Unlock()
		if n == keep {
			return // the request was read; no answer, the connection closes
		}
		answer := sessionJSON
		if req.URL.Path == "/kb/search" {
			answer = `{"kb_ids":["faq"],"hits":[{"score":0.9,"content":"c","doc_id":7,"title":"t","seq":0,"kb_id":"faq"}]}`
		}
		fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(answer), answer)
		if closeAfter {
			return // closed silently, without Connection: close
		}
	}
}

func (rc *rawCore) requests() []string {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]string(nil), rc.got...)
}

// Core closing each connection after its answer (without Connection: close)
// costs the next call nothing, GETs and the /kb/search POST alike: the
// closed connection is dropped from the pool, or the call is sent again on
// a new one.
func TestTransportServerClosedIdle(t *testing.T) {
	core := newRawCore(t, -1, true)
	c := defaultClient(t, core.addr, 0)
	for i := range 3 {
		if _, err := c.Session(t.Context(), aliceAuth); err != nil {
			t.Fatalf("session %d: %v", i, err)
		}
		if _, err := c.SearchKB(t.Context(), "faq", "refund", 4); err != nil {
			t.Fatalf("search %d: %v", i, err)
		}
	}
	if got := core.accepted.Load(); got < 6 {
		t.Errorf("connections: got %d; want one per call (each was closed by the server)", got)
	}
}

// A reused connection that Core closes after reading a request, before any
// byte of the answer (its keep-alive timer firing as the request arrives),
// is the race net/http retries only for a request marked idempotent: the
// /kb/search POST is sent again, body and all, on a new connection and
// succeeds, as the session GET does.
func TestTransportRetriesOnDroppedReusedConnection(t *testing.T) {
	for _, second := range []string{"search", "session"} {
		t.Run(second, func(t *testing.T) {
			core := newRawCore(t, 1, false) // each connection answers one request, drops the next
			c := defaultClient(t, core.addr, 0)
			if _, err := c.Session(t.Context(), aliceAuth); err != nil {
				t.Fatal(err)
			}
			var err error
			if second == "search" {
				var hits []corefacts.Hit
				hits, err = c.SearchKB(t.Context(), "faq", "refund", 4)
				if err == nil && (len(hits) != 1 || hits[0].DocID != 7) {
					t.Fatalf("hits: got %+v; want doc 7", hits)
				}
			} else {
				_, err = c.Session(t.Context(), aliceAuth)
			}
			if err != nil {
				t.Fatalf("%s on the dropped connection: got %v; want it retried and answered", second, err)
			}
			got := core.requests()
			if len(got) != 3 || got[1] != got[2] || core.accepted.Load() != 2 {
				t.Fatalf("Core saw %q on %d connections; want the second request twice, on 2 connections", got, core.accepted.Load())
			}
			if second == "search" && (!strings.HasPrefix(got[2], "/kb/search {") || !strings.HasSuffix(got[2], "}")) {
				t.Errorf("retried search: got %q; want its body again and no Idempotency-Key on the wire", got[2])
			}
		})
	}
}

// A new connection dropped before any answer is not retried (net/http:
// Core refusing the request outright must not loop): ErrUnavailable.
func TestTransportNoRetryOnFreshConnection(t *testing.T) {
	core := newRawCore(t, 0, false)
	c := defaultClient(t, core.addr, 0)
	if _, err := c.SearchKB(t.Context(), "faq", "refund", 4); !errors.Is(err, corefacts.ErrUnavailable) {
		t.Fatalf("got %v; want ErrUnavailable", err)
	}
	if got := core.requests(); len(got) != 1 {
		t.Errorf("Core saw %q; want the search once", got)
	}
}

// A call whose deadline passes while Core is silent fails as a timeout; its
// connection is not reused and the next call succeeds.
func TestTransportDeadline(t *testing.T) {
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
func TestTransportUnreadBodyClosesConnection(t *testing.T) {
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
// over the default transport: cpu-µs/op is the whole process's user +
// system time per call (the double's share included).
func BenchmarkCoreSession(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(sessionJSON))
	}))
	defer srv.Close()
	c, err := coreclient.NewClient(coreclient.Options{BaseURL: srv.URL, ServiceToken: testServiceToken})
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
}

func rusageCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
