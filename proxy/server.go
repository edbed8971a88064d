package proxy

import (
	"log/slog"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/bailinghub/knowledge-sidecar/corefacts"
)

// Options wire a Server. Only CoreURL is required: without Features the
// sidecar is a pure pass-through proxy.
type Options struct {
	CoreURL        *url.URL
	Transport      http.RoundTripper // nil → NewTransport with defaults
	TrustedProxies []netip.Prefix
	PreserveHost   bool
	Logger         *slog.Logger
	Registry       *prometheus.Registry  // own registry, served on /metrics; nil → a new one
	Registerer     prometheus.Registerer // where the edge registers its metrics; nil → Registry
	AccessLog      bool                  // log every request at info level (else debug; 5xx warn)
	Version        string
	Features       *Features // knowledge endpoints and turn interception; nil → off
	// BodyIdleTimeout ends a request whose body sends no byte for this long
	// (408 if nothing was answered yet; the connection closes). 0 → none.
	BodyIdleTimeout time.Duration
	// Limits bound what clients can make the edge hold; zero fields take
	// their Default… constants.
	Limits Limits
	// TracerProvider, when set, turns on tracing (SPEC §9): a SERVER span
	// per request, a CLIENT span for what goes to Core, W3C propagation,
	// trace-id exemplars. nil → off, at no per-request cost.
	TracerProvider trace.TracerProvider

	// ClientAddressHeadersExtra adds names to the client-address headers
	// an untrusted peer's request loses (passthrough.go).
	ClientAddressHeadersExtra []string
	// TraceTrustInbound: whose traceparent/tracestate count (SPEC §9).
	TraceTrustInbound TraceTrust
	// AdminAllowedHosts are the Host names the admin listener serves
	// besides IP literals and localhost (config admin_allowed_hosts).
	AdminAllowedHosts []string
}

// turnBodyFloor is the least a client's turn body share shrinks to with
// many clients active: two of Core's largest turn bodies (a buffer and its
// stripped copy).
const turnBodyFloor = 2 * corefacts.TurnBodyMax

// edgeLimits are a Server's bounds in effect.
type edgeLimits struct {
	rate        int64
	window      time.Duration
	bodyTimeout time.Duration
	inFlight    *shares
	turnBody    *shares
	m           *limitMetrics
}

func newEdgeLimits(l Limits, m *limitMetrics) *edgeLimits {
	pick := func(v, def int64) int64 {
		switch {
		case v == 0:
			return def
		case v < 0:
			return 0
		}
		return v
	}
	inFlight := pick(int64(l.MaxInFlight), DefaultMaxInFlight)
	turnBody := pick(l.TurnBodyBudget, DefaultTurnBodyBudget)
	// A turn body share never shrinks below what one of Core's largest
	// turns holds (its buffer and the stripped copy), or a client could
	// be refused its one turn however few it sends.
	bodies := newShares(turnBody, perClient(l.TurnBodyPerClient, turnBody)).withFloor(turnBodyFloor)
	return &edgeLimits{
		rate:        pick(l.BodyMinRate, DefaultBodyMinRate),
		window:      time.Duration(pick(int64(l.BodyMinRateWindow), int64(DefaultBodyMinRateWindow))),
		bodyTimeout: max(l.BodyTimeout, 0),
		inFlight:    newShares(inFlight, perClient(int64(l.InFlightPerClient), inFlight)),
		turnBody:    bodies,
		m:           m,
	}
}

// Server is the sidecar's edge.
type Server struct {
	echo  *echo.Echo
	pass  *httputil.ReverseProxy
	passH echo.HandlerFunc
	// passEdge is the edge around passH, built once: what a request no
	// route can claim runs (ServeHTTP), without echo's routing and its
	// per-request middleware chain.
	passEdge echo.HandlerFunc
	// claim: a request whose path starts with one of them goes through
	// echo's router (claimPrefixes with features on; none claims nothing).
	claim    []string
	log      *slog.Logger
	m        *metrics
	registry *prometheus.Registry
	ids      *idSource
	ready    atomic.Bool
	bodyIdle time.Duration
	access   bool
	reloader reloaderSlot
	ops      opsSlots // GET /-/status and /-/explain (status.go)
	lim      *edgeLimits

	target    *url.URL
	fw        forwarding
	transport http.RoundTripper

	feat *features

	tracer  trace.Tracer // nil: tracing off
	version string       // Options.Version

	adminHosts []string // Options.AdminAllowedHosts
}

func registerer(o Options) prometheus.Registerer {
	if o.Registerer != nil {
		return o.Registerer
	}
	return o.Registry
}

// Handler is the proxy listener's handler.
func (s *Server) Handler() http.Handler { return s }

// ServeHTTP routes a request echo could match to a route of the table
// through echo; every other request, which echo could only route to "/*",
// goes straight to the edge around the pass-through, in an echo context of
// echo's pool, as echo itself would run it.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	for _, p := range s.claim {
		if strings.HasPrefix(r.URL.Path, p) {
			s.echo.ServeHTTP(w, r)
			return
		}
	}
	c := s.echo.AcquireContext()
	c.Reset(r, w)
	c.SetPath(passRoute)
	_ = s.passEdge(c) // the edge answers errors itself and returns nil
	s.echo.ReleaseContext(c)
}

// SetReady flips /readyz; it goes false before a drain.
func (s *Server) SetReady(ok bool) {
	s.ready.Store(ok)
	if ok {
		s.m.ready.Set(1)
	} else {
		s.m.ready.Set(0)
	}
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }
