package coreclient

import (
	"bytes"
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"syscall"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/bailinghub/knowledge-sidecar/breaker"
	"github.com/bailinghub/knowledge-sidecar/corefacts"
	"github.com/bailinghub/knowledge-sidecar/corefacts/jsstring"
	"github.com/bailinghub/knowledge-sidecar/corelink"
	"github.com/bailinghub/knowledge-sidecar/telemetry"
)

// Body size limits of Core's answers.
const (
	identityBodyLimit = 64 << 10 // session, system-info, error bodies
	searchBodyLimit   = 4 << 20  // /kb/search answers
)

// Options configures a Client.
type Options struct {
	BaseURL      string            // Core base URL, absolute http(s)
	ServiceToken string            // sidecar's own credential for /kb/search (Bearer); never the caller's
	Transport    http.RoundTripper // nil → NewTransport(TransportOptions{}): corelink's defaults
	Timeout      time.Duration     // per-call deadline, always below the caller's (default corelink.Timeout, 3s)
	// ProbeInterval is how long "system-info absent" is remembered
	// (default corelink.ProbeInterval, 60s).
	ProbeInterval       time.Duration
	Identity, Retrieval breaker.Settings // zero fields take DefaultBreakerSettings
	Metrics             *Metrics         // nil: no metrics
	Now                 func() time.Time
	// TracerProvider, when set, gives every request to Core a CLIENT span
	// and the W3C propagation headers (SPEC §9). nil: no tracing.
	TracerProvider trace.TracerProvider
}

// Client talks HTTP to the legacy Core: identity (session, system-info),
// retrieval (/kb/search) and the native-capabilities probe. It satisfies
// knowledge.Identity and knowledge.Retriever. Safe for concurrent use.
type Client struct {
	base          *url.URL
	serviceToken  string
	rt            http.RoundTripper
	timeout       time.Duration
	probeInterval time.Duration
	metrics       *Metrics
	now           func() time.Time
	identity      *breaker.Breaker
	retrieval     *breaker.Breaker
	tracer        trace.Tracer // nil: tracing off

	mu          sync.Mutex
	absentUntil time.Time // system-info known absent until then
}

