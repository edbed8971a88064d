package proxy

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bailinghub/knowledge-sidecar/internal/prom"
)

// The edge's bounds on what clients can make it hold (docs/reliability.md):
// a cap on open connections (limitListener), one on requests in flight and
// a byte budget for turn bodies buffered for interception (limits), and the
// connection wrapper (edgeConn) that also closes connections whose framing
// RFC 9112 §6.1 calls ambiguous and marks net/http's own error answers
// no-store.

// Limits bound the work one listener takes on. Zero fields take the
// Default… constants (defaults.go); negative ones turn the bound off (tests).
type Limits struct {
	// BodyMinRate (bytes/s) and BodyMinRateWindow: see config.Proxy.
	BodyMinRate       int64
	BodyMinRateWindow time.Duration
	// BodyTimeout bounds reading a whole request body (0: none).
	BodyTimeout time.Duration
	// MaxInFlight caps requests handled at once.
	MaxInFlight int
	// TurnBodyBudget caps the bytes of turn bodies buffered at once.
	TurnBodyBudget int64
	// InFlightPerClient and TurnBodyPerClient are one client's shares of
	// MaxInFlight and TurnBodyBudget (0: a quarter of the cap; negative:
	// no share, one client may take the whole cap).
	InFlightPerClient int
	TurnBodyPerClient int64
}

// limitMetrics count what the bounds refused.
type limitMetrics struct {
	rejected   *prometheus.CounterVec // reason: connections, in_flight, turn_body_budget
	share      *prometheus.CounterVec // the same, refused by one client's share
	idleClosed prometheus.Counter
	open       prometheus.Gauge
	idle       prometheus.Gauge
	turnBody   prometheus.Gauge
	ambig      prometheus.Counter
}

func newLimitMetrics(reg prometheus.Registerer) *limitMetrics {
	limits := []string{limitConnections, limitInFlight, limitTurnBody}
	m := &limitMetrics{
		rejected: prom.ClosedCounter("overload_rejections_total",
			"Requests and connections answered 503 because a bound was reached, by bound (one client's share included).", "limit", limits),
		share: prom.ClosedCounter("client_share_rejections_total",
			"Requests and connections answered 503 because their client address held its whole share of a bound, by bound.", "limit", limits),
		idleClosed: prom.Counter("idle_connections_closed_total",
			"Idle keep-alive connections closed to make room for a new connection under the connection caps."),
		open: prom.Gauge("open_connections", "Client connections open on the proxy listener."),
		idle: prom.Gauge("idle_connections",
			"Client connections open on the proxy listener and idle between keep-alive requests (the first closed when a connection cap is short)."),
		turnBody: prom.Gauge("turn_body_budget_used_bytes",
			"Bytes of the turn body budget held by turns being read or intercepted."),
		ambig: prom.Counter("ambiguous_framing_total",
			"Requests with both Content-Length and Transfer-Encoding, or Transfer-Encoding on HTTP/1.0, whose connection was closed after the answer."),
	}
	reg.MustRegister(m.rejected, m.share, m.idleClosed, m.open, m.idle, m.turnBody, m.ambig)
	return m
}

const (
	limitConnections = "connections"
	limitInFlight    = "in_flight"
	limitTurnBody    = "turn_body_budget"
)

// retryAfterSeconds is what every overload answer tells the client.
const retryAfterSeconds = 1

// The overload 503's code and message: errOverloaded, and overloadBody for
// the raw answer to a refused connection.
const (
	overloadCode    = "overloaded"
	overloadMessage = "The sidecar is at capacity; retry later."
	overloadBody    = `{"error":"` + overloadCode + `","message":"` + overloadMessage + `"}`
)

// limitListener caps the open connections of a listener, all clients
// together and per peer address (a trusted proxy's connections carry many
// clients: only the global cap applies to them). When a cap has no room,
// the oldest idle keep-alive connection is closed first (anyone's for the
// global cap, the peer's own for its share) and the new one takes its
// place; only when none is idle is the new connection answered a minimal
// 503 on the raw socket and closed, by a bounded set of goroutines (beyond
// them it is closed at once), so Accept keeps going and the process never
// piles up work for refused clients.
type limitListener struct {
	net.Listener
	open    *shares
	fw      forwarding
	m       *limitMetrics
	refuser chan struct{}

	mu   sync.Mutex
	idle map[*edgeConn]struct{} // keep-alive connections waiting for a request
}

// maxRefusing bounds the goroutines answering refused connections.
const maxRefusing = 64

func newLimitListener(ln net.Listener, total, perPeer int, fw forwarding, m *limitMetrics) *limitListener {
	return &limitListener{Listener: ln, open: newShares(int64(total), perClient(int64(perPeer), int64(total))),
		fw: fw, m: m, refuser: make(chan struct{}, maxRefusing), idle: map[*edgeConn]struct{}{}}
}

