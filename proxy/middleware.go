package proxy

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/net/http/httpguts"

	"github.com/bailinghub/knowledge-sidecar/corefacts/jsstring"
	"github.com/bailinghub/knowledge-sidecar/knowledge"
)

// reqState travels in the request context so the ReverseProxy's error
// handler can report an outcome (499) the response writer never saw. It is
// that context too: the parent's, answering ctxKey with itself (Value), so
// the state and its context are one allocation, not two as with
// context.WithValue. BenchmarkReqStateContext: against context.WithValue
// for the state and the two knowledge keys it saves ~0.5 µs and 6
// allocations of a ~25 µs pass-through request (~2 %; DESIGN 14 review,
// docs/performance.md).
type reqState struct {
	context.Context
	id      string
	outcome int
	// w and idv live here so that a request's state, its response writer
	// and its X-Request-Id value are one allocation.
	w   edgeWriter
	idv [1]string
	// Set from the transport's goroutine while it reads the client's body.
	bodyBad, bodyGone atomic.Bool
	// bodyTimeout: no byte of the body arrived for the idle timeout.
	// bodyEOF: the body was read to its end.
	bodyTimeout, bodyEOF atomic.Bool
	// client is the address the request is counted under (shares.go).
	client clientKey
	// turnBytes is what this request holds of the turn body budget
	// (charged as a turn body is buffered, turns.go; given back when the
	// request ends).
	turnBytes int64
	// What the edge's steps share: the request as the edge handed it on
	// (with this state as its context; a handler may hand another on), its
	// response, its handler's series, its start and its server span (nil
	// unless tracing is on).
	req    *http.Request
	resp   *echo.Response
	series *handlerSeries
	start  time.Time
	span   trace.Span
	// fw resolves the client address the audit records (Value); refusal,
	// when set, audits the sidecar's own answer to the request (writeErr,
	// audit.go).
	fw      *forwarding
	refusal *refusalAudit
}

type ctxKey struct{}

// Value is the embedded context's, but for ctxKey: the state itself, and
// for knowledge.RequestIDKey and knowledge.ClientAddressKey: the request id
// and the resolved client address (the disclosure audit's).
func (s *reqState) Value(key any) any {
	switch key.(type) {
	case ctxKey:
		return s
	case knowledge.RequestIDKey:
		return s.id
	case knowledge.ClientAddressKey:
		if s.fw == nil || s.req == nil {
			return ""
		}
		if a, ok := s.fw.clientAddr(s.req); ok {
			return a.String()
		}
		return ""
	}
	return s.Context.Value(key)
}

func stateOf(ctx context.Context) *reqState {
	s, _ := ctx.Value(ctxKey{}).(*reqState)
	return s
}

// RequestID is the id the edge gave the request ctx belongs to ("" outside
// one): what the parts built beside the edge log with their warnings.
func RequestID(ctx context.Context) string { return requestID(ctx) }

func requestID(ctx context.Context) string {
	if s := stateOf(ctx); s != nil {
		return s.id
	}
	return ""
}

func setOutcome(ctx context.Context, status int) {
	if s := stateOf(ctx); s != nil {
		s.outcome = status
	}
}

// idSource makes request ids: a random per-process prefix and a counter, so
// ids are unique without a syscall per request.
type idSource struct {
	prefix string
	n      atomic.Uint64
}

func newIDSource() *idSource {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return &idSource{prefix: hex.EncodeToString(b[:]) + "-"}
}

func (s *idSource) next() string {
	var b [40]byte // a 12-character prefix, "-" and at most 13 digits
	return string(strconv.AppendUint(append(b[:0], s.prefix...), s.n.Add(1), 36))
}

// maxRequestIDLen bounds an inbound X-Request-Id we are willing to echo.
const maxRequestIDLen = 128

func validRequestID(v string) bool {
	if v == "" || len(v) > maxRequestIDLen {
		return false
	}
	for i := 0; i < len(v); i++ {
		if c := v[i]; c < 0x21 || c > 0x7e {
			return false
		}
	}
	return true
}

