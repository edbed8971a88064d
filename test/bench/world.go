package main

import (
	"bytes"
	"cmp"
	"context"
	"crypto/tls"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/bailinghub/knowledge-sidecar/catalog"
	kscfg "github.com/bailinghub/knowledge-sidecar/config"
	"github.com/bailinghub/knowledge-sidecar/corefacts"
	"github.com/bailinghub/knowledge-sidecar/internal/fakecore"
	"github.com/bailinghub/knowledge-sidecar/internal/testkit"
	"github.com/bailinghub/knowledge-sidecar/internal/testkit/testdb"
	"github.com/bailinghub/knowledge-sidecar/proxy"
	"github.com/bailinghub/knowledge-sidecar/sidecar"
	"github.com/bailinghub/knowledge-sidecar/turn/turntest"
)

// The bench world is deterministic, so the upstream and sidecar processes
// build the same documents, routes and tokens independently.
const (
	routeKB      = "bench-kb"    // search and read
	routeTurn10  = "bench-t10k"  // turns, rolled out, 10 KiB context
	routeTurn256 = "bench-t256k" // turns, rolled out, 256 KiB context
	routePass10  = "bench-p10k"  // turns, NOT rolled out: pure pass-through
	benchKB      = "bench-kb"
	benchClient  = "bench-host"
	// benchService is the sidecar's Core service token in this closed,
	// loopback-only world. Not a secret: it is printed nowhere and protects
	// nothing outside the bench processes.
	benchService = "svc_bench_world_0123456789abcdefghijklmnopqrstuvwxyz"
	benchDocs    = 12
	benchDocSize = 40 << 10
	searchQuery  = "refund window shipping carrier"
	benchKnowCfg = `{"kb_ids":["bench-kb"],"top_k":8,"min_score":0.01,"inject":"chunk","max_docs":4}`
)

var benchToken = fakecore.Token("bench")

// benchSession is the bench token's Agent Session.
const benchSession = "0b6f8c3e-1d2a-4c4b-8e6f-3a2b1c0d9e8f"

// jsonSizes are the pass-through JSON bodies, by the name used in paths.
var jsonSizes = map[string]int{"1k": 1 << 10, "10k": 10 << 10, "64k": 64 << 10}

// turnSizes are the canned turn contexts by route.
var turnSizes = map[string]int{routeTurn10: 10 << 10, routeTurn256: 256 << 10, routePass10: 10 << 10}

// jsonBody is a JSON object of at least size bytes.
func jsonBody(size int) []byte {
	type item struct {
		ID    int     `json:"id"`
		Name  string  `json:"name"`
		Price float64 `json:"price"`
		Tags  []string
		Text  string `json:"text"`
	}
	var items []item
	for {
		b, _ := json.Marshal(map[string]any{"schema_version": "bench.v1", "items": items})
		if len(b) >= size {
			return b
		}
		n := len(items)
		items = append(items, item{ID: n, Name: "item " + strconv.Itoa(n), Price: float64(n) * 1.25,
			Tags: []string{"a", "b"}, Text: testkit.Vocabulary[n%len(testkit.Vocabulary)] + " 退款窗口 \"q\" " + strings.Repeat("x", 40)})
	}
}

// turnContext is a realistic turn context of at least size bytes (the
// same generator the Go benchmarks of the turn rewrite use), whose inline
// knowledge is chunks of the first three bench documents, as Core would have
// retrieved them: the sidecar mints up to 3 same-run hints from it.
func turnContext(size int) []byte {
	var chunks []turntest.Chunk
	for i := 1; i <= 3; i++ {
		title, content := testkit.Document(i, benchDocSize)
		r := []rune(content)
		chunks = append(chunks, turntest.Chunk{DocID: i, Title: title, Content: string(r[200:900]), Score: 0.9 - float64(i)/10})
	}
	return turntest.AnswerWith(size, chunks)
}

