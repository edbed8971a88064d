package proxy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httputil"
	"sync"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/bailinghub/knowledge-sidecar/corefacts"
	"github.com/bailinghub/knowledge-sidecar/corelink"
	"github.com/bailinghub/knowledge-sidecar/knowledge"
	"github.com/bailinghub/knowledge-sidecar/native"
	"github.com/bailinghub/knowledge-sidecar/protocol"
	"github.com/bailinghub/knowledge-sidecar/rollout"
)

func newFeatures(f *Features, s *Server) (*features, error) {
	if f.Knowledge == nil || f.Native == nil || f.Turns == nil {
		return nil, errors.New("proxy: features need a knowledge service, native detection and a turn interceptor")
	}
	if f.ProbeTimeout <= 0 {
		f.ProbeTimeout = corelink.Timeout
	}
	ft := &features{k: f.Knowledge, native: f.Native, turns: f.Turns}
	p := f.Rollout
	ft.rollout.Store(&p)
	ft.turnProxy = s.newTurnProxy()
	ft.caps = s.newCapsProxy(f.ProbeTimeout, f.Native)
	ft.mcp, ft.mcpOpts = f.MCPHandler, f.MCP
	ft.oauth = f.OAuth
	return ft, nil
}

// SetRollout swaps the rollout policy atomically (SIGHUP reload). Requests
// in flight keep the decision they already made.
func (s *Server) SetRollout(p rollout.Policy) {
	if s.feat != nil {
		s.feat.rollout.Store(&p)
	}
}

// SetTurnHints turns same-run hints on or off (turn_hints, SIGHUP reload).
// Turns whose answer is being rewritten keep the setting they read.
func (s *Server) SetTurnHints(on bool) {
	if s.feat != nil {
		s.feat.turns.SetHints(on)
	}
}

// decide says whether the sidecar handles a knowledge or turn request for
// route itself: the workspace is rolled out and the Core is not native.
// While no native-detection verdict is held, the first such request probes
// Core's capabilities with its own bearer before it is decided.
func (s *Server) decide(c echo.Context, key corefacts.RouteKey) bool {
	route := c.Param("route") // the rollout policy judges the segment as written
	pol := s.feat.rollout.Load()
	decision := decisionEnabled
	switch {
	case key.IsZero() && !s.feat.native.IsNative():
		// No workspace has this key (upper case, encoded, too long): the
		// sidecar answers 404 route_unavailable after identity, like
		// Core's own 404, rather than guess how Core would spell it.
		decision = decisionInvalidRoute
	case !pol.Enabled(route):
		decision = decisionDisabled
	case s.feat.native.Native(c.Request().Context(), c.Request().Header.Get("Authorization"), key):
		// With no verdict held this probes Core first (SPEC §8.2).
		decision = decisionNative
	}
	s.m.rollout.WithLabelValues(string(decision)).Inc()
	if s.log.Enabled(c.Request().Context(), slog.LevelDebug) {
		s.log.LogAttrs(c.Request().Context(), slog.LevelDebug, "rollout decision",
			slog.String("request_id", requestID(c.Request().Context())), slog.String("route", route),
			slog.String("policy", pol.String()), slog.String("decision", string(decision)))
	}
	return decision == decisionEnabled || decision == decisionInvalidRoute
}

// routeKey parses the request's route segment, once, at the edge: the zero
// key when it is no route key.
func routeKey(c echo.Context) corefacts.RouteKey {
	k, _ := corefacts.ParseRouteKey(c.Param("route"))
	return k
}

func (s *Server) capabilities(c echo.Context) error {
	route := c.Param("route")
	pol := s.feat.rollout.Load()
	key, valid := corefacts.ParseRouteKey(route)
	if valid && !pol.Enabled(route) {
		s.m.rollout.WithLabelValues(string(decisionDisabled)).Inc()
		return s.passH(c)
	}
	// A route outside Core's pattern is never probed (Core answers it 404
	// whatever its version): it is answered as any knowledge request on it.
	if valid {
		if call, due := s.feat.native.Claim(); due {
			if answered, err := s.capsProbe(c, call); answered {
				return err
			}
		}
	}
	if !s.decide(c, key) {
		return s.passH(c)
	}
	r := c.Request()
	body, err := s.feat.k.Capabilities(r.Context(), r.Header.Get("Authorization"), key)
	return reply(c, body, err)
}

func (s *Server) search(c echo.Context) error {
	key := routeKey(c)
	if !s.decide(c, key) {
		return s.passH(c)
	}
	r := c.Request()
	buf := answerBuffers.Get().(*[]byte)
	defer answerBuffers.Put(buf)
	body, err := s.feat.k.SearchInto(r.Context(), *buf, r.Header.Get("Authorization"), key, r.Body)
	return reply(c, body, err)
}

func (s *Server) read(c echo.Context) error {
	key := routeKey(c)
	if !s.decide(c, key) {
		// A chain the sidecar issued before a flip to native ends here.
		return s.readAfterFlip(c, key)
	}
	r := c.Request()
	buf := answerBuffers.Get().(*[]byte)
	defer answerBuffers.Put(buf)
	body, err := s.feat.k.ReadInto(r.Context(), *buf, r.Header.Get("Authorization"), key, r.Body)
	return reply(c, body, err)
}