// NewClient validates o and builds a Client. Errors name the option, never its value.
func NewClient(o Options) (*Client, error) {
	u, err := url.Parse(o.BaseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil {
		return nil, errors.New("coreclient: base url must be an absolute http(s) url without credentials")
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return nil, errors.New("coreclient: base url must not have a query or fragment")
	}
	u.Path = strings.TrimRight(u.Path, "/")
	u.RawPath = ""
	if o.Timeout < 0 || o.ProbeInterval < 0 {
		return nil, errors.New("coreclient: timeout and probe interval must not be negative")
	}
	c := &Client{
		base:          u,
		serviceToken:  o.ServiceToken,
		timeout:       o.Timeout,
		probeInterval: o.ProbeInterval,
		metrics:       o.Metrics,
		now:           o.Now,
		tracer:        telemetry.Tracer(o.TracerProvider),
	}
	// Zero means the documented default.
	if c.timeout == 0 {
		c.timeout = corelink.Timeout
	}
	if c.probeInterval == 0 {
		c.probeInterval = corelink.ProbeInterval
	}
	if c.now == nil {
		c.now = time.Now
	}
	rt := o.Transport
	if rt == nil {
		rt = NewTransport(TransportOptions{})
	}
	// Requests go to the RoundTripper itself, not through an http.Client:
	// redirects are never followed (Core does not redirect these calls, and
	// a redirect must not carry a bearer elsewhere), so the client's
	// redirect bookkeeping — a copy of every request's headers — would be
	// pure cost.
	c.rt = rt
	c.identity = breaker.New(breaker.FamilyIdentity, o.Identity, o.Metrics.Breakers())
	c.retrieval = breaker.New(breaker.FamilyRetrieval, o.Retrieval, o.Metrics.Breakers())
	return c, nil
}

// TransportOptions tune the Core client's transport. Zero fields take
// corelink's defaults: the settings are the pass-through's to the same Core
// (proxy.dial_timeout, proxy.max_idle_conns_per_host) and the per-call
// bound (core.timeout) as the response-header timeout.
type TransportOptions struct {
	DialTimeout           time.Duration // connecting to Core (default 5s)
	ResponseHeaderTimeout time.Duration // waiting for Core's answer headers (default 3s)
	MaxIdleConnsPerHost   int           // the keep-alive pool to Core (default 256)
}

// NewTransport returns the Core client's transport: a clone of
// http.DefaultTransport with o's timeouts and pool, no transparent
// compression (Core's JSON answers are small; asking for gzip would only
// cost CPU on both sides) and no environment proxy. It is a pool of its
// own, not the pass-through's: a burst of long turns or streams held open
// to Core cannot take the connections the identity and search calls need,
// nor they the turns'.
//
// A reused connection that Core closed while idle (Node's keep-alive
// timeout is 5s) costs nothing: net/http's connection reader sees the close
// and drops it from the pool; in the race where a request was already
// written to it, net/http retries a GET on a new connection, and a POST
// when it is marked idempotent (SearchKB does so) and its body can be
// replayed (Request.GetBody).
func NewTransport(o TransportOptions) *http.Transport {
	o.DialTimeout = cmp.Or(o.DialTimeout, corelink.DialTimeout)
	o.ResponseHeaderTimeout = cmp.Or(o.ResponseHeaderTimeout, corelink.Timeout)
	o.MaxIdleConnsPerHost = cmp.Or(o.MaxIdleConnsPerHost, corelink.MaxIdleConnsPerHost)
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.DialContext = (&net.Dialer{Timeout: o.DialTimeout, KeepAlive: 30 * time.Second}).DialContext
	t.ResponseHeaderTimeout = o.ResponseHeaderTimeout
	t.MaxIdleConns = o.MaxIdleConnsPerHost // one host
	t.MaxIdleConnsPerHost = o.MaxIdleConnsPerHost
	t.DisableCompression = true
	// Calls carry the caller's bearer or the service token: never route them
	// through a proxy named by HTTP(S)_PROXY in the environment.
	t.Proxy = nil
	return t
}

// Usable reports whether retrieval may be attempted (the retrieval breaker is not open).
func (c *Client) Usable() bool { return !c.retrieval.Open() }

// IdentityUsable reports whether the identity breaker is not open.
func (c *Client) IdentityUsable() bool { return !c.identity.Open() }

// sessionBody is the subset of Core's GET /agent-auth/v1/session answer we use
// (CORE_FACTS §1.2). Unknown fields are ignored.
type sessionBody struct {
	SessionID   string `json:"session_id"`
	ClientAppID string `json:"client_app_id"`
	Principal   struct {
		ID       string   `json:"id"`
		Tenant   string   `json:"tenant"`
		Roles    []string `json:"roles"`
		Audience string   `json:"audience"`
		Channel  string   `json:"channel"`
	} `json:"principal"`
	OnBehalfOf    string   `json:"on_behalf_of"`
	AllowedRoutes []string `json:"allowed_routes"`
	ExpiresAt     string   `json:"expires_at"`
}

// Session forwards the caller's Authorization header verbatim to
// GET /agent-auth/v1/session. A header Core could not accept
// (corefacts.BearerAcceptable: over 4 KiB, not Core's bearer shape) is
// ErrUnauthorized without a call; 401 → ErrUnauthorized; 200 with
// session_id, client_app_id and principal.id → the Session; a 4xx that is
// none of the endpoint's own answers (refusedStatus: Node's 431, a 400 or
// 413 of a front) → ErrRequestRefused wrapping ErrUnauthorized, which no
// breaker counts; anything else → ErrUnavailable.
func (c *Client) Session(ctx context.Context, authorization string) (corefacts.Session, error) {
	if !corefacts.BearerAcceptable(authorization) {
		return corefacts.Session{}, fmt.Errorf("coreclient: %s: %w", OpSession, corefacts.ErrUnauthorized)
	}
	var s corefacts.Session
	err := c.call(ctx, c.identity, OpSession, func(ctx context.Context) error {
		status, body, err := c.get(ctx, "/agent-auth/v1/session", authorization, identityBodyLimit)
		if err != nil {
			return err
		}
		switch {
		case status == http.StatusOK:
			var b sessionBody
			if json.Unmarshal(body, &b) != nil || b.SessionID == "" || b.ClientAppID == "" || b.Principal.ID == "" {
				return fmt.Errorf("%w: unusable session answer", corefacts.ErrUnavailable)
			}
			s = corefacts.Session{
				SessionID:   b.SessionID,
				ClientAppID: b.ClientAppID,
				Principal: corefacts.Principal{
					ID: b.Principal.ID, Tenant: b.Principal.Tenant, Roles: b.Principal.Roles,
					Audience: b.Principal.Audience, Channel: b.Principal.Channel,
				},
				OnBehalfOf:    b.OnBehalfOf,
				AllowedRoutes: b.AllowedRoutes,
			}
			if t, err := time.Parse(time.RFC3339Nano, b.ExpiresAt); err == nil {
				s.ExpiresAt = t.UTC()
			}
			return nil
		case status == http.StatusUnauthorized:
			return corefacts.ErrUnauthorized
		case refusedStatus(status):
			return errIdentityRefused(status)
		default:
			return statusUnavailable(status)
		}
	})
	if err != nil {
		return corefacts.Session{}, err
	}
	return s, nil
}

// agentError is the flat error body of Core's Agent API.
type agentError struct {
	Error   string `json:"error"`
	Message string `json:"message"`
}

// SystemInfo asks GET /agent-api/v1/workspaces/:route/system-info with the
// caller's header. nil: the route is allowed. A header Core could not
// accept is ErrUnauthorized without a call; 401 → ErrUnauthorized; 404
// not_found → ErrEndpointAbsent (an older Core; remembered for ProbeInterval,
// during which no request is sent); other 4xx with an Agent API body →
// *CoreError; another 4xx without one (refusedStatus) → ErrRequestRefused
// wrapping ErrUnauthorized; 5xx, transport errors and unusable answers →
// ErrUnavailable.
// The zero route key (a segment Core's workspace pattern rejects) is a
// *CoreError 404 route_unavailable without a call (Core would answer a
// misleading 404 not_found).
func (c *Client) SystemInfo(ctx context.Context, authorization string, route corefacts.RouteKey) error {
	if !corefacts.BearerAcceptable(authorization) {
		return fmt.Errorf("coreclient: %s: %w", OpSystemInfo, corefacts.ErrUnauthorized)
	}
	if route.IsZero() {
		return errNoRouteKey()
	}
	if c.systemInfoAbsent() {
		return fmt.Errorf("coreclient: %s: %w", OpSystemInfo, corefacts.ErrEndpointAbsent)
	}
	return c.call(ctx, c.identity, OpSystemInfo, func(ctx context.Context) error {
		status, body, err := c.get(ctx, "/agent-api/v1/workspaces/"+route.String()+"/system-info", authorization, identityBodyLimit)
		if err != nil {
			return err
		}
		switch {
		case status == http.StatusOK:
			return nil
		case status == http.StatusUnauthorized:
			return corefacts.ErrUnauthorized
		case status >= 400 && status < 500:
			var e agentError
			if json.Unmarshal(body, &e) != nil || e.Error == "" {
				if refusedStatus(status) {
					return errIdentityRefused(status)
				}
				return fmt.Errorf("%w: unusable answer (status %d)", corefacts.ErrUnavailable, status)
			}
			if status == http.StatusNotFound && e.Error == "not_found" {
				c.markSystemInfoAbsent()
				return corefacts.ErrEndpointAbsent
			}
			return &corefacts.CoreError{Status: status, Code: jsstring.CutUTF8(e.Error, 64), Message: jsstring.CutUTF8(e.Message, 512)}
		default:
			return statusUnavailable(status)
		}
	})
}

func (c *Client) systemInfoAbsent() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now().Before(c.absentUntil)
}

