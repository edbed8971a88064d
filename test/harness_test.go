package test

import (
	"bufio"
	"cmp"
	"context"
	"crypto/sha1"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"reflect"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/bailinghub/knowledge-sidecar/config"
	"github.com/bailinghub/knowledge-sidecar/internal/testkit"
	"github.com/bailinghub/knowledge-sidecar/proxy"
	"github.com/bailinghub/knowledge-sidecar/sidecar"
)

// TestMain prints one line when tests were skipped for want of MariaDB or
// Redis (without CI=true).
func TestMain(m *testing.M) { testkit.Main(m) }

// SidecarOptions configure StartSidecar. Every zero value means the
// production default from config.Defaults, so a test states only what it
// changes. Each maps to the configuration field named.
type SidecarOptions struct {
	// CoreURL is the upstream (required; core.url), e.g. an httptest.Server's URL.
	CoreURL string
	// Transport replaces the pass-through transport (sidecar.Deps.Transport).
	Transport http.RoundTripper
	// TransportOptions: proxy.dial_timeout, proxy.response_header_timeout,
	// proxy.max_idle_conns_per_host; zero fields take the defaults.
	TransportOptions proxy.TransportOptions
	TrustedProxies   []netip.Prefix // proxy.trusted_proxies
	// ClientAddressHeadersExtra: proxy.client_address_headers_extra.
	ClientAddressHeadersExtra []string
	// RewriteHost sends Core's own host as Host (proxy.preserve_host: false);
	// false, the default, forwards the client's Host.
	RewriteHost bool
	// Features turns the knowledge features on (World.Features); nil: a
	// pure pass-through proxy.
	Features *Features
	// Serve: zero timeouts take the production defaults, except DrainDelay
	// (default 0 here so stopping is quick) and ShutdownTimeout (default 10s).
	// Listener, AdminListener and OnListening are the harness's own.
	Serve  proxy.ServeOptions
	Logger *slog.Logger
	// BodyIdleTimeout: proxy.body_idle_timeout; zero takes the default.
	BodyIdleTimeout time.Duration
	// Limits: the proxy's bounds (proxy.body_min_rate, …, as
	// sidecar.ProxyLimits maps them back); zero fields take the defaults,
	// negative ones turn the bound off.
	Limits proxy.Limits
	// AdminAllowedHosts: admin_allowed_hosts.
	AdminAllowedHosts []string
}

// Sidecar is a running sidecar: sidecar.Build + (*proxy.Server).Run on
// pre-bound 127.0.0.1:0 listeners.
type Sidecar struct {
	URL       string // http://127.0.0.1:port of the proxy listener
	Addr      string // host:port of the proxy listener
	AdminURL  string
	AdminAddr string
	Server    *proxy.Server
	Registry  *prometheus.Registry
	// Cancel cancels Run's context (what SIGTERM does): the drain starts.
	Cancel context.CancelFunc

	finished chan struct{} // closed when Run has returned
	runErr   error         // Run's result, valid after finished
	bound    time.Duration // how long Stop waits for Run
}

// Finished is closed once Run has returned.
func (s *Sidecar) Finished() <-chan struct{} { return s.finished }

// Wait waits (bounded) for Run to return and returns its result.
func (s *Sidecar) Wait() error {
	select {
	case <-s.finished:
		return s.runErr
	case <-time.After(s.bound):
		return errors.New("run did not return")
	}
}

// Stop cancels Run and waits for it. Safe to call more than once; it also
// runs at test cleanup.
func (s *Sidecar) Stop() error {
	s.Cancel()
	return s.Wait()
}

