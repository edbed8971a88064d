package knowledge

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"

	"github.com/bailinghub/knowledge-sidecar/corefacts"
	"github.com/bailinghub/knowledge-sidecar/corelink"
	"github.com/bailinghub/knowledge-sidecar/protocol"
)

// The protocol's limits (SPEC §3) are in package protocol.
const (
	limiterCacheSize = 16384
	routeCacheSize   = 1024
)

// The per-session rate limit's defaults, their one source (config's
// Defaults maps them onto rate_limit.rps and rate_limit.burst).
const (
	DefaultRateLimit = 10 // requests per second
	DefaultRateBurst = 20 // the bucket size
)

// Options configures a Service. Identity, Retriever, Catalog and Keys are
// required.
type Options struct {
	Identity  Identity
	Retriever Retriever
	Catalog   Catalog
	Keys      *Keyring
	// Tasks applies Core 0.8's managed-task rules (SPEC §4a) to search and
	// read; nil means no task rules (the schema gate of package catalog
	// says absent when Core has no task tables).
	Tasks Tasks
	// Now is the clock (default time.Now).
	Now func() time.Time
	// RateLimit is the per-session token rate in requests per second (default 10).
	RateLimit float64
	// RateBurst is the per-session bucket size (default 20).
	RateBurst int
	// SharedLimiter, when set, holds the per-session buckets for every
	// replica (same RateLimit and RateBurst); while it cannot be reached the
	// local buckets decide (counted, logged once per transition). Nil: local
	// buckets only.
	SharedLimiter SharedLimiter
	// RetrievalTimeout bounds each per-KB Core search (default
	// corelink.Timeout, 3s).
	RetrievalTimeout time.Duration
	// Logger receives diagnostics (default: discard). Bearer tokens, full
	// refs/cursors, queries and document text are never logged.
	Logger *slog.Logger
	// Registerer receives the metrics (nil: no metrics).
	Registerer prometheus.Registerer
	// Auditor records every answer of search, read and an on_demand turn's
	// hints before it is sent (SPEC §11); nil: no audit.
	Auditor Auditor
}

// Service answers the knowledge endpoints. It is safe for concurrent use.
type Service struct {
	id        Identity
	retriever Retriever
	catalog   Catalog
	tasks     Tasks
	keys      *Keyring
	now       func() time.Time
	rate      rate.Limit
	burst     int
	timeout   time.Duration
	log       *slog.Logger
	m         *metrics
	audit     Auditor // nil: audit off

	limiter *limiter
	// routes remembers the last configuration seen per route, used only
	// to answer capabilities while the catalog is unreachable.
	routes *lru.Cache[corefacts.RouteKey, corefacts.Route]
	// rechecks remembers hit re-checks per document revision (recheck.go).
	rechecks *recheckMemo
}