func (c *Client) markSystemInfoAbsent() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.absentUntil = c.now().Add(c.probeInterval)
}

// searchRequest is the body of POST /kb/search (one KB per call).
type searchRequest struct {
	KBIDs    []string `json:"kb_ids"`
	Query    string   `json:"query"`
	TopK     int      `json:"top_k"`
	MinScore float64  `json:"min_score"`
}

// kbUnavailablePrefix starts Core's 400 answer when none of the requested KBs
// exists ("知识库不可用：<ids>"). /kb/search has no error codes, only this
// human text, so the protocol forces a prefix test on Core's body.
const kbUnavailablePrefix = "知识库不可用"

// SearchKB searches one knowledge base with POST /kb/search, authenticated with
// the service token (never the caller's), and returns Core's unfiltered top
// topK: it always sends min_score UnfilteredMinScore, and the caller applies
// the route's threshold (ScoreThreshold, KeepsScore). Hits of other KBs are
// dropped.
//
// kbID is sent as given: callers pass the spelling stored in bz_kb_bases
// (Core matches ids case-insensitively but keys its index cache by the
// spelling sent). Core's echo of the id is matched case-insensitively.
//
// Errors: ErrKBMissing when Core does not list the KB (or answers 400
// 知识库不可用); ErrRateLimited on 429 (Core's per-client rate limit on our
// credential: not a breaker failure, counted as outcome rate_limited);
// ErrRequestRefused on any other 400, and on 413, 414 and 431 (the body
// carries the caller's query: that KB fails for this search, and no
// breaker counts it, outcome client_error);
// ErrUnavailable for everything else, including 401/403 (our own credential
// was refused: an operator problem), which counts as a breaker failure on
// purpose: retrieval really is unusable until the operator fixes it, and the
// open breaker stops us from hammering Core meanwhile.
func (c *Client) SearchKB(ctx context.Context, kbID, query string, topK int) ([]corefacts.Hit, error) {
	if kbID == "" || jsstring.Trim(query) == "" {
		return nil, errors.New("coreclient: kb search: empty kb id or query")
	}
	payload, err := json.Marshal(searchRequest{KBIDs: []string{kbID}, Query: query, TopK: topK, MinScore: corefacts.UnfilteredMinScore})
	if err != nil {
		return nil, fmt.Errorf("coreclient: kb search: encode: %w", err)
	}
	var hits []corefacts.Hit
	err = c.call(ctx, c.retrieval, OpKBSearch, func(ctx context.Context) error {
		status, body, err := c.postKBSearch(ctx, payload)
		if err != nil {
			return err
		}
		switch status {
		case http.StatusOK:
			r, err := decodeSearch(body)
			if err != nil {
				return fmt.Errorf("%w: unusable search answer", corefacts.ErrUnavailable)
			}
			found := false
			for _, id := range r.KBIDs {
				if corefacts.SameID(id, kbID) {
					found = true
					break
				}
			}
			if !found {
				return corefacts.ErrKBMissing
			}
			hits = make([]corefacts.Hit, 0, len(r.Hits))
			for _, h := range r.Hits {
				if h.KBID != "" && !corefacts.SameID(h.KBID, kbID) {
					continue
				}
				docID, err := h.DocID.Int64()
				if err != nil {
					return fmt.Errorf("%w: unusable search answer", corefacts.ErrUnavailable)
				}
				hits = append(hits, corefacts.Hit{KBID: kbID, DocID: docID, Seq: h.Seq, Title: h.Title, Content: h.Content, Score: h.Score})
			}
			return nil
		case http.StatusBadRequest:
			if kbUnavailable(body) {
				return corefacts.ErrKBMissing
			}
			return fmt.Errorf("%w (status 400)", corefacts.ErrRequestRefused)
		case http.StatusRequestEntityTooLarge, http.StatusRequestURITooLong, http.StatusRequestHeaderFieldsTooLarge:
			return fmt.Errorf("%w (status %d)", corefacts.ErrRequestRefused, status)
		case http.StatusUnauthorized, http.StatusForbidden:
			return fmt.Errorf("%w: service credential refused (status %d)", corefacts.ErrUnavailable, status)
		case http.StatusTooManyRequests:
			return corefacts.ErrRateLimited
		default:
			return statusUnavailable(status)
		}
	})
	if err != nil {
		return nil, err
	}
	return hits, nil
}

