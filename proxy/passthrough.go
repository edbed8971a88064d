package proxy

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"time"
)

// TransportOptions tune the one transport used for all pass-through traffic.
type TransportOptions struct {
	DialTimeout           time.Duration
	ResponseHeaderTimeout time.Duration
	MaxIdleConnsPerHost   int
	// TLSClientConfig verifies an https:// Core (core.ca_file); nil: the
	// system roots.
	TLSClientConfig *tls.Config
}

// coreReadBuffer is the transport's read buffer for Core's answers: 256
// bytes under net/http's 4 KiB default. The first read of an answer holds
// Core's header and the first body bytes, which the relay then writes
// behind the sidecar's own header into net/http's 4 KiB server write
// buffer. That header is longer than Core's (X-Request-Id, up to 144
// bytes), so with a 4 KiB read buffer those first bytes overflowed the
// write buffer by a few bytes, and every answer longer than about 4 KiB
// took one write syscall more than through a lean proxy (6 % more CPU per
// 64 KiB answer; TestPassthroughWrites).
const coreReadBuffer = 4<<10 - 256

// NewTransport returns a transport tuned for a single upstream: a large
// keep-alive pool (so bursts do not churn TIME_WAIT sockets), dial and
// response-header timeouts, and no transparent compression, so gzip bodies
// pass through still compressed and byte-identical.
func NewTransport(o TransportOptions) *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.DialContext = (&net.Dialer{Timeout: o.DialTimeout, KeepAlive: 30 * time.Second}).DialContext
	t.MaxIdleConns = 4 * o.MaxIdleConnsPerHost
	t.MaxIdleConnsPerHost = o.MaxIdleConnsPerHost
	t.IdleConnTimeout = 90 * time.Second
	t.ResponseHeaderTimeout = o.ResponseHeaderTimeout
	t.ExpectContinueTimeout = time.Second
	t.DisableCompression = true
	t.ReadBufferSize = coreReadBuffer
	t.Proxy = nil // never route Core traffic through an environment proxy
	if o.TLSClientConfig != nil {
		t.TLSClientConfig = o.TLSClientConfig.Clone()
	}
	return t
}

// forwarding decides which of a peer's forwarding headers survive: the
// client-address headers (clientAddressHeaders) and the trace context.
type forwarding struct {
	trusted      []netip.Prefix
	preserveHost bool
	// addr is the client-address list in effect: the built-in one and the
	// configuration's extra names.
	addr addrHeaders
	// trace is whose traceparent/tracestate count (TraceTrust*).
	trace TraceTrust
}

// newForwarding is the forwarding of o.
func newForwarding(o Options) forwarding {
	return forwarding{
		trusted:      o.TrustedProxies,
		preserveHost: o.PreserveHost,
		addr:         newAddrHeaders(o.ClientAddressHeadersExtra),
		trace:        o.TraceTrustInbound,
	}
}

func (f forwarding) isTrusted(remoteAddr string) bool {
	if len(f.trusted) == 0 {
		return false
	}
	a, ok := peerAddr(remoteAddr)
	return ok && f.trustedAddr(a)
}

// TraceTrust is whose inbound trace context (traceparent, tracestate) the
// edge honours (SPEC §9, config tracing.trust_inbound).
type TraceTrust uint8

const (
	// TraceTrustProxies (the default): only peers in the trusted-proxy
	// list, the same trust as X-Forwarded-*.
	TraceTrustProxies TraceTrust = iota
	// TraceTrustAll: every peer.
	TraceTrustAll
	// TraceTrustNone: no peer; every request starts its own trace.
	TraceTrustNone
)

// ParseTraceTrust maps tracing.trust_inbound to a TraceTrust: "" and
// "trusted_proxies", "all", "none".
func ParseTraceTrust(s string) (TraceTrust, bool) {
	switch s {
	case "", "trusted_proxies":
		return TraceTrustProxies, true
	case "all":
		return TraceTrustAll, true
	case "none":
		return TraceTrustNone, true
	}
	return TraceTrustProxies, false
}

// traceTrusted: the peer's trace context is honoured, given whether the
// peer is a trusted proxy.
func (f forwarding) traceTrusted(proxyTrusted bool) bool {
	switch f.trace {
	case TraceTrustAll:
		return true
	case TraceTrustNone:
		return false
	}
	return proxyTrusted
}

