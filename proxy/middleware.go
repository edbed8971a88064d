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
	"golang.org/x/net/http/httpguts"
)

// reqState travels in the request context so the ReverseProxy's error
// handler can report an outcome (499) the response writer never saw.
type reqState struct {
	id      string
	outcome int
	// Set from the transport's goroutine while it reads the client's body.
	bodyBad, bodyGone atomic.Bool
	// bodyTimeout: no byte of the body arrived for the idle timeout.
	// bodyEOF: the body was read to its end.
	bodyTimeout, bodyEOF atomic.Bool
}

type ctxKey struct{}

func stateOf(ctx context.Context) *reqState {
	s, _ := ctx.Value(ctxKey{}).(*reqState)
	return s
}

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
	return s.prefix + strconv.FormatUint(s.n.Add(1), 36)
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

// edge is the one middleware every request passes: request id, refusal of
// h2c upgrades, in-flight gauge, status/duration metrics and the access log.
// The only thing it puts around the ResponseWriter is edgeWriter, which keeps
// Flush/Hijack reachable through Unwrap, so streams stay streams.
//
// The accounting runs in a defer: ReverseProxy aborts a response whose body
// copy fails (client gone mid-stream, Core reset) by panicking with
// http.ErrAbortHandler, and such requests must still leave the in-flight
// gauge and be counted. The panic is re-raised for net/http to handle.
func (s *Server) edge() echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			start := time.Now()
			r := c.Request()
			st := &reqState{id: r.Header.Get("X-Request-Id")}
			if !validRequestID(st.id) {
				st.id = s.ids.next()
			}
			resp := c.Response()
			resp.Writer = &edgeWriter{ResponseWriter: resp.Writer, resp: resp, id: st.id}
			r = r.WithContext(context.WithValue(r.Context(), ctxKey{}, st))
			c.SetRequest(r)
			name := handlerName(c)
			s.m.inFlight.Inc()
			defer func() {
				p := recover()
				s.m.inFlight.Dec()
				status := resp.Status
				switch {
				case st.outcome != 0:
					status = st.outcome
				case p != nil && r.Context().Err() != nil:
					status = statusClientClosed // the client went away mid-response
				case p != nil:
					status = http.StatusBadGateway // the response was cut short
				}
				s.observe(r, st.id, name, status, resp.Size, time.Since(start))
				if p != nil {
					panic(p)
				}
			}()
			switch {
			case isH2CUpgrade(r.Header):
				s.writeErr(resp, r, errH2C)
				return nil
			case r.Method == "PRI" || r.RequestURI == "*" && r.Method != http.MethodOptions:
				// An HTTP/2 connection preface (or another asterisk-form
				// target) on this HTTP/1 listener: not a request Core serves.
				s.writeErr(resp, r, errRequestLine)
				return nil
			case s.feat != nil && nonCanonical(r):
				// Refused before Core sees it; the body is never read.
				s.writeErr(resp, r, errNonCanonicalPath)
				return nil
			}
			if r.ContentLength != 0 {
				// Without full duplex, net/http drains and closes the request
				// body when the response header is written, while the
				// transport may still be reading it to send to Core (it has
				// not seen EOF yet): the transport then kills the upstream
				// connection and the response is cut short.
				ctl := http.NewResponseController(resp.Writer)
				_ = ctl.EnableFullDuplex()
				r.Body = &idleBody{ReadCloser: r.Body, ctl: ctl, idle: s.bodyIdle, st: st}
			}
			body := r.Body // handlers may swap r.Body; the wire is this one
			if err := next(c); err != nil && !resp.Committed {
				// The edge answers handler errors itself, so that what is
				// recorded below is what was sent.
				s.writeErr(resp, r, err)
			}
			// Read what the handler left of the body (bounded) before the
			// connection is reused. With full duplex net/http no longer does
			// this reliably: a fixed-length body left unread (Core
			// unreachable, an early answer) made the next request on the
			// connection fail with a reset.
			// A handler that already chose to close the connection (say, a
			// 401 to an oversized body) is not made to read the rest.
			closing := httpguts.HeaderValuesContainsToken(resp.Header()["Connection"], "close")
			clean := r.ContentLength == 0 || closing || bodyEndsCleanly(body, drainLimit(c))
			if r.ContentLength < 0 && !clean {
				// A chunked body that breaks after the answer went out
				// (Core answered early). With full duplex net/http would
				// keep the connection and parse whatever follows the break
				// as the next request; aborting closes it instead.
				if st.outcome == 0 {
					st.outcome = resp.Status
				}
				panic(http.ErrAbortHandler)
			}
			if !resp.Committed && st.outcome != http.StatusSwitchingProtocols {
				// Every request gets an answer: net/http would otherwise send
				// an empty 200 for a handler that wrote nothing.
				st.outcome = 0
				s.writeErr(resp, r, errUpstreamGone)
			}
			return nil
		}
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

// idleBody is every request body as the edge hands it on: a read that sees
// no byte for idle ends with a timeout (the connection's read deadline), so
// a client trickling or stalling its body cannot hold a goroutine, a Core
// connection or a ledger record forever. It also notes whether the body was
// read to its end, which decides whether an early answer closes the
// connection.
type idleBody struct {
	io.ReadCloser
	ctl  *http.ResponseController
	idle time.Duration
	st   *reqState
}

func (b *idleBody) Read(p []byte) (int, error) {
	if b.idle > 0 {
		_ = b.ctl.SetReadDeadline(time.Now().Add(b.idle))
	}
	n, err := b.ReadCloser.Read(p)
	switch {
	case err == nil:
	case errors.Is(err, io.EOF):
		b.st.bodyEOF.Store(true)
		if b.idle > 0 {
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

// observe records one finished request in the metrics and the access log.
func (s *Server) observe(r *http.Request, id, handler string, status int, size int64, elapsed time.Duration) {
	s.m.requests.WithLabelValues(handler, strconv.Itoa(status)).Inc()
	s.m.duration.WithLabelValues(handler).Observe(elapsed.Seconds())
	level := slog.LevelDebug
	if s.access {
		level = slog.LevelInfo
	}
	if status >= 500 {
		level = slog.LevelWarn
	}
	if s.log.Enabled(r.Context(), level) {
		// Path only: the query may hold a token (Core accepts ?token=).
		s.log.LogAttrs(r.Context(), level, "request",
			slog.String("request_id", id), slog.String("handler", handler),
			slog.String("method", r.Method), slog.String("path", r.URL.Path),
			slog.Int("status", status), slog.Int64("bytes", size),
			slog.Float64("duration_ms", durationMS(elapsed)))
	}
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
	id            string
	informational bool // a 1xx went out and echo now thinks it is committed
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
	if len(h.Values("X-Request-Id")) == 0 {
		h.Set("X-Request-Id", w.id)
	}
}

func (w *edgeWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// isH2CUpgrade reports an Upgrade: h2c request (h2c smuggling is refused).
func isH2CUpgrade(h http.Header) bool { return httpguts.HeaderValuesContainsToken(h["Upgrade"], "h2c") }