// postKBSearch sends POST /kb/search with the service token and reads the
// answer (at most searchBodyLimit bytes).
func (c *Client) postKBSearch(ctx context.Context, payload []byte) (int, []byte, error) {
	req, err := c.newRequest(ctx, http.MethodPost, "/kb/search", bytes.NewReader(payload))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+c.serviceToken)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	// A search changes nothing in Core, so it may be sent again: an
	// Idempotency-Key without a value lets net/http retry it on a new
	// connection when a reused one fails before the answer's first byte,
	// and is not sent (net/http's Transport documentation).
	req.Header["Idempotency-Key"] = nil
	return c.do(req, searchBodyLimit)
}

// call runs one Core operation under breaker b with the per-call timeout and
// records its metrics. Errors come back as "coreclient: <op>: …", wrapping the
// sentinel (and context.Canceled / context.DeadlineExceeded when relevant);
// they never carry the URL, host or a credential.
func (c *Client) call(ctx context.Context, b *breaker.Breaker, op string, fn func(context.Context) error) error {
	start := c.now()
	sent := false
	run := func(ctx context.Context) error {
		sent = true
		cctx, cancel := context.WithTimeout(ctx, c.timeout)
		defer cancel()
		return fn(cctx)
	}
	var err error
	if b != nil {
		err = b.Do(ctx, run)
	} else {
		err = run(ctx)
	}
	d := time.Duration(-1)
	if sent {
		d = c.now().Sub(start)
	}
	tid := "" // the exemplar's trace id: a sampled request's
	if c.tracer != nil {
		if sc, ok := telemetry.Sampled(ctx); ok {
			tid = sc.TraceID().String()
		}
	}
	if err == nil {
		c.metrics.Observe(op, OutcomeOK, d, tid)
		return nil
	}
	if errors.Is(err, corefacts.ErrBreakerOpen) {
		c.metrics.Observe(op, OutcomeOpen, -1, tid)
		if c.tracer != nil {
			breaker.MarkRefused(ctx, b)
		}
		return err // already "coreclient: <family>: …"
	}
	var ce *corefacts.CoreError
	switch {
	case errors.Is(err, corefacts.ErrUnavailable) && ctx.Err() != nil:
		// The caller gave up: not Core's fault; keep both sentinels.
		c.metrics.Observe(op, OutcomeCanceled, d, tid)
		return fmt.Errorf("coreclient: %s: %w: %w", op, corefacts.ErrUnavailable, ctx.Err())
	case errors.Is(err, corefacts.ErrRequestRefused):
		c.metrics.Observe(op, OutcomeClientError, d, tid)
	case errors.Is(err, corefacts.ErrUnauthorized):
		c.metrics.Observe(op, OutcomeUnauthorized, d, tid)
	case errors.Is(err, corefacts.ErrRateLimited):
		c.metrics.Observe(op, OutcomeRateLimited, d, tid)
	case errors.As(err, &ce), errors.Is(err, corefacts.ErrNotFound), errors.Is(err, corefacts.ErrEndpointAbsent):
		c.metrics.Observe(op, OutcomeClientError, d, tid)
		if ce != nil {
			return err // relayed as is
		}
	default:
		c.metrics.Observe(op, OutcomeUnavailable, d, tid)
	}
	return fmt.Errorf("coreclient: %s: %w", op, err)
}