// rewrite prepares the outbound request: target URL (raw path and query
// kept), Host, request trailers, and X-Forwarded-* per the trusted-proxy
// list. ReverseProxy has already removed hop-by-hop headers, including those
// named in Connection, and the inbound Forwarded/X-Forwarded-* headers.
func (f forwarding) rewrite(target *url.URL, pr *httputil.ProxyRequest) {
	pr.SetURL(target)
	// ReverseProxy re-encodes a query it cannot parse (a ';', a bad escape,
	// too many parameters), which drops parameters and reorders the rest.
	// The sidecar decides nothing from a passed-through query, so Core gets
	// the client's bytes, as the contract requires.
	pr.Out.URL.RawQuery = joinQuery(target.RawQuery, pr.In.URL.RawQuery)
	keepRawPath(target, pr)
	// Request trailers arrive after the body; the server fills them into
	// In.Trailer when the body hits EOF, which the transport reads before it
	// writes the outbound trailers. Sharing the map (Clone copied it before
	// any value was known) lets them through.
	if len(pr.In.Trailer) > 0 {
		pr.Out.Trailer = pr.In.Trailer
	}
	if st := stateOf(pr.In.Context()); st != nil && pr.Out.Body != nil {
		pr.Out.Body = &bodyWatch{ReadCloser: pr.Out.Body, st: st}
	}
	if f.preserveHost {
		pr.Out.Host = pr.In.Host
	}
	trusted := f.isTrusted(pr.In.RemoteAddr)
	traceTrusted := f.traceTrusted(trusted)
	if !trusted || !traceTrusted {
		// Before SetXForwarded: the X-Forwarded-For/-Host/-Proto it sets
		// are in the list.
		f.addr.strip(pr.Out.Header, !trusted, !traceTrusted)
	}
	if traceTrusted {
		dropOrphanTracestate(pr.Out.Header)
	}
	if trusted {
		if v := pr.In.Header.Values("X-Forwarded-For"); len(v) > 0 {
			pr.Out.Header["X-Forwarded-For"] = append([]string(nil), v...)
		}
	}
	pr.SetXForwarded()
	if trusted {
		for _, h := range []string{"X-Forwarded-Host", "X-Forwarded-Proto"} {
			if v := pr.In.Header.Get(h); v != "" {
				pr.Out.Header.Set(h, v)
			}
		}
		if v := pr.In.Header.Values("Forwarded"); len(v) > 0 {
			pr.Out.Header["Forwarded"] = append([]string(nil), v...)
		}
	}
}

// clientAddressHeaders is the one list of headers that carry a client's
// address or the original URL in the conventions of common proxies, CDNs
// and servers (SPEC §8.3): an untrusted peer's are removed before the
// request goes to Core (X-Forwarded-For/-Host/-Proto are then set by the
// edge), since Core, or something behind it, may believe them; a trusted
// proxy's are forwarded. proxy.client_address_headers_extra adds to it.
//
// A name matches whatever its case and with '_' for '-' (X_Real_IP,
// x-real_ip): servers that map headers to CGI-style variables
// (HTTP_X_REAL_IP) cannot tell the spellings apart, and net/http keeps an
// underscore spelling as a key of its own ("X_real_ip"). An entry ending in
// '*' matches every name with that prefix: the X-Forwarded-* family keeps
// growing members (-Port, -Prefix, -Ssl, -Client-Cert, …).
var clientAddressHeaders = []string{
	"Forwarded",
	"X-Forwarded", "X-Forwarded-*", // -For, -Host, -Proto, -Port, -Prefix, -Server, -Ssl, -Scheme, -Uri, -Path, …
	"Forwarded-For", "X-Original-Forwarded-For",
	"X-Real-IP", "True-Client-IP", "CF-Connecting-IP", "Fastly-Client-IP",
	"X-Client-IP", "Client-IP", "X-Cluster-Client-IP", "X-Originating-IP",
	"X-Remote-IP", "X-Remote-Addr", "X-Envoy-External-Address",
	"X-ProxyUser-IP", "Fly-Client-IP", "X-Azure-ClientIP", "X-Azure-SocketIP",
	"X-Original-URL", "X-Rewrite-URL", "X-Original-URI", "X-Original-Host", "X-Host",
	"X-Envoy-Original-Path",
}

// traceHeaders are the W3C trace-context headers (canonical keys), dropped
// with the client-address ones when the peer's trace context is not
// trusted (SPEC §9).
const (
	hdrTraceparent = "Traceparent"
	hdrTracestate  = "Tracestate"
)

// addrHeaders is clientAddressHeaders (plus the configured extra names)
// in matching form: lower case, '-' for '_'.
type addrHeaders struct {
	exact    map[string]struct{}
	prefixes []string
	maxLen   int // the longest exact name; longer keys match a prefix or nothing
}