// edge is the one middleware every request passes, as a list of steps:
// request id and state (begin), connection flags (markConnection), the
// in-flight share (enter), refusals before any handler (refusal), the body
// wrapper (watchBody), the handler (handle), and the one post-answer drain
// (drain); leave does the accounting. The only thing it puts around the
// ResponseWriter is edgeWriter, which keeps Flush/Hijack reachable through
// Unwrap, so streams stay streams.
//
// The accounting runs in a defer: ReverseProxy aborts a response whose body
// copy fails (client gone mid-stream, Core reset) by panicking with
// http.ErrAbortHandler, and such requests must still leave the in-flight
// gauge and be counted. The panic is re-raised for net/http to handle.
func (s *Server) edge() echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			st := s.begin(c)
			s.markConnection(st)
			if !s.enter(st) {
				s.writeErr(st.resp, st.req, errOverloaded)
				s.record(st, st.resp.Status)
				return nil
			}
			defer func() {
				p := recover()
				s.leave(st, p)
				if p != nil {
					panic(p)
				}
			}()
			if err := s.refusal(st.req); err != nil {
				s.writeErr(st.resp, st.req, err)
				return nil
			}
			wire := s.watchBody(st)
			s.handle(c, next, st)
			s.drain(c, st, wire)
			return nil
		}
	}
}

// begin gives the request its id (a valid inbound X-Request-Id, else a new
// one), its state — which is its context too, with the server span when
// tracing is on — and the edgeWriter around echo's.
func (s *Server) begin(c echo.Context) *reqState {
	st := &reqState{start: time.Now(), fw: &s.fw}
	r := c.Request()
	if v := r.Header["X-Request-Id"]; len(v) > 0 && validRequestID(v[0]) { // the key is canonical
		st.id = v[0]
	} else {
		st.id = s.ids.next()
	}
	st.idv[0] = st.id
	resp := c.Response()
	st.w = edgeWriter{ResponseWriter: resp.Writer, resp: resp, id: st.idv[:]}
	resp.Writer = &st.w
	ctx := r.Context()
	if s.tracer != nil {
		ctx, st.span = s.startServerSpan(ctx, r, c.Path(), st.id)
	}
	st.Context = ctx
	r = r.WithContext(st)
	c.SetRequest(r)
	st.req, st.resp = r, resp
	st.series = s.m.handler(handlerName(c))
	return st
}

// markConnection tells the connection that the request is being handled
// (net/http's own answers are done for it) and ends an ambiguously framed
// one after the answer.
func (s *Server) markConnection(st *reqState) {
	conn := connOf(st.req.Context())
	if conn == nil {
		return
	}
	conn.handling.Store(true)
	if conn.ambiguous.Load() {
		// RFC 9112 §6.1: Content-Length with Transfer-Encoding, or
		// Transfer-Encoding on HTTP/1.0: answered, then the connection
		// ends, so nothing after it is parsed with a framing another hop
		// may have read differently.
		st.resp.Header().Set("Connection", "close")
		s.lim.m.ambig.Inc()
	}
}

// enter takes the request's place in flight, under its client's share;
// false when the cap (everyone's, or the client's share) is reached.
func (s *Server) enter(st *reqState) bool {
	st.client = s.fw.clientOf(st.req)
	if ok, global := s.lim.inFlight.acquire(st.client, 1); !ok {
		s.lim.m.rejected.WithLabelValues(limitInFlight).Inc()
		if !global {
			s.lim.m.share.WithLabelValues(limitInFlight).Inc()
		}
		return false
	}
	s.m.inFlight.Inc()
	return true
}

// leave gives back what the request held (its place in flight, its turn
// body bytes) and records it; p is what the handler panicked with.
func (s *Server) leave(st *reqState, p any) {
	s.m.inFlight.Dec()
	s.lim.inFlight.release(st.client, 1)
	if n := st.turnBytes; n > 0 {
		st.turnBytes = 0
		s.lim.turnBody.release(st.client, n)
		s.lim.m.turnBody.Sub(float64(n))
	}
	status := st.resp.Status
	switch {
	case st.outcome != 0:
		status = st.outcome
	case p != nil && st.req.Context().Err() != nil:
		status = statusClientClosed // the client went away mid-response
	case p != nil:
		status = http.StatusBadGateway // the response was cut short
	}
	s.record(st, status)
}

