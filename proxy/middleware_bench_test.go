package proxy

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"

	"github.com/bailinghub/knowledge-sidecar/internal/testkit"
	"github.com/bailinghub/knowledge-sidecar/knowledge"
)

// DESIGN 14 side-by-side benchmark of reqState being the request's context
// (its Value answers ctxKey with itself) against the plain version, a
// context.WithValue holding it; and the CPU of the requests it and the
// turn body scanner sit in (docs/performance.md, "DESIGN 14 review").

// reqStateLookups is how many times a pass-through request asks its
// context for its state: begin, the transport's error handler path and
// the accounting (stateOf, requestID, setOutcome) — counted generously.
const reqStateLookups = 4

// BenchmarkReqStateContext: one request's state made into its context and
// looked up reqStateLookups times, as reqState does it ("fast") and the
// plain way that keeps what the context answers ("plain"): a
// context.WithValue for the state and one for each of the two keys the
// knowledge service reads (request id; client address, resolved here as
// Value resolves it when asked).
func BenchmarkReqStateContext(b *testing.B) {
	r := httptest.NewRequest(http.MethodGet, "/json/1024", nil)
	r.RemoteAddr = "127.0.0.1:40000"
	parent := r.Context()
	var fw forwarding
	b.Run("fast", func(b *testing.B) {
		b.ReportAllocs()
		cpu0 := testkit.ProcessCPU(b)
		for b.Loop() {
			st := &reqState{id: "rid", fw: &fw, req: r}
			st.Context = parent
			ctx := r.WithContext(st).Context()
			for range reqStateLookups {
				if stateOf(ctx) != st {
					b.Fatal("state lost")
				}
			}
		}
		b.ReportMetric(float64(testkit.ProcessCPU(b)-cpu0)/float64(b.N), "cpu-ns/op")
	})
	b.Run("plain", func(b *testing.B) {
		b.ReportAllocs()
		cpu0 := testkit.ProcessCPU(b)
		for b.Loop() {
			st := &reqState{id: "rid", fw: &fw, req: r}
			ctx := context.WithValue(parent, ctxKey{}, st)
			ctx = context.WithValue(ctx, knowledge.RequestIDKey{}, st.id)
			a, _ := fw.clientAddr(r)
			ctx = context.WithValue(ctx, knowledge.ClientAddressKey{}, a.String())
			ctx = r.WithContext(ctx).Context()
			for range reqStateLookups {
				if s, _ := ctx.Value(ctxKey{}).(*reqState); s != st {
					b.Fatal("state lost")
				}
			}
		}
		b.ReportMetric(float64(testkit.ProcessCPU(b)-cpu0)/float64(b.N), "cpu-ns/op")
	})
}

// BenchmarkRequestCPU is the process CPU (getrusage, GC and the in-process
// upstream included) of the whole requests the DESIGN 14 items sit in: a
// 1 KiB pass-through over the canned Core (BenchmarkPassthroughCanned's;
// reqState) and a 256 KiB on_demand turn (BenchmarkTurn's; the turn body
// scanner, jsonscan.String).
func BenchmarkRequestCPU(b *testing.B) {
	b.Run("passthrough1KiB", func(b *testing.B) {
		body := bytes.Repeat([]byte("x"), 1<<10)
		w := newBenchWorldWith(b, cannedCore{body: body})
		h := w.server.Handler()
		rw := &benchWriter{h: http.Header{}}
		b.ReportAllocs()
		cpu0 := testkit.ProcessCPU(b)
		for b.Loop() {
			req := httptest.NewRequest(http.MethodGet, "/json/1024", nil)
			req.RemoteAddr = "127.0.0.1:40000"
			rw.reset()
			h.ServeHTTP(rw, req)
			if rw.code != http.StatusOK || rw.n != len(body) {
				b.Fatalf("got %d with %d bytes", rw.code, rw.n)
			}
		}
		b.ReportMetric(float64(testkit.ProcessCPU(b)-cpu0)/float64(b.N), "cpu-ns/op")
	})
	b.Run("turn256KiB", func(b *testing.B) {
		w := newBenchWorld(b)
		h := w.server.Handler()
		rw := &benchWriter{h: http.Header{}}
		target := "/agent-api/v1/workspaces/" + benchRouteOn + "/turns?size=" + strconv.Itoa(256<<10)
		b.ReportAllocs()
		seq := 0
		cpu0 := testkit.ProcessCPU(b)
		for b.Loop() {
			seq++
			rw.reset()
			h.ServeHTTP(rw, w.onDemandTurn(target, strconv.Itoa(seq)))
			if rw.code != http.StatusOK || rw.n == 0 {
				b.Fatalf("got %d with %d bytes", rw.code, rw.n)
			}
		}
		b.ReportMetric(float64(testkit.ProcessCPU(b)-cpu0)/float64(b.N), "cpu-ns/op")
	})
}
