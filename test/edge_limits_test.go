package test

// The edge's bounds (docs/reliability.md): the connection cap and its raw
// 503, the in-flight cap, the minimum body rate and the whole-body deadline
// (which never cut a response), and net/http's own error answers marked
// no-store.

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bailinghub/knowledge-sidecar/internal/testkit"
	"github.com/bailinghub/knowledge-sidecar/proxy"
)

// startConnCapped starts a sidecar in front of coreURL that holds at most
// max connections, the per-client share off.
func startConnCapped(t *testing.T, coreURL string, max int) *Sidecar {
	t.Helper()
	return StartSidecar(t, SidecarOptions{CoreURL: coreURL, Serve: proxy.ServeOptions{MaxConnections: max, MaxConnectionsPerClient: -1}})
}

// dialEach dials n raw connections to addr, one after the other, each made
// ready (i its index) before the next is dialled.
func dialEach(t testing.TB, addr string, n int, ready func(i int, c *rawConn)) []*rawConn {
	t.Helper()
	conns := make([]*rawConn, n)
	for i := range conns {
		conns[i] = dialRaw(t, addr)
		ready(i, conns[i])
	}
	return conns
}

// rawGet is a plain GET of a pass-through path.
const rawGet = "GET /x HTTP/1.1\r\nHost: ks\r\n\r\n"

// getOK sends rawGet on c and fails the test, naming what, unless the
// answer is 200.
func (c *rawConn) getOK(t testing.TB, what string) {
	t.Helper()
	c.send(t, rawGet)
	if res, _ := c.response(t); res.StatusCode != 200 {
		t.Fatalf("%s: got %d; want 200", what, res.StatusCode)
	}
}

// TestConnectionCap: past proxy.max_connections a new connection gets a
// minimal 503 with Retry-After and is closed when no connection is idle;
// the connections already open keep working, and a freed place is taken
// again. (One client here: its share is switched off; the shares have
// their own tests in edge_fairness_test.go.)
func TestConnectionCap(t *testing.T) {
	release := make(chan struct{})
	var releaseOnce sync.Once
	t.Cleanup(func() { releaseOnce.Do(func() { close(release) }) })
	entered := make(chan struct{}, 8)
	u := startUpstream(t, func(u *upstream, w http.ResponseWriter, r *http.Request) {
		u.readAndRecord(r)
		if r.URL.Path == "/hold" {
			entered <- struct{}{}
			<-release
		}
	})
	const max = 3
	sc := startConnCapped(t, u.URL, max)
	// Every connection busy with a held request: none is idle.
	open := dialEach(t, sc.Addr, max, func(_ int, c *rawConn) {
		c.send(t, "GET /hold HTTP/1.1\r\nHost: ks\r\n\r\n")
		waitFor(t, entered, "held request")
	})
	over := dialRaw(t, sc.Addr)
	over.send(t, rawGet)
	res, body := over.response(t)
	if res.StatusCode != http.StatusServiceUnavailable || res.Header.Get("Retry-After") != "1" || errorCode(body) != "overloaded" ||
		res.Header.Get("Cache-Control") != "no-store" {
		t.Fatalf("over the cap: got %d Retry-After %q Cache-Control %q %s; want 503 overloaded, Retry-After 1, no-store",
			res.StatusCode, res.Header.Get("Retry-After"), res.Header.Get("Cache-Control"), body)
	}
	if !over.closedAfter() {
		t.Error("connection over the cap kept open")
	}
	testkit.WaitMetric(t, sc.Registry, "knowledge_sidecar_overload_rejections_total", map[string]string{"limit": "connections"}, 1)
	testkit.WaitMetric(t, sc.Registry, "knowledge_sidecar_open_connections", nil, max)
	// The open ones still work once their held requests end.
	releaseOnce.Do(func() { close(release) })
	for _, c := range open {
		if res, _ := c.response(t); res.StatusCode != 200 {
			t.Fatalf("held request: got %d; want 200", res.StatusCode)
		}
	}
	open[0].getOK(t, "open connection after a refusal")
	// A place freed (the server notices the close) is taken again.
	open[1].Close()
	testkit.WaitMetric(t, sc.Registry, "knowledge_sidecar_open_connections", nil, max-1)
	dialRaw(t, sc.Addr).getOK(t, "after a place was freed")
}