// sidecarConfig is the configuration and Deps of o, as `serve` would read
// them from a file.
func sidecarConfig(t testing.TB, o SidecarOptions) (config.Config, sidecar.Deps) {
	t.Helper()
	cfg := config.Defaults()
	cfg.Core.URL = o.CoreURL
	p := &cfg.Proxy
	p.DialTimeout = cmp.Or(o.TransportOptions.DialTimeout, p.DialTimeout)
	p.ResponseHeaderTimeout = cmp.Or(o.TransportOptions.ResponseHeaderTimeout, p.ResponseHeaderTimeout)
	p.MaxIdleConnsPerHost = cmp.Or(o.TransportOptions.MaxIdleConnsPerHost, p.MaxIdleConnsPerHost)
	for _, tp := range o.TrustedProxies {
		p.TrustedProxies = append(p.TrustedProxies, tp.String())
	}
	p.ClientAddressHeadersExtra = o.ClientAddressHeadersExtra
	p.PreserveHost = !o.RewriteHost
	p.BodyIdleTimeout = cmp.Or(o.BodyIdleTimeout, p.BodyIdleTimeout)
	l := o.Limits
	if l.BodyMinRate != 0 {
		p.BodyMinRate = max(l.BodyMinRate, 0) // 0: off
	}
	p.BodyMinRateWindow = cmp.Or(l.BodyMinRateWindow, p.BodyMinRateWindow)
	p.BodyTimeout = cmp.Or(l.BodyTimeout, p.BodyTimeout)
	p.MaxInFlight = cmp.Or(l.MaxInFlight, p.MaxInFlight)
	p.TurnBodyBudget = cmp.Or(l.TurnBodyBudget, p.TurnBodyBudget)
	p.MaxInFlightPerClient = cmp.Or(l.InFlightPerClient, p.MaxInFlightPerClient)
	p.TurnBodyBudgetPerClient = cmp.Or(l.TurnBodyPerClient, p.TurnBodyBudgetPerClient)
	cfg.AdminAllowedHosts = o.AdminAllowedHosts
	deps := sidecar.Deps{Logger: o.Logger, Version: "test", Transport: o.Transport}
	if deps.Logger == nil {
		deps.Logger = testLogger(t)
	}
	if o.Features != nil {
		o.Features.configure(&cfg, &deps)
	}
	if err := cfg.Validate(sidecar.ExtraChecks...); err != nil {
		t.Fatalf("StartSidecar: %v", err)
	}
	return cfg, deps
}

// StartSidecar starts a sidecar built by sidecar.Build, as `serve` builds
// it, and registers its Stop with t.Cleanup.
func StartSidecar(t testing.TB, o SidecarOptions) *Sidecar {
	t.Helper()
	core, err := url.Parse(o.CoreURL)
	if err != nil || core.Host == "" {
		t.Fatalf("StartSidecar: bad CoreURL %q", o.CoreURL)
	}
	cfg, deps := sidecarConfig(t, o)
	app, err := sidecar.Build(context.Background(), cfg, deps)
	if err != nil {
		t.Fatalf("build: %v", err)
	}
	if o.Features != nil && o.Features.o.CatalogDSN == "" {
		// The world's catalog must pass the schema check Build ran.
		if got := testkit.Metric(t, app.Server.Registry(), "knowledge_sidecar_catalog_schema_ok", nil); got != 1 {
			app.Close()
			t.Fatalf("world: schema check: catalog_schema_ok %v; want 1", got)
		}
	}
	if o.Features != nil && o.Features.o.Ledger != nil {
		t.Cleanup(func() { o.Features.o.Ledger.Close() }) // Build leaves a given ledger to its owner
	}
	srv := app.Server
	def := config.Defaults()
	so := o.Serve
	so.ReadHeaderTimeout = cmp.Or(so.ReadHeaderTimeout, def.Proxy.ReadHeaderTimeout)
	so.IdleTimeout = cmp.Or(so.IdleTimeout, def.Proxy.IdleTimeout)
	so.MaxHeaderBytes = cmp.Or(so.MaxHeaderBytes, def.Proxy.MaxHeaderBytes)
	so.ShutdownTimeout = cmp.Or(so.ShutdownTimeout, 10*time.Second)
	ln := listenLocal(t)
	aln := listenLocal(t)
	so.Listener, so.AdminListener, so.OnListening = ln, aln, nil

	ctx, cancel := context.WithCancel(context.Background())
	s := &Sidecar{
		URL:       "http://" + ln.Addr().String(),
		Addr:      ln.Addr().String(),
		AdminURL:  "http://" + aln.Addr().String(),
		AdminAddr: aln.Addr().String(),
		Server:    srv,
		Registry:  srv.Registry(),
		Cancel:    cancel,
		finished:  make(chan struct{}),
		bound:     so.DrainDelay + so.ShutdownTimeout + 10*time.Second,
	}
	go func() {
		s.runErr = srv.Run(ctx, so)
		app.Close() // the pools outlive Run otherwise
		close(s.finished)
	}()
	t.Cleanup(func() {
		if err := s.Stop(); err != nil {
			t.Errorf("sidecar Run: %v", err)
		}
	})
	return s
}