func newAddrHeaders(extra []string) addrHeaders {
	a := addrHeaders{exact: map[string]struct{}{}}
	for _, h := range append(clientAddressHeaders[:len(clientAddressHeaders):len(clientAddressHeaders)], extra...) {
		n := headerMatchForm(h)
		if p, ok := strings.CutSuffix(n, "*"); ok {
			a.prefixes = append(a.prefixes, p)
			continue
		}
		a.exact[n] = struct{}{}
		a.maxLen = max(a.maxLen, len(n))
	}
	return a
}

// headerMatchForm is name in lower case with '-' for '_'.
func headerMatchForm(name string) string {
	return strings.ReplaceAll(strings.ToLower(name), "_", "-")
}

// matches: key is in the list in any of its spellings. No allocation: the
// key is folded into a stack buffer and looked up as a string conversion,
// which the compiler does not copy.
func (a addrHeaders) matches(key string) bool {
	var buf [64]byte
	if len(key) > len(buf) {
		return a.matchPrefix(headerMatchForm(key))
	}
	b := buf[:len(key)]
	for i := 0; i < len(key); i++ {
		c := key[i]
		switch {
		case 'A' <= c && c <= 'Z':
			c += 'a' - 'A'
		case c == '_':
			c = '-'
		}
		b[i] = c
	}
	if len(b) <= a.maxLen {
		if _, ok := a.exact[string(b)]; ok {
			return true
		}
	}
	return a.matchPrefix(string(b))
}

func (a addrHeaders) matchPrefix(n string) bool {
	for _, p := range a.prefixes {
		if strings.HasPrefix(n, p) {
			return true
		}
	}
	return false
}

// builtinAddrHeaders is clientAddressHeaders alone, what the zero
// addrHeaders stands for.
var builtinAddrHeaders = newAddrHeaders(nil)

// strip removes from h the client-address headers (addr) and the trace
// context (trace), in every spelling.
func (a addrHeaders) strip(h http.Header, addr, trace bool) {
	if a.exact == nil {
		a = builtinAddrHeaders
	}
	for k := range h {
		switch {
		case addr && a.matches(k):
			delete(h, k)
		case trace && (k == hdrTraceparent || k == hdrTracestate):
			delete(h, k)
		}
	}
}

// dropOrphanTracestate removes a tracestate that came without a valid
// traceparent (W3C Trace Context §3.3: a vendor receiving one must not
// forward it). Nothing runs unless a tracestate is present.
func dropOrphanTracestate(h http.Header) {
	if _, ok := h[hdrTracestate]; !ok {
		return
	}
	if !validTraceparent(h[hdrTraceparent]) {
		delete(h, hdrTracestate)
	}
}

// keepRawPath sends Core the client's path bytes where url.URL would
// re-encode them: a backslash, for one, arrives as %5C otherwise. The exact
// path goes out as the URL's opaque part (the request line's path). A path
// starting with "//" keeps url.URL's form, which an opaque part would turn
// into an absolute URL.
func keepRawPath(target *url.URL, pr *httputil.ProxyRequest) {
	raw, ok := rawRequestPath(pr.In)
	if !ok || raw == pr.In.URL.EscapedPath() {
		return
	}
	base := strings.TrimSuffix(target.EscapedPath(), "/")
	if base == "" && strings.HasPrefix(raw, "//") {
		return
	}
	pr.Out.URL.Opaque = base + raw
}

func joinQuery(target, in string) string {
	switch {
	case target == "":
		return in
	case in == "":
		return target
	}
	return target + "&" + in
}

// bufferPool lends 32 KiB copy buffers to the ReverseProxy.
type bufferPool struct{ p sync.Pool }

func newBufferPool() *bufferPool {
	return &bufferPool{p: sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}}
}

func (b *bufferPool) Get() []byte  { return *(b.p.Get().(*[]byte)) }
func (b *bufferPool) Put(p []byte) { b.p.Put(&p) }

// newPassthrough builds the one ReverseProxy for all pass-through traffic.
func (s *Server) newPassthrough() *httputil.ReverseProxy {
	target, fw := s.target, s.fw
	return &httputil.ReverseProxy{
		Rewrite:   func(pr *httputil.ProxyRequest) { fw.rewrite(target, pr) },
		Transport: s.transport,
		// 0: a body with a Content-Length is flushed when the handler ends
		// (and whenever net/http's buffers fill), not after every write; the
		// stdlib itself flushes every write of text/event-stream and of
		// bodies of unknown length (ReverseProxy.flushInterval), so SSE and
		// chunked streams still stream. -1 flushed every write of every
		// body: most of the CPU gap to a lean stdlib proxy (issue 22).
		FlushInterval:  0,
		BufferPool:     newBufferPool(),
		ErrorLog:       slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
		ModifyResponse: noteUpgrade,
		ErrorHandler:   s.upstreamFailed,
	}
}