// answerBuffers hold search and read answers while they are written: a
// read page is up to 32 KiB, and allocating one per request made the
// collector run for them (knowledge.Service.ReadInto, SearchInto). net/http
// has copied the answer into the connection's buffer or the socket when
// Write returns. knowledge's BenchmarkAnswerBuffer: against a fresh buffer
// it saves ~41 µs of an ~89 µs read (46 %, mostly collector work); for a
// search the gain is within noise (DESIGN 14 review, docs/performance.md).
var answerBuffers = sync.Pool{New: func() any { b := make([]byte, 0, protocol.ReadMaxBytes); return &b }}

// reply writes a knowledge endpoint's success; an error goes back to the
// edge, which answers it (writeErr).
func reply(c echo.Context, body []byte, err error) error {
	if err != nil {
		return err
	}
	writeJSON(c.Response(), http.StatusOK, body)
	return nil
}

// wrongMethod answers a knowledge path asked with another method: 405 with
// Allow on a rolled-out workspace of a legacy Core, pass-through otherwise
// (a native Core, or a workspace the sidecar does not serve).
func (s *Server) wrongMethod(allow string) echo.HandlerFunc {
	return func(c echo.Context) error {
		if !s.decide(c, routeKey(c)) {
			return s.passH(c)
		}
		return errMethodNotAllowed(allow)
	}
}

// capsRelay is one capabilities request forwarded to Core as the probe.
type capsRelay struct {
	call   *native.Probe
	legacy bool  // Core does not know the endpoint: the sidecar answers
	err    error // Core could not be reached, or its answer not read
	cancel context.CancelFunc
}

type capsCtxKey struct{}

func capsOf(ctx context.Context) *capsRelay {
	cr, _ := ctx.Value(capsCtxKey{}).(*capsRelay)
	return cr
}

var (
	// errCapsServe: Core's answer is not relayed (legacy, or unread); the
	// handler answers.
	errCapsServe  = errors.New("capabilities probe answered by the sidecar")
	errProbeLarge = errors.New("capabilities answer too large")
	errNotProbed  = errors.New("route not probed")
)

// capsProbe forwards a capabilities request to Core as the claimed probe,
// through the pass-through ReverseProxy like any other request, and relays
// Core's answer unless it says legacy. answered is false for a legacy
// answer: the sidecar then serves the request. Core unreachable (or its
// answer unreadable) is 503 knowledge_unavailable, like every knowledge
// endpoint facing an unreachable Core (SPEC §2); the verdict stays open.
func (s *Server) capsProbe(c echo.Context, call *native.Probe) (answered bool, err error) {
	cr := &capsRelay{call: call}
	defer func() {
		// Also when the relay aborts (the ReverseProxy panics with
		// http.ErrAbortHandler when the client's connection fails).
		if cr.cancel != nil {
			cr.cancel()
		}
		s.feat.native.Fail(call, errNotProbed) // when nothing else did
	}()
	r := c.Request()
	s.feat.caps.ServeHTTP(c.Response(), r.WithContext(context.WithValue(r.Context(), capsCtxKey{}, cr)))
	switch {
	case cr.legacy:
		return false, nil
	case cr.err != nil:
		return true, knowledge.Unavailable(fmt.Errorf("%w: %w", corefacts.ErrUnavailable, cr.err))
	}
	return true, nil
}

// newCapsProxy is the pass-through ReverseProxy (same transport, same header
// rules: the one relay path and hop-by-hop list) whose ModifyResponse reads
// Core's capabilities answer to settle the probe d is waiting on.
func (s *Server) newCapsProxy(timeout time.Duration, d Verdict) *httputil.ReverseProxy {
	rp := s.newPassthrough()
	passRewrite := rp.Rewrite
	rp.Rewrite = func(pr *httputil.ProxyRequest) {
		passRewrite(pr)
		// Other requests may wait for this probe's verdict: it does not
		// end with its caller; the deadline bounds it.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(pr.Out.Context()), timeout)
		capsOf(ctx).cancel = cancel
		pr.Out = pr.Out.WithContext(ctx)
	}
	rp.ModifyResponse = func(res *http.Response) error {
		cr := capsOf(res.Request.Context())
		body, err := io.ReadAll(io.LimitReader(res.Body, native.BodyLimit+1))
		_ = res.Body.Close()
		if err == nil && len(body) > native.BodyLimit {
			err = errProbeLarge
		}
		if err != nil {
			cr.err = err
			d.Fail(cr.call, err)
			return errCapsServe
		}
		if d.Answer(cr.call, res.StatusCode, body) == native.Legacy {
			cr.legacy = true
			return errCapsServe
		}
		res.Body = io.NopCloser(bytes.NewReader(body))
		res.ContentLength = int64(len(body))
		return nil
	}
	rp.ErrorHandler = func(_ http.ResponseWriter, r *http.Request, err error) {
		if errors.Is(err, errCapsServe) {
			return
		}
		cr := capsOf(r.Context())
		cr.err = err
		d.Fail(cr.call, err)
	}
	return rp
}