// errNoRouteKey is the answer for the zero route key, sent nowhere: Core's
// gate answer for a workspace that does not exist.
func errNoRouteKey() error {
	return &corefacts.CoreError{Status: http.StatusNotFound, Code: "route_unavailable", Message: "The configured route is unavailable."}
}

// newRequest builds a request to base URL + path. path is a constant or
// built from a parsed corefacts.RouteKey, so no caller text reaches the URL unchecked.
func (c *Client) newRequest(ctx context.Context, method, path string, body io.Reader) (*http.Request, error) {
	u := *c.base
	u.Path = c.base.Path + path
	req, err := http.NewRequestWithContext(ctx, method, u.String(), body)
	if err != nil {
		return nil, fmt.Errorf("%w: cannot build request", corefacts.ErrUnavailable)
	}
	return req, nil
}

// get sends GET base URL + path (see newRequest) asking for JSON, with the
// caller's Authorization header verbatim when not empty, and reads at most
// limit bytes of the answer (see do).
func (c *Client) get(ctx context.Context, path, authorization string, limit int64) (int, []byte, error) {
	req, err := c.newRequest(ctx, http.MethodGet, path, nil)
	if err != nil {
		return 0, nil, err
	}
	if authorization != "" {
		req.Header.Set("Authorization", authorization)
	}
	req.Header.Set("Accept", "application/json")
	return c.do(req, limit)
}

