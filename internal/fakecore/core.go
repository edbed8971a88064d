package fakecore

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bailinghub/knowledge-sidecar/corefacts"
)

// Options configures a fake Core.
type Options struct {
	// ServiceToken is accepted on /kb/search (Bearer or ?token=). Empty: nothing is.
	ServiceToken string
	// SystemInfo serves …/system-info (Core ≥ 0.7); false → 404 not_found like an older Core.
	SystemInfo bool
	// Native serves the knowledge protocol itself (capabilities 200 plus stub
	// search/read answers, and turns accept knowledge_delivery); false → 404 not_found.
	Native bool
	// TaskControl declares task_binding on turns (Core ≥ 0.8).
	TaskControl bool
	// GzipTurns compresses turn answers when the request accepts gzip.
	GzipTurns bool
	// Now is the clock (default time.Now), used for session expiry and timestamps.
	Now func() time.Time
	// RateLimitPerMin is the service credential's client rate limit on
	// /kb/search (bz_clients.rate_limit_per_min): past it in a one-minute
	// window (started by the first call, measured with Now) Core answers
	// 429 {"error":"超出限速（N/分钟）"}. 0: unlimited.
	RateLimitPerMin int
	// OnRun, when set, is called (outside the fake's lock) for every run a turn creates.
	OnRun func(corefacts.Run)
	// AccessTTL is how long an access token from /agent-auth/v1/token
	// lives (Core: 15 minutes, the default).
	AccessTTL time.Duration
	// MaxHeaderSize is the bound of Core's HTTP front (Node's
	// --max-http-header-size) on the request line and headers, in bytes:
	// past it the request is answered 431 with no body and the connection
	// closed, before any route runs, as Node's parser does. 0: Node's
	// default, 16 KiB; negative: no bound.
	MaxHeaderSize int
}

// NodeMaxHeaderSize is Node's default --max-http-header-size (16 KiB), the
// bound of Core's HTTP front.
const NodeMaxHeaderSize = 16 << 10

// Fault is an injected misbehaviour for requests whose path has a prefix.
// The first matching effect applies in this order: Latency (then continue),
// Hang, Reset, Status.
type Fault struct {
	Latency time.Duration // wait this long (or until the request ends) before answering
	Hang    bool          // never answer; return when the request context ends or on Close
	Reset   bool          // hijack the connection and close it without answering
	Status  int           // answer this status with Body (default body: Core's internal_error with a request_id)
	Body    []byte        // body for Status; must be JSON
}

// Core is a fake BailingHub Core for tests and the demo: an http.Handler
// that answers Agent Auth, Agent API and /kb/search the way CORE_FACTS.md
// describes. Safe for concurrent use.
type Core struct {
	opts   Options
	native atomic.Bool // Options.Native, then SetNative

	mu       sync.Mutex
	sessions map[string]corefacts.Session // by access token
	routes   map[string]*route
	kbs      map[string]*kb
	faults   map[string]Fault // by path prefix; "" matches every path
	calls    map[string]int   // by exact path
	last     map[string]recorded
	lastSize int // sum of last[*].size
	seq      uint64
	turns    map[string]*turnRecord // by idempotency key
	runs     []corefacts.Run
	threads  map[string]*thread // by (session, route, conversation)

	embedOutage bool // every KB's embedding call fails (SetEmbeddingsOutage)

	authSt         *authState // Agent Auth's clients, authorizations and sessions (agentauth.go)
	headerRefusals int        // requests the front answered 431 (MaxHeaderSize)

	rateWindow time.Time // start of the current rate-limit minute
	rateCount  int       // /kb/search calls in it

	closeOnce sync.Once
	closed    chan struct{} // closed by Close: ends hangs and latencies
}

type route struct {
	gate      string // "" allowed, else a gate code
	knowledge []TurnKnowledge
	retrieval *TurnRetrieval // non-nil: turns retrieve from their input instead of knowledge
}

type recorded struct {
	seq    uint64
	method string
	header http.Header
	body   []byte
	size   int // bytes of header and body, for the retention bound
}

// What the fake keeps of the requests it saw is bounded, so a client that
// sends many distinct, large paths (a load test, the demo behind a real
// listener) cannot grow it without end: paths are kept to their first
// maxKeptPath bytes, at most maxCountedPaths paths are counted, and the
// last request per path is kept for at most maxRecorded paths and
// maxRecordedBytes of headers and bodies in all (the oldest go first; the
// newest is always kept).
const (
	maxKeptPath      = 1 << 10
	maxCountedPaths  = 1 << 10
	maxRecorded      = 256
	maxRecordedBytes = 8 << 20
)

