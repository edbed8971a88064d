package proxy

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestPassthroughWrites: an answer of known length goes to the client in no
// more writes than through a lean ReverseProxy. net/http's server buffers 4
// KiB before its first write; the transport's first read from Core holds
// Core's header and the first body bytes. The sidecar's header is longer
// than Core's (X-Request-Id), so with a 4 KiB read buffer the first body
// bytes overflowed the write buffer by a few bytes and every answer longer
// than that took one write (a syscall) more. Core's bytes come from a
// connection that answers every read as fully as it can, so the reads, and
// with them the writes, are the same on every run.
func TestPassthroughWrites(t *testing.T) {
	body := bytes.Repeat([]byte("x"), 64<<10)
	answer := append([]byte("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"+
		"Date: Tue, 01 Dec 2026 16:00:00 GMT\r\nContent-Length: 65536\r\n\r\n"), body...)
	dial := func(context.Context, string, string) (net.Conn, error) { return newScriptedConn(answer), nil }

	side := NewTransport(TransportOptions{DialTimeout: time.Second, ResponseHeaderTimeout: 5 * time.Second, MaxIdleConnsPerHost: 4})
	side.DialContext = dial
	w := newBenchWorldWith(t, side)
	leanTransport := &http.Transport{DialContext: dial, DisableCompression: true}
	t.Cleanup(leanTransport.CloseIdleConnections)
	lean := leanProxy(w.upstream.URL, leanTransport)
	writes := func(h http.Handler) int64 {
		t.Helper()
		srv := httptest.NewUnstartedServer(h)
		cl := &countingListener{Listener: srv.Listener}
		srv.Listener = cl
		srv.Start()
		defer srv.Close()
		resp, err := http.Get(srv.URL + "/json/65536")
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK || !bytes.Equal(got, body) {
			t.Fatalf("got %d with %d bytes (%v); want 200 with the 64 KiB body", resp.StatusCode, len(got), err)
		}
		return cl.writes.Load()
	}
	edge, bare := writes(w.server.Handler()), writes(lean)
	t.Logf("writes to the client for a 64 KiB answer: edge %d, lean %d", edge, bare)
	if edge > bare {
		t.Errorf("edge: %d writes to the client for a 64 KiB answer; want at most the lean proxy's %d", edge, bare)
	}
}

// countingListener counts the writes to every connection it accepted.
type countingListener struct {
	net.Listener
	writes atomic.Int64
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &countingConn{Conn: c, writes: &l.writes}, nil
}

type countingConn struct {
	net.Conn
	writes *atomic.Int64
}

func (c *countingConn) Write(p []byte) (int, error) {
	c.writes.Add(1) // before the bytes can reach the client
	return c.Conn.Write(p)
}

// scriptedConn is Core's side of one connection: once a whole request
// header has been written to it, reads return answer as fully as each
// buffer allows; after it, a read waits for Close, as an idle keep-alive
// connection does.
type scriptedConn struct {
	answer  *bytes.Reader
	mu      sync.Mutex
	req     []byte
	sent    chan struct{} // closed when the request header is in
	closed  chan struct{}
	onceReq sync.Once
	onceEnd sync.Once
}

func newScriptedConn(answer []byte) *scriptedConn {
	return &scriptedConn{answer: bytes.NewReader(answer), sent: make(chan struct{}), closed: make(chan struct{})}
}

func (c *scriptedConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	c.req = append(c.req, p...)
	done := bytes.Contains(c.req, []byte("\r\n\r\n"))
	c.mu.Unlock()
	if done {
		c.onceReq.Do(func() { close(c.sent) })
	}
	return len(p), nil
}

func (c *scriptedConn) Read(p []byte) (int, error) {
	select {
	case <-c.sent:
	case <-c.closed:
		return 0, io.EOF
	}
	if c.answer.Len() > 0 {
		return c.answer.Read(p)
	}
	<-c.closed
	return 0, io.EOF
}

func (c *scriptedConn) Close() error {
	c.onceEnd.Do(func() { close(c.closed) })
	return nil
}

var scriptedAddr = &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1}

func (c *scriptedConn) LocalAddr() net.Addr              { return scriptedAddr }
func (c *scriptedConn) RemoteAddr() net.Addr             { return scriptedAddr }
func (c *scriptedConn) SetDeadline(time.Time) error      { return nil }
func (c *scriptedConn) SetReadDeadline(time.Time) error  { return nil }
func (c *scriptedConn) SetWriteDeadline(time.Time) error { return nil }