// metricByLabel returns the values of the series of name whose label has
// each of values.
func metricByLabel(t testing.TB, sc *Sidecar, name, label string, values ...string) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	for _, v := range values {
		out[v] = testkit.Metric(t, sc.Registry, name, map[string]string{label: v})
	}
	return out
}

// counterSeries sums the series of the counter name by key, which names a
// series by its labels.
func counterSeries(t testing.TB, g prometheus.Gatherer, name string, key func(labels map[string]string) string) map[string]float64 {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			out[key(labels)] += m.GetCounter().GetValue()
		}
	}
	return out
}

func listenLocal(t testing.TB) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	return ln
}

// deadAddr returns an address nothing listens on: listen on :0, then close.
func deadAddr(t testing.TB) string {
	t.Helper()
	ln := listenLocal(t)
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// testLogger writes the sidecar's logs to the test log when -v is on, and
// discards them otherwise.
func testLogger(t testing.TB) *slog.Logger {
	if !testing.Verbose() {
		return slog.New(slog.DiscardHandler)
	}
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type tWriter struct{ t testing.TB }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// newClient returns a client with its own transport (so idle connections can
// be closed and counted) that neither follows redirects nor asks for gzip.
func newClient(t testing.TB) *http.Client {
	tr := &http.Transport{
		Proxy:               nil,
		DisableCompression:  true,
		MaxIdleConnsPerHost: 16,
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
	}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{
		Transport:     tr,
		Timeout:       30 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// waitFor receives from ch or fails the test after a generous bound.
func waitFor[T any](t testing.TB, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(15 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
		var zero T
		return zero
	}
}

// drainClose reads a body to the end and closes it.
func drainClose(b io.ReadCloser) {
	_, _ = io.Copy(io.Discard, b)
	b.Close()
}

// doRead sends req and returns the response with its body read and closed.
func doRead(t testing.TB, c *http.Client, req *http.Request) (*http.Response, []byte) {
	t.Helper()
	res, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", req.Method, req.URL, err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatalf("%s %s: read: %v", req.Method, req.URL, err)
	}
	return res, b
}

// readOK reads the next response from br, its body drained, and fails the
// test unless it is a 200; what names it.
func readOK(t testing.TB, br *bufio.Reader, what string) *http.Response {
	t.Helper()
	res, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	drainClose(res.Body)
	if res.StatusCode != http.StatusOK {
		t.Fatalf("%s: got %d; want 200", what, res.StatusCode)
	}
	return res
}

func mustGet(t testing.TB, c *http.Client, u string) (int, string) {
	t.Helper()
	res, err := c.Get(u)
	if err != nil {
		t.Fatalf("GET %s: %v", u, err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatalf("GET %s body: %v", u, err)
	}
	return res.StatusCode, string(b)
}

// seenRequest is what an upstream received.
type seenRequest struct {
	Method     string
	RequestURI string
	Host       string
	Proto      string
	Header     http.Header
	Body       []byte
	Trailer    http.Header
	RemoteAddr string
}

// upstream is an httptest server standing in for Core. It records every
// request it receives (the handler decides when the body has been read) and
// counts new connections.
type upstream struct {
	*httptest.Server
	newConns atomic.Int64

	mu   sync.Mutex
	seen []seenRequest
}

// startUpstream starts an upstream whose handler gets a record func: call it
// once the body has been read (or pass the body it read).
func startUpstream(t testing.TB, h func(u *upstream, w http.ResponseWriter, r *http.Request)) *upstream {
	t.Helper()
	u := &upstream{}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h(u, w, r)
	}))
	srv.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			u.newConns.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	u.Server = srv
	return u
}

// record stores r with the body already read.
func (u *upstream) record(r *http.Request, body []byte) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.seen = append(u.seen, seenRequest{
		Method: r.Method, RequestURI: r.RequestURI, Host: r.Host, Proto: r.Proto,
		Header: r.Header.Clone(), Body: body, Trailer: r.Trailer.Clone(), RemoteAddr: r.RemoteAddr,
	})
}