// New builds a Service.
func New(o Options) (*Service, error) {
	var problems []error
	if o.Identity == nil {
		problems = append(problems, errors.New("identity is required"))
	}
	if o.Retriever == nil {
		problems = append(problems, errors.New("retriever is required"))
	}
	if o.Catalog == nil {
		problems = append(problems, errors.New("catalog is required"))
	}
	if o.Keys == nil || len(o.Keys.keys) == 0 {
		problems = append(problems, errors.New("keys are required"))
	}
	if o.RateLimit < 0 {
		problems = append(problems, errors.New("rate limit must not be negative"))
	}
	if o.RateBurst < 0 {
		problems = append(problems, errors.New("rate burst must not be negative"))
	}
	if o.RetrievalTimeout < 0 {
		problems = append(problems, errors.New("retrieval timeout must not be negative"))
	}
	if len(problems) > 0 {
		return nil, errors.Join(problems...)
	}
	s := &Service{
		id: o.Identity, retriever: o.Retriever, catalog: o.Catalog, tasks: o.Tasks, keys: o.Keys,
		now: o.Now, rate: rate.Limit(o.RateLimit), burst: o.RateBurst,
		timeout: o.RetrievalTimeout, log: o.Logger, audit: o.Auditor,
	}
	if s.now == nil {
		s.now = time.Now
	}
	// Zero means the documented default.
	if o.RateLimit == 0 {
		s.rate = DefaultRateLimit
	}
	if s.burst == 0 {
		s.burst = DefaultRateBurst
	}
	if s.timeout == 0 {
		s.timeout = corelink.Timeout
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	var err error
	if s.limiter, err = newLimiter(s.rate, s.burst, s.now, o.SharedLimiter, s.log, o.Registerer); err != nil {
		return nil, err
	}
	if s.routes, err = lru.New[corefacts.RouteKey, corefacts.Route](routeCacheSize); err != nil {
		return nil, err
	}
	if s.rechecks, err = newRecheckMemo(); err != nil {
		return nil, err
	}
	if s.m, err = newMetrics(o.Registerer); err != nil {
		return nil, err
	}
	return s, nil
}

// Authenticate asks Core who the bearer is (identity only: no rate limit,
// no route check). Failures are *Error: 401 unauthorized or 503
// knowledge_unavailable.
func (s *Service) Authenticate(ctx context.Context, authorization string) (corefacts.Session, error) {
	if h := held(ctx, authorization); h != nil {
		return h.sess, nil
	}
	sess, err := s.id.Session(ctx, authorization)
	if err != nil {
		if errors.Is(err, corefacts.ErrUnauthorized) {
			return corefacts.Session{}, errUnauthorized(err)
		}
		return corefacts.Session{}, errUnavailable(err)
	}
	if sess.SessionID == "" || sess.ClientAppID == "" || sess.Principal.ID == "" {
		return corefacts.Session{}, errUnavailable(errors.New("core returned an incomplete session"))
	}
	return sess, nil
}

type identityKey struct{}

type heldIdentity struct {
	authorization string
	sess          corefacts.Session
	// calls counts the calls made with the identity: the first takes the
	// request's rate-limit token, and every walkPagesPerToken-th after it
	// one more (identify).
	calls atomic.Int64
	// gated is the route whose gate Core (or the catalog) passed for this
	// request: later pages of a walk do not ask again (gate).
	mu    sync.Mutex
	gated corefacts.RouteKey
}

// walkPagesPerToken is how many calls of one request (the pages of a near
// read's or a fetch's walk) one rate-limit token buys: the first 4 cost the
// request's token, and each further 4 another (docs/hosts.md).
const walkPagesPerToken = 4

// passedGate reports whether route's gate passed earlier in the request.
func (h *heldIdentity) passedGate(route corefacts.RouteKey) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return !h.gated.IsZero() && h.gated == route
}

func (h *heldIdentity) passGate(route corefacts.RouteKey) {
	h.mu.Lock()
	h.gated = route
	h.mu.Unlock()
}

// WithIdentity holds, for the calls made with ctx, the session Authenticate
// returned for authorization during the same inbound request: one remote MCP
// request authenticates once at the edge (SPEC §10) and its tool call is not
// sent to Core's identity endpoint a second time. It is never kept past the
// request (SPEC §2: no identity caching across requests); another
// authorization is still asked of Core. So is the route gate's decision:
// a route Core's gate passed is not asked again within the request. The
// calls made with ctx take one token of the session's rate limit for their
// first 4, and one more for each further 4: a tool call that pages through
// a chain (a near read, a fetch) costs by the pages it reads.
func WithIdentity(ctx context.Context, authorization string, sess corefacts.Session) context.Context {
	return context.WithValue(ctx, identityKey{}, &heldIdentity{authorization: authorization, sess: sess})
}

// held is the identity held in ctx for authorization, or nil.
func held(ctx context.Context, authorization string) *heldIdentity {
	if h, ok := ctx.Value(identityKey{}).(*heldIdentity); ok && h.authorization == authorization {
		return h
	}
	return nil
}

// AllowTurn takes one token from the session's bucket (the knowledge
// endpoints' per-session limit) for a turn with knowledge_delivery whose
// mode the sidecar is about to record (SPEC §7): nil, or 429 rate_limited
// with its Retry-After.
func (s *Service) AllowTurn(sessionID string) error {
	if ok, retry := s.limiter.allow(context.Background(), sessionID); !ok {
		return errRateLimited(retry)
	}
	return nil
}

// admitted is the state shared by every endpoint once identity, rate limit
// and route gate have passed.
type admitted struct {
	sess  corefacts.Session
	route corefacts.Route
	// stale is true when route came from the last-known cache because the
	// catalog could not be reached.
	stale bool
	// bundle holds the rows read with the route in one statement (nil: the
	// route alone was read); kbRows and document take from it.
	bundle *corefacts.RouteBundle
	docID  int64 // the document asked for with the bundle (0: none)
}

