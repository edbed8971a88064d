package proxy

import (
	"errors"
	"fmt"
	"log/slog"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/bailinghub/knowledge-sidecar/corelink"
	"github.com/bailinghub/knowledge-sidecar/telemetry"
)

// The package in three groups, each using only those below it
// (layering_test.go holds the list): the edge — the Server, its
// middleware, limits, errors, pass-through, route table and admin
// listener; the handlers of the endpoints the sidecar serves itself
// (features.go, turns.go, upgrade.go, mcp.go, mcpnative.go, oauth.go),
// which call the edge; and this file, which assembles the two: New, and
// the binding of each route row to its handler.

// New builds the edge. It does not listen; see Run and NewHTTPServer.
func New(o Options) (*Server, error) {
	if o.CoreURL == nil || o.CoreURL.Host == "" {
		return nil, errors.New("proxy: core URL is required")
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Registry == nil {
		o.Registry = prometheus.NewRegistry()
	}
	if o.Transport == nil {
		o.Transport = NewTransport(TransportOptions{DialTimeout: corelink.DialTimeout, ResponseHeaderTimeout: DefaultResponseHeaderTimeout,
			MaxIdleConnsPerHost: corelink.MaxIdleConnsPerHost})
	}
	s := &Server{
		log:        o.Logger,
		m:          newMetrics(registerer(o), o.Version),
		access:     o.AccessLog,
		registry:   o.Registry,
		ids:        newIDSource(),
		bodyIdle:   o.BodyIdleTimeout,
		version:    o.Version,
		adminHosts: append([]string(nil), o.AdminAllowedHosts...),
	}
	s.lim = newEdgeLimits(o.Limits, newLimitMetrics(registerer(o)))
	s.target, s.transport = o.CoreURL, o.Transport
	if o.TracerProvider != nil {
		s.tracer = telemetry.Tracer(o.TracerProvider)
		s.transport = &tracingTransport{next: o.Transport, tracer: s.tracer}
	}
	s.fw = newForwarding(o)
	s.pass = s.newPassthrough()
	s.passH = echo.WrapHandler(s.pass)

	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	e.Logger.SetOutput(discard{})
	// No HTTPErrorHandler: the edge answers a handler's error itself
	// (writeErr) and returns nil, so echo's is never called.
	e.Use(s.edge())
	s.passEdge = s.edge()(s.passH)
	// Everything, whatever the method, goes to Core unless a route below
	// claims it. RouteNotFound also catches methods echo does not know.
	e.Any(passRoute, s.passH)
	e.RouteNotFound(passRoute, s.passH)

	if o.Features != nil {
		f, err := newFeatures(o.Features, s)
		if err != nil {
			return nil, err
		}
		s.feat = f
		if err := s.register(e); err != nil {
			return nil, err
		}
		s.claim = claimPrefixes
	}
	s.echo = e
	s.SetReady(true)
	return s, nil
}

// handlers are the route table's handlers by row name (route.name).
var handlers = map[string]func(*Server, echo.Context) error{
	"capabilities":    (*Server).capabilities,
	"search":          (*Server).search,
	"read":            (*Server).read,
	"turns":           (*Server).turns,
	"mcp":             (*Server).mcp,
	"mcp_metadata":    (*Server).mcpMetadata,
	"oauth_metadata":  (*Server).oauthMetadata,
	"oauth_register":  (*Server).oauthRegister,
	"oauth_authorize": (*Server).oauthAuthorize,
	"oauth_token":     (*Server).oauthToken,
	"oauth_revoke":    (*Server).oauthRevoke,
}

// register claims the table's routes on e, each with its handler; a row
// without one is a programming error, reported by New.
func (s *Server) register(e *echo.Echo) error {
	for _, rt := range routes {
		serve, ok := handlers[rt.name]
		if !ok {
			return fmt.Errorf("proxy: route %s %s has no handler", rt.method, rt.path)
		}
		other := s.passH
		switch {
		case rt.path == pathMCP:
			other = s.mcpWrongMethod // the sidecar's after a flip too
		case rt.knowledge:
			other = s.wrongMethod(rt.method)
		}
		// Every method is claimed first, then the route's own method gets
		// its handler; RouteNotFound covers methods echo does not know.
		e.Any(rt.path, other)
		e.RouteNotFound(rt.path, other)
		e.Add(rt.method, rt.path, func(c echo.Context) error { return serve(s, c) })
	}
	return nil
}