func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		var key clientKey
		unshared := false
		if a, ok := peerAddr(c.RemoteAddr().String()); ok {
			key, unshared = keyOf(a), l.fw.trustedAddr(a)
		}
		if ok, global := l.admit(key, unshared); !ok {
			l.m.rejected.WithLabelValues(limitConnections).Inc()
			if !global {
				l.m.share.WithLabelValues(limitConnections).Inc()
			}
			l.refuse(c)
			continue
		}
		l.m.open.Inc()
		return &edgeConn{Conn: c, ln: l, key: key}, nil
	}
}

// admit takes a place for a connection from key, closing idle keep-alive
// connections to make room when a cap is full.
// global reports which cap refused it, as shares.acquire does.
func (l *limitListener) admit(key clientKey, unshared bool) (ok, global bool) {
	for range 3 { // the global cap, then the peer's own share, then give up
		if unshared {
			ok, global = l.open.acquireUnshared(key, 1)
		} else {
			ok, global = l.open.acquire(key, 1)
		}
		if ok || !l.closeIdle(key, global) {
			return ok, global
		}
	}
	return false, global
}

// closeIdle closes the oldest idle keep-alive connection: when anyone is
// true, of any client at or above its share (never one of a client below
// it: a flood cannot take another client's idle connections), else one of
// key's. Closing releases its place at once.
func (l *limitListener) closeIdle(key clientKey, anyone bool) bool {
	l.mu.Lock()
	var oldest *edgeConn
	for c := range l.idle {
		if oldest != nil && !c.idleSince.Before(oldest.idleSince) {
			continue
		}
		if c.key == key || anyone && !l.open.belowShare(c.key) {
			oldest = c
		}
	}
	if oldest != nil {
		delete(l.idle, oldest)
		l.m.idle.Dec()
	}
	l.mu.Unlock()
	if oldest == nil {
		return false
	}
	l.m.idleClosed.Inc()
	_ = oldest.Close()
	return true
}

// setIdle records whether c waits for its next request (net/http's
// ConnState hook).
func (l *limitListener) setIdle(c *edgeConn, idle bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	_, was := l.idle[c]
	switch {
	case idle && !was:
		c.idleSince = time.Now()
		l.idle[c] = struct{}{}
		l.m.idle.Inc()
	case !idle && was:
		delete(l.idle, c)
		l.m.idle.Dec()
	}
}

// refusedAnswer is the whole answer to a connection over the cap.
var refusedAnswer = []byte("HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json; charset=utf-8\r\n" +
	"Cache-Control: no-store\r\nRetry-After: " + strconv.Itoa(retryAfterSeconds) + "\r\nConnection: close\r\nContent-Length: " +
	strconv.Itoa(len(overloadBody)) + "\r\n\r\n" + overloadBody)

func (l *limitListener) refuse(c net.Conn) {
	select {
	case l.refuser <- struct{}{}:
	default:
		c.Close()
		return
	}
	go func() {
		defer func() { <-l.refuser }()
		defer c.Close()
		// Answer, then read (and drop) what the client sends for a moment
		// before closing: closing with unread bytes resets the connection,
		// and the client may never see the answer.
		_ = c.SetDeadline(time.Now().Add(time.Second))
		if _, err := c.Write(refusedAnswer); err != nil {
			return
		}
		if cw, ok := c.(interface{ CloseWrite() error }); ok {
			_ = cw.CloseWrite()
		}
		var buf [4 << 10]byte
		for i := 0; i < 16; i++ { // at most 64 KiB
			if _, err := c.Read(buf[:]); err != nil {
				return
			}
		}
	}()
}

// edgeConn is one accepted client connection.
//
//   - Close releases its place under the connection cap (once).
//   - Read watches the request headers going by (framingScan) for the
//     combinations RFC 9112 §6.1 says must not keep a connection.
//   - Write adds Cache-Control: no-store to the answers net/http writes on
//     its own, before any handler (400, 431, 501, 417): those are written
//     straight to the connection while no handler of ours is running.
type edgeConn struct {
	net.Conn
	ln        *limitListener
	key       clientKey // the peer, whose connection share this holds
	idleSince time.Time // guarded by ln.mu
	closeOnce sync.Once
	scan      framingScan // touched by net/http's reading goroutine only
	ambiguous atomic.Bool
	// handling: a handler of ours runs, or its answer is still being
	// written (set by the edge, cleared when the connection goes idle).
	handling atomic.Bool
}

func (c *edgeConn) Close() error {
	err := c.Conn.Close()
	c.closeOnce.Do(func() {
		c.ln.setIdle(c, false)
		c.ln.open.release(c.key, 1)
		c.ln.m.open.Dec()
	})
	return err
}

func (c *edgeConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 && c.scan.feed(p[:n]) {
		c.ambiguous.Store(true)
	}
	return n, err
}