// readAndRecord reads the whole body, records the request and returns the body.
func (u *upstream) readAndRecord(r *http.Request) []byte {
	b, _ := io.ReadAll(r.Body)
	u.record(r, b)
	return b
}

func (u *upstream) requests() []seenRequest {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]seenRequest(nil), u.seen...)
}

func (u *upstream) count() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return len(u.seen)
}

func (u *upstream) reset() {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.seen = nil
}

// last returns the one request received since the last reset.
func (u *upstream) last(t testing.TB) seenRequest {
	t.Helper()
	got := u.requests()
	if len(got) != 1 {
		t.Fatalf("upstream received %d requests; want 1", len(got))
	}
	return got[0]
}

// hopByHop are the headers a proxy must not forward (RFC 9110 §7.6.1 and the
// legacy ones Go strips).
var hopByHop = []string{"Connection", "Keep-Alive", "Proxy-Connection", "Proxy-Authenticate",
	"Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade"}

// endToEnd returns h without hop-by-hop headers, Date, X-Request-Id and the
// extra names given. Never nil.
func endToEnd(h http.Header, drop ...string) http.Header {
	out := http.Header{}
	for k, v := range h {
		out[k] = append([]string(nil), v...)
	}
	for _, k := range hopByHop {
		out.Del(k)
	}
	out.Del("Date")
	out.Del("X-Request-Id")
	for _, k := range drop {
		out.Del(k)
	}
	return out
}

func headerDiff(got, want http.Header) string {
	if reflect.DeepEqual(got, want) {
		return ""
	}
	keys := map[string]bool{}
	for k := range got {
		keys[k] = true
	}
	for k := range want {
		keys[k] = true
	}
	var names []string
	for k := range keys {
		names = append(names, k)
	}
	sort.Strings(names)
	var b strings.Builder
	for _, k := range names {
		if !reflect.DeepEqual(got[k], want[k]) {
			fmt.Fprintf(&b, "\n  %s: got %q; want %q", k, got[k], want[k])
		}
	}
	return b.String()
}

// --- a minimal WebSocket (RFC 6455) for raw-socket tests ---

const wsGUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"

func wsAccept(key string) string {
	h := sha1.Sum([]byte(key + wsGUID))
	return base64.StdEncoding.EncodeToString(h[:])
}

const (
	wsText  = 0x1
	wsClose = 0x8
)

func writeFrame(w io.Writer, opcode byte, payload []byte, masked bool) error {
	hdr := []byte{0x80 | opcode}
	maskBit := byte(0)
	if masked {
		maskBit = 0x80
	}
	switch n := len(payload); {
	case n < 126:
		hdr = append(hdr, maskBit|byte(n))
	case n <= 0xffff:
		hdr = append(hdr, maskBit|126, byte(n>>8), byte(n))
	default:
		return errors.New("frame too large for this test helper")
	}
	body := append([]byte(nil), payload...)
	if masked {
		key := [4]byte{0x12, 0x34, 0x56, 0x78}
		hdr = append(hdr, key[:]...)
		for i := range body {
			body[i] ^= key[i%4]
		}
	}
	_, err := w.Write(append(hdr, body...))
	return err
}

func readFrame(r io.Reader) (opcode byte, payload []byte, err error) {
	var h [2]byte
	if _, err = io.ReadFull(r, h[:]); err != nil {
		return 0, nil, err
	}
	opcode = h[0] & 0x0f
	masked := h[1]&0x80 != 0
	n := int(h[1] & 0x7f)
	switch n {
	case 126:
		var l [2]byte
		if _, err = io.ReadFull(r, l[:]); err != nil {
			return 0, nil, err
		}
		n = int(binary.BigEndian.Uint16(l[:]))
	case 127:
		return 0, nil, errors.New("64-bit frame length not supported by this test helper")
	}
	var key [4]byte
	if masked {
		if _, err = io.ReadFull(r, key[:]); err != nil {
			return 0, nil, err
		}
	}
	payload = make([]byte, n)
	if _, err = io.ReadFull(r, payload); err != nil {
		return 0, nil, err
	}
	if masked {
		for i := range payload {
			payload[i] ^= key[i%4]
		}
	}
	return opcode, payload, nil
}

