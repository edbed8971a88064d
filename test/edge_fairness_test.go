package test

// Fair shares of the edge's caps (SPEC §8.3, docs/reliability.md "One
// client cannot refuse everyone"): the attacks of the fourth campaign, run
// as they were found — real sockets, the attacker on its own loopback
// address (127.0.0.2), legitimate clients on 127.0.0.1, production
// defaults for every cap and share.

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bailinghub/knowledge-sidecar/internal/testkit"
	"github.com/bailinghub/knowledge-sidecar/internal/testkit/testdb"
)

// attackerAddr is the attacker's own loopback address: Linux routes all of
// 127.0.0.0/8 to lo, so a socket bound here is a second client.
const attackerAddr = "127.0.0.2"

// dialFrom connects to addr from the local address ip; the connection is
// closed when the test ends.
func dialFrom(t testing.TB, ip, addr string) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}, Timeout: 5 * time.Second}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatalf("dial from %s: %v", ip, err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(60 * time.Second)) // a bound, not a synchronization
	return c
}

// served counts the legitimate requests answered with want.
type served struct{ ok, all int }

// checkLegitServed sends 40 GETs from a legitimate client, each on a new
// connection, and checks that at least 95 % are served.
func checkLegitServed(t testing.TB, sc *Sidecar, what string) {
	t.Helper()
	c := newClient(t)
	var s served
	for i := range 40 {
		res, err := c.Get(fmt.Sprintf("%s/legit/%d", sc.URL, i))
		s.all++
		if err != nil {
			t.Logf("%s: legitimate request %d: %v", what, i, err)
			continue
		}
		drainClose(res.Body)
		if res.StatusCode == 200 {
			s.ok++
		}
		c.Transport.(*http.Transport).CloseIdleConnections() // a new connection each time
	}
	s.check(t, what)
}

func (s served) check(t testing.TB, what string) {
	t.Helper()
	t.Logf("%s: %d of %d legitimate requests served", what, s.ok, s.all)
	if s.ok*100 < s.all*95 {
		t.Errorf("%s: %d of %d legitimate requests served; want at least 95 %%", what, s.ok, s.all)
	}
}

// TestUnauthenticatedTurnFloodRefusesNoOne: 64 connections with no
// Authorization announce Content-Length 524288 on a turn and send nothing
// (half of them labelled gzip). They hold none of the turn body budget —
// their turns stream to Core unread — so on_demand, inline and old-client
// turns from another client are all served meanwhile.
func TestUnauthenticatedTurnFloodRefusesNoOne(t *testing.T) {
	w := NewWorld(t, WorldOptions{})
	sc := StartSidecar(t, SidecarOptions{CoreURL: w.CoreURL, Features: w.Features(t, FeatureOptions{})})
	path := turnsPath(testdb.RouteMulti)
	const n = 64
	for i := range n {
		enc := ""
		if i%2 == 1 {
			enc = "Content-Encoding: gzip\r\n"
		}
		c := dialFrom(t, attackerAddr, sc.Addr)
		fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: ks\r\nContent-Type: application/json\r\n%sContent-Length: %d\r\n\r\n", path, enc, 512<<10)
	}
	testkit.Eventually(t, 20*time.Second, "the flood's requests in the sidecar's handlers", func() bool {
		return testkit.Metric(t, sc.Registry, "knowledge_sidecar_http_requests_in_flight", nil) >= n
	})
	if used := testkit.Metric(t, sc.Registry, "knowledge_sidecar_turn_body_budget_used_bytes", nil); used != 0 {
		t.Errorf("the unauthenticated flood holds %v bytes of the turn body budget; want 0", used)
	}
	c := newClient(t)
	var s served
	for i := range 22 {
		var body []byte
		switch ti := newTurn(fmt.Sprintf("legit-%d", i)); i % 3 {
		case 0:
			body = ti.body(modeJSON("on_demand"))
		case 1:
			body = ti.body(modeJSON("inline"))
		default:
			body = ti.body("")
		}
		r := send(t, c, "POST", sc.URL+path, w.TokenA, body, nil)
		s.all++
		if r.Status == 200 {
			s.ok++
		} else {
			t.Logf("legitimate turn %d: %d %s", i, r.Status, r.Body)
		}
	}
	if s.ok != s.all {
		t.Errorf("%d of %d legitimate turns served during the unauthenticated flood; want all", s.ok, s.all)
	}
}

