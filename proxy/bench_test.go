package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"github.com/bailinghub/knowledge-sidecar/catalog"
	"github.com/bailinghub/knowledge-sidecar/coreclient"
	"github.com/bailinghub/knowledge-sidecar/corefacts"
	"github.com/bailinghub/knowledge-sidecar/internal/fakecore"
	"github.com/bailinghub/knowledge-sidecar/internal/testkit"
	"github.com/bailinghub/knowledge-sidecar/knowledge"
	"github.com/bailinghub/knowledge-sidecar/ledger"
	"github.com/bailinghub/knowledge-sidecar/mcpserver"
	"github.com/bailinghub/knowledge-sidecar/native"
	"github.com/bailinghub/knowledge-sidecar/protocol"
	"github.com/bailinghub/knowledge-sidecar/rollout"
	"github.com/bailinghub/knowledge-sidecar/turn"
	"github.com/bailinghub/knowledge-sidecar/turn/turntest"
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
	svc      *knowledge.Service
	turns    map[string][]byte
	core     *fakecore.Core
	cat      *catalog.MemCatalog
}

// benchMCP is the MCP tools' backend as package sidecar builds it
// (sidecar/mcp.go), cut to what the benchmarks ask: the knowledge service
// in process as the caller the edge put in the context (no audit group,
// no native Core).
type benchMCP struct{ k *knowledge.Service }

func (m benchMCP) Search(ctx context.Context, body []byte) ([]byte, error) {
	c := MCPCallOf(ctx)
	return m.k.Search(ctx, c.Authorization, c.Route, bytes.NewReader(body))
}

func (m benchMCP) Read(ctx context.Context, body []byte) ([]byte, error) {
	c := MCPCallOf(ctx)
	return m.k.Read(ctx, c.Authorization, c.Route, bytes.NewReader(body))
}

func newBenchWorld(b testing.TB) *benchWorld { return newBenchWorldWith(b, nil) }