// newFakeCore seeds the fake Core with the bench world.
func newFakeCore() *fakecore.Core {
	core := fakecore.New(fakecore.Options{ServiceToken: benchService, SystemInfo: true})
	core.AddKB(benchKB)
	routes := []string{routeKB, routeTurn10, routeTurn256, routePass10}
	for _, r := range routes {
		core.SetRoute(r, fakecore.GateAllowed)
	}
	for i := 1; i <= benchDocs; i++ {
		title, content := testkit.Document(i, benchDocSize)
		core.AddDoc(benchKB, int64(i), title, content)
	}
	core.AddSession(benchToken, corefacts.Session{
		SessionID:     benchSession,
		ClientAppID:   benchClient,
		Principal:     corefacts.Principal{ID: "bench-user", Tenant: "bench-tenant", Roles: []string{"agent"}},
		OnBehalfOf:    "bench-tenant:bench-user",
		AllowedRoutes: routes,
		ExpiresAt:     time.Now().Add(24 * time.Hour).UTC(),
	})
	return core
}

// newMemCatalog is the catalog twin of newFakeCore.
func newMemCatalog() *catalog.MemCatalog {
	cat := catalog.NewMemCatalog()
	cat.PutKB(benchKB, true)
	routes := []string{routeKB, routeTurn10, routeTurn256, routePass10}
	for _, r := range routes {
		cat.PutRoute(r, true, benchKnowCfg)
	}
	cat.PutClient(benchClient, true, routes, "http://127.0.0.1:1/callback")
	now := time.Now().UTC().Truncate(time.Second)
	for i := 1; i <= benchDocs; i++ {
		title, content := testkit.Document(i, benchDocSize)
		cat.PutDoc(corefacts.Document{
			DocMeta: corefacts.DocMeta{DocID: int64(i), KBID: benchKB, Title: title, Status: "ready", UpdatedAt: now},
			Content: content,
		})
	}
	return cat
}

// upstreamHandler is the Core double: canned pass-through bodies, canned
// turn contexts, everything else answered by the fake Core.
func upstreamHandler() (http.Handler, func()) {
	core := newFakeCore()
	bodies := map[string][]byte{}
	for name, n := range jsonSizes {
		bodies[name] = jsonBody(n)
	}
	turns := map[string][]byte{}
	for route, n := range turnSizes {
		turns[route] = turnContext(n)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /bench/json/{size}", func(w http.ResponseWriter, r *http.Request) {
		b, ok := bodies[r.PathValue("size")]
		if !ok {
			http.NotFound(w, r)
			return
		}
		writeCanned(w, b)
	})
	mux.HandleFunc("GET /bench/sse", serveSSE)
	mux.HandleFunc("POST /agent-api/v1/workspaces/{route}/turns", func(w http.ResponseWriter, r *http.Request) {
		b, ok := turns[r.PathValue("route")]
		if !ok {
			core.ServeHTTP(w, r)
			return
		}
		_, _ = io.Copy(io.Discard, r.Body)
		writeCanned(w, b)
	})
	// The fake Core scores every chunk per /kb/search (tens of ms for this
	// corpus): answers are memoized per request, so the Core double has
	// (close to) zero latency and the sidecar's own cost is what is measured.
	var kbAnswers sync.Map
	mux.HandleFunc("POST /kb/search", func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		key := r.Header.Get("Authorization") + "\x00" + r.URL.RawQuery + "\x00" + string(body)
		if v, ok := kbAnswers.Load(key); ok {
			writeCanned(w, v.([]byte))
			return
		}
		rec := httptest.NewRecorder()
		in := r.Clone(r.Context())
		in.Body = io.NopCloser(bytes.NewReader(body))
		core.ServeHTTP(rec, in)
		if rec.Code == http.StatusOK {
			kbAnswers.Store(key, rec.Body.Bytes())
		}
		for k, v := range rec.Header() {
			w.Header()[k] = v
		}
		w.WriteHeader(rec.Code)
		_, _ = w.Write(rec.Body.Bytes())
	})
	mux.Handle("/", core)
	return mux, core.Close
}