// record counts the finished request, logs it and ends its span.
func (s *Server) record(st *reqState, status int) {
	s.observe(st.req, st.id, st.series, status, st.resp.Size, time.Since(st.start))
	if st.span != nil {
		endServerSpan(st.span, status)
	}
}

// refusal is the answer for a request the edge refuses before any handler
// sees it, or nil.
func (s *Server) refusal(r *http.Request) error {
	switch {
	case isH2CUpgrade(r.Header):
		return errH2C
	case r.Method == "PRI" || r.RequestURI == "*" && r.Method != http.MethodOptions:
		// An HTTP/2 connection preface (or another asterisk-form target) on
		// this HTTP/1 listener: not a request Core serves.
		return errRequestLine
	case s.feat != nil && nonCanonical(r):
		// Refused before Core sees it; the body is never read.
		return errNonCanonicalPath
	}
	return nil
}

// watchBody puts idleBody around a request body (deadlines, end of body)
// and returns the body as it comes off the wire (handlers may swap r.Body).
func (s *Server) watchBody(st *reqState) io.ReadCloser {
	r := st.req
	if r.ContentLength != 0 {
		// Without full duplex, net/http drains and closes the request body
		// when the response header is written, while the transport may
		// still be reading it to send to Core (it has not seen EOF yet):
		// the transport then kills the upstream connection and the response
		// is cut short.
		ctl := http.NewResponseController(st.resp.Writer)
		_ = ctl.EnableFullDuplex()
		ib := &idleBody{ReadCloser: r.Body, ctl: ctl, idle: s.bodyIdle, st: st, rate: s.lim.rate, window: s.lim.window}
		if s.lim.bodyTimeout > 0 {
			ib.end = st.start.Add(s.lim.bodyTimeout)
		}
		r.Body = ib
	}
	return r.Body
}

// handle runs the handler; the edge answers a handler's error itself, so
// that what is recorded is what was sent.
func (s *Server) handle(c echo.Context, next echo.HandlerFunc, st *reqState) {
	if err := next(c); err != nil && !st.resp.Committed {
		s.writeErr(st.resp, st.req, err)
	}
}

// drain reads what the handler left of the body (bounded) before the
// connection is reused: with full duplex net/http no longer does this
// reliably, and a fixed-length body left unread (Core unreachable, an early
// answer) made the next request on the connection fail with a reset. A
// handler that already chose to close the connection (say, a 401 to an
// oversized body) is not made to read the rest. A chunked body that breaks
// after the answer went out aborts the connection; a request that got no
// answer at all gets one.
func (s *Server) drain(c echo.Context, st *reqState, wire io.ReadCloser) {
	r, resp := st.req, st.resp
	if r.ContentLength != 0 && resp.Committed && !st.bodyEOF.Load() {
		// An early answer (Core answered before the body ended). With
		// FlushInterval 0 its tail may still sit in net/http's buffers, and
		// the client may wait for it before it sends the rest: it goes out
		// before the drain below.
		_ = http.NewResponseController(resp.Writer).Flush()
	}
	closing := httpguts.HeaderValuesContainsToken(resp.Header()["Connection"], "close")
	clean := r.ContentLength == 0 || closing || bodyEndsCleanly(wire, drainLimit(c))
	if r.ContentLength < 0 && !clean {
		// A chunked body that breaks after the answer went out (Core
		// answered early). With full duplex net/http would keep the
		// connection and parse whatever follows the break as the next
		// request; aborting closes it instead.
		if st.outcome == 0 {
			st.outcome = resp.Status
		}
		panic(http.ErrAbortHandler)
	}
	if !resp.Committed && st.outcome != http.StatusSwitchingProtocols {
		// Every request gets an answer: net/http would otherwise send an
		// empty 200 for a handler that wrote nothing.
		st.outcome = 0
		s.writeErr(resp, r, errUpstreamGone)
	}
}

// nonCanonical reports whether the request's target is an intercepted path
// in a spelling other than the literal one. (A literal intercepted path
// whose route segment is no route key reaches its handler, which answers
// 404 route_unavailable after identity.)
func nonCanonical(r *http.Request) bool {
	raw, ok := rawRequestPath(r)
	return ok && classifyPath(raw) == pathNonCanon
}