// TestConnectionCapClosesIdleFirst: with every place taken by idle
// keep-alive connections, a new connection is served and the oldest idle
// one is closed to make room (SPEC §8.3); the busy ones are never touched.
func TestConnectionCapClosesIdleFirst(t *testing.T) {
	u := startUpstream(t, func(u *upstream, w http.ResponseWriter, r *http.Request) { u.readAndRecord(r) })
	const max = 3
	sc := startConnCapped(t, u.URL, max)
	idle := dialEach(t, sc.Addr, max, func(i int, c *rawConn) {
		c.getOK(t, "within the cap")
		// The server marks a connection idle a moment after its answer
		// went out: wait, so that idle[0] is the oldest idle one, then idle[1].
		testkit.WaitMetric(t, sc.Registry, "knowledge_sidecar_idle_connections", nil, float64(i+1))
	})
	for range 2 { // two newcomers: the two oldest idle connections go
		testkit.WaitMetric(t, sc.Registry, "knowledge_sidecar_idle_connections", nil, max)
		dialRaw(t, sc.Addr).getOK(t, "a newcomer while every place is idle")
	}
	testkit.WaitMetric(t, sc.Registry, "knowledge_sidecar_idle_connections_closed_total", nil, 2)
	for i, c := range idle[:2] {
		if !c.closedAfter() {
			t.Errorf("idle connection %d (of the oldest): still open; want closed for the newcomer", i)
		}
	}
	idle[2].send(t, rawGet)
	if res, _ := idle[2].response(t); res.StatusCode != 200 {
		t.Errorf("the youngest idle connection: got %d; want it kept and served", res.StatusCode)
	}
	if got := testkit.Metric(t, sc.Registry, "knowledge_sidecar_overload_rejections_total", map[string]string{"limit": "connections"}); got != 0 {
		t.Errorf("connections refused: %v; want 0 while idle ones could make room", got)
	}
}

// TestInFlightCap: past proxy.max_in_flight a request is answered 503
// overloaded with Retry-After, on a connection the edge accepted; once the
// held requests end, requests are served again.
func TestInFlightCap(t *testing.T) {
	entered := make(chan struct{}, 8)
	release := make(chan struct{})
	u := startUpstream(t, func(u *upstream, w http.ResponseWriter, r *http.Request) {
		u.readAndRecord(r)
		if r.URL.Path == "/hold" {
			entered <- struct{}{}
			<-release
		}
	})
	sc := StartSidecar(t, SidecarOptions{CoreURL: u.URL, Limits: proxy.Limits{MaxInFlight: 2, InFlightPerClient: -1}})
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			res, err := http.Get(sc.URL + "/hold")
			if err != nil {
				t.Errorf("held request: %v", err)
				return
			}
			drainClose(res.Body)
		})
	}
	waitFor(t, entered, "first held request")
	waitFor(t, entered, "second held request")
	conn := dialRaw(t, sc.Addr)
	conn.send(t, postRaw("/x", "ks", "", []byte(`{"a":1}`), ""))
	res, body := conn.response(t)
	if res.StatusCode != http.StatusServiceUnavailable || res.Header.Get("Retry-After") != "1" || errorCode(body) != "overloaded" ||
		res.Header.Get("Cache-Control") != "no-store" {
		t.Fatalf("over the in-flight cap: got %d Retry-After %q %s; want 503 overloaded with Retry-After 1", res.StatusCode, res.Header.Get("Retry-After"), body)
	}
	testkit.WaitMetric(t, sc.Registry, "knowledge_sidecar_overload_rejections_total", map[string]string{"limit": "in_flight"}, 1)
	testkit.WaitMetric(t, sc.Registry, "knowledge_sidecar_http_requests_total", map[string]string{"handler": "passthrough", "code": "503"}, 1)
	close(release)
	wg.Wait()
	res2, err := http.Get(sc.URL + "/after")
	if err != nil {
		t.Fatal(err)
	}
	drainClose(res2.Body)
	if res2.StatusCode != 200 {
		t.Errorf("after the held requests ended: got %d; want 200", res2.StatusCode)
	}
	for _, s := range u.requests() {
		if s.RequestURI == "/x" {
			t.Error("the refused request reached Core")
		}
	}
}

