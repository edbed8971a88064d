package coreclient

import (
	"bufio"
	"bytes"
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
	"github.com/bailinghub/knowledge-sidecar/config"
	"github.com/bailinghub/knowledge-sidecar/corefacts"
	"github.com/bailinghub/knowledge-sidecar/corefacts/jsstring"
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
	Transport    http.RoundTripper // nil → coreTransport for http:// (keep-alive on the caller's goroutine), over a tuned clone of http.DefaultTransport for https (dial 2s, resp-header 5s, idle 256/host)
	Timeout      time.Duration     // per-call deadline, always below the caller's (default 3s)
	// ProbeInterval is how long "system-info absent" is remembered (default 60s).
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
	// Zero means the documented default; config.Defaults is its one source.
	if c.timeout == 0 {
		c.timeout = config.Defaults().Core.Timeout
	}
	if c.probeInterval == 0 {
		c.probeInterval = config.Defaults().ProbeInterval
	}
	if c.now == nil {
		c.now = time.Now
	}
	rt := o.Transport
	if rt == nil {
		rt = newCoreTransport()
	}
	// Requests go to the RoundTripper itself, not through an http.Client:
	// redirects are never followed (Core does not redirect these calls, and
	// a redirect must not carry a bearer elsewhere), so the client's
	// redirect bookkeeping — a copy of every request's headers — would be
	// pure cost.
	c.rt = rt
	c.identity = breaker.New(breaker.FamilyIdentity, o.Identity, o.Metrics.breakerMetrics())
	c.retrieval = breaker.New(breaker.FamilyRetrieval, o.Retrieval, o.Metrics.breakerMetrics())
	return c, nil
}