// do sends req and reads at most limit bytes of the answer. Transport errors
// are reduced to ErrUnavailable (plus context.DeadlineExceeded for a timeout),
// because *url.Error would leak the URL.
func (c *Client) do(req *http.Request, limit int64) (int, []byte, error) {
	resp, body, err := c.doResponse(req, limit)
	if err != nil {
		return 0, nil, err
	}
	return resp.StatusCode, body, nil
}

// doResponse is do returning the (already closed) response for its headers.
func (c *Client) doResponse(req *http.Request, limit int64) (resp *http.Response, body []byte, err error) {
	if c.tracer != nil && trace.SpanContextFromContext(req.Context()).IsValid() {
		// Calls of a request only: a background probe starts no trace.
		var span trace.Span
		req, span = c.startSpan(req)
		defer func() { endSpan(span, resp, err) }()
	}
	resp, err = c.rt.RoundTrip(req)
	if err == nil && resp == nil {
		err = errors.New("no response")
	}
	if err != nil {
		return nil, nil, transportError(req.Context(), err)
	}
	defer resp.Body.Close()
	if resp.ContentLength > limit {
		return nil, nil, errTooLarge
	}
	body, err = readAnswer(resp.Body, resp.ContentLength, limit)
	if err != nil {
		return nil, nil, transportError(req.Context(), err)
	}
	if int64(len(body)) > limit {
		return nil, nil, errTooLarge
	}
	return resp, body, nil
}

var errTooLarge = fmt.Errorf("%w: answer too large", corefacts.ErrUnavailable)

// readAnswer reads r to its end, or to one byte past limit. An answer of
// known length (n ≥ 0) is read into one buffer of that size plus the byte
// the read that sees the end needs (the transports hand a connection back
// only once its answer was read to the end); io.ReadAll would grow a buffer
// from 512 bytes, about twice the answer in garbage.
func readAnswer(r io.Reader, n, limit int64) ([]byte, error) {
	size := int64(4 << 10)
	if n >= 0 {
		size = n + 1
	}
	b := make([]byte, 0, min(size, limit+1))
	for {
		if int64(len(b)) > limit {
			return b, nil
		}
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)] // grow, as io.ReadAll does
		}
		m, err := r.Read(b[len(b):min(int64(cap(b)), limit+1)])
		b = b[:len(b)+m]
		if err == io.EOF {
			return b, nil
		}
		if err != nil {
			return nil, err
		}
	}
}