func writeCanned(w http.ResponseWriter, b []byte) {
	h := w.Header()
	h["Content-Type"] = []string{"application/json"}
	h["Content-Length"] = []string{strconv.Itoa(len(b))}
	_, _ = w.Write(b)
}

// serveSSE streams n events (default 5), each flushed on its own, gap apart
// (default 0). Each event's data carries the upstream's wall clock at the
// flush, in Unix nanoseconds, for the event-delay probe.
func serveSSE(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	n, _ := strconv.Atoi(q.Get("n"))
	if n <= 0 || n > 10000 {
		n = 5
	}
	gap, _ := time.ParseDuration(q.Get("gap"))
	if gap < 0 || gap > time.Second {
		gap = 0
	}
	rc := http.NewResponseController(w)
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	pad := strings.Repeat("p", 160)
	var t *time.Timer
	for i := 0; i < n; i++ {
		if i > 0 && gap > 0 {
			if t == nil {
				t = time.NewTimer(gap)
			} else {
				t.Reset(gap)
			}
			select {
			case <-t.C:
			case <-r.Context().Done():
				return
			}
		}
		if _, err := fmt.Fprintf(w, "id: %d\ndata: {\"t\":%d,\"pad\":%q}\n\n", i, time.Now().UnixNano(), pad); err != nil {
			return
		}
		if err := rc.Flush(); err != nil {
			return
		}
	}
}

// newSidecar builds the sidecar exactly as `serve` does (sidecar.Build from
// the defaults), over the upstream at coreURL, rolled out for the knowledge
// and turn routes. The knowledge paths read the production SQL catalog at
// catalogDSN (a MariaDB database seeded by seedCatalog); with an empty DSN
// the in-memory twin stands in. The per-session rate limit is lifted so the
// load is not answered 429. turnHints is the turn_hints setting.
func newSidecar(coreURL, catalogDSN string, turnHints bool, log *slog.Logger) (*sidecar.App, error) {
	cfg := kscfg.Defaults()
	cfg.Core.URL, cfg.Core.Token, cfg.Catalog.DSN = coreURL, benchService, catalogDSN
	cfg.RateLimit.RPS, cfg.RateLimit.Burst = 1e9, 1<<30
	cfg.TurnHints = turnHints
	cfg.Rollout = "allow:" + strings.Join([]string{routeKB, routeTurn10, routeTurn256}, ",")
	// As serve reads it; the SDK then reads the OTEL_* variables.
	if on, err := strconv.ParseBool(os.Getenv("KNOWLEDGE_SIDECAR_TRACING_ENABLED")); err == nil {
		cfg.Tracing.Enabled = on
	}
	// The disclosure audit, as serve reads it (--cpu-variant
	// 'audit=;KNOWLEDGE_SIDECAR_AUDIT_ENABLED=true;KNOWLEDGE_SIDECAR_AUDIT_FILE=…').
	if on, err := strconv.ParseBool(os.Getenv("KNOWLEDGE_SIDECAR_AUDIT_ENABLED")); err == nil && on {
		cfg.Audit.Enabled = true
		cfg.Audit.File = cmp.Or(os.Getenv("KNOWLEDGE_SIDECAR_AUDIT_FILE"), cfg.Audit.File)
		cfg.Audit.QueryHMACKey = os.Getenv("KNOWLEDGE_SIDECAR_AUDIT_QUERY_HMAC_KEY")
	}
	deps := sidecar.Deps{Logger: log, Version: "bench"}
	if catalogDSN == "" {
		deps.Catalog = newMemCatalog()
	}
	sidecar.ApplyGCPercent(os.LookupEnv) // as serve does
	return sidecar.Build(context.Background(), cfg, deps)
}

