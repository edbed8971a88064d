package test

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bailinghub/knowledge-sidecar/internal/testkit"
	"github.com/bailinghub/knowledge-sidecar/proxy"
)

func memTotal() uint64 {
	heapInUse()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc + m.StackInuse
}

// TestEdgeMemoryFigures prints what one connection costs the sidecar in
// each state (heap plus goroutine stacks, after a GC), the per-connection
// figures of docs/reliability.md. A tool, not an assertion (the bounds are
// asserted by TestHostileClientsBoundedMemory): KS_MEASURE=1 go test -run
// TestEdgeMemoryFigures -v ./test/
func TestEdgeMemoryFigures(t *testing.T) {
	if os.Getenv("KS_MEASURE") == "" {
		t.Skip("set KS_MEASURE=1 to print the figures")
	}
	const n = 500
	var entered atomic.Int64
	u := startUpstream(t, func(u *upstream, w http.ResponseWriter, r *http.Request) {
		if r.Method == "POST" {
			entered.Add(1)
			io.Copy(io.Discard, r.Body)
		}
	})
	sc := StartSidecar(t, SidecarOptions{CoreURL: u.URL, Serve: proxy.ServeOptions{MaxConnections: 10 * n, MaxConnectionsPerClient: -1}, Limits: proxy.Limits{MaxInFlight: 10 * n, InFlightPerClient: -1}})
	dial := func(addr string) net.Conn {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	// Idle keep-alive connections, one answered request each.
	b := memTotal()
	for range n {
		c := dial(sc.Addr)
		io.WriteString(c, "GET /x HTTP/1.1\r\nHost: ks\r\n\r\n")
		buf := make([]byte, 512)
		c.Read(buf)
	}
	t.Logf("idle keep-alive: %.1f KiB per connection", float64(int64(memTotal())-int64(b))/n/1024)
	// Connections with 30 KiB of a header sent and the rest never.
	b = memTotal()
	hdr := "GET /x HTTP/1.1\r\nHost: ks\r\nX-Pad: " + strings.Repeat("p", 30<<10)
	for range n {
		c := dial(sc.Addr)
		io.WriteString(c, hdr)
	}
	testkit.WaitMetric(t, sc.Registry, "knowledge_sidecar_open_connections", nil, 2*n)
	t.Logf("30 KiB of headers pending: %.1f KiB per connection", float64(int64(memTotal())-int64(b))/n/1024)
	// Uploads held open (16 KiB sent of 1 GiB), first straight to the
	// upstream, then through the sidecar: the difference is the sidecar's.
	up := u.Listener.Addr().String()
	head := fmt.Sprintf("POST /up HTTP/1.1\r\nHost: ks\r\nContent-Length: %d\r\n\r\n", 1<<30)
	body := strings.Repeat("b", 16<<10)
	b = memTotal()
	for range n {
		c := dial(up)
		io.WriteString(c, head+body)
	}
	testkit.Poll(20*time.Second, func() bool { return entered.Load() == n })
	direct := float64(int64(memTotal())-int64(b)) / n / 1024
	t.Logf("upload straight to the upstream: %.1f KiB", direct)
	b = memTotal()
	for range n {
		c := dial(sc.Addr)
		io.WriteString(c, head+body)
	}
	testkit.Poll(20*time.Second, func() bool { return entered.Load() == 2*n })
	via := float64(int64(memTotal())-int64(b)) / n / 1024
	t.Logf("upload through the sidecar: %.1f KiB, of which the sidecar %.1f KiB", via, via-direct)
}
