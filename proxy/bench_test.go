package proxy

import (
	"bytes"
	"errors"
	"fmt"
	"github.com/bailinghub/knowledge-sidecar/turn/turntest"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"github.com/bailinghub/knowledge-sidecar/coreclient"
	"github.com/bailinghub/knowledge-sidecar/knowledge"
	"github.com/bailinghub/knowledge-sidecar/ledger"
	"github.com/bailinghub/knowledge-sidecar/rollout"
	"github.com/bailinghub/knowledge-sidecar/test/fakecore"
)

// Benchmarks of the edge's hot paths through the real handler, against an
// in-process upstream (an httptest.Server on loopback): the pass-through
// handler next to a bare httputil.ReverseProxy with the same transport, and
// the intercepted turn next to the same turn passed through. The upstream's
// own cost is in every number; compare within a benchmark family (edge vs
// bare, intercepted vs passthrough), e.g. with benchstat. The load tool in
// test/bench measures the same paths across processes.

const (
	benchService  = "svc_proxy_bench_0123456789abcdefghijklmnopqrstuvwxyz"
	benchRouteOn  = "bench-on"  // rolled out: turns are intercepted
	benchRouteOff = "bench-off" // not rolled out: turns pass through
)

var benchSizes = []int{1 << 10, 10 << 10, 64 << 10}

// benchWriter is a minimal ResponseWriter that keeps no body, so the
// benchmark measures the proxy and not a recorder's buffer.
type benchWriter struct {
	h    http.Header
	code int
	n    int
}

func (w *benchWriter) Header() http.Header { return w.h }
func (w *benchWriter) WriteHeader(code int) {
	if w.code == 0 || w.code < 200 {
		w.code = code
	}
}
func (w *benchWriter) Write(p []byte) (int, error) {
	if w.code == 0 {
		w.code = http.StatusOK
	}
	w.n += len(p)
	return len(p), nil
}
func (w *benchWriter) Flush() {}

func (w *benchWriter) reset() {
	clear(w.h)
	w.code, w.n = 0, 0
}

// benchWorld is an upstream (canned JSON and turn answers, the fake Core for
// identity) and a sidecar with features over it.
type benchWorld struct {
	upstream *httptest.Server
	server   *Server
	bare     http.Handler
	token    string
}

func newBenchWorld(b *testing.B) *benchWorld {
	b.Helper()
	core := fakecore.New(fakecore.Options{ServiceToken: benchService, SystemInfo: true})
	token := fakecore.Token("proxy-bench")
	core.AddSession(token, coreclient.Session{
		SessionID: "0b6f8c3e-1d2a-4c4b-8e6f-3a2b1c0d9e8f", ClientAppID: "bench-host",
		Principal:     coreclient.Principal{ID: "bench-user", Tenant: "bench-tenant"},
		AllowedRoutes: []string{benchRouteOn, benchRouteOff},
	})
	bodies := map[string][]byte{}
	for _, n := range benchSizes {
		bodies[strconv.Itoa(n)] = bytes.Repeat([]byte("x"), n)
	}
	turns := map[string][]byte{}
	for _, n := range []int{10 << 10, 256 << 10} {
		turns[strconv.Itoa(n)] = turntest.Answer(n)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /json/{n}", func(w http.ResponseWriter, r *http.Request) {
		body := bodies[r.PathValue("n")]
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		_, _ = w.Write(body)
	})
	mux.HandleFunc("POST /agent-api/v1/workspaces/{route}/turns", func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		body := turns[r.URL.Query().Get("size")]
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		_, _ = w.Write(body)
	})
	mux.Handle("/", core)
	up := httptest.NewServer(mux)
	b.Cleanup(func() { core.Close(); up.Close() })

	client, err := coreclient.NewClient(coreclient.Options{BaseURL: up.URL, ServiceToken: benchService})
	if err != nil {
		b.Fatal(err)
	}
	cat := coreclient.NewMemCatalog()
	cat.PutKB("bench-kb", true)
	for _, r := range []string{benchRouteOn, benchRouteOff} {
		cat.PutRoute(r, true, `{"kb_ids":["bench-kb"],"top_k":8,"min_score":0.1,"inject":"chunk","max_docs":4}`)
	}
	keys, err := knowledge.NewKeyring("", benchService)
	if err != nil {
		b.Fatal(err)
	}
	svc, err := knowledge.New(knowledge.Options{Identity: client, Retriever: client, Catalog: cat, Keys: keys, RateLimit: 1e9, RateBurst: 1 << 30})
	if err != nil {
		b.Fatal(err)
	}
	pol, err := rollout.Parse("allow:" + benchRouteOn)
	if err != nil {
		b.Fatal(err)
	}
	u, _ := url.Parse(up.URL)
	s, err := New(Options{CoreURL: u, Features: &Features{
		Knowledge: svc, Prober: client, Ledger: ledger.NewMemory(1<<16, time.Hour, time.Now), Rollout: pol,
	}})
	if err != nil {
		b.Fatal(err)
	}
	t := NewTransport(TransportOptions{DialTimeout: 5 * time.Second, ResponseHeaderTimeout: time.Minute, MaxIdleConnsPerHost: 256})
	bare := &httputil.ReverseProxy{
		Rewrite:       func(pr *httputil.ProxyRequest) { pr.SetURL(u); pr.SetXForwarded() },
		Transport:     t,
		FlushInterval: -1,
		BufferPool:    newBufferPool(),
	}
	return &benchWorld{upstream: up, server: s, bare: bare, token: token}
}