// prefetch names the rows a request will read after its route, so that a
// catalog that can (RouteBundler) reads them with the route in one
// statement. It changes no answer and no order: each row is still checked
// at its own step.
type prefetch struct {
	kbIDs []string
	docID int64
}

// RouteBundler is an optional extension of Catalog (the SQL catalog has it):
// the route with the KB rows and the one document a request reads next, in
// one statement. Without it the rows are read one query each, at their step.
type RouteBundler interface {
	RouteBundle(ctx context.Context, key corefacts.RouteKey, kbIDs []string, docID int64) (corefacts.RouteBundle, error)
}

// kbRows is Catalog.KBs, answered from the bundle when it looked up every
// id of ids.
func (s *Service) kbRows(ctx context.Context, a admitted, ids []string) (map[string]corefacts.KB, error) {
	if b := a.bundle; b != nil && covers(b.Asked, ids) {
		return b.KBs, nil
	}
	return s.catalog.KBs(ctx, ids)
}

// document is Catalog.Document, answered from the bundle when it read that
// document with the same fence.
func (s *Service) document(ctx context.Context, a admitted, docID int64, fence []string) (corefacts.Document, error) {
	if b := a.bundle; b != nil && docID == a.docID && slices.Equal(b.Asked, fence) {
		switch {
		case b.DocErr != nil:
			return corefacts.Document{}, b.DocErr
		case !b.DocFound:
			return corefacts.Document{}, fmt.Errorf("catalog document: %w", corefacts.ErrNotFound)
		}
		return b.Doc, nil
	}
	return s.catalog.Document(ctx, docID, fence)
}

// covers reports whether every id of want is in asked (exact spelling).
func covers(asked, want []string) bool {
	for _, id := range want {
		if !slices.Contains(asked, id) {
			return false
		}
	}
	return true
}

// admit runs identify then admitRoute (capabilities, which has no body).
// allowStale lets capabilities fall back to the last-known configuration when
// the catalog is down.
func (s *Service) admit(ctx context.Context, authorization string, route corefacts.RouteKey, allowStale bool) (admitted, error) {
	sess, err := s.identify(ctx, authorization)
	if err != nil {
		return admitted{}, err
	}
	return s.admitRoute(ctx, authorization, route, sess, allowStale, prefetch{})
}

// identify is the first step of the check order: identity → rate limit.
func (s *Service) identify(ctx context.Context, authorization string) (corefacts.Session, error) {
	sess, err := s.Authenticate(ctx, authorization)
	if err != nil {
		return corefacts.Session{}, err
	}
	if h := held(ctx, authorization); h != nil && (h.calls.Add(1)-1)%walkPagesPerToken != 0 {
		return sess, nil // within what the request's tokens bought
	}
	if ok, retry := s.limiter.allow(ctx, sess.SessionID); !ok {
		return corefacts.Session{}, errRateLimited(retry)
	}
	return sess, nil
}

// admitRoute is the route step of the check order (SPEC §2: after the body
// and the managed-task rules): route syntax (the edge parsed it: the zero key
// is a segment that is no route key) → route gate → route row. With pf
// naming rows and a RouteBundler catalog, those rows are read with the route.
func (s *Service) admitRoute(ctx context.Context, authorization string, route corefacts.RouteKey, sess corefacts.Session, allowStale bool, pf prefetch) (admitted, error) {
	if route.IsZero() {
		return admitted{}, errRouteUnavailable(nil)
	}
	if err := s.gate(ctx, authorization, route, sess); err != nil {
		return admitted{}, err
	}
	var (
		r      corefacts.Route
		bundle *corefacts.RouteBundle
		ok     bool
		err    error
	)
	if rb, isBundler := s.catalog.(RouteBundler); isBundler && len(pf.kbIDs) > 0 {
		var b corefacts.RouteBundle
		if b, err = rb.RouteBundle(ctx, route, pf.kbIDs, pf.docID); err == nil {
			r, ok = s.acceptRoute(route, b.Route)
			bundle = &b
		}
	} else {
		r, ok, err = s.routeRow(ctx, route)
	}
	if err != nil {
		if errors.Is(err, corefacts.ErrNotFound) {
			return admitted{}, errRouteUnavailable(err)
		}
		if allowStale {
			if last, ok := s.routes.Get(route); ok {
				return admitted{sess: sess, route: last, stale: true}, nil
			}
		}
		return admitted{}, classifyCore(err, nil)
	}
	if !ok {
		return admitted{}, errRouteUnavailable(nil)
	}
	return admitted{sess: sess, route: r, bundle: bundle, docID: pf.docID}, nil
}