func (c *edgeConn) Write(p []byte) (int, error) {
	if !c.handling.Load() {
		if q, ok := withNoStore(p); ok {
			if _, err := c.Conn.Write(q); err != nil {
				return 0, err
			}
			return len(p), nil
		}
	}
	return c.Conn.Write(p)
}

// withNoStore inserts Cache-Control: no-store after the status line of an
// error answer (4xx/5xx) that begins p, unless it has one.
func withNoStore(p []byte) ([]byte, bool) {
	if !(bytes.HasPrefix(p, []byte("HTTP/1.1 ")) || bytes.HasPrefix(p, []byte("HTTP/1.0 "))) || len(p) < 13 {
		return nil, false
	}
	if c := p[9]; c != '4' && c != '5' {
		return nil, false
	}
	end := bytes.Index(p, []byte("\r\n"))
	if end < 0 {
		return nil, false
	}
	hdrEnd := bytes.Index(p, []byte("\r\n\r\n"))
	if hdrEnd >= 0 && bytes.Contains(bytes.ToLower(p[:hdrEnd]), []byte("\r\ncache-control:")) {
		return nil, false
	}
	q := make([]byte, 0, len(p)+25)
	q = append(q, p[:end]...)
	q = append(q, "\r\nCache-Control: no-store"...)
	q = append(q, p[end:]...)
	return q, true
}

// connOf is the client connection a request came on, or nil.
func connOf(ctx context.Context) *edgeConn {
	c, _ := ctx.Value(connKey{}).(*edgeConn)
	return c
}

type connKey struct{}

// connContext and connState are the http.Server hooks that tie requests to
// their edgeConn.
func connContext(ctx context.Context, c net.Conn) context.Context {
	if ec, ok := c.(*edgeConn); ok {
		return context.WithValue(ctx, connKey{}, ec)
	}
	return ctx
}

func connState(c net.Conn, s http.ConnState) {
	ec, ok := c.(*edgeConn)
	if !ok {
		return
	}
	switch s {
	case http.StateIdle:
		ec.handling.Store(false)
		ec.ln.setIdle(ec, true)
	case http.StateActive, http.StateHijacked, http.StateClosed:
		ec.ln.setIdle(ec, false)
	}
}

// framingScan follows the lines of what a client sends, header block by
// header block (a block ends at an empty line), and reports a block that
// holds both a Content-Length and a Transfer-Encoding field, or a
// Transfer-Encoding field under an HTTP/1.0 request line. net/http deletes
// both fields before a handler sees the request, so this is the only place
// they can be seen. Body bytes are scanned too: a body that looks like such
// a block closes its connection after the answer, which costs the client a
// reconnect and nothing else; a real one is never missed, because net/http
// must have read a request's whole header before its handler runs.
type framingScan struct {
	head  [len("transfer-encoding:")]byte
	headN int
	tail  [len("HTTP/1.0\r")]byte
	tailN int
	lines int // lines in the current block
	cl    bool
	te    bool
	h10   bool
}

// feed scans p and reports whether an ambiguous block ended in it.
func (s *framingScan) feed(p []byte) bool {
	found := false
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		seg := p
		if i >= 0 {
			seg = p[:i]
		}
		s.add(seg)
		if i < 0 {
			break
		}
		if s.endLine() {
			found = true
		}
		p = p[i+1:]
	}
	return found
}

func (s *framingScan) add(seg []byte) {
	if s.headN < len(s.head) {
		s.headN += copy(s.head[s.headN:], seg)
	}
	if len(seg) >= len(s.tail) {
		copy(s.tail[:], seg[len(seg)-len(s.tail):])
		s.tailN = len(s.tail)
		return
	}
	keep := min(s.tailN, len(s.tail)-len(seg))
	copy(s.tail[:], s.tail[s.tailN-keep:s.tailN])
	copy(s.tail[keep:], seg)
	s.tailN = keep + len(seg)
}

func (s *framingScan) endLine() bool {
	head := s.head[:s.headN]
	tail := s.tail[:s.tailN]
	s.headN, s.tailN = 0, 0
	if len(head) == 0 || len(head) == 1 && head[0] == '\r' {
		found := s.lines > 0 && s.te && (s.cl || s.h10)
		s.lines, s.cl, s.te, s.h10 = 0, false, false, false
		return found
	}
	if s.lines == 0 {
		s.h10 = bytes.HasSuffix(bytes.TrimSuffix(tail, []byte("\r")), []byte("HTTP/1.0"))
	} else {
		s.cl = s.cl || hasFoldPrefix(head, "content-length:")
		s.te = s.te || hasFoldPrefix(head, "transfer-encoding:")
	}
	s.lines++
	return false
}

func hasFoldPrefix(b []byte, prefix string) bool {
	return len(b) >= len(prefix) && bytes.EqualFold(b[:len(prefix)], []byte(prefix))
}