// seedCatalog writes the bench world into a catalog database (the rows
// newMemCatalog holds), as the admin account.
func seedCatalog(ctx context.Context, db *sql.DB) error {
	now := time.Now().UTC().Truncate(time.Second)
	routes := []string{routeKB, routeTurn10, routeTurn256, routePass10}
	stmts := []struct {
		q    string
		args []any
	}{{"INSERT INTO bz_kb_bases (kb_id, enabled, updated_at) VALUES (?, 1, ?)", []any{benchKB, now}}}
	for _, r := range routes {
		stmts = append(stmts, struct {
			q    string
			args []any
		}{"INSERT INTO bz_routes (route_key, enabled, knowledge, updated_at) VALUES (?, 1, ?, ?)", []any{r, benchKnowCfg, now}})
	}
	allowed, _ := json.Marshal(routes)
	stmts = append(stmts, struct {
		q    string
		args []any
	}{"INSERT INTO bz_clients (app_id, token, enabled, allowed_routes, agent_authorize_url, rate_limit_per_min) VALUES (?, ?, 1, ?, ?, 0)",
		[]any{benchClient, strings.Repeat("b", 32), string(allowed), "http://127.0.0.1:1/callback"}})
	for i := 1; i <= benchDocs; i++ {
		title, content := testkit.Document(i, benchDocSize)
		stmts = append(stmts, struct {
			q    string
			args []any
		}{"INSERT INTO bz_kb_docs (doc_id, kb_id, title, content, content_hash, status, created_at, updated_at) VALUES (?, ?, ?, ?, ?, 'ready', ?, ?)",
			[]any{i, benchKB, title, content, fmt.Sprintf("%032x", i), now, now}})
	}
	for _, st := range stmts {
		if _, err := db.ExecContext(ctx, st.q, st.args...); err != nil {
			return err
		}
	}
	return nil
}

// seedTask migrates the catalog database to Core 0.8's task control and
// puts the bench session inside a managed task (Core's member revalidation
// passes: its session row, a direct-tool workspace), with a context_ready
// run bound to the task. It returns that run's id: searches and reads that
// carry it run every task rule (SPEC §4a).
func seedTask(ctx context.Context, db *testdb.DB) (string, error) {
	if err := db.InstallTasks(ctx); err != nil {
		return "", err
	}
	const (
		task = "7a000000-0000-4000-8000-000000000001"
		run  = "e1000000-0000-4000-8000-000000000001"
		conv = "bench-conv"
	)
	routes, _ := json.Marshal([]string{routeKB, routeTurn10, routeTurn256, routePass10})
	for _, st := range []struct {
		q    string
		args []any
	}{
		{`INSERT INTO bz_agent_sessions (session_id, client_app_id, principal_json, on_behalf_of, allowed_routes,
			access_token_hash, access_expires_at, refresh_expires_at, revoked_at)
			VALUES (?, ?, '{"id":"bench-user","tenant":"bench-tenant","roles":["agent"]}', 'bench-tenant:bench-user', ?,
			REPEAT('f', 64), '2099-01-01 00:00:00', '2099-01-01 00:00:00', NULL)`, []any{benchSession, benchClient, string(routes)}},
		{`UPDATE bz_routes SET tools = '{"agent_direct":{"enabled":true}}', agent_client = NULL WHERE route_key = ?`, []any{routeKB}},
		{`INSERT INTO bz_agent_tasks (task_id, create_key, create_hash, scope_hash, state, revision, ledger_sequence,
			policy_json, created_by, created_at, updated_at) VALUES (?, SHA2(?, 256), REPEAT('c', 64), REPEAT('d', 64), 'active', 1, 1,
			'{"maxWriteCalls":null,"maxConcurrent":1,"expiresAt":null}', 'admin', '2026-01-01 00:00:00.000', '2026-01-01 00:00:00.000')`, []any{task, task}},
		{`INSERT INTO bz_agent_task_members (task_id, member_key, session_id, identity_hash, client_app_id, route_key,
			client_conversation_id, allowed_tools_json) VALUES (?, SHA2(CONCAT(?, ?, ?), 256), ?, REPEAT('e', 64), ?, ?, ?, '[]')`,
			[]any{task, benchSession, routeKB, conv, benchSession, benchClient, routeKB, conv}},
		{`INSERT INTO bz_agent_task_enforcements (session_id, first_task_id, created_by, created_at)
			VALUES (?, ?, 'admin', '2026-01-01 00:00:00.000')`, []any{benchSession, task}},
		{`INSERT INTO bz_agent_client_runs (run_id, session_id, client_app_id, route_key, client_conversation_id, status,
			created_at, updated_at) VALUES (?, ?, ?, ?, ?, 'context_ready', '2026-01-01 00:00:00', '2026-01-01 00:00:00')`,
			[]any{run, benchSession, benchClient, routeKB, conv}},
		{`INSERT INTO bz_agent_task_runs (run_id, task_id, session_id, created_at) VALUES (?, ?, ?, '2026-01-01 00:00:00.000')`,
			[]any{run, task, benchSession}},
	} {
		if _, err := db.Admin.ExecContext(ctx, st.q, st.args...); err != nil {
			return "", err
		}
	}
	return run, nil
}