// idleBody is every request body as the edge hands it on. Each read gets
// the connection's read deadline, the earliest of:
//
//   - idle after now: no byte for that long ends the body;
//   - the minimum-rate deadline: the body starts with window of credit,
//     every byte read adds 1/rate seconds, and the credit is never more than
//     window ahead of now, so a body that arrives slower than rate (on
//     average over any stretch longer than window) ends, while one that
//     keeps up runs as long as it needs;
//   - end: the whole-body deadline, when one is set.
//
// A deadline that passes ends the body with a timeout (408 if nothing was
// answered yet; the connection closes), so a client trickling or stalling
// its body cannot hold a goroutine, a Core connection, a buffer or a ledger
// record for long. Nothing applies once the body is read to its end: the
// answer (an SSE stream, a WebSocket) is never cut by these. It also notes
// whether the body was read to its end, which decides whether an early
// answer closes the connection.
type idleBody struct {
	io.ReadCloser
	ctl    *http.ResponseController
	idle   time.Duration
	st     *reqState
	rate   int64         // bytes per second; ≤ 0: no minimum rate
	window time.Duration // grace and most credit of the minimum rate
	credit time.Time     // the minimum-rate deadline; zero until the first read
	end    time.Time     // whole-body deadline; zero: none
}

func (b *idleBody) Read(p []byte) (int, error) {
	now := time.Now()
	var deadline time.Time
	if b.idle > 0 {
		deadline = now.Add(b.idle)
	}
	if b.rate > 0 {
		if b.credit.IsZero() {
			b.credit = now.Add(b.window)
		}
		deadline = earliest(deadline, b.credit)
	}
	deadline = earliest(deadline, b.end)
	if !deadline.IsZero() {
		_ = b.ctl.SetReadDeadline(deadline)
	}
	n, err := b.ReadCloser.Read(p)
	if b.rate > 0 && n > 0 {
		earned := time.Duration(int64(n) * int64(time.Second) / b.rate)
		b.credit = b.credit.Add(earned)
		if ceiling := time.Now().Add(b.window); b.credit.After(ceiling) {
			b.credit = ceiling
		}
	}
	switch {
	case err == nil:
	case errors.Is(err, io.EOF):
		b.st.bodyEOF.Store(true)
		if !deadline.IsZero() {
			// Past the body, net/http's own background read must not
			// inherit the deadline (it would cancel a long answer).
			_ = b.ctl.SetReadDeadline(time.Time{})
		}
	default:
		// A timeout leaves the deadline expired, so nothing waits on
		// this connection's body again; it closes after the answer.
		if ne, ok := errors.AsType[net.Error](err); ok && ne.Timeout() {
			b.st.bodyTimeout.Store(true)
		}
	}
	return n, err
}

// earliest is the earlier of two deadlines, zero meaning none.
func earliest(a, b time.Time) time.Time {
	switch {
	case a.IsZero():
		return b
	case b.IsZero() || a.Before(b):
		return a
	}
	return b
}

// bodyEndsCleanly reads what is left of a request body (bounded) and
// reports false only when its framing is broken. A body already closed, at
// EOF, or longer than the bound is left to net/http, which closes the
// connection for the last case itself.
func bodyEndsCleanly(body io.Reader, limit int64) bool {
	if body == nil || body == http.NoBody {
		return true
	}
	_, err := io.CopyN(io.Discard, body, limit)
	switch {
	case err == nil, errors.Is(err, io.EOF), errors.Is(err, http.ErrBodyReadAfterClose):
		return true
	}
	return false
}