func transportError(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("%w: %w", corefacts.ErrUnavailable, context.DeadlineExceeded)
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return fmt.Errorf("%w: %w", corefacts.ErrUnavailable, context.DeadlineExceeded)
	}
	var dnsErr *net.DNSError
	var unknownCA x509.UnknownAuthorityError
	var verify *tls.CertificateVerificationError
	switch {
	case errors.As(err, &unknownCA): // the sentinels' texts name no host
		return fmt.Errorf("%w: transport error: %w", corefacts.ErrUnavailable, ErrUnknownAuthority)
	case errors.As(err, &verify):
		return fmt.Errorf("%w: transport error: %w", corefacts.ErrUnavailable, ErrCertificate)
	case errors.Is(err, syscall.ECONNREFUSED): // its text names no address
		return fmt.Errorf("%w: transport error: %w", corefacts.ErrUnavailable, syscall.ECONNREFUSED)
	case errors.As(err, &dnsErr):
		return fmt.Errorf("%w: transport error: %w", corefacts.ErrUnavailable, ErrNoSuchHost)
	}
	return fmt.Errorf("%w: transport error", corefacts.ErrUnavailable)
}

// ErrUnknownAuthority: an https Core's certificate is signed by a CA that
// is not trusted (a private CA needs core.ca_file). ErrCertificate: it did
// not verify otherwise (host name, expiry). Neither keeps the address.
var (
	ErrUnknownAuthority = errors.New("core's TLS certificate is signed by an unknown authority")
	ErrCertificate      = errors.New("core's TLS certificate does not verify")
)

// ErrNoSuchHost: Core's host name does not resolve (the name is not kept).
var ErrNoSuchHost = errors.New("the host name does not resolve")

// ErrRequestRefused is corefacts.ErrRequestRefused: Core refused a request
// whose shape the caller chose (outcome client_error; no breaker counts it).
var ErrRequestRefused = corefacts.ErrRequestRefused

// refusedStatus reports whether a 4xx from an identity endpoint is a refusal
// of the request's shape rather than one of the endpoint's own answers
// (CORE_FACTS §1.3, §2.2): every 4xx except 401 (answered apart), 403 and
// 404 (Core's gate and not_found answers; with no Agent API body, a front
// refusing the sidecar or a Core of another version: an operator problem),
// 405 (the method itself), 408 (Core's front timed the request out) and
// 429 (a limit in front of Core). Method and path are the client's
// constants, so what is left — Node's 431 for headers over 16 KiB, a 400 or
// 413 of a front — was caused by the caller's Authorization header.
func refusedStatus(status int) bool {
	switch status {
	case http.StatusForbidden, http.StatusNotFound, http.StatusMethodNotAllowed, http.StatusRequestTimeout, http.StatusTooManyRequests:
		return false
	}
	return status >= 400 && status < 500
}

// errIdentityRefused is an identity call's refused request: the caller's
// credential did not authenticate (401), and Core is up.
func errIdentityRefused(status int) error {
	return fmt.Errorf("%w (status %d): %w", corefacts.ErrRequestRefused, status, corefacts.ErrUnauthorized)
}

func statusUnavailable(status int) error {
	return fmt.Errorf("%w: status %d", corefacts.ErrUnavailable, status)
}

// headerValueOK reports whether v is a non-empty header value that can be
// forwarded (no control characters), so a malformed caller header never
// becomes a transport error that would count against the breaker.
func headerValueOK(v string) bool {
	if strings.TrimSpace(v) == "" {
		return false
	}
	for i := 0; i < len(v); i++ {
		if b := v[i]; (b < 0x20 && b != '\t') || b == 0x7f {
			return false
		}
	}
	return true
}

// kbUnavailable reports Core's 400 for a knowledge base it does not have
// (its error starts with kbUnavailablePrefix).
func kbUnavailable(body []byte) bool {
	var e struct {
		Error string `json:"error"`
	}
	return json.Unmarshal(body, &e) == nil && strings.HasPrefix(e.Error, kbUnavailablePrefix)
}