// TestBodyMinimumRate: a body that trickles below proxy.body_min_rate ends
// with 408 once the window is spent, long before the per-byte idle timeout
// would; an upload that keeps the rate runs well past the window; a
// whole-body deadline ends even a fast-moving body; and none of it ever
// cuts a response that streams after its request body is done.
func TestBodyMinimumRate(t *testing.T) {
	u := startUpstream(t, func(u *upstream, w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/events" {
			io.Copy(io.Discard, r.Body)
			w.Header().Set("Content-Type", "text/event-stream")
			rc := http.NewResponseController(w)
			tick := time.NewTicker(100 * time.Millisecond)
			defer tick.Stop()
			for i := range 40 { // 4 s, more than the window
				fmt.Fprintf(w, "data: %d\n\n", i)
				rc.Flush()
				<-tick.C
			}
			return
		}
		b := u.readAndRecord(r)
		fmt.Fprintf(w, "%d", len(b))
	})
	const window = 2 * time.Second
	sc := StartSidecar(t, SidecarOptions{CoreURL: u.URL, BodyIdleTimeout: time.Minute,
		Limits: proxy.Limits{BodyMinRate: 2000, BodyMinRateWindow: window}})
	head := func(path string, n int) string {
		return fmt.Sprintf("POST %s HTTP/1.1\r\nHost: ks\r\nContent-Length: %d\r\n\r\n", path, n)
	}

	t.Run("trickle is cut after the window", func(t *testing.T) {
		t.Parallel() // each on its own connection: the waits overlap
		conn := dialRaw(t, sc.Addr)
		conn.send(t, head("/up", 100000)+strings.Repeat("x", 1000))
		stop := make(chan struct{})
		defer close(stop)
		// One byte every 50 ms: 20 B/s, a hundredth of the rate.
		go onEachTick(50*time.Millisecond, stop, func() bool {
			_, err := conn.Write([]byte("x"))
			return err == nil
		})
		start := time.Now()
		res, body := conn.response(t)
		if res.StatusCode != http.StatusRequestTimeout || errorCode(body) != "request_timeout" {
			t.Fatalf("got %d %s; want 408 request_timeout", res.StatusCode, body)
		}
		if took := time.Since(start); took > 15*time.Second {
			t.Errorf("cut after %s; want about the %s window, far below the 1m idle timeout", took, window)
		}
	})

	t.Run("upload that keeps the rate runs past the window", func(t *testing.T) {
		t.Parallel()
		const chunk, chunks = 1000, 40 // 1000 bytes per 100 ms: 10 kB/s for 4 s
		conn := dialRaw(t, sc.Addr)
		conn.send(t, head("/up", chunk*chunks))
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for range chunks {
			<-tick.C
			conn.send(t, strings.Repeat("y", chunk))
		}
		res, body := conn.response(t)
		if res.StatusCode != 200 || string(body) != fmt.Sprint(chunk*chunks) {
			t.Fatalf("got %d %q; want 200 and all %d bytes at Core", res.StatusCode, body, chunk*chunks)
		}
	})

	t.Run("a stream after the body is not cut", func(t *testing.T) {
		t.Parallel()
		conn := dialRaw(t, sc.Addr)
		conn.send(t, head("/events", 2)+"{}")
		res, body := conn.response(t)
		if res.StatusCode != 200 || strings.Count(string(body), "data: ") != 40 {
			t.Fatalf("got %d with %d events; want 200 and all 40", res.StatusCode, strings.Count(string(body), "data: "))
		}
	})

	t.Run("whole-body deadline", func(t *testing.T) {
		t.Parallel()
		sc := StartSidecar(t, SidecarOptions{CoreURL: u.URL, Limits: proxy.Limits{BodyTimeout: window}})
		conn := dialRaw(t, sc.Addr)
		conn.send(t, head("/up", 10<<20))
		done := make(chan struct{})
		go func() { // fast, but never finishing within the deadline
			defer close(done)
			tick := time.NewTicker(20 * time.Millisecond)
			defer tick.Stop()
			chunk := []byte(strings.Repeat("z", 64<<10))
			for range 150 {
				<-tick.C
				if _, err := conn.Write(chunk); err != nil {
					return
				}
			}
		}()
		start := time.Now()
		res, body := conn.response(t)
		took := time.Since(start)
		conn.Close()
		<-done
		if res.StatusCode != http.StatusRequestTimeout {
			t.Fatalf("got %d %s; want 408", res.StatusCode, body)
		}
		if took > 15*time.Second { // the minimum rate (20 s window) would have taken longer
			t.Errorf("cut after %s; want about the %s deadline", took, window)
		}
	})
}