// observe records one finished request in the metrics (through the
// handler's pre-resolved series) and the access log.
func (s *Server) observe(r *http.Request, id string, hs *handlerSeries, status int, size int64, elapsed time.Duration) {
	hs.requests(status).Inc()
	if sc, ok := s.sampled(r.Context()); ok {
		// The exemplar links this bucket to the trace (OpenMetrics only).
		hs.duration.(prometheus.ExemplarObserver).ObserveWithExemplar(
			elapsed.Seconds(), prometheus.Labels{"trace_id": sc.TraceID().String()})
	} else {
		hs.duration.Observe(elapsed.Seconds())
	}
	handler := hs.name
	level := slog.LevelDebug
	if s.access {
		level = slog.LevelInfo
	}
	if status >= 500 {
		level = slog.LevelWarn
	}
	if s.log.Enabled(r.Context(), level) {
		// Path only, never the query (it may hold a token: Core accepts
		// ?token=), and at most maxLoggedPath bytes of it.
		s.log.LogAttrs(r.Context(), level, "request",
			slog.String("request_id", id), slog.String("handler", handler),
			slog.String("method", r.Method), slog.String("path", loggedPath(r.URL.Path)),
			slog.Int("status", status), slog.Int64("bytes", size),
			slog.Float64("duration_ms", durationMS(elapsed)))
	}
}

// maxLoggedPath bounds the bytes of a request path written to a log line:
// a path may be as long as the header limit allows, and a log line per 5xx
// must not be.
const maxLoggedPath = 256

// loggedPath is path cut to maxLoggedPath bytes (at a UTF-8 boundary, with
// "…" marking the cut, the whole still at most maxLoggedPath bytes).
func loggedPath(path string) string {
	if len(path) <= maxLoggedPath {
		return path
	}
	const mark = "…"
	return jsstring.CutUTF8(path, maxLoggedPath-len(mark)) + mark
}

// durationMS is a duration in milliseconds with microsecond precision, the
// unit of every duration in the logs.
func durationMS(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// edgeWriter sits between echo's Response and net/http's writer. It fixes
// two things echo's Response gets wrong for a proxy:
//
//   - informational (1xx) responses: echo marks the response committed on
//     the first WriteHeader, so after a 103 Early Hints the final status was
//     dropped and the client got 200. edgeWriter passes 1xx straight through
//     and un-commits echo's Response before the final header is written
//     (ReverseProxy always touches Header() between the two; a handler of
//     our own that sends a 1xx must do the same).
//   - 100 Continue from Core is not relayed (see WriteHeader).
//   - X-Request-Id: set when the final header is written, and only if the
//     answer does not already carry one (Core's own passes through once).
//
// Unwrap keeps Flush, Hijack and deadlines reachable via ResponseController.
type edgeWriter struct {
	http.ResponseWriter
	resp          *echo.Response
	id            []string // the X-Request-Id value, shared, never appended to
	informational bool     // a 1xx went out and echo now thinks it is committed
}

func (w *edgeWriter) Header() http.Header {
	if w.informational {
		w.informational = false
		w.resp.Committed = false
		w.resp.Status = http.StatusOK
	}
	return w.ResponseWriter.Header()
}

func (w *edgeWriter) WriteHeader(code int) {
	if code == http.StatusContinue {
		// 100-continue is per hop: net/http sends the client its own 100
		// when the body is first read, which the transport does only once
		// Core has said 100 itself. Relaying Core's as well would send two.
		w.informational = true // echo has marked itself committed all the same
		return
	}
	if code >= 100 && code < 200 && code != http.StatusSwitchingProtocols {
		w.informational = true
		w.ResponseWriter.WriteHeader(code)
		return
	}
	w.stampID()
	w.ResponseWriter.WriteHeader(code)
}

// Write covers a handler that writes a body right after a 1xx without
// touching Header(): net/http then sends an implicit 200, which gets the id.
func (w *edgeWriter) Write(p []byte) (int, error) {
	if w.informational {
		w.informational = false
		w.resp.Status = http.StatusOK
		w.stampID()
	}
	return w.ResponseWriter.Write(p)
}

// stampID adds the request id unless the answer already has one.
func (w *edgeWriter) stampID() {
	h := w.ResponseWriter.Header()
	if len(h["X-Request-Id"]) == 0 { // keys of a response header are canonical
		h["X-Request-Id"] = w.id[:1:1]
	}
}

func (w *edgeWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// isH2CUpgrade reports an Upgrade: h2c request (h2c smuggling is refused).
func isH2CUpgrade(h http.Header) bool { return httpguts.HeaderValuesContainsToken(h["Upgrade"], "h2c") }
