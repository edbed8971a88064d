package test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/bailinghub/knowledge-sidecar/internal/testkit"
)

// floodAddrs are four attacker addresses of their own (Linux routes all of
// 127.0.0.0/8 to lo): four hosts, or four /64s of one IPv6 customer.
var floodAddrs = []string{"127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.5"}

// TestFourClientsCannotRefuseAFifth: issue 39, finding 5. With each share a
// fixed quarter of its cap, four addresses held all of it and a fifth
// client was refused every request; and when connections ran short, the
// fifth client's idle keep-alive connections were the ones closed. Shares
// now shrink with the number of active clients and keep a reserve, and an
// idle connection of a client below its share is never closed for another.
// Production defaults for every cap and share.
func TestFourClientsCannotRefuseAFifth(t *testing.T) {
	u := startUpstream(t, func(u *upstream, w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			io.Copy(io.Discard, r.Body)
		}
		io.WriteString(w, "ok")
	})

	t.Run("slow uploads from four addresses", func(t *testing.T) {
		sc := StartSidecar(t, SidecarOptions{CoreURL: u.URL})
		const each = 300 // past a quarter of the 1024 connections and 512 requests in flight
		for range each {
			for _, ip := range floodAddrs {
				c := dialFrom(t, ip, sc.Addr)
				fmt.Fprintf(c, "POST /upload HTTP/1.1\r\nHost: ks\r\nContent-Type: application/octet-stream\r\nContent-Length: %d\r\n\r\n", 1<<20)
			}
		}
		testkit.Eventually(t, 30*time.Second, "the flood's connections and requests refused past the caps", func() bool {
			return testkit.Metric(t, sc.Registry, "knowledge_sidecar_overload_rejections_total", map[string]string{"limit": "connections"}) > 0 &&
				testkit.Metric(t, sc.Registry, "knowledge_sidecar_overload_rejections_total", map[string]string{"limit": "in_flight"}) > 0
		})
		checkLegitServed(t, sc, "a fifth client during slow uploads from four addresses")
	})

	t.Run("idle connections of a client below its share are kept", func(t *testing.T) {
		sc := StartSidecar(t, SidecarOptions{CoreURL: u.URL})
		get := []byte("GET /x HTTP/1.1\r\nHost: ks\r\n\r\n")
		roundTrip := func(c net.Conn, r *bufio.Reader) bool {
			if _, err := c.Write(get); err != nil {
				return false
			}
			res, err := http.ReadResponse(r, nil)
			if err != nil {
				return false
			}
			drainClose(res.Body)
			return res.StatusCode == 200
		}
		// The fifth client's keep-alive connections, idle first (the oldest).
		type kept struct {
			c net.Conn
			r *bufio.Reader
		}
		var mine []kept
		for range 8 {
			c := dialFrom(t, "127.0.0.1", sc.Addr)
			r := bufio.NewReader(c)
			if !roundTrip(c, r) {
				t.Fatal("the fifth client's first request: not served")
			}
			mine = append(mine, kept{c, r})
		}
		// Four addresses open idle keep-alive connections past the cap.
		for range 300 {
			for _, ip := range floodAddrs {
				c := dialFrom(t, ip, sc.Addr)
				roundTrip(c, bufio.NewReader(c))
			}
		}
		if closed := testkit.Metric(t, sc.Registry, "knowledge_sidecar_idle_connections_closed_total", nil); closed == 0 {
			t.Fatalf("precondition: no idle connection was closed; want the flood past the caps")
		}
		var s served
		for _, k := range mine {
			s.all++
			if roundTrip(k.c, k.r) {
				s.ok++
			}
		}
		if s.ok != s.all {
			t.Errorf("the fifth client's idle keep-alive connections: %d of %d still served; want all (it is below its share)", s.ok, s.all)
		}
	})
}