// BenchmarkPassthrough: GET of a JSON body through the sidecar's edge
// (routing, request id, metrics, X-Forwarded-*, ReverseProxy) and through a
// bare ReverseProxy with the same transport. edge − bare is what the
// sidecar adds to the hop.
func BenchmarkPassthrough(b *testing.B) {
	w := newBenchWorld(b)
	for _, n := range benchSizes {
		for _, h := range []struct {
			name string
			h    http.Handler
		}{{"edge", w.server.Handler()}, {"bare", w.bare}} {
			b.Run(fmt.Sprintf("%s/%dKiB", h.name, n>>10), func(b *testing.B) {
				rw := &benchWriter{h: http.Header{}}
				b.SetBytes(int64(n))
				b.ReportAllocs()
				for b.Loop() {
					req := httptest.NewRequest(http.MethodGet, "/json/"+strconv.Itoa(n), nil)
					req.RemoteAddr = "127.0.0.1:40000"
					rw.reset()
					h.h.ServeHTTP(rw, req)
					if rw.code != http.StatusOK || rw.n != n {
						b.Fatalf("got %d with %d bytes; want 200 with %d", rw.code, rw.n, n)
					}
				}
			})
		}
	}
}

// BenchmarkTurn: a turn with knowledge_delivery "on_demand" on a rolled-out
// workspace (identity call to Core, ledger reservation, request splice,
// response rewrite) next to the same turn on a workspace that is not rolled
// out (byte-for-byte pass-through). intercepted − passthrough is the cost
// of interception; B/op against the context size shows the allocations.
func BenchmarkTurn(b *testing.B) {
	w := newBenchWorld(b)
	h := w.server.Handler()
	for _, n := range []int{10 << 10, 256 << 10} {
		for _, mode := range []struct{ name, route string }{{"intercepted", benchRouteOn}, {"passthrough", benchRouteOff}} {
			b.Run(fmt.Sprintf("%s/%dKiB", mode.name, n>>10), func(b *testing.B) {
				rw := &benchWriter{h: http.Header{}}
				target := "/agent-api/v1/workspaces/" + mode.route + "/turns?size=" + strconv.Itoa(n)
				b.SetBytes(int64(n))
				b.ReportAllocs()
				seq := 0
				for b.Loop() {
					seq++
					id := strconv.Itoa(seq)
					body := `{"client_conversation_id":"c-` + id + `","client_turn_id":"t-` + id + `","user_message_id":"m-` + id +
						`","user_input":"Can I get a refund?","knowledge_delivery":"on_demand"}`
					req := httptest.NewRequest(http.MethodPost, target, strings.NewReader(body))
					req.RemoteAddr = "127.0.0.1:40000"
					req.Header.Set("Authorization", "Bearer "+w.token)
					req.Header.Set("Content-Type", "application/json")
					rw.reset()
					h.ServeHTTP(rw, req)
					if rw.code != http.StatusOK || rw.n == 0 {
						b.Fatalf("got %d with %d bytes; want 200 with a body", rw.code, rw.n)
					}
				}
			})
		}
	}
}

// TestReadSized: the same bytes and errors as io.ReadAll over a LimitReader
// of limit+1, whatever the announced size (right, short, long, unknown) and
// however the reader splits its data; an announced size never reserves more
// than prealloc before the bytes arrive.
func TestReadSized(t *testing.T) {
	const limit = 3000
	errBoom := errors.New("boom")
	for _, n := range []int{0, 1, 511, 512, 513, 2999, 3000, 3001, 5000} {
		data := bytes.Repeat([]byte("0123456789abcdef"), n/16+1)[:n]
		for _, size := range []int64{-1, 0, int64(n) - 1, int64(n), int64(n) + 1, limit, limit + 1, 1 << 40} {
			for _, wrap := range []struct {
				name string
				fn   func(io.Reader) io.Reader
			}{
				{"plain", func(r io.Reader) io.Reader { return r }},
				{"one-byte", iotest.OneByteReader},
				{"half", iotest.HalfReader},
				{"data-err", iotest.DataErrReader},
				{"failing", func(r io.Reader) io.Reader { return io.MultiReader(r, iotest.ErrReader(errBoom)) }},
			} {
				for _, prealloc := range []int64{limit, 700} {
					t.Run(fmt.Sprintf("%d/%d/%s/%d", n, size, wrap.name, prealloc), func(t *testing.T) {
						want, wantErr := io.ReadAll(io.LimitReader(wrap.fn(bytes.NewReader(data)), limit+1))
						got, err := readSized(wrap.fn(bytes.NewReader(data)), size, limit, prealloc)
						if !bytes.Equal(got, want) || !errors.Is(err, wantErr) {
							t.Fatalf("got %d bytes, %v; want %d bytes, %v", len(got), err, len(want), wantErr)
						}
						if size >= 0 && cap(got) > int(max(prealloc+1, int64(len(got))*2+512)) {
							t.Fatalf("got a buffer of %d bytes for %d bytes read with prealloc %d; want no large reservation", cap(got), len(got), prealloc)
						}
					})
				}
			}
		}
	}
}
