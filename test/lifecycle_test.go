package test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/bailinghub/knowledge-sidecar/internal/testkit"
	"github.com/bailinghub/knowledge-sidecar/internal/testkit/testdb"
	"github.com/bailinghub/knowledge-sidecar/proxy"
	"github.com/bailinghub/knowledge-sidecar/sidecar"
)

// TestSlowloris: connections that dribble their headers slower than
// ReadHeaderTimeout are closed, while ordinary requests keep being served.
func TestSlowloris(t *testing.T) {
	const headerTimeout = 300 * time.Millisecond
	u := startUpstream(t, func(u *upstream, w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	sc := StartSidecar(t, SidecarOptions{CoreURL: u.URL, Serve: proxy.ServeOptions{ReadHeaderTimeout: headerTimeout}})
	cl := newClient(t)

	// The full header takes ~5s to send at one byte per 20ms: 16× the timeout.
	header := "GET /slow HTTP/1.1\r\nHost: ks.example\r\nX-Slow: " + strings.Repeat("a", 220) + "\r\n\r\n"
	const slow = 8
	type result struct {
		sent    int
		elapsed time.Duration
		got     []byte
	}
	results := make(chan result, slow)
	start := time.Now()
	for range slow {
		conn, err := net.Dial("tcp", sc.Addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		closed := make(chan struct{})
		var sent atomic.Int64
		go func() { // writer: one byte per tick until the server hangs up
			tick := time.NewTicker(20 * time.Millisecond)
			defer tick.Stop()
			for i := 0; i < len(header); i++ {
				if _, err := conn.Write([]byte{header[i]}); err != nil {
					return
				}
				sent.Add(1)
				select {
				case <-tick.C:
				case <-closed:
					return
				}
			}
		}()
		go func() { // reader: returns when the server closes the connection
			conn.SetReadDeadline(time.Now().Add(20 * time.Second))
			got, _ := io.ReadAll(conn)
			close(closed)
			results <- result{sent: int(sent.Load()), elapsed: time.Since(start), got: got}
		}()
	}

	// Meanwhile, ordinary requests are answered.
	served := 0
	for served < 5 {
		code, body := mustGet(t, cl, sc.URL+"/fast")
		if code != http.StatusOK || body != "ok" {
			t.Fatalf("ordinary request during slowloris: got %d %q; want 200 ok", code, body)
		}
		served++
	}
	for range slow {
		r := waitFor(t, results, "slow connection to be closed")
		if r.sent >= len(header) {
			t.Errorf("slow connection sent its whole header (%d bytes) before being closed", r.sent)
		}
		if r.elapsed > 4*time.Second {
			t.Errorf("slow connection closed after %v; want about %v", r.elapsed, headerTimeout)
		}
		if bytes.Contains(r.got, []byte(" 200 ")) {
			t.Errorf("slow connection got an answer: %q", r.got)
		}
	}
	if n := u.count(); n != 0 {
		t.Errorf("upstream saw %d requests; want only the ordinary ones, which do not record", n)
	}
	// And the listener still serves after all that.
	if code, _ := mustGet(t, cl, sc.URL+"/after"); code != http.StatusOK {
		t.Errorf("after slowloris: got %d; want 200", code)
	}
}

// TestGracefulDrain: on cancel, /readyz turns 503, new connections are
// refused once the drain delay has passed, in-flight requests finish
// successfully, and Run returns.
func TestGracefulDrain(t *testing.T) {
	const inFlight = 4
	arrived := make(chan struct{}, inFlight)
	release := make(chan struct{})
	u := startUpstream(t, func(u *upstream, w http.ResponseWriter, r *http.Request) {
		u.readAndRecord(r)
		if r.URL.Path != "/block" {
			return
		}
		arrived <- struct{}{}
		select {
		case <-release:
		case <-r.Context().Done():
			return
		}
		io.WriteString(w, "done")
	})
	// The drain delay is the one timing the design needs: long enough that
	// a request right after /readyz flips is still inside it.
	sc := StartSidecar(t, SidecarOptions{CoreURL: u.URL, Serve: proxy.ServeOptions{DrainDelay: 1500 * time.Millisecond, ShutdownTimeout: 20 * time.Second}})
	cl := newClient(t)
	admin := newClient(t)
	if code, _ := mustGet(t, admin, sc.AdminURL+"/readyz"); code != http.StatusOK {
		t.Fatalf("/readyz before drain: got %d; want 200", code)
	}

	type result struct {
		code int
		body string
		err  error
	}
	results := make(chan result, inFlight)
	for range inFlight {
		go func() {
			res, err := cl.Post(sc.URL+"/block", "text/plain", strings.NewReader("payload"))
			if err != nil {
				results <- result{err: err}
				return
			}
			b, err := io.ReadAll(res.Body)
			res.Body.Close()
			results <- result{code: res.StatusCode, body: string(b), err: err}
		}()
	}
	for range inFlight {
		waitFor(t, arrived, "in-flight request to reach the upstream")
	}

	sc.Cancel() // SIGTERM
	testkit.Eventually(t, 10*time.Second, "/readyz to report 503", func() bool {
		res, err := admin.Get(sc.AdminURL + "/readyz")
		if err != nil {
			return false
		}
		drainClose(res.Body)
		return res.StatusCode == http.StatusServiceUnavailable
	})
	// Readiness flips first; during the delay the listener still serves new
	// connections, so a load balancer that has not noticed yet loses nothing.
	fresh := newClient(t)
	if code, _ := mustGet(t, fresh, sc.URL+"/during-drain"); code != http.StatusOK {
		t.Errorf("request during the drain delay: got %d; want 200", code)
	}
	fresh.CloseIdleConnections()
	testkit.Eventually(t, 10*time.Second, "new connections to be refused", func() bool {
		c, err := net.Dial("tcp", sc.Addr)
		if err != nil {
			return true
		}
		c.Close()
		return false
	})
	select {
	case <-sc.Finished():
		t.Fatal("Run returned with requests still in flight")
	default:
	}

	close(release)
	failed := 0
	for range inFlight {
		r := waitFor(t, results, "in-flight request to finish")
		if r.err != nil || r.code != http.StatusOK || r.body != "done" {
			failed++
			t.Errorf("in-flight request: got %d %q %v; want 200 done", r.code, r.body, r.err)
		}
	}
	if failed != 0 {
		t.Errorf("failed in-flight requests: got %d; want 0", failed)
	}
	if err := sc.Wait(); err != nil {
		t.Errorf("Run: got %v; want nil", err)
	}
	if _, err := net.Dial("tcp", sc.AdminAddr); err == nil {
		t.Error("admin listener still accepts after Run returned")
	}
	if got := testkit.Metric(t, sc.Registry, "knowledge_sidecar_ready", nil); got != 0 {
		t.Errorf("ready gauge: got %v; want 0", got)
	}
	if got := testkit.Metric(t, sc.Registry, "knowledge_sidecar_http_requests_total", map[string]string{"handler": "passthrough", "code": "200"}); got != inFlight+1 {
		t.Errorf("requests_total{200}: got %v; want %d", got, inFlight+1)
	}
}

// TestDrainClosesUpgradedConnections: Shutdown does not track hijacked
// connections; after the drain the sidecar closes open WebSockets itself,
// and Run still returns.
func TestDrainClosesUpgradedConnections(t *testing.T) {
	upstreamDone := make(chan error, 1)
	u := startUpstream(t, func(u *upstream, w http.ResponseWriter, r *http.Request) {
		upstreamDone <- serveWebSocketEcho(w, r)
	})
	sc := StartSidecar(t, SidecarOptions{CoreURL: u.URL})
	conn, br, res := wsDial(t, sc.Addr, "/ws")
	if res.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("handshake: got %d; want 101", res.StatusCode)
	}
	if err := writeFrame(conn, wsText, []byte("ping"), true); err != nil {
		t.Fatal(err)
	}
	if _, p, err := readFrame(br); err != nil || string(p) != "ping" {
		t.Fatalf("echo: got %q %v", p, err)
	}
	if err := sc.Stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	conn.SetReadDeadline(time.Now().Add(15 * time.Second))
	if _, _, err := readFrame(br); err == nil || isTimeout(err) {
		t.Errorf("client side of the tunnel: got %v; want it closed", err)
	}
	if err := waitFor(t, upstreamDone, "upstream side of the tunnel to close"); err == nil {
		t.Error("upstream websocket ended cleanly; want the tunnel torn down")
	}
}

// TestKeepAliveReuse: N sequential requests use a bounded number of
// upstream connections (the pool keeps them alive), and the client's
// connection to the sidecar is reused too.
func TestKeepAliveReuse(t *testing.T) {
	u := startUpstream(t, func(u *upstream, w http.ResponseWriter, r *http.Request) {
		body := u.readAndRecord(r)
		switch r.URL.Path {
		case "/missing":
			w.WriteHeader(http.StatusNotFound)
			io.WriteString(w, `{"error":"not_found"}`)
		default:
			w.Write(body)
		}
	})
	sc := StartSidecar(t, SidecarOptions{CoreURL: u.URL})
	cl := newClient(t)
	const n = 60
	reused := 0
	for i := range n {
		method, path, body := http.MethodGet, "/ok", ""
		switch i % 4 {
		case 1:
			method, body = http.MethodPost, strings.Repeat("b", 10<<10)
		case 2:
			method = http.MethodHead
		case 3:
			path = "/missing"
		}
		trace := &httptrace.ClientTrace{GotConn: func(ci httptrace.GotConnInfo) {
			if ci.Reused {
				reused++
			}
		}}
		req, _ := http.NewRequestWithContext(httptrace.WithClientTrace(context.Background(), trace), method, sc.URL+path, strings.NewReader(body))
		res, err := cl.Do(req)
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		drainClose(res.Body)
	}
	// Ideally 1. Go's transport returns a connection to the pool from its
	// read loop just after the body's EOF, so a request that arrives in that
	// instant dials anew; under -race and a busy machine that happens a few
	// times. Without keep-alive it would be n.
	if got := u.newConns.Load(); got > n/6 {
		t.Errorf("upstream connections for %d sequential requests: got %d; want at most %d", n, got, n/6)
	}
	if reused < n-n/6 {
		t.Errorf("client connections reused: got %d of %d; want at least %d", reused, n, n-n/6)
	}
}

// TestNoGoroutineLeak: after a mixed workload and stopping everything, the
// goroutines it started have all ended.
func TestNoGoroutineLeak(t *testing.T) {
	before := goleak.IgnoreCurrent()

	cl := newClient(t)
	func() {
		events := make(chan struct{})
		u := startUpstream(t, func(u *upstream, w http.ResponseWriter, r *http.Request) {
			body := u.readAndRecord(r)
			switch r.URL.Path {
			case "/ws":
				serveWebSocketEcho(w, r)
			case "/sse":
				w.Header().Set("Content-Type", "text/event-stream")
				io.WriteString(w, "data: 1\n\n")
				http.NewResponseController(w).Flush()
				select {
				case <-events:
				case <-r.Context().Done():
				}
			case "/hang":
				<-r.Context().Done()
			default:
				w.Write(body)
			}
		})
		sc := StartSidecar(t, SidecarOptions{CoreURL: u.URL})
		for i := range 20 {
			res, err := cl.Post(sc.URL+fmt.Sprintf("/echo/%d", i), "text/plain", strings.NewReader(strings.Repeat("x", i*1000)))
			if err != nil {
				t.Fatal(err)
			}
			drainClose(res.Body)
		}
		// A big upload, an SSE stream cut by the client, a cancelled
		// request, a WebSocket, an h2c refusal.
		res, err := cl.Post(sc.URL+"/big", "application/octet-stream", bytes.NewReader(patterned(1<<20)))
		if err != nil {
			t.Fatal(err)
		}
		drainClose(res.Body)

		res, err = cl.Get(sc.URL + "/sse")
		if err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, len("data: 1\n\n"))
		io.ReadFull(res.Body, buf)
		res.Body.Close()
		close(events)

		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			defer close(done)
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, sc.URL+"/hang", nil)
			if res, err := cl.Do(req); err == nil {
				res.Body.Close()
			}
		}()
		testkit.Eventually(t, 10*time.Second, "the hanging request to reach the upstream", func() bool {
			for _, r := range u.requests() {
				if r.RequestURI == "/hang" {
					return true
				}
			}
			return false
		})
		cancel()
		<-done

		conn, br, res := wsDial(t, sc.Addr, "/ws")
		if res.StatusCode != http.StatusSwitchingProtocols {
			t.Fatalf("ws: got %d", res.StatusCode)
		}
		writeFrame(conn, wsText, []byte("hi"), true)
		readFrame(br)
		writeFrame(conn, wsClose, nil, true)
		readFrame(br)
		conn.Close()

		rawRequest(t, sc.Addr, "GET / HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: h2c\r\n\r\n")

		if err := sc.Stop(); err != nil {
			t.Fatalf("Run: %v", err)
		}
		u.Close()
	}()
	cl.CloseIdleConnections()

	// Every goroutine the workload started ends: goleak compares with the
	// goroutines that ran before it (other tests' leftovers are not this
	// test's). The client's pooled connections close on their read loops a
	// moment after the sidecar hangs up, so the check is retried, bounded,
	// closing idle connections each time; the last report names the stacks.
	testkit.Poll(10*time.Second, func() bool {
		cl.CloseIdleConnections()
		return goleak.Find(before) == nil
	})
	goleak.VerifyNone(t, before)
}