// newBenchWorldWith is newBenchWorld with rt as the sidecar's transport to
// Core (nil: the default tuned transport).
func newBenchWorldWith(b testing.TB, rt http.RoundTripper) *benchWorld {
	b.Helper()
	core := fakecore.New(fakecore.Options{ServiceToken: benchService, SystemInfo: true})
	token := fakecore.Token("proxy-bench")
	core.AddSession(token, corefacts.Session{
		SessionID: "0b6f8c3e-1d2a-4c4b-8e6f-3a2b1c0d9e8f", ClientAppID: "bench-host",
		Principal:     corefacts.Principal{ID: "bench-user", Tenant: "bench-tenant"},
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
	cat := catalog.NewMemCatalog()
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
	turns["hints"] = hintsTurnAnswer(cat)
	u, _ := url.Parse(up.URL)
	nd, err := native.New(native.Options{Prober: client, Interval: time.Minute})
	if err != nil {
		b.Fatal(err)
	}
	ti, err := turn.NewInterceptor(turn.Options{Knowledge: svc, Ledger: ledger.NewMemory(1<<16, time.Hour, time.Now),
		Recorder: turn.NewMetrics(nil, nil, nil)})
	if err != nil {
		b.Fatal(err)
	}
	mcpH, err := mcpserver.NewHTTP(mcpserver.HTTPOptions{Knowledge: benchMCP{svc}, Budget: NewMCPBudget(0, nil)})
	if err != nil {
		b.Fatal(err)
	}
	s, err := New(Options{CoreURL: u, Transport: rt, Features: &Features{Knowledge: svc, Native: nd, Turns: ti, Rollout: pol,
		MCPHandler: mcpH}})
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
	return &benchWorld{upstream: up, server: s, bare: bare, token: token, svc: svc, turns: turns, core: core, cat: cat}
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
					req := w.onDemandTurn(target, strconv.Itoa(seq))
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

// hintsTurnAnswer is a 10 KiB turn context whose knowledge holds two
// chunks (as Core's chunker cuts them) of each of three documents of
// bench-kb, which it adds to cat: an on_demand turn then gets 3 same-run
// hints. Memory messages fill the rest.
func hintsTurnAnswer(cat *catalog.MemCatalog) []byte {
	var items, refs []map[string]any
	for d := range 3 {
		title := fmt.Sprintf("Refund policy %d", d+1)
		para := strings.Repeat(fmt.Sprintf("退款窗口设为%d天时, refunds close after the window. ", d), 12)
		content := "# " + title + "\n\n" + para + "\n\n" + strings.Repeat("Exchanges are free within the window. ", 14)
		id := cat.PutDoc(corefacts.Document{DocMeta: corefacts.DocMeta{KBID: "bench-kb", Title: title, Status: "ready"}, Content: content})
		for c, chunk := range fakecore.Chunks(content)[:2] {
			n := fmt.Sprintf("knowledge:%d", len(items)+1)
			items = append(items, map[string]any{"ref": n, "title": title, "content": chunk})
			refs = append(refs, map[string]any{"ref": n, "doc_id": id, "title": title, "score": 0.9 - float64(d)/10 - float64(c)/100})
		}
	}
	ctx := map[string]any{
		"instructions": "Answer using the workspace's rules.", "page_context": map[string]any{}, "renderers": []string{"markdown"},
		"memory": map[string]any{"summary": nil, "recent": []any{}}, "knowledge": items, "knowledge_refs": refs,
		"governance": map[string]any{"planner": "local_agent", "knowledge_trust": "reference_only"},
	}
	var recent []map[string]string
	for {
		b, _ := json.Marshal(map[string]any{
			"schema_version": "bailing.agent-turn-context.v1", "run_id": "6f1c2a8e-6a55-4c6b-9d7e-2f1f1f1f1f1f",
			"profile_revision": strings.Repeat("a", 64), "capability_revision": strings.Repeat("b", 64),
			"context": ctx, "active_tools": []any{},
		})
		if len(b) >= 10<<10 {
			return b
		}
		recent = append(recent, map[string]string{"role": "user", "content": strings.Repeat("Where is my order? ", 10)})
		ctx["memory"] = map[string]any{"summary": nil, "recent": recent}
	}
}

// BenchmarkTurnHints: the on_demand 10 KiB turn whose Core answer holds
// chunks of three documents, through the real handler (identity, ledger,
// splice, rewrite) with same-run hints on (3 hints: one in-memory catalog
// query, re-check, summaries, 3 sealed refs, budget) and off. hints −
// no_hints is what the hints cost; cpu-µs/op is the process's user+system
// time per turn (upstream included, the same in both).
func BenchmarkTurnHints(b *testing.B) {
	w := newBenchWorld(b)
	h := w.server.Handler()
	for _, on := range []bool{true, false} {
		name := "no_hints"
		if on {
			name = "hints"
		}
		b.Run(name+"/10KiB", func(b *testing.B) {
			w.server.SetTurnHints(on)
			rw := &benchWriter{h: http.Header{}}
			target := "/agent-api/v1/workspaces/" + benchRouteOn + "/turns?size=hints"
			b.ReportAllocs()
			seq := 0
			cpu0 := testkit.ProcessCPU(b)
			for b.Loop() {
				seq++
				req := w.onDemandTurn(target, name+strconv.Itoa(seq))
				rw.reset()
				h.ServeHTTP(rw, req)
				if rw.code != http.StatusOK {
					b.Fatalf("got %d; want 200", rw.code)
				}
			}
			b.ReportMetric(float64(testkit.ProcessCPU(b)-cpu0)/float64(time.Microsecond)/float64(b.N), "cpu-µs/op")
		})
	}
}

// BenchmarkTurnRewriteHints: only the on_demand rewrite of the same 10 KiB
// answer (turn.ReadReply: scan; Rewrite: splice, delivery block), with the
// same-run hints built (Items, TurnHintsFor over the in-memory catalog: one
// document query, re-check, summaries, 3 sealed refs, budget) and without.
// No HTTP, no upstream: with_hints − without_hints is the CPU the hints add
// to a turn (cpu-µs/op counts the process's user+system time, the GC's
// included).
func BenchmarkTurnRewriteHints(b *testing.B) {
	w := newBenchWorld(b)
	body := w.turns["hints"]
	sess := corefacts.Session{SessionID: "0b6f8c3e-1d2a-4c4b-8e6f-3a2b1c0d9e8f", ClientAppID: "bench-host",
		Principal: corefacts.Principal{ID: "bench-user", Tenant: "bench-tenant"}}
	d, err := w.svc.Delivery(context.Background(), testkit.RouteKey(benchRouteOn))
	if err != nil {
		b.Fatal(err)
	}
	for _, on := range []bool{true, false} {
		name := "without_hints"
		if on {
			name = "with_hints"
		}
		b.Run(name+"/10KiB", func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			cpu0 := testkit.ProcessCPU(b)
			for b.Loop() {
				rep, err := turn.ReadReply(body, protocol.DeliveryOnDemand)
				if err != nil {
					b.Fatal(err)
				}
				var hints []byte
				if on {
					var outcome string
					hints, outcome = w.svc.TurnHintsFor(context.Background(), sess, d, rep.RunID(), rep.Items())
					if outcome != knowledge.HintsMinted || bytes.Count(hints, []byte(`"ref":`)) != 3 {
						b.Fatalf("hints: got %s (%s); want 3", hints, outcome)
					}
				}
				if _, err := rep.Rewrite(d, hints); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(testkit.ProcessCPU(b)-cpu0)/float64(time.Microsecond)/float64(b.N), "cpu-µs/op")
		})
	}
}

// TestBenchTurnHintsAnswer: the benchmark's turn really gets 3 hints with
// hints on and none with hints off, so BenchmarkTurnHints compares what it
// says it does.
func TestBenchTurnHintsAnswer(t *testing.T) {
	w := newBenchWorld(t)
	h := w.server.Handler()
	for _, tc := range []struct {
		on   bool
		want int
	}{{true, 3}, {false, 0}} {
		w.server.SetTurnHints(tc.on)
		req := w.onDemandTurn("/agent-api/v1/workspaces/"+benchRouteOn+"/turns?size=hints", strconv.FormatBool(tc.on))
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		var v struct {
			D struct {
				Hints []json.RawMessage `json:"hints"`
			} `json:"knowledge_delivery"`
		}
		if rec.Code != 200 || json.Unmarshal(rec.Body.Bytes(), &v) != nil || len(v.D.Hints) != tc.want {
			t.Errorf("turn_hints %v: got %d with %d hints (%.200s); want 200 with %d", tc.on, rec.Code, len(v.D.Hints), rec.Body.Bytes(), tc.want)
		}
	}
}

// onDemandTurn is an on_demand turn request of the bench session to target,
// with ids made from id.
func (w *benchWorld) onDemandTurn(target, id string) *http.Request {
	body := `{"client_conversation_id":"c-` + id + `","client_turn_id":"t-` + id + `","user_message_id":"m-` + id +
		`","user_input":"Can I get a refund?","knowledge_delivery":"on_demand"}`
	req := httptest.NewRequest(http.MethodPost, target, strings.NewReader(body))
	req.RemoteAddr = "127.0.0.1:40000"
	req.Header.Set("Authorization", "Bearer "+w.token)
	req.Header.Set("Content-Type", "application/json")
	return req
}

// TestReadSized: the same bytes and errors as io.ReadAll over a LimitReader
// of limit+1, whatever the announced size (right, short, long, unknown) and
// however the reader splits its data.
func TestReadSized(t *testing.T) {
	const limit = 3000
	errBoom := errors.New("boom")
	splits := append(slices.Clip(bodySplits), bodySplit{"failing", func(r io.Reader) io.Reader {
		return io.MultiReader(r, iotest.ErrReader(errBoom))
	}})
	for _, n := range []int{0, 1, 511, 512, 513, 2999, 3000, 3001, 5000} {
		data := bytes.Repeat([]byte("0123456789abcdef"), n/16+1)[:n]
		for _, size := range []int64{-1, 0, int64(n) - 1, int64(n), int64(n) + 1, limit, limit + 1, 1 << 40} {
			for _, wrap := range splits {
				t.Run(fmt.Sprintf("%d/%d/%s", n, size, wrap.name), func(t *testing.T) {
					want, wantErr := io.ReadAll(io.LimitReader(wrap.fn(bytes.NewReader(data)), limit+1))
					got, err := readSized(wrap.fn(bytes.NewReader(data)), size, limit)
					if !bytes.Equal(got, want) || !errors.Is(err, wantErr) {
						t.Fatalf("got %d bytes, %v; want %d bytes, %v", len(got), err, len(want), wantErr)
					}
				})
			}
		}
	}
}

// BenchmarkSearch: the same search (test/bench's query over 4 documents of
// 4 KiB, in the fake Core and in the in-memory catalog) through the real
// handler as POST …/knowledge/search ("rest") and as a tools/call of
// knowledge_search on the remote MCP endpoint, one stateless POST per call
// ("mcp", MCP-Protocol-Version 2025-06-18; "mcp-2026-07-28", with the
// Mcp-Method/Mcp-Name headers and the per-request _meta). The fake Core
// runs in this process, so its search is in every cpu-µs/op: compare
// mcp − rest (what the MCP endpoint adds to a search), not the ratio (test/bench's "mcp search vs
// search" measures the same across processes).
func BenchmarkSearch(b *testing.B) {
	w := newBenchWorld(b)
	w.core.AddKB("bench-kb")
	w.core.SetRoute(benchRouteOn, fakecore.GateAllowed)
	for i := 1; i <= 4; i++ { // few and small: the fake Core's search runs in this process, and its CPU is in every number
		title, content := testkit.Document(i, 4<<10)
		id := w.cat.PutDoc(corefacts.Document{DocMeta: corefacts.DocMeta{KBID: "bench-kb", Title: title, Status: "ready", UpdatedAt: time.Now().UTC().Truncate(time.Second)}, Content: content})
		w.core.AddDoc("bench-kb", id, title, content)
	}
	h := w.server.Handler()
	const args = `{"query":"refund window shipping carrier","limit":3}`
	base := "/agent-api/v1/workspaces/" + benchRouteOn + "/knowledge/"
	meta := `"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientInfo":{"name":"ks-bench","version":"1"},"io.modelcontextprotocol/clientCapabilities":{"roots":{"listChanged":true}}},`
	for _, c := range []struct {
		name, path, body string
		header           map[string]string
		ok               func([]byte) bool
	}{
		{"rest", "search", args, nil, func(b []byte) bool { return bytes.Contains(b, []byte(`"hints":[{`)) }},
		{"mcp", "mcp", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"knowledge_search","arguments":` + args + `}}`,
			map[string]string{"MCP-Protocol-Version": "2025-06-18"}, mcpSearchOK},
		{"mcp-2026-07-28", "mcp", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{` + meta + `"name":"knowledge_search","arguments":` + args + `}}`,
			map[string]string{"MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/call", "Mcp-Name": "knowledge_search"}, mcpSearchOK},
	} {
		b.Run(c.name, func(b *testing.B) {
			var rec *httptest.ResponseRecorder
			do := func() {
				req := httptest.NewRequest(http.MethodPost, base+c.path, strings.NewReader(c.body))
				req.RemoteAddr = "127.0.0.1:40000"
				req.Header.Set("Authorization", "Bearer "+w.token)
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("Accept", "application/json, text/event-stream")
				for k, v := range c.header {
					req.Header.Set(k, v)
				}
				rec = httptest.NewRecorder()
				h.ServeHTTP(rec, req)
			}
			do()
			if rec.Code != http.StatusOK || !c.ok(rec.Body.Bytes()) {
				b.Fatalf("got %d %s; want 200 with a successful search", rec.Code, rec.Body.Bytes())
			}
			b.ReportAllocs()
			cpu0 := testkit.ProcessCPU(b)
			for b.Loop() {
				do()
				if rec.Code != http.StatusOK {
					b.Fatalf("got %d; want 200", rec.Code)
				}
			}
			b.ReportMetric(float64(testkit.ProcessCPU(b)-cpu0)/float64(time.Microsecond)/float64(b.N), "cpu-µs/op")
		})
	}
}

// mcpSearchOK: a JSON-RPC result that is a successful tool result with
// hints in its structuredContent.
func mcpSearchOK(body []byte) bool {
	var v struct {
		Result *struct {
			IsError           bool `json:"isError"`
			StructuredContent struct {
				Hints []json.RawMessage `json:"hints"`
			} `json:"structuredContent"`
		} `json:"result"`
	}
	return json.Unmarshal(body, &v) == nil && v.Result != nil && !v.Result.IsError && len(v.Result.StructuredContent.Hints) > 0
}