// serveWebSocketEcho completes the handshake by hijacking and echoes frames
// until a close frame. It is the upstream side of the WebSocket tests.
func serveWebSocketEcho(w http.ResponseWriter, r *http.Request) error {
	if !strings.EqualFold(r.Header.Get("Upgrade"), "websocket") {
		return errors.New("no websocket upgrade header")
	}
	key := r.Header.Get("Sec-WebSocket-Key")
	conn, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return err
	}
	defer conn.Close()
	fmt.Fprintf(brw, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: %s\r\nX-Upstream: ws\r\n\r\n", wsAccept(key))
	if err := brw.Flush(); err != nil {
		return err
	}
	for {
		op, p, err := readFrame(brw)
		if err != nil {
			return err
		}
		if err := writeFrame(conn, op, p, false); err != nil {
			return err
		}
		if op == wsClose {
			return nil
		}
	}
}

// wsDial performs a raw WebSocket handshake against addr and returns the
// connection, a reader positioned after the 101 and the response.
func wsDial(t testing.TB, addr, path string) (net.Conn, *bufio.Reader, *http.Response) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	t.Cleanup(func() { conn.Close() })
	const key = "dGhlIHNhbXBsZSBub25jZQ=="
	fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: ks.example\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\n\r\n", path, key)
	br := bufio.NewReader(conn)
	res, err := http.ReadResponse(br, &http.Request{Method: http.MethodGet})
	if err != nil {
		t.Fatalf("read handshake response: %v", err)
	}
	return conn, br, res
}

// tcpForwarder relays TCP connections to the catalog's MariaDB until shut,
// so a test can take the catalog away from a running sidecar (hints, tasks).
type tcpForwarder struct {
	dsn string
	ln  net.Listener

	mu     sync.Mutex
	conns  []net.Conn
	closed bool
	// refusing: connections are accepted and closed at once, as a catalog
	// that is not up yet (setRefusing; a replica started before it).
	refusing atomic.Bool
}

// setRefusing makes new connections fail (true) or be relayed (false).
func (f *tcpForwarder) setRefusing(v bool) { f.refusing.Store(v) }

func newTCPForwarder(t *testing.T, dsn string) *tcpForwarder {
	t.Helper()
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	target := cfg.Addr
	f := &tcpForwarder{ln: listenLocal(t)}
	cfg.Addr = f.ln.Addr().String()
	f.dsn = cfg.FormatDSN()
	go func() {
		for {
			in, err := f.ln.Accept()
			if err != nil {
				return
			}
			if f.refusing.Load() {
				in.Close()
				continue
			}
			out, err := net.Dial("tcp", target)
			if err != nil {
				in.Close()
				continue
			}
			f.mu.Lock()
			if f.closed {
				f.mu.Unlock()
				in.Close()
				out.Close()
				return
			}
			f.conns = append(f.conns, in, out)
			f.mu.Unlock()
			go func() { _, _ = io.Copy(out, in); out.Close() }()
			go func() { _, _ = io.Copy(in, out); in.Close() }()
		}
	}()
	t.Cleanup(f.shut)
	return f
}

// shut stops accepting and cuts every relayed connection.
func (f *tcpForwarder) shut() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return
	}
	f.closed = true
	f.ln.Close()
	for _, c := range f.conns {
		c.Close()
	}
}

// serveBuilt builds a sidecar from cfg as `serve` does (sidecar.Build) and
// serves its edge on a test server; both are closed by t.Cleanup (the
// server first). A zero deps.Logger or deps.Version is the test's.
func serveBuilt(t testing.TB, cfg config.Config, deps sidecar.Deps) (*sidecar.App, string) {
	t.Helper()
	if deps.Logger == nil {
		deps.Logger = testLogger(t)
	}
	if deps.Version == "" {
		deps.Version = "test"
	}
	app, err := sidecar.Build(context.Background(), cfg, deps)
	if err != nil {
		t.Fatalf("build: %v", err)
	}
	srv := httptest.NewServer(app.Server.Handler())
	t.Cleanup(func() { srv.Close(); app.Close() })
	return app, srv.URL
}
