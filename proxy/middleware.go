package proxy

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/labstack/echo/v4"
)

// reqState travels in the request context so the ReverseProxy's error
// handler can report an outcome (499) the response writer never saw.
type reqState struct {
	id      string
	outcome int
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
// It wraps nothing around the ResponseWriter (echo's Response already records
// status and size and keeps Flush/Hijack/Unwrap), so streams stay streams.
func (s *Server) edge(handler string) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			start := time.Now()
			r := c.Request()
			st := &reqState{id: r.Header.Get("X-Request-Id")}
			if !validRequestID(st.id) {
				st.id = s.ids.next()
			}
			c.Response().Header().Set("X-Request-Id", st.id)
			c.SetRequest(r.WithContext(context.WithValue(r.Context(), ctxKey{}, st)))
			name := handler
			if name == "" {
				name = handlerName(c)
			}
			s.m.inFlight.Inc()
			var err error
			if isH2CUpgrade(r.Header) {
				writeError(c.Response(), http.StatusBadRequest, "invalid_request", "HTTP/2 cleartext upgrade (h2c) is not supported.")
			} else {
				err = next(c)
			}
			s.m.inFlight.Dec()
			status := c.Response().Status
			if st.outcome != 0 {
				status = st.outcome
			}
			s.m.requests.WithLabelValues(name, strconv.Itoa(status)).Inc()
			elapsed := time.Since(start)
			s.m.duration.WithLabelValues(name).Observe(elapsed.Seconds())
			level := slog.LevelDebug
			if status >= 500 {
				level = slog.LevelWarn
			}
			if s.log.Enabled(r.Context(), level) {
				// Path only: the query may hold a token (Core accepts ?token=).
				s.log.LogAttrs(r.Context(), level, "request",
					slog.String("request_id", st.id), slog.String("handler", name),
					slog.String("method", r.Method), slog.String("path", r.URL.Path),
					slog.Int("status", status), slog.Int64("bytes", c.Response().Size),
					slog.Duration("duration", elapsed))
			}
			return err
		}
	}
}

// handlerName labels a request by the route it matched (closed set).
func handlerName(c echo.Context) string {
	switch c.Path() {
	case pathCapabilities:
		return "capabilities"
	case pathSearch:
		return "search"
	case pathRead:
		return "read"
	case pathTurns:
		return "turns"
	}
	return "passthrough"
}

func isH2CUpgrade(h http.Header) bool {
	for _, v := range h.Values("Upgrade") {
		for _, tok := range strings.Split(v, ",") {
			if strings.EqualFold(strings.TrimSpace(tok), "h2c") {
				return true
			}
		}
	}
	return false
}