// upstreamFailed answers a proxied request that got no answer from Core.
// The client's own body can fail first (malformed chunking, a stall, the
// client hung up mid-upload): that is not Core's fault, is answered 408/400
// and not counted against Core.
func (s *Server) upstreamFailed(w http.ResponseWriter, r *http.Request, err error) {
	ctx := r.Context()
	if st := stateOf(ctx); st != nil && bodyFailure(st, ctx) != nil {
		s.writeErr(w, r, err) // answered for the body
		return
	}
	kind, status := classifyUpstreamError(ctx, err)
	s.m.upstreamErrors.WithLabelValues(kind).Inc()
	switch {
	case kind == "canceled":
		s.writeErr(w, r, errUpstreamGone)
		return
	case status == http.StatusGatewayTimeout:
		err = errUpstreamTimeout
	default:
		err = errUpstream
	}
	// Recorded even when a 101 was already noted (the tunnel then failed
	// to open).
	setOutcome(ctx, status)
	s.log.LogAttrs(ctx, slog.LevelWarn, "core request failed",
		slog.String("kind", kind), slog.Int("status", status), slog.String("request_id", requestID(ctx)))
	s.writeErr(w, r, err)
}

// bodyWatch notes how the client's request body failed, for the error
// handler: the transport reports a body read error as its own.
type bodyWatch struct {
	io.ReadCloser
	st *reqState
}

func (b *bodyWatch) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil && !errors.Is(err, io.EOF) && !b.st.bodyTimeout.Load() {
		var ne net.Error
		if errors.Is(err, io.ErrUnexpectedEOF) || errors.As(err, &ne) || errors.Is(err, net.ErrClosed) {
			b.st.bodyGone.Store(true)
		} else {
			b.st.bodyBad.Store(true)
		}
	}
	return n, err
}

// noteUpgrade records Core's 101 before ReverseProxy opens the tunnel.
// Vetting the switch is the stdlib's (handleUpgradeResponse, and the
// Transport before it): it refuses a 101 to another protocol than the
// client's Upgrade, to a non-printable one, and one whose body cannot be
// written, which is every 101 that is not an Upgrade answer (Connection:
// upgrade and Upgrade) to an Upgrade request; Core can switch protocols
// only when the client asked to. What it does not do, this adds: the
// outcome is recorded as 101 (echo's Response never sees it, the
// connection is hijacked), which also tells upstreamFailed that a failure
// after it is the switch's (kind protocol), and the answer gets the request
// id.
func noteUpgrade(res *http.Response) error {
	if res.StatusCode != http.StatusSwitchingProtocols {
		return nil
	}
	ctx := res.Request.Context()
	setOutcome(ctx, http.StatusSwitchingProtocols)
	if id := requestID(ctx); id != "" && res.Header.Get("X-Request-Id") == "" {
		res.Header.Set("X-Request-Id", id)
	}
	return nil
}

// statusClientClosed is nginx's code for "client closed request", used only
// in metrics and logs.
const statusClientClosed = 499

// classifyUpstreamError maps a transport error to a metric kind and the
// status the client gets: client gone → canceled (499 in logs), timeouts →
// 504, everything else → 502. errors.Is/As only, never string matching.
func classifyUpstreamError(ctx context.Context, err error) (kind string, status int) {
	var ne net.Error
	var oe *net.OpError
	switch {
	case ctx.Err() != nil && errors.Is(err, context.Canceled):
		return "canceled", statusClientClosed
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return "timeout", http.StatusGatewayTimeout
	case errors.As(err, &oe) && oe.Op == "dial":
		return "dial", http.StatusBadGateway
	case switched(ctx):
		// The stdlib refused Core's 101 (noteUpgrade): its errors are
		// plain, the 101 noted is not.
		return "protocol", http.StatusBadGateway
	default:
		return "other", http.StatusBadGateway
	}
}

// switched: Core answered this request 101 (noteUpgrade).
func switched(ctx context.Context) bool {
	st := stateOf(ctx)
	return st != nil && st.outcome == http.StatusSwitchingProtocols
}