// TestNetHTTPOwnErrorsNoStore: the answers net/http writes by itself,
// before any handler (431 headers too large, 400 malformed, 501 unknown
// transfer coding, 417 unknown expectation), carry Cache-Control: no-store
// like every answer the sidecar makes; Core's own answers pass untouched.
func TestNetHTTPOwnErrorsNoStore(t *testing.T) {
	u := startUpstream(t, func(u *upstream, w http.ResponseWriter, r *http.Request) {
		u.readAndRecord(r)
		w.WriteHeader(http.StatusNotFound) // no Cache-Control of its own
	})
	sc := StartSidecar(t, SidecarOptions{CoreURL: u.URL})
	big := strings.Repeat("a", 40<<10) // over the 32 KiB default
	for _, tc := range []struct {
		name, raw string
		status    int
	}{
		{"400 NUL in a header", "GET /x HTTP/1.1\r\nHost: ks\r\nX-A: a\x00b\r\n\r\n", 400},
		{"400 missing Host", "GET /x HTTP/1.1\r\n\r\n", 400},
		{"501 transfer coding", "POST /x HTTP/1.1\r\nHost: ks\r\nTransfer-Encoding: gzip\r\n\r\n", 501},
		{"417 expectation", "GET /x HTTP/1.1\r\nHost: ks\r\nExpect: teapot\r\n\r\n", 417},
		{"400 after a good request on the same connection", "GET /x HTTP/1.1\r\nHost: ks\r\n\r\nGET /y HTTP/1.1\r\nX-A: a\x00b\r\n\r\n", 400},
	} {
		t.Run(tc.name, func(t *testing.T) {
			responses, err := exchangeRaw(sc.Addr, tc.raw)
			if err != nil || len(responses) == 0 {
				t.Fatalf("got %v, %v; want an answer", statuses(responses), err)
			}
			for i, res := range responses[:len(responses)-1] { // Core's answers
				if res.StatusCode != 404 || res.Header.Get("Cache-Control") != "" {
					t.Errorf("answer %d from Core: got %d Cache-Control %q; want 404 untouched", i, res.StatusCode, res.Header.Get("Cache-Control"))
				}
			}
			res := responses[len(responses)-1]
			if res.StatusCode != tc.status || res.Header.Get("Cache-Control") != "no-store" {
				t.Errorf("got %d Cache-Control %q; want %d no-store", res.StatusCode, res.Header.Get("Cache-Control"), tc.status)
			}
		})
	}
	t.Run("431 header too large", func(t *testing.T) {
		// Only the head is read: net/http stops reading at the limit, so
		// the rest of what was sent resets the connection after the answer.
		conn := dialRaw(t, sc.Addr)
		conn.send(t, "GET /x HTTP/1.1\r\nHost: ks\r\nX-Big: "+big+"\r\n\r\n")
		res, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatal(err)
		}
		if res.StatusCode != 431 || res.Header.Get("Cache-Control") != "no-store" {
			t.Errorf("got %d Cache-Control %q; want 431 no-store", res.StatusCode, res.Header.Get("Cache-Control"))
		}
	})
}
