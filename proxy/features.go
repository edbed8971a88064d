package proxy

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httputil"
	"sync/atomic"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/bailinghub/knowledge-sidecar/config"

	"github.com/bailinghub/knowledge-sidecar/coreclient"
	"github.com/bailinghub/knowledge-sidecar/corefacts"
	"github.com/bailinghub/knowledge-sidecar/knowledge"
	"github.com/bailinghub/knowledge-sidecar/ledger"
	"github.com/bailinghub/knowledge-sidecar/rollout"
)

// Prober forwards a caller's capabilities request to Core (native detection).
type Prober interface {
	ProbeCapabilities(ctx context.Context, authorization, route string) (*coreclient.Probe, error)
}

// Features are the knowledge endpoints and turn interception.
type Features struct {
	Knowledge *knowledge.Service
	Prober    Prober
	Ledger    ledger.Ledger
	Rollout   rollout.Policy
	// NativeDetection is "auto" (default), "never" (always serve the
	// protocol) or "always" (the Core is native: pass everything through).
	NativeDetection string
	// ProbeInterval is how long a probe's verdict is kept. Default 60s.
	ProbeInterval time.Duration
	Now           func() time.Time
	// NoTurnHints turns same-run hints off (config turn_hints: false):
	// on_demand turns then answer "hints": []. Default: hints on.
	NoTurnHints bool
}

type features struct {
	k       *knowledge.Service
	ledger  ledger.Ledger
	rollout atomic.Pointer[rollout.Policy]
	hints   atomic.Bool // same-run hints in on_demand turns
	native  *nativeDetector
	turns   *httputil.ReverseProxy
	// inflight: on_demand turn attempts awaiting Core's answer (turns.go).
	inflight turnsInFlight
}

func newFeatures(f *Features, s *Server) (*features, error) {
	if f.Knowledge == nil || f.Ledger == nil {
		return nil, errors.New("proxy: features need a knowledge service and a ledger")
	}
	if f.Now == nil {
		f.Now = time.Now
	}
	if f.ProbeInterval <= 0 {
		f.ProbeInterval = config.Defaults().ProbeInterval
	}
	nd, err := newNativeDetector(f.NativeDetection, f.ProbeInterval, f.Prober, f.Now, s.m)
	if err != nil {
		return nil, err
	}
	ft := &features{k: f.Knowledge, ledger: f.Ledger, native: nd}
	p := f.Rollout
	ft.rollout.Store(&p)
	ft.hints.Store(!f.NoTurnHints)
	ft.turns = s.newTurnProxy()
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
		s.feat.hints.Store(on)
	}
}

// decide says whether the sidecar handles a knowledge or turn request for
// route itself: the workspace is rolled out and the Core is not native.
// While no native-detection verdict is held, the first such request probes
// Core's capabilities with its own bearer before it is decided.
func (s *Server) decide(c echo.Context, route string) bool {
	pol := s.feat.rollout.Load()
	decision := decisionEnabled
	switch {
	case !corefacts.ValidRouteKey(route) && !s.feat.native.isNative():
		// No workspace has this key (upper case, encoded, too long): the
		// sidecar answers 404 route_unavailable after identity, like
		// Core's own 404, rather than guess how Core would spell it.
		decision = decisionInvalidRoute
	case !pol.Enabled(route):
		decision = decisionDisabled
	case s.feat.native.native(c.Request().Context(), c.Request().Header.Get("Authorization"), route):
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

func (s *Server) capabilities(c echo.Context) error {
	route := c.Param("route")
	pol := s.feat.rollout.Load()
	valid := corefacts.ValidRouteKey(route)
	if valid && !pol.Enabled(route) {
		s.m.rollout.WithLabelValues(string(decisionDisabled)).Inc()
		return s.passH(c)
	}
	r := c.Request()
	authz := r.Header.Get("Authorization")
	if probe, handled, perr := s.feat.native.maybeProbe(r.Context(), authz, route); valid && handled {
		if probe == nil {
			// Core could not be reached for the probe: like every knowledge
			// endpoint facing an unreachable Core, 503 knowledge_unavailable
			// (SPEC §2); the verdict stays open for the next request.
			return knowledge.Unavailable(perr)
		}
		relayProbe(c.Response(), probe)
		return nil
	}
	if !s.decide(c, route) {
		return s.passH(c)
	}
	body, err := s.feat.k.Capabilities(r.Context(), authz, route)
	return reply(c, body, err)
}

func (s *Server) search(c echo.Context) error {
	route := c.Param("route")
	if !s.decide(c, route) {
		return s.passH(c)
	}
	r := c.Request()
	body, err := s.feat.k.Search(r.Context(), r.Header.Get("Authorization"), route, r.Body)
	return reply(c, body, err)
}

func (s *Server) read(c echo.Context) error {
	route := c.Param("route")
	if !s.decide(c, route) {
		return s.passH(c)
	}
	r := c.Request()
	body, err := s.feat.k.Read(r.Context(), r.Header.Get("Authorization"), route, r.Body)
	return reply(c, body, err)
}

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
		if !s.decide(c, c.Param("route")) {
			return s.passH(c)
		}
		return errMethodNotAllowed(allow)
	}
}

// relayProbe sends Core's own answer to the forwarded capabilities request.
// coreclient has already removed the hop-by-hop headers; the length is the
// body's.
func relayProbe(w http.ResponseWriter, p *coreclient.Probe) {
	h := w.Header()
	for k, vs := range p.Header {
		if http.CanonicalHeaderKey(k) != "Content-Length" {
			h[k] = append([]string(nil), vs...)
		}
	}
	w.WriteHeader(p.Status)
	_, _ = w.Write(p.Body)
}