// New returns an empty fake Core.
func New(o Options) *Core {
	if o.Now == nil {
		o.Now = time.Now
	}
	c := &Core{
		opts:     o,
		sessions: map[string]corefacts.Session{},
		routes:   map[string]*route{},
		kbs:      map[string]*kb{},
		faults:   map[string]Fault{},
		calls:    map[string]int{},
		last:     map[string]recorded{},
		turns:    map[string]*turnRecord{},
		closed:   make(chan struct{}),
	}
	c.native.Store(o.Native)
	return c
}

// SetNative is the Core restarted as another version on the same database:
// native (true) serves the knowledge protocol as Options.Native does, legacy
// (false) does not; what it holds (sessions, routes, documents, the turns
// it recorded) is kept, as Core keeps them in its database.
func (c *Core) SetNative(on bool) { c.native.Store(on) }

// Close ends every hanging or delayed request (they then return without an
// answer). Call it before closing the httptest.Server, whose Close waits for
// active requests. Idempotent.
func (c *Core) Close() { c.closeOnce.Do(func() { close(c.closed) }) }

// Token returns a deterministic Agent access token that looks like Core's
// (bha_ + base64url of 32 bytes) for a seed such as "alice".
func Token(seed string) string {
	sum := sha256.Sum256([]byte("fakecore token " + seed))
	return "bha_" + base64.RawURLEncoding.EncodeToString(sum[:])
}

// ValidAccessToken reports whether t has the shape Core accepts: bha_ prefix,
// at least 40 characters, no whitespace.
func ValidAccessToken(t string) bool {
	return strings.HasPrefix(t, "bha_") && len(t) >= 40 && !strings.ContainsAny(t, " \t\r\n")
}

// AddSession makes token (a bearer such as Token("alice")) resolve to s. It
// panics if token does not have Core's shape, since Core would reject it.
// A non-zero s.ExpiresAt before Now makes the token expired (401).
func (c *Core) AddSession(token string, s corefacts.Session) {
	if !ValidAccessToken(token) {
		panic("fakecore: AddSession: token must look like Core's (bha_ prefix, ≥ 40 chars); use fakecore.Token")
	}
	c.locked(func() { c.sessions[token] = s })
}

// RevokeSession makes token unknown (401 everywhere).
func (c *Core) RevokeSession(token string) {
	c.locked(func() { delete(c.sessions, token) })
}

// locked runs f holding c.mu.
func (c *Core) locked(f func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	f()
}

// editRoute runs f on route name, declared (allowed) first if unknown,
// holding c.mu.
func (c *Core) editRoute(name string, f func(*route)) {
	c.locked(func() {
		r := c.routes[name]
		if r == nil {
			r = &route{}
			c.routes[name] = r
		}
		f(r)
	})
}

// Gate codes system-info and turns answer for a route (CORE_FACTS §2).
const (
	GateAllowed             = ""
	GateRouteUnavailable    = "route_unavailable"
	GateAgentClientDisabled = "agent_client_disabled"
	GateInvalidRoute        = "invalid_route"
	GateRouteNotAllowed     = "route_not_allowed"
	GateAgentDirectDisabled = "agent_direct_disabled"
	GateAudienceNotAllowed  = "audience_not_allowed"
)

var gates = map[string]struct {
	status  int
	message string
}{
	GateRouteUnavailable:    {404, "The configured route is unavailable."},
	GateAgentClientDisabled: {403, "Agent Client Runtime is not enabled for this route."},
	GateInvalidRoute:        {400, "The configured route is invalid."},
	GateRouteNotAllowed:     {403, "The Agent Session is not allowed to use this route."},
	GateAgentDirectDisabled: {403, "Direct Agent tools are not enabled for this route."},
	GateAudienceNotAllowed:  {403, "The business identity is not allowed to use this route."},
}

// SetRoute declares a route and what its gate answers: GateAllowed or one of
// the Gate* codes. Unknown routes answer 404 route_unavailable; an allowed
// route still answers 403 route_not_allowed to a session whose
// allowed_routes lacks it (and lacks "*"). It panics on an unknown code.
func (c *Core) SetRoute(name, gate string) {
	if _, ok := gates[gate]; gate != GateAllowed && !ok {
		panic("fakecore: SetRoute: unknown gate code " + gate)
	}
	c.editRoute(name, func(r *route) { r.gate = gate })
}

// TurnKnowledge is one item of a route's inline knowledge, returned by turns
// as context.knowledge[i] / context.knowledge_refs[i].
type TurnKnowledge struct {
	DocID   int64
	Title   string
	Content string
	Score   float64
}