// DefaultTransport is a clone of http.DefaultTransport tuned for one busy
// upstream: 2s dial, 5s response-header timeout, 256 idle connections per
// host, and no environment proxy.
func DefaultTransport() *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	d := &net.Dialer{Timeout: 2 * time.Second, KeepAlive: 30 * time.Second}
	t.DialContext = d.DialContext
	t.ResponseHeaderTimeout = 5 * time.Second
	t.MaxIdleConns = 1024
	t.MaxIdleConnsPerHost = 256
	t.IdleConnTimeout = 90 * time.Second
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
// GET /agent-auth/v1/session. An empty or malformed header is ErrUnauthorized
// without a call; 401 → ErrUnauthorized; 200 with session_id, client_app_id and
// principal.id → the Session; anything else → ErrUnavailable.
func (c *Client) Session(ctx context.Context, authorization string) (corefacts.Session, error) {
	if !headerValueOK(authorization) {
		return corefacts.Session{}, fmt.Errorf("coreclient: %s: %w", OpSession, corefacts.ErrUnauthorized)
	}
	var s corefacts.Session
	err := c.call(ctx, c.identity, OpSession, func(ctx context.Context) error {
		req, err := c.newRequest(ctx, http.MethodGet, "/agent-auth/v1/session", nil)
		if err != nil {
			return err
		}
		req.Header.Set("Authorization", authorization)
		req.Header.Set("Accept", "application/json")
		status, body, err := c.do(req, identityBodyLimit)
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
// caller's header. nil: the route is allowed. 401 → ErrUnauthorized; 404
// not_found → ErrEndpointAbsent (an older Core; remembered for ProbeInterval,
// during which no request is sent); other 4xx with an Agent API body →
// *CoreError; 5xx, transport errors and unusable answers → ErrUnavailable.
// The zero route key (a segment Core's workspace pattern rejects) is a
// *CoreError 404 route_unavailable without a call (Core would answer a
// misleading 404 not_found).
func (c *Client) SystemInfo(ctx context.Context, authorization string, route corefacts.RouteKey) error {
	if !headerValueOK(authorization) {
		return fmt.Errorf("coreclient: %s: %w", OpSystemInfo, corefacts.ErrUnauthorized)
	}
	if route.IsZero() {
		return errNoRouteKey()
	}
	if c.systemInfoAbsent() {
		return fmt.Errorf("coreclient: %s: %w", OpSystemInfo, corefacts.ErrEndpointAbsent)
	}
	return c.call(ctx, c.identity, OpSystemInfo, func(ctx context.Context) error {
		req, err := c.newRequest(ctx, http.MethodGet, "/agent-api/v1/workspaces/"+route.String()+"/system-info", nil)
		if err != nil {
			return err
		}
		req.Header.Set("Authorization", authorization)
		req.Header.Set("Accept", "application/json")
		status, body, err := c.do(req, identityBodyLimit)
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
			return fmt.Errorf("%w: search rejected (status 400)", corefacts.ErrUnavailable)
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
		c.metrics.observeRequest(op, OutcomeOK, d, tid)
		return nil
	}
	if errors.Is(err, corefacts.ErrBreakerOpen) {
		c.metrics.observeRequest(op, OutcomeOpen, -1, tid)
		if c.tracer != nil {
			breaker.MarkRefused(ctx, b)
		}
		return err // already "coreclient: <family>: …"
	}
	var ce *corefacts.CoreError
	switch {
	case errors.Is(err, corefacts.ErrUnavailable) && ctx.Err() != nil:
		// The caller gave up: not Core's fault; keep both sentinels.
		c.metrics.observeRequest(op, OutcomeCanceled, d, tid)
		return fmt.Errorf("coreclient: %s: %w: %w", op, corefacts.ErrUnavailable, ctx.Err())
	case errors.Is(err, corefacts.ErrUnauthorized):
		c.metrics.observeRequest(op, OutcomeUnauthorized, d, tid)
	case errors.Is(err, corefacts.ErrRateLimited):
		c.metrics.observeRequest(op, OutcomeRateLimited, d, tid)
	case errors.As(err, &ce), errors.Is(err, corefacts.ErrNotFound), errors.Is(err, corefacts.ErrEndpointAbsent):
		c.metrics.observeRequest(op, OutcomeClientError, d, tid)
		if ce != nil {
			return err // relayed as is
		}
	default:
		c.metrics.observeRequest(op, OutcomeUnavailable, d, tid)
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

// coreTransport is the Core client's default transport for http:// Core
// URLs: HTTP/1.1 keep-alive exchanges run on the caller's goroutine (write
// the request, read the answer, hand the connection back when its body was
// read to the end), where net/http's Transport hands every exchange to a
// connection's read and write goroutines: three goroutine wake-ups per call
// fewer, about 17 µs of CPU per Core call on this machine kind (session,
// system-info and each /kb/search: two to four per knowledge request).
// Requests and answers are written and parsed by net/http (Request.Write,
// ReadResponse). https and anything else go to the fallback Transport.
//
// Deadlines come from the request's context (every Core call has one) and
// the response-header timeout; a cancelled context poisons the connection's
// deadline, so the exchange returns at once and the connection is closed.
// A reused connection that fails before any byte of an answer arrived (Core
// closed it while idle: Node's keep-alive timeout is 5 s) is retried once on
// a new connection when the body can be replayed.
type coreTransport struct {
	fallback          *http.Transport
	dial              func(ctx context.Context, network, addr string) (net.Conn, error)
	respHeaderTimeout time.Duration
	idleTimeout       time.Duration
	maxIdle           int
	now               func() time.Time

	mu   sync.Mutex
	idle map[string][]*coreConn // by host:port, most recently used last
}

type coreConn struct {
	c    net.Conn
	br   *bufio.Reader
	bw   *bufio.Writer
	used time.Time
}

func newCoreTransport() *coreTransport {
	fb := DefaultTransport()
	d := &net.Dialer{Timeout: 2 * time.Second, KeepAlive: 30 * time.Second}
	return &coreTransport{
		fallback: fb, dial: d.DialContext, respHeaderTimeout: fb.ResponseHeaderTimeout,
		idleTimeout: fb.IdleConnTimeout, maxIdle: fb.MaxIdleConnsPerHost, now: time.Now,
		idle: map[string][]*coreConn{},
	}
}

// errNothingReceived: the connection failed before the first byte of an answer.
type errNothingReceived struct{ err error }

func (e errNothingReceived) Error() string { return "core connection closed before an answer" }
func (e errNothingReceived) Unwrap() error { return e.err }

func (t *coreTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL.Scheme != "http" || req.Method == http.MethodConnect || req.Header.Get("Upgrade") != "" {
		return t.fallback.RoundTrip(req)
	}
	addr := req.URL.Host
	if req.URL.Port() == "" {
		addr = net.JoinHostPort(req.URL.Hostname(), "80")
	}
	for attempt := 0; ; attempt++ {
		cc, reused, err := t.conn(req.Context(), addr)
		if err != nil {
			closeRequestBody(req)
			return nil, err
		}
		resp, err := t.exchange(cc, addr, req)
		if err == nil {
			return resp, nil
		}
		cc.c.Close()
		var nothing errNothingReceived
		if !reused || attempt > 0 || !errors.As(err, &nothing) || req.Context().Err() != nil ||
			(req.Body != nil && req.Body != http.NoBody && req.GetBody == nil) {
			closeRequestBody(req)
			return nil, err
		}
		if req.GetBody != nil { // replay the body on the new connection
			body, gerr := req.GetBody()
			if gerr != nil {
				return nil, err
			}
			r2 := *req
			r2.Body = body
			req = &r2
		}
	}
}

func closeRequestBody(req *http.Request) {
	if req.Body != nil {
		req.Body.Close()
	}
}

// conn takes the most recently used idle connection to addr that has not
// idled too long, or dials one.
func (t *coreTransport) conn(ctx context.Context, addr string) (*coreConn, bool, error) {
	now := t.now()
	t.mu.Lock()
	for list := t.idle[addr]; len(list) > 0; list = t.idle[addr] {
		cc := list[len(list)-1]
		t.idle[addr] = list[:len(list)-1]
		if now.Sub(cc.used) < t.idleTimeout {
			t.mu.Unlock()
			return cc, true, nil
		}
		cc.c.Close()
	}
	t.mu.Unlock()
	c, err := t.dial(ctx, "tcp", addr)
	if err != nil {
		return nil, false, err
	}
	return &coreConn{c: c, br: bufio.NewReaderSize(c, 16<<10), bw: bufio.NewWriterSize(c, 4<<10)}, false, nil
}

// put keeps a connection whose exchange ended cleanly for the next call.
func (t *coreTransport) put(addr string, cc *coreConn) {
	cc.used = t.now()
	t.mu.Lock()
	if len(t.idle[addr]) < t.maxIdle {
		t.idle[addr] = append(t.idle[addr], cc)
		cc = nil
	}
	t.mu.Unlock()
	if cc != nil {
		cc.c.Close()
	}
}

// CloseIdleConnections closes the idle connections (http.Client calls it).
func (t *coreTransport) CloseIdleConnections() {
	t.mu.Lock()
	idle := t.idle
	t.idle = map[string][]*coreConn{}
	t.mu.Unlock()
	for _, list := range idle {
		for _, cc := range list {
			cc.c.Close()
		}
	}
	t.fallback.CloseIdleConnections()
}

// longAgo is a deadline in the past: it makes every pending I/O return.
var longAgo = time.Unix(1, 0)

func (t *coreTransport) exchange(cc *coreConn, addr string, req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	deadline, hasDeadline := ctx.Deadline()
	if err := cc.c.SetDeadline(deadline); err != nil { // zero: none
		return nil, err
	}
	stop := context.AfterFunc(ctx, func() { cc.c.SetDeadline(longAgo) })
	fail := func(err error) (*http.Response, error) {
		stop()
		return nil, err
	}
	if err := req.Write(cc.bw); err != nil {
		return fail(errNothingReceived{err})
	}
	if err := cc.bw.Flush(); err != nil {
		return fail(errNothingReceived{err})
	}
	if t.respHeaderTimeout > 0 {
		hd := t.now().Add(t.respHeaderTimeout)
		if !hasDeadline || hd.Before(deadline) {
			cc.c.SetReadDeadline(hd)
		}
	}
	if _, err := cc.br.Peek(1); err != nil {
		if ne, ok := err.(net.Error); ok && ne.Timeout() {
			return fail(err) // Core is slow, not gone: never retried
		}
		return fail(errNothingReceived{err})
	}
	var resp *http.Response
	for {
		var err error
		if resp, err = http.ReadResponse(cc.br, req); err != nil {
			return fail(err)
		}
		if resp.StatusCode >= 200 || resp.StatusCode == http.StatusSwitchingProtocols {
			break
		}
		resp.Body.Close() // an informational answer (1xx): the real one follows
	}
	cc.c.SetReadDeadline(deadline) // the body: the call's deadline only
	if ctx.Err() != nil {
		cc.c.SetDeadline(longAgo) // cancelled meanwhile: keep the poison
	}
	keep := !resp.Close && !req.Close && resp.ProtoAtLeast(1, 1) && resp.StatusCode != http.StatusSwitchingProtocols
	resp.Body = &coreBody{rc: resp.Body, t: t, cc: cc, addr: addr, stop: stop, keep: keep}
	return resp, nil
}

// coreBody hands its connection back when read to the end and closed;
// closed early, the connection is closed.
type coreBody struct {
	rc     io.ReadCloser
	t      *coreTransport
	cc     *coreConn
	addr   string
	stop   func() bool
	keep   bool
	eof    bool
	closed bool
}

func (b *coreBody) Read(p []byte) (int, error) {
	if b.closed {
		return 0, errors.New("coreclient: read on a closed answer body")
	}
	n, err := b.rc.Read(p)
	if err == io.EOF {
		b.eof = true
	}
	return n, err
}

func (b *coreBody) Close() error {
	if b.closed {
		return nil
	}
	b.closed = true
	err := b.rc.Close()
	// stop is false when the context already fired: the deadline is poisoned.
	if b.stop() && b.keep && b.eof && err == nil && b.cc.br.Buffered() == 0 {
		b.t.put(b.addr, b.cc)
		return nil
	}
	b.cc.c.Close()
	return err
}