// TestCatalogLateAtStart: a replica built (as `serve` builds it) while its
// catalog refuses connections answers the knowledge endpoints 503, and
// serves them at the first request after the 1s backoff once the catalog
// is reachable — not only after the 30s re-check interval. The clock is
// injected: the test does not wait.
func TestCatalogLateAtStart(t *testing.T) {
	w := NewWorld(t, WorldOptions{})
	fwd := newTCPForwarder(t, w.DB.ReadOnlyDSN)
	fwd.setRefusing(true) // the catalog is not up yet
	clock := testkit.NewClock(time.Now())

	cfg := w.Config()
	cfg.Catalog.DSN = fwd.dsn
	cfg.RateLimit.RPS, cfg.RateLimit.Burst = 1000, 1000
	if err := cfg.Validate(sidecar.ExtraChecks...); err != nil {
		t.Fatal(err)
	}
	app, url := serveBuilt(t, cfg, sidecar.Deps{Now: clock.Now})
	c := newClient(t)
	search := url + "/agent-api/v1/workspaces/" + testdb.RouteMulti + "/knowledge/search"
	body := []byte(`{"query": "refund window"}`)
	schemaOK := func() float64 {
		return testkit.Metric(t, app.Server.Registry(), "knowledge_sidecar_catalog_schema_ok", nil)
	}

	r := send(t, c, "POST", search, w.TokenA, body, nil)
	checkErrorJSON(t, r, http.StatusServiceUnavailable, "knowledge_unavailable")
	if schemaOK() != 0 {
		t.Fatalf("catalog_schema_ok is 1 with the catalog down")
	}

	// The catalog comes up. Before the backoff ends nothing is re-checked.
	fwd.setRefusing(false)
	clock.Advance(999 * time.Millisecond)
	r = send(t, c, "POST", search, w.TokenA, body, nil)
	checkErrorJSON(t, r, http.StatusServiceUnavailable, "knowledge_unavailable")

	// 1s after the failed start-up check: the next request re-checks and is served.
	clock.Advance(time.Millisecond)
	r = send(t, c, "POST", search, w.TokenA, body, nil)
	if r.Status != 200 || !bytes.Contains(r.Body, []byte(`"schema_version":"bailing.agent-knowledge-search.v1"`)) {
		t.Fatalf("search 1s after start, catalog up: got %d %s; want it served", r.Status, r.Body)
	}
	if schemaOK() != 1 {
		t.Errorf("catalog_schema_ok: got %v; want 1", schemaOK())
	}
}