// SetTurnKnowledge sets what turns on route return inline (declaring the
// route as allowed if it is unknown).
func (c *Core) SetTurnKnowledge(name string, items []TurnKnowledge) {
	c.editRoute(name, func(r *route) { r.knowledge = append([]TurnKnowledge(nil), items...) })
}

// TurnRetrieval is a route's knowledge config for turns (inject "chunk"):
// Core's knowledgeFor searches KBIDs with the turn's query (page context
// fields, then "\n" and user_input, cut to 2,000 characters) exactly as
// /kb/search does, keeping the top TopK hits scoring at least MinScore
// (CORE_FACTS §3.3, §5).
type TurnRetrieval struct {
	KBIDs    []string
	TopK     int
	MinScore float64
}

// SetTurnRetrieval makes turns on route retrieve their inline knowledge from
// the turn's input with the same ranking as /kb/search (declaring the route
// as allowed if it is unknown). It replaces SetTurnKnowledge's fixed items.
func (c *Core) SetTurnRetrieval(name string, r TurnRetrieval) {
	r.KBIDs = append([]string(nil), r.KBIDs...)
	c.editRoute(name, func(rt *route) { rt.retrieval = &r })
}

// SetFault injects f for paths starting with prefix ("" = every path).
func (c *Core) SetFault(prefix string, f Fault) {
	c.locked(func() { c.faults[prefix] = f })
}

// ClearFault removes the fault of prefix.
func (c *Core) ClearFault(prefix string) {
	c.locked(func() { delete(c.faults, prefix) })
}

// ClearFaults removes every fault.
func (c *Core) ClearFaults() {
	c.locked(func() { c.faults = map[string]Fault{} })
}

// Calls counts requests received (faulted ones included) whose path starts with prefix.
func (c *Core) Calls(prefix string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for p, k := range c.calls {
		if strings.HasPrefix(p, prefix) {
			n += k
		}
	}
	return n
}

// Request is what the fake received.
type Request struct {
	Method string
	Path   string
	Header http.Header
	Body   []byte
}

// LastRequest returns the most recent request whose path starts with prefix.
func (c *Core) LastRequest(prefix string) (Request, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var best Request
	var bestSeq uint64
	for p, r := range c.last {
		if strings.HasPrefix(p, prefix) && r.seq > bestSeq {
			bestSeq = r.seq
			best = Request{Method: r.method, Path: p, Header: r.header.Clone(), Body: bytes.Clone(r.body)}
		}
	}
	return best, bestSeq > 0
}

// RunsCreated counts the runs turns have created (replays create none).
func (c *Core) RunsCreated() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.runs)
}

// Runs returns a copy of the runs created so far.
func (c *Core) Runs() []corefacts.Run {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]corefacts.Run(nil), c.runs...)
}

// remember counts and records a request (c.mu held), within the bounds.
func (c *Core) remember(path string, r *http.Request, body []byte) {
	if len(path) > maxKeptPath {
		path = path[:maxKeptPath]
	}
	if _, ok := c.calls[path]; ok || len(c.calls) < maxCountedPaths {
		c.calls[path]++
	}
	size := len(body)
	for k, vs := range r.Header {
		for _, v := range vs {
			size += len(k) + len(v)
		}
	}
	if old, ok := c.last[path]; ok {
		c.lastSize -= old.size
		delete(c.last, path)
	}
	for len(c.last) > 0 && (len(c.last) >= maxRecorded || c.lastSize+size > maxRecordedBytes) {
		oldest, oldestSeq := "", uint64(0)
		for p, rec := range c.last {
			if oldestSeq == 0 || rec.seq < oldestSeq {
				oldest, oldestSeq = p, rec.seq
			}
		}
		c.lastSize -= c.last[oldest].size
		delete(c.last, oldest)
	}
	c.last[path] = recorded{seq: c.seq, method: r.Method, header: r.Header.Clone(), body: body, size: size}
	c.lastSize += size
}

// recordLimit bounds how much of a request body is kept and inspected; the
// fake's largest real limit is /kb/search's 1 MiB.
const recordLimit = 1 << 20