// TestCompressedTurnFloodBoundedMemory: 120 authenticated turns whose
// bodies are 710-byte gzip streams of 384 KiB of JSON, against a Core that
// holds every turn. Core parses raw bytes, so the sidecar neither inflates
// them nor keeps a stripped copy: the heap grows by a few KiB per turn (the
// connection, its buffers), not by the decoded size.
func TestCompressedTurnFloodBoundedMemory(t *testing.T) {
	w := NewWorld(t, WorldOptions{})
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	var held atomic.Int64
	core := newCoreTap(t, w.Core)
	core.hold = func(r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/turns") {
			held.Add(1)
			select {
			case <-release:
			case <-r.Context().Done():
			}
		}
	}
	sc := StartSidecar(t, SidecarOptions{CoreURL: core.URL, Features: w.Features(t, FeatureOptions{})})
	path := turnsPath(testdb.RouteMulti)
	decoded := append(append([]byte(`{"user_input":"`), strings.Repeat(" ", 384<<10)...), `","knowledge_delivery":"on_demand"}`...)
	zipped := gzipBytes(t, decoded)
	const n = 120
	before := heapInUse()
	for range n {
		c := dialRaw(t, sc.Addr)
		c.send(t, fmt.Sprintf("POST %s HTTP/1.1\r\nHost: ks\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Encoding: gzip\r\nContent-Length: %d\r\n\r\n%s",
			path, w.TokenA, len(zipped), zipped))
	}
	testkit.Eventually(t, 30*time.Second, "Core holding every compressed turn", func() bool { return held.Load() == n })
	grown := int64(heapInUse()) - int64(before)
	t.Logf("heap grew %.1f MiB with %d held %d-byte gzip turns (%d KiB decoded each)", float64(grown)/(1<<20), n, len(zipped), len(decoded)>>10)
	// Decoding each (and keeping its stripped copy) would be 2 × 384 KiB
	// a turn: 90 MiB.
	const bound = 24 << 20
	if grown > bound {
		t.Errorf("heap grew %d MiB; want under %d MiB", grown>>20, bound>>20)
	}
	if used := testkit.Metric(t, sc.Registry, "knowledge_sidecar_turn_body_budget_used_bytes", nil); used > n*8<<10 {
		t.Errorf("turn body budget used: %v bytes for %d turns of %d bytes; want what they hold, not their decoded size", used, n, len(zipped))
	}
}

// TestOneClientCannotRefuseOthers: one client holds 520 slow uploads, or
// 1024 idle keep-alive connections; another client's requests are served
// all the while. The attacker is refused at its own shares (counted in
// client_share_rejections_total) and, for keep-alive connections, loses
// its own oldest idle ones.
func TestOneClientCannotRefuseOthers(t *testing.T) {
	u := startUpstream(t, func(u *upstream, w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			io.Copy(io.Discard, r.Body)
		}
		io.WriteString(w, "ok")
	})
	sc := StartSidecar(t, SidecarOptions{CoreURL: u.URL})
	const uploads = 520
	for range uploads {
		c := dialFrom(t, attackerAddr, sc.Addr)
		fmt.Fprintf(c, "POST /upload HTTP/1.1\r\nHost: ks\r\nContent-Type: application/octet-stream\r\nContent-Length: %d\r\n\r\n", 1<<20)
	}
	share := map[string]string{"limit": "connections"}
	testkit.Eventually(t, 20*time.Second, "the attacker's connections past its share refused", func() bool {
		return testkit.Metric(t, sc.Registry, "knowledge_sidecar_client_share_rejections_total", share) > 0 &&
			testkit.Metric(t, sc.Registry, "knowledge_sidecar_client_share_rejections_total", map[string]string{"limit": "in_flight"}) > 0
	})
	checkLegitServed(t, sc, "during 520 slow uploads from one client")

	sc = StartSidecar(t, SidecarOptions{CoreURL: u.URL})
	const idle = 1024
	get := []byte("GET /x HTTP/1.1\r\nHost: ks\r\n\r\n")
	kept := 0
	for range idle {
		c := dialFrom(t, attackerAddr, sc.Addr)
		if _, err := c.Write(get); err != nil {
			continue
		}
		if res, err := http.ReadResponse(bufio.NewReader(c), nil); err == nil {
			drainClose(res.Body)
			if res.StatusCode == 200 {
				kept++
			}
		}
	}
	checkLegitServed(t, sc, "during 1024 idle keep-alive connections from one client")
	// Each newer connection of the attacker's past its share took the
	// place of its own oldest idle one.
	closed := testkit.Metric(t, sc.Registry, "knowledge_sidecar_idle_connections_closed_total", nil)
	t.Logf("the attacker's keep-alive connections answered 200: %d of %d; its idle ones closed for newer: %v", kept, idle, closed)
	// (A newer connection can arrive a moment before net/http marks the
	// one before it idle; then it is refused: at most a few.)
	if kept*100 < idle*95 || closed == 0 {
		t.Errorf("attacker's connections served %d of %d, %v idle closed; want nearly all served, its own oldest idle ones closed to make room", kept, idle, closed)
	}
}