// newBareProxy is the baseline: a tuned httputil.ReverseProxy with nothing
// around it (same transport settings as the sidecar's pass-through).
func newBareProxy(coreURL string) (http.Handler, error) {
	u, err := url.Parse(coreURL)
	if err != nil {
		return nil, err
	}
	d := kscfg.Defaults().Proxy
	t := proxy.NewTransport(proxy.TransportOptions{DialTimeout: d.DialTimeout, ResponseHeaderTimeout: d.ResponseHeaderTimeout, MaxIdleConnsPerHost: d.MaxIdleConnsPerHost})
	pool := &bufPool{p: sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}}
	return &httputil.ReverseProxy{
		Rewrite:       func(pr *httputil.ProxyRequest) { pr.SetURL(u); pr.SetXForwarded() },
		Transport:     t,
		FlushInterval: -1,
		BufferPool:    pool,
	}, nil
}

// newLeanProxy is the CPU section's baseline, the "lean stdlib proxy" of
// issue 22: httputil.ReverseProxy with Rewrite (SetURL, SetXForwarded),
// pooled 32 KiB buffers, FlushInterval 0 (the stdlib still flushes SSE and
// unknown-length bodies on every write), no compression and HTTP/1.1 only
// on both sides, and nothing else. Its transport has the sidecar's pool
// size and timeouts.
func newLeanProxy(coreURL string) (http.Handler, error) {
	u, err := url.Parse(coreURL)
	if err != nil {
		return nil, err
	}
	pool := &bufPool{p: sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}}
	return &httputil.ReverseProxy{
		Rewrite:       func(pr *httputil.ProxyRequest) { pr.SetURL(u); pr.SetXForwarded() },
		Transport:     leanTransport(),
		FlushInterval: 0,
		BufferPool:    pool,
	}, nil
}

// leanTransport is net/http's Transport with the sidecar's pool size and
// timeouts, no compression, HTTP/1.1 only: the lean proxy's and the
// floor's.
func leanTransport() *http.Transport {
	return &http.Transport{
		DialContext:           (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:          1024,
		MaxIdleConnsPerHost:   256,
		IdleConnTimeout:       90 * time.Second,
		ResponseHeaderTimeout: time.Minute,
		DisableCompression:    true,
		ForceAttemptHTTP2:     false,
		TLSNextProto:          map[string]func(string, *tls.Conn) http.RoundTripper{},
	}
}

type bufPool struct{ p sync.Pool }

func (b *bufPool) Get() []byte  { return *(b.p.Get().(*[]byte)) }
func (b *bufPool) Put(p []byte) { b.p.Put(&p) }