// ServeHTTP answers like Core.
func (c *Core) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if max := c.maxHeaderSize(); max >= 0 && headerSize(r) > max {
		// Node's parser refuses the request before Core sees it: a bare
		// 431, connection closed (no route, no record, no fault).
		w.Header().Set("Connection", "close")
		w.WriteHeader(http.StatusRequestHeaderFieldsTooLarge)
		c.mu.Lock()
		c.headerRefusals++
		c.mu.Unlock()
		return
	}
	body, tooLarge := readAll(r.Body, recordLimit)
	path := r.URL.Path

	c.mu.Lock()
	c.seq++
	c.remember(path, r, body)
	fault, faulted := c.faultFor(path)
	c.mu.Unlock()

	if faulted && c.applyFault(w, r, fault) {
		return
	}

	switch {
	case path == "/agent-auth/v1/session":
		c.serveSession(w, r)
	case strings.HasPrefix(path, "/agent-auth/v1/"):
		c.serveAgentAuth(w, r, body)
	case strings.HasPrefix(path, "/agent-auth/"):
		writeJSON(w, http.StatusNotFound, errBody{Error: "not_found"})
	case path == "/agent-api" || strings.HasPrefix(path, "/agent-api/"):
		c.serveAgentAPI(w, r, body, tooLarge)
	case path == "/kb/search":
		c.serveKBSearch(w, r, body, tooLarge)
	default:
		writeJSON(w, http.StatusNotFound, errBody{Error: "not found"})
	}
}

func (c *Core) maxHeaderSize() int {
	switch m := c.opts.MaxHeaderSize; {
	case m == 0:
		return NodeMaxHeaderSize
	case m < 0:
		return -1
	default:
		return m
	}
}

// headerSize is the size of r's request line and header lines as sent
// (HTTP/1.1 framing), the bytes Node's parser counts against its bound.
func headerSize(r *http.Request) int {
	n := len(r.Method) + 1 + len(r.RequestURI) + 1 + len(r.Proto) + 2
	n += len("Host: ") + len(r.Host) + 2
	for k, vs := range r.Header {
		for _, v := range vs {
			n += len(k) + 2 + len(v) + 2
		}
	}
	return n
}

// HeaderRefusals is how many requests the fake's HTTP front answered 431
// (Options.MaxHeaderSize).
func (c *Core) HeaderRefusals() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.headerRefusals
}

// faultFor returns the fault of the longest matching prefix. Caller holds mu.
func (c *Core) faultFor(path string) (Fault, bool) {
	best, found := "", false
	for p := range c.faults {
		if strings.HasPrefix(path, p) && (!found || len(p) > len(best)) {
			best, found = p, true
		}
	}
	return c.faults[best], found
}

// applyFault reports whether it answered (or dropped) the request.
func (c *Core) applyFault(w http.ResponseWriter, r *http.Request, f Fault) bool {
	if f.Latency > 0 {
		t := time.NewTimer(f.Latency)
		select {
		case <-t.C:
		case <-r.Context().Done():
			t.Stop()
			return true
		case <-c.closed:
			t.Stop()
			return true
		}
	}
	switch {
	case f.Hang:
		select {
		case <-r.Context().Done():
		case <-c.closed:
		}
		return true
	case f.Reset:
		hj, ok := w.(http.Hijacker)
		if !ok {
			panic(http.ErrAbortHandler)
		}
		conn, _, err := hj.Hijack()
		if err == nil {
			conn.Close()
		}
		return true
	case f.Status != 0:
		if f.Body != nil {
			writeRaw(w, f.Status, f.Body)
		} else {
			writeInternalError(w, f.Status)
		}
		return true
	}
	return false
}

// readAll reads at most limit bytes; tooLarge reports that more were sent.
func readAll(r io.Reader, limit int64) (body []byte, tooLarge bool) {
	if r == nil {
		return nil, false
	}
	b, _ := io.ReadAll(io.LimitReader(r, limit+1))
	if int64(len(b)) > limit {
		return b[:limit], true
	}
	return b, false
}

// errBody is Core's flat error body.
type errBody struct {
	Error   string `json:"error"`
	Message string `json:"message,omitempty"`
}

func writeJSON(w http.ResponseWriter, status int, v any) { writeRaw(w, status, encodeJSON(v)) }

// encodeJSON is v as Core's JSON.stringify writes it: no HTML escaping, no
// trailing newline.
func encodeJSON(v any) []byte {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false) // like JSON.stringify
	if err := enc.Encode(v); err != nil {
		panic(fmt.Sprintf("fakecore: encode: %v", err))
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
}

func writeRaw(w http.ResponseWriter, status int, b []byte) {
	h := w.Header()
	h.Set("Content-Type", "application/json; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	h.Set("Content-Length", fmt.Sprint(len(b)))
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

func writeInternalError(w http.ResponseWriter, status int) {
	id := newUUID()
	w.Header().Set("X-Request-Id", id)
	writeJSON(w, status, struct {
		Error     string `json:"error"`
		RequestID string `json:"request_id"`
	}{"internal_error", id})
}

// newUUID returns a random UUID v4.
func newUUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}