// routeRow reads route's row and accepts it as Core serves a workspace:
// enabled, and with exactly the key asked (the catalog's collation matches
// keys case-insensitively and ignoring trailing spaces; Core's workspace
// match is exact). An accepted row is remembered as the route's last known
// configuration. A row without its key (a test double's) is the route
// asked. err is the catalog's (corefacts.ErrNotFound for no row).
func (s *Service) routeRow(ctx context.Context, route corefacts.RouteKey) (r corefacts.Route, ok bool, err error) {
	if r, err = s.catalog.Route(ctx, route); err != nil {
		return corefacts.Route{}, false, err
	}
	r, ok = s.acceptRoute(route, r)
	return r, ok, nil
}

// acceptRoute is routeRow's acceptance of a row already read (by Route or
// with a RouteBundle).
func (s *Service) acceptRoute(route corefacts.RouteKey, r corefacts.Route) (corefacts.Route, bool) {
	if r.Key == "" {
		r.Key = route.String()
	}
	if !r.Enabled || r.Key != route.String() {
		return r, false
	}
	s.routes.Add(route, r)
	return r, true
}

// gate asks Core's system-info; an older Core (endpoint absent) or an
// answer that only concerns the Agent Client Runtime or direct tools (which
// knowledge must not require, SPEC §2) falls back to the catalog gate.
func (s *Service) gate(ctx context.Context, authorization string, route corefacts.RouteKey, sess corefacts.Session) error {
	h := held(ctx, authorization)
	if h != nil && h.passedGate(route) {
		return nil // passed for this request already (WithIdentity)
	}
	if err := s.askGate(ctx, authorization, route, sess); err != nil {
		return err
	}
	if h != nil {
		h.passGate(route)
	}
	return nil
}

// askGate is gate's question to Core, or to the catalog.
func (s *Service) askGate(ctx context.Context, authorization string, route corefacts.RouteKey, sess corefacts.Session) error {
	err := s.id.SystemInfo(ctx, authorization, route)
	if err == nil {
		return nil
	}
	var ce *corefacts.CoreError
	useCatalog := errors.Is(err, corefacts.ErrEndpointAbsent) ||
		errors.As(err, &ce) && (ce.Code == "agent_client_disabled" || ce.Code == "agent_direct_disabled")
	if !useCatalog {
		return classifyCore(err, errRouteUnavailable(nil))
	}
	if err := s.catalog.RouteGate(ctx, route, sess); err != nil {
		return classifyCore(err, errRouteUnavailable(nil))
	}
	return nil
}

// readAll reads at most protocol.MaxRequestBytes; one byte more is 413.
func readAll(body io.Reader) ([]byte, error) {
	if body == nil {
		return nil, nil
	}
	b, err := io.ReadAll(io.LimitReader(body, protocol.MaxRequestBytes+1))
	if err != nil {
		return nil, errInvalid("The request body could not be read.")
	}
	if len(b) > protocol.MaxRequestBytes {
		return nil, errTooLarge()
	}
	return b, nil
}

// checkRun enforces run ownership and activity (SPEC §2 table).
func (s *Service) checkRun(ctx context.Context, runID string, a admitted) error {
	run, err := s.catalog.Run(ctx, runID)
	if err != nil {
		return classifyCore(err, errRunNotFound(nil))
	}
	if run.SessionID != a.sess.SessionID || run.ClientAppID != a.sess.ClientAppID || run.RouteKey != a.route.Key {
		return errRunNotFound(nil)
	}
	if !run.Active() {
		return errRunNotActive()
	}
	return nil
}

func (s *Service) binding(a admitted, runID string) Binding {
	return Binding{
		ClientAppID: a.sess.ClientAppID,
		SessionID:   a.sess.SessionID,
		PrincipalID: a.sess.Principal.ID,
		OnBehalfOf:  a.sess.OnBehalfOf,
		Route:       a.route.Key,
		RunID:       runID,
	}
}
