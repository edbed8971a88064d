package test

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/go-sql-driver/mysql"

	"github.com/bailinghub/knowledge-sidecar/corefacts"
	"github.com/bailinghub/knowledge-sidecar/hostclient"
	"github.com/bailinghub/knowledge-sidecar/internal/fakecore"
	"github.com/bailinghub/knowledge-sidecar/internal/testkit"
	"github.com/bailinghub/knowledge-sidecar/internal/testkit/testdb"
	"github.com/bailinghub/knowledge-sidecar/protocol"
)

// End-to-end tests of the three knowledge endpoints through the edge: real
// sockets, the fake Core, and the real MariaDB catalog. Every call goes
// through kworld.call, which checks the headers of every knowledge answer and
// the shape and hygiene of every error body; every sidecar logs into a sink
// that is scanned for secrets, refs, queries and document text at cleanup.

// kworld is a World plus a recorder in front of the fake Core, a log sink
// shared by its sidecars, and the strings that must never leak.
type kworld struct {
	*World
	rec  *coreRecorder
	logs *testkit.Buffer
	c    *http.Client
	// TokenStar is a session of app-a whose allowed_routes is ["*"].
	TokenStar string

	mu sync.Mutex
	// secret: never in an error body nor in a log.
	secret []string
	// private: never in a log (refs, cursors, queries, document text).
	private []string
	// errorBodies counts the error bodies scanned, so a suite that scanned
	// nothing is visible.
	errorBodies int
}

// newKWorld builds a World whose sidecars reach the fake Core through a
// recorder, and registers the log scan.
func newKWorld(t *testing.T, o fakecore.Options) *kworld {
	t.Helper()
	w := NewWorld(t, WorldOptions{Core: o})
	kw := &kworld{World: w, logs: &testkit.Buffer{}, c: newClient(t)}
	direct := w.CoreURL
	kw.rec = recordCore(t, w)
	for _, u := range []string{direct, w.CoreURL} {
		pu, _ := url.Parse(u)
		kw.secret = append(kw.secret, u, pu.Host)
	}
	kw.TokenStar = fakecore.Token("session-star")
	w.Core.AddSession(kw.TokenStar, corefacts.Session{
		SessionID: "d0000000-0000-4000-8000-00000000000d", ClientAppID: testdb.AppA,
		Principal:  corefacts.Principal{ID: "user-42", Tenant: "tenant-7", Roles: []string{"manager"}},
		OnBehalfOf: "tenant-7:user-42", AllowedRoutes: []string{"*"}, ExpiresAt: time.Now().Add(15 * time.Minute),
	})
	kw.secret = append(kw.secret, w.ServiceToken, w.TokenA, w.TokenB, kw.TokenStar, w.DB.ReadOnlyDSN, w.DB.Name)
	if cfg, err := mysql.ParseDSN(w.DB.ReadOnlyDSN); err == nil {
		kw.secret = append(kw.secret, cfg.Passwd, cfg.User)
	}
	for _, content := range queryStrings(t, w.DB.Admin, `SELECT content FROM bz_kb_docs`) {
		kw.addPrivate(content)
	}
	t.Cleanup(func() { kw.scanLogs(t) })
	return kw
}

// addPrivate registers text that must never be logged (a document body, a
// query, a ref): a distinctive prefix is enough to catch a leak.
func (kw *kworld) addPrivate(s string) {
	if r := []rune(s); len(r) > 24 {
		s = string(r[:24])
	}
	if len(s) < 12 {
		return
	}
	kw.mu.Lock()
	kw.private = append(kw.private, s)
	kw.mu.Unlock()
}

func (kw *kworld) addSecret(s string) {
	if s == "" {
		return
	}
	kw.mu.Lock()
	kw.secret = append(kw.secret, s)
	kw.mu.Unlock()
}

func (kw *kworld) scanLogs(t *testing.T) {
	t.Helper()
	logs := kw.logs.String()
	kw.mu.Lock()
	defer kw.mu.Unlock()
	for _, s := range append(append([]string(nil), kw.secret...), kw.private...) {
		if s != "" && strings.Contains(logs, s) {
			t.Errorf("sidecar logs contain %q (secret, ref, query or document text); want it never logged", clip(s))
		}
	}
	if strings.Contains(strings.ToLower(logs), "bearer ") {
		t.Errorf("sidecar logs contain a bearer credential")
	}
}

func clip(s string) string {
	if len(s) > 40 {
		return s[:40] + "…"
	}
	return s
}

// coreRecorder sits in front of the fake Core and keeps every request.
type coreRecorder struct {
	mu   sync.Mutex
	reqs []fakecore.Request
}

// recordCore puts a recorder in front of w.Core and points w.CoreURL at it.
func recordCore(t *testing.T, w *World) *coreRecorder {
	t.Helper()
	rec := &coreRecorder{}
	core := w.Core
	srv := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		rec.mu.Lock()
		rec.reqs = append(rec.reqs, fakecore.Request{Method: r.Method, Path: r.URL.Path, Header: r.Header.Clone(), Body: body})
		rec.mu.Unlock()
		r.Body = io.NopCloser(bytes.NewReader(body))
		core.ServeHTTP(rw, r)
	}))
	t.Cleanup(func() { core.Close(); srv.Close() })
	w.CoreURL = srv.URL
	return rec
}

// mark returns a position for since.
func (r *coreRecorder) mark() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.reqs)
}

// since returns the requests recorded after mark whose path starts with prefix.
func (r *coreRecorder) since(mark int, prefix string) []fakecore.Request {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []fakecore.Request
	for _, q := range r.reqs[mark:] {
		if strings.HasPrefix(q.Path, prefix) {
			out = append(out, q)
		}
	}
	return out
}

// kopts are a kworld sidecar's settings: the world's FeatureOptions plus
// what only the knowledge tests need.
type kopts struct {
	FeatureOptions
	// NoSettle skips the first capabilities call that lets auto native
	// detection reach its legacy verdict.
	NoSettle bool
}

// ksidecar is a running sidecar of a kworld.
type ksidecar struct {
	*Sidecar
}

// start runs a sidecar of the world (World.Features), with the kworld's
// logger.
func (kw *kworld) start(t *testing.T, o kopts) *ksidecar {
	t.Helper()
	log := slog.New(slog.NewJSONHandler(kw.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	f := kw.World.Features(t, o.FeatureOptions)
	sc := &ksidecar{Sidecar: StartSidecar(t, SidecarOptions{CoreURL: kw.CoreURL, Features: f, Logger: log})}
	if (o.NativeDetection == "" || o.NativeDetection == "auto") && !o.NoSettle {
		kw.call(t, "GET", sc.WS(testdb.RouteMulti)+"/knowledge/capabilities", kw.TokenA, nil)
	}
	return sc
}

// kresp is one answer of the sidecar.
type kresp struct {
	Status int
	Header http.Header
	Body   []byte
}

// errorCode returns the "error" member of an error body.
func (r kresp) errorCode() string {
	var e struct {
		Error string `json:"error"`
	}
	_ = json.Unmarshal(r.Body, &e)
	return e.Error
}

// call sends a request through the sidecar. For the knowledge endpoints it
// checks, on every answer, Cache-Control and Content-Type, and for errors the
// {"error","message"} shape and that nothing secret or internal leaks.
func (kw *kworld) call(t *testing.T, method, u, token string, body any) kresp {
	t.Helper()
	code, h, raw := Call(t, kw.c, method, u, token, body)
	if !strings.Contains(u, "/knowledge/") {
		return kresp{code, h, raw}
	}
	if got := h.Get("Cache-Control"); got != "no-store" {
		t.Errorf("%s %s: Cache-Control: got %q; want no-store", method, pathOf(u), got)
	}
	if got := h.Get("Content-Type"); got != "application/json; charset=utf-8" {
		t.Errorf("%s %s: Content-Type: got %q; want application/json; charset=utf-8", method, pathOf(u), got)
	}
	if !json.Valid(raw) {
		t.Errorf("%s %s: body is not JSON: %q", method, pathOf(u), clip(string(raw)))
	}
	if code >= 400 {
		kw.checkErrorBody(t, code, raw)
	}
	return kresp{code, h, raw}
}

func pathOf(u string) string {
	if p, err := url.Parse(u); err == nil {
		return p.Path
	}
	return u
}

// leakMarkers are never part of an error body: SQL, stack traces, addresses.
var leakMarkers = []string{"SELECT", " FROM ", " WHERE ", "bz_", "mysql", "sql:", "tcp(", "127.0.0.1", "localhost",
	"goroutine ", ".go:", "panic", "dial ", "Bearer", "bha_", "svc_"}

func (kw *kworld) checkErrorBody(t *testing.T, code int, raw []byte) {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Errorf("%d error body is not a JSON object: %q", code, clip(string(raw)))
		return
	}
	var e, msg string
	if len(m) != 2 || json.Unmarshal(m["error"], &e) != nil || json.Unmarshal(m["message"], &msg) != nil || e == "" || msg == "" {
		t.Errorf("%d error body: got %s; want exactly {\"error\",\"message\"} non-empty strings", code, raw)
	}
	s := string(raw)
	kw.mu.Lock()
	kw.errorBodies++
	forbidden := append(append(append([]string(nil), kw.secret...), kw.private...), leakMarkers...)
	kw.mu.Unlock()
	for _, f := range forbidden {
		if f != "" && strings.Contains(s, f) {
			t.Errorf("%d error body %s contains %q; want no internal address, credential, SQL or document text", code, raw, clip(f))
		}
	}
}

func strictDecode(t *testing.T, raw []byte, v any) {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		t.Fatalf("decode %q: %v", clip(string(raw)), err)
	}
}

// search posts a search; a 200 answer is decoded strictly and its refs and
// query are registered as never-logged.
func (kw *kworld) search(t *testing.T, sc *ksidecar, route, token string, req map[string]any) (kresp, hostclient.SearchAnswer) {
	t.Helper()
	r, a := postKnowledge[hostclient.SearchAnswer](t, kw, sc, route, token, "search", req)
	if r.Status == 200 {
		if q, ok := req["query"].(string); ok {
			kw.addPrivate(q)
		}
		for _, h := range a.Hints {
			kw.addPrivate(h.Ref)
		}
	}
	return r, a
}

// mustSearch expects 200 and at least one hint titled title; it returns that hint.
func (kw *kworld) mustSearch(t *testing.T, sc *ksidecar, route, token string, req map[string]any, title string) (hostclient.SearchAnswer, hostclient.Hint) {
	t.Helper()
	r, a := kw.search(t, sc, route, token, req)
	if r.Status != 200 {
		t.Fatalf("search %s: got %d %s; want 200", route, r.Status, r.Body)
	}
	for _, h := range a.Hints {
		if h.Title == title {
			return a, h
		}
	}
	t.Fatalf("search %s: no hint titled %q in %s", route, title, r.Body)
	return a, hostclient.Hint{}
}

func (kw *kworld) read(t *testing.T, sc *ksidecar, route, token string, req map[string]any) (kresp, hostclient.ReadAnswer) {
	t.Helper()
	r, a := postKnowledge[hostclient.ReadAnswer](t, kw, sc, route, token, "read", req)
	if r.Status == 200 && a.NextCursor != nil {
		kw.addPrivate(*a.NextCursor)
	}
	return r, a
}

// postKnowledge posts req to route's knowledge endpoint; a 200 answer is
// decoded strictly into A.
func postKnowledge[A any](t *testing.T, kw *kworld, sc *ksidecar, route, token, endpoint string, req map[string]any) (kresp, A) {
	t.Helper()
	r := kw.call(t, "POST", sc.WS(route)+"/knowledge/"+endpoint, token, req)
	var a A
	if r.Status == 200 {
		strictDecode(t, r.Body, &a)
	}
	return r, a
}

// wantError checks an error answer's status and code.
func wantError(t *testing.T, what string, r kresp, status int, code string) {
	t.Helper()
	if r.Status != status || r.errorCode() != code {
		t.Errorf("%s: got %d %s; want %d %s", what, r.Status, clip(string(r.Body)), status, code)
	}
}

const refundQuery = "refunds accepted within days of delivery"

// TestKnowledgeCheckOrder: identity before anything, then the body (search
// and read), then the route gate — through the edge, with a Core that has
// system-info and with an old Core where the catalog gate decides. (SPEC §2
// changed with managed tasks: the body used to come after the route.)
func TestKnowledgeCheckOrder(t *testing.T) {
	big := `{"query":"` + strings.Repeat("a", protocol.MaxRequestBytes) + `"}`
	badRoute := "-bad-route-"
	unknown := fakecore.Token("nobody")
	for _, systemInfo := range []bool{true, false} {
		t.Run(fmt.Sprintf("system-info=%v", systemInfo), func(t *testing.T) {
			kw := newKWorld(t, fakecore.Options{SystemInfo: systemInfo})
			sc := kw.start(t, kopts{})
			// status/code: capabilities (no body) and search/read with a
			// well-formed body; bodyStatus/bodyCode: search/read with an
			// oversized body.
			cases := []struct {
				name         string
				token, route string
				status       int
				code         string
				bodyStatus   int
				bodyCode     string
			}{
				{"bad token, bad route", unknown, badRoute, 401, "unauthorized", 401, "unauthorized"},
				{"no token, unknown route", "", testdb.RouteMissing, 401, "unauthorized", 401, "unauthorized"},
				{"good token, route not allowed", kw.TokenB, testdb.RouteLegacy, 403, "route_not_allowed", 413, "payload_too_large"},
				{"good token, malformed route", kw.TokenB, badRoute, 404, "route_unavailable", 413, "payload_too_large"},
				{"good token, unknown route", kw.TokenA, testdb.RouteMissing, 404, "route_unavailable", 413, "payload_too_large"},
				{"good token, allowed route", kw.TokenA, testdb.RouteMulti, 0, "", 413, "payload_too_large"},
			}
			wellFormed := map[string]string{"search": `{"query":"x"}`, "read": `{"ref":"kr2.AAAA"}`}
			for _, tc := range cases {
				t.Run(tc.name, func(t *testing.T) {
					for _, ep := range []string{"capabilities", "search", "read", "search oversized", "read oversized"} {
						path, oversized := strings.CutSuffix(ep, " oversized")
						status, code := tc.status, tc.code
						if oversized {
							status, code = tc.bodyStatus, tc.bodyCode
						}
						if status == 0 {
							continue
						}
						sysBefore := kw.Core.Calls("/agent-api/")
						kbBefore := kw.Core.Calls("/kb/search")
						var r kresp
						switch {
						case ep == "capabilities":
							r = kw.call(t, "GET", sc.WS(tc.route)+"/knowledge/capabilities", tc.token, nil)
						case oversized:
							r = kw.call(t, "POST", sc.WS(tc.route)+"/knowledge/"+path, tc.token, big)
						default:
							r = kw.call(t, "POST", sc.WS(tc.route)+"/knowledge/"+path, tc.token, wellFormed[path])
						}
						wantError(t, ep, r, status, code)
						if oversized && kw.Core.Calls("/agent-api/") != sysBefore && tc.status != 401 {
							t.Errorf("%s: the route gate was asked for an oversized body", ep)
						}
						if tc.status == 401 && kw.Core.Calls("/agent-api/") != sysBefore {
							t.Errorf("%s: the route gate was asked before identity failed", ep)
						}
						if got := kw.Core.Calls("/kb/search") - kbBefore; got != 0 {
							t.Errorf("%s: %d /kb/search calls; want 0", ep, got)
						}
					}
				})
			}
			// The 403 came from where it should: Core's system-info, or the
			// catalog gate once Core answered that system-info is absent
			// (remembered for the probe interval, so asked once).
			legacy := kw.Core.Calls("/agent-api/v1/workspaces/" + testdb.RouteLegacy + "/system-info")
			all := len(kw.rec.since(0, "/agent-api/v1/workspaces/"))
			switch {
			case systemInfo && legacy == 0:
				t.Errorf("system-info of %s was never asked", testdb.RouteLegacy)
			case !systemInfo && (legacy != 0 || all == 0):
				t.Errorf("old Core: system-info asked %d times for %s, %d Agent API calls; want 0 and at least 1", legacy, testdb.RouteLegacy, all)
			}
		})
	}
}

// TestKnowledgeErrorClasses reaches each error class end to end (429 and
// 503 have their own tests; 409 changes too).
func TestKnowledgeErrorClasses(t *testing.T) {
	clock := testkit.NewClock(time.Now().UTC())
	kw := newKWorld(t, fakecore.Options{SystemInfo: true})
	sc := kw.start(t, kopts{FeatureOptions: FeatureOptions{Now: clock.Now}})
	multi := testdb.RouteMulti
	_, hint := kw.mustSearch(t, sc, multi, kw.TokenA, map[string]any{"query": refundQuery}, testdb.DocRefundTitle)
	_, runHint := kw.mustSearch(t, sc, multi, kw.TokenA, map[string]any{"query": refundQuery, "run_id": testdb.RunActive}, testdb.DocRefundTitle)
	_, bigHint := kw.mustSearch(t, sc, multi, kw.TokenA, map[string]any{"query": testdb.BigDocUnit}, testdb.DocBigTitle)
	r, page := kw.read(t, sc, multi, kw.TokenA, map[string]any{"ref": bigHint.Ref, "max_bytes": 4096})
	if r.Status != 200 || page.NextCursor == nil {
		t.Fatalf("read big: got %d %s; want a page with a cursor", r.Status, clip(string(r.Body)))
	}
	cursor := *page.NextCursor
	tampered := []byte(hint.Ref)
	if i := len(tampered) - 10; tampered[i] == 'A' {
		tampered[i] = 'B'
	} else {
		tampered[i] = 'A'
	}

	cases := []struct {
		name   string
		method string
		route  string
		token  string
		ep     string
		body   any
		status int
		code   string
	}{
		{"malformed json", "POST", multi, kw.TokenA, "search", `{"query":`, 400, "invalid_request"},
		{"not an object", "POST", multi, kw.TokenA, "search", `["q"]`, 400, "invalid_request"},
		{"unknown field", "POST", multi, kw.TokenA, "search", map[string]any{"query": "q", "top_k": 5}, 400, "invalid_request"},
		{"limit out of range", "POST", multi, kw.TokenA, "search", map[string]any{"query": "q", "limit": 4}, 400, "invalid_request"},
		{"empty query", "POST", multi, kw.TokenA, "search", map[string]any{"query": "  "}, 400, "invalid_request"},
		{"bad run_id", "POST", multi, kw.TokenA, "search", map[string]any{"query": "q", "run_id": "run-1"}, 400, "invalid_request"},
		{"max_bytes too small", "POST", multi, kw.TokenA, "read", map[string]any{"ref": hint.Ref, "max_bytes": 4095}, 400, "invalid_request"},
		{"forged ref", "POST", multi, kw.TokenA, "read", map[string]any{"ref": "kr1.forged"}, 400, "knowledge_reference_invalid"},
		{"in-turn ref", "POST", multi, kw.TokenA, "read", map[string]any{"ref": "knowledge:1"}, 400, "knowledge_reference_invalid"},
		{"tampered ref", "POST", multi, kw.TokenA, "read", map[string]any{"ref": string(tampered)}, 400, "knowledge_reference_invalid"},
		{"cursor as ref", "POST", multi, kw.TokenA, "read", map[string]any{"ref": cursor}, 400, "knowledge_reference_invalid"},
		{"cursor of another ref", "POST", multi, kw.TokenA, "read", map[string]any{"ref": hint.Ref, "cursor": cursor}, 400, "knowledge_reference_invalid"},
		{"ref of another session", "POST", multi, kw.TokenB, "read", map[string]any{"ref": hint.Ref}, 400, "knowledge_reference_invalid"},
		{"ref of another route", "POST", testdb.RouteLegacy, kw.TokenA, "read", map[string]any{"ref": hint.Ref}, 400, "knowledge_reference_invalid"},
		{"ref without run read with run", "POST", multi, kw.TokenA, "read", map[string]any{"ref": hint.Ref, "run_id": testdb.RunActive}, 400, "knowledge_reference_invalid"},
		{"ref with run read without run", "POST", multi, kw.TokenA, "read", map[string]any{"ref": runHint.Ref}, 400, "knowledge_reference_invalid"},
		{"no bearer", "GET", multi, "", "capabilities", nil, 401, "unauthorized"},
		{"unknown bearer", "POST", multi, fakecore.Token("stranger"), "search", map[string]any{"query": "q"}, 401, "unauthorized"},
		{"route not allowed", "POST", testdb.RouteLegacy, kw.TokenB, "search", map[string]any{"query": "q"}, 403, "route_not_allowed"},
		{"unknown route", "GET", testdb.RouteMissing, kw.TokenA, "capabilities", nil, 404, "route_unavailable"},
		{"malformed route", "POST", "A", kw.TokenA, "search", map[string]any{"query": "q"}, 404, "route_unavailable"},
		{"foreign run", "POST", multi, kw.TokenA, "search", map[string]any{"query": "q", "run_id": testdb.RunForeign}, 404, "run_not_found"},
		{"missing run", "POST", multi, kw.TokenA, "search", map[string]any{"query": "q", "run_id": testdb.RunMissing}, 404, "run_not_found"},
		{"completed run", "POST", multi, kw.TokenA, "search", map[string]any{"query": "q", "run_id": testdb.RunCompleted}, 409, "run_not_active"},
		{"preparing run", "POST", multi, kw.TokenA, "search", map[string]any{"query": "q", "run_id": testdb.RunPreparing}, 409, "run_not_active"},
		{"oversized", "POST", multi, kw.TokenA, "read", strings.Repeat(" ", protocol.MaxRequestBytes+1), 413, "payload_too_large"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := kw.call(t, tc.method, sc.WS(tc.route)+"/knowledge/"+tc.ep, tc.token, tc.body)
			wantError(t, tc.name, r, tc.status, tc.code)
		})
	}

	t.Run("expiry", func(t *testing.T) {
		// Valid through the 300th second, expired after it; ref and cursor alike.
		clock.Advance(299 * time.Second)
		if r, _ := kw.read(t, sc, multi, kw.TokenA, map[string]any{"ref": bigHint.Ref, "max_bytes": 4096, "cursor": cursor}); r.Status != 200 {
			t.Fatalf("read at +299s: got %d %s; want 200", r.Status, r.Body)
		}
		clock.Advance(2 * time.Second)
		wantError(t, "ref at +301s", kw.call(t, "POST", sc.WS(multi)+"/knowledge/read", kw.TokenA,
			map[string]any{"ref": hint.Ref}), 410, "knowledge_reference_expired")
		wantError(t, "cursor at +301s", kw.call(t, "POST", sc.WS(multi)+"/knowledge/read", kw.TokenA,
			map[string]any{"ref": bigHint.Ref, "cursor": cursor, "max_bytes": 4096}), 410, "knowledge_reference_expired")
	})
	if kw.errorBodies < len(cases) {
		t.Errorf("scanned %d error bodies; want at least %d", kw.errorBodies, len(cases))
	}
}

// TestKnowledgeSearchEndToEnd: statuses, what Core is asked, what is never
// returned, the stale-index re-check and the byte budget on a hostile corpus.
func TestKnowledgeSearchEndToEnd(t *testing.T) {
	kw := newKWorld(t, fakecore.Options{SystemInfo: true})
	sc := kw.start(t, kopts{})
	start := kw.rec.mark()
	runsBefore := kw.Core.RunsCreated()

	t.Run("statuses", func(t *testing.T) {
		cases := []struct {
			route, status string
			kbCalls       int
			wantHint      bool
		}{
			{testdb.RouteMulti, "partial", 2, true}, // faq + manuals; kb-disabled skipped, kb-missing has no row
			{testdb.RouteLegacy, "ok", 1, true},
			{testdb.RouteNull, "disabled", 0, false},
		}
		for _, tc := range cases {
			before := kw.Core.Calls("/kb/search")
			token := kw.TokenA
			if tc.route == testdb.RouteNull {
				token = kw.TokenStar
			}
			r, a := kw.search(t, sc, tc.route, token, map[string]any{"query": refundQuery})
			if r.Status != 200 || a.Status != tc.status {
				t.Errorf("%s: got %d status %q; want 200 %q", tc.route, r.Status, a.Status, tc.status)
			}
			if got := kw.Core.Calls("/kb/search") - before; got != tc.kbCalls {
				t.Errorf("%s: %d /kb/search calls; want %d", tc.route, got, tc.kbCalls)
			}
			if got := len(a.Hints) > 0; got != tc.wantHint {
				t.Errorf("%s: hints present %v; want %v (%s)", tc.route, got, tc.wantHint, r.Body)
			}
			if a.Hints == nil || a.Trust != "reference_only" || a.SchemaVersion != "bailing.agent-knowledge-search.v1" || a.Route != tc.route || a.RunID != nil {
				t.Errorf("%s: envelope %s", tc.route, r.Body)
			}
		}
	})

	t.Run("core requests", func(t *testing.T) {
		cases := []struct {
			route    string
			limit    int
			kbs      []string
			topK     int
			minScore float64
		}{
			// min_score is always -1 (Core's filter off): the sidecar
			// applies the route's threshold itself.
			{testdb.RouteMulti, 3, []string{testdb.KBFAQ, testdb.KBManuals}, 12, -1}, // max(8, 12)
			{testdb.RouteMulti, 1, []string{testdb.KBFAQ, testdb.KBManuals}, 8, -1},  // max(8, 4)
			{testdb.RouteLegacy, 2, []string{testdb.KBFAQ}, 8, -1},                   // max(5, 8)
		}
		for _, tc := range cases {
			m := kw.rec.mark()
			kw.search(t, sc, tc.route, kw.TokenA, map[string]any{"query": refundQuery, "limit": tc.limit})
			calls := kw.rec.since(m, "/kb/search")
			var got []string
			for _, c := range calls {
				if c.Header.Get("Authorization") != "Bearer "+kw.ServiceToken {
					t.Errorf("%s: /kb/search credential is not the sidecar's service token", tc.route)
				}
				var b struct {
					KBIDs    []string `json:"kb_ids"`
					Query    string   `json:"query"`
					TopK     int      `json:"top_k"`
					MinScore float64  `json:"min_score"`
				}
				dec := json.NewDecoder(bytes.NewReader(c.Body))
				dec.DisallowUnknownFields()
				if err := dec.Decode(&b); err != nil || len(b.KBIDs) != 1 {
					t.Errorf("%s: /kb/search body %s; want one kb id and query/top_k/min_score", tc.route, c.Body)
					continue
				}
				got = append(got, b.KBIDs[0])
				if b.Query != refundQuery || b.TopK != tc.topK || b.MinScore != tc.minScore {
					t.Errorf("%s limit %d: got query %q top_k %d min_score %v; want %q %d %v",
						tc.route, tc.limit, b.Query, b.TopK, b.MinScore, refundQuery, tc.topK, tc.minScore)
				}
			}
			slices.Sort(got)
			if !slices.Equal(got, tc.kbs) {
				t.Errorf("%s: searched KBs %v; want one call each for %v", tc.route, got, tc.kbs)
			}
			last, ok := kw.Core.LastRequest("/kb/search")
			if !ok || len(calls) == 0 || !slices.ContainsFunc(calls, func(c fakecore.Request) bool { return bytes.Equal(c.Body, last.Body) }) {
				t.Errorf("%s: the fake's last /kb/search body is not one the recorder saw", tc.route)
			}
		}
	})

	t.Run("no business work", func(t *testing.T) {
		if got := kw.Core.RunsCreated() - runsBefore; got != 0 {
			t.Errorf("runs created: got %d; want 0", got)
		}
		for _, q := range kw.rec.since(start, "") {
			ok := q.Path == "/agent-auth/v1/session" || q.Path == "/kb/search" ||
				strings.HasPrefix(q.Path, "/agent-api/v1/workspaces/") && strings.HasSuffix(q.Path, "/system-info")
			if !ok {
				t.Errorf("Core was asked %s %s; want only session, system-info and /kb/search", q.Method, q.Path)
			}
		}
	})

	t.Run("never returned", func(t *testing.T) {
		// Make Core's index disagree with the catalog: it serves the
		// disabled KB and lists the disabled-KB and foreign-KB documents in
		// faq. The catalog (not Core's index) decides.
		kw.Core.EnableKB(testdb.KBDisabled)
		kw.Core.AddDoc(testdb.KBFAQ, testdb.DocDisabledKB, "Disabled KB doc", "Body in a disabled knowledge base.")
		kw.Core.AddDoc(testdb.KBFAQ, testdb.DocOtherKB, "Foreign KB doc", "Body in a knowledge base no route uses.")
		const q = "body"
		hits := coreHits(t, kw, testdb.KBFAQ, q)
		for _, id := range []int64{testdb.DocEmbedding, testdb.DocDisabledKB, testdb.DocOtherKB} {
			if !slices.Contains(hits, id) {
				t.Fatalf("precondition: Core's faq index does not return doc %d for %q (got %v)", id, q, hits)
			}
		}
		if !slices.Contains(coreHits(t, kw, testdb.KBManuals, q), testdb.DocError) {
			t.Fatalf("precondition: Core's manuals index does not return the error doc")
		}
		m := kw.rec.mark()
		for _, route := range []string{testdb.RouteLegacy, testdb.RouteMulti} {
			r, a := kw.search(t, sc, route, kw.TokenA, map[string]any{"query": q})
			if r.Status != 200 || len(a.Hints) != 0 {
				t.Errorf("%s: got %d %s; want 200 without hints (not ready, disabled-KB and foreign documents)", route, r.Status, r.Body)
			}
		}
		for _, c := range kw.rec.since(m, "/kb/search") {
			if bytes.Contains(c.Body, []byte(testdb.KBDisabled)) || bytes.Contains(c.Body, []byte(testdb.KBMissing)) {
				t.Errorf("/kb/search asked for a disabled or missing KB: %s", c.Body)
			}
		}
	})

	t.Run("stale index", func(t *testing.T) {
		const fresh = "Refund requests now go to a human approver. Delivery dates do not matter."
		kw.addPrivate(fresh)
		// Core's index keeps the old chunk; the database has the new body.
		kw.Core.UpdateDoc(testdb.KBFAQ, testdb.DocRefund, testdb.DocRefundTitle, fresh, true)
		kw.DB.Exec(t, `UPDATE bz_kb_docs SET content = ?, content_hash = MD5(CONCAT(title, CHAR(0), ?)), updated_at = ? WHERE doc_id = ?`,
			fresh, fresh, testdb.DocRefundUpdatedAt.Add(time.Hour), testdb.DocRefund)
		if !slices.Contains(coreHits(t, kw, testdb.KBFAQ, refundQuery), testdb.DocRefund) {
			t.Fatalf("precondition: the stale chunk is not in Core's index")
		}
		r, a := kw.search(t, sc, testdb.RouteLegacy, kw.TokenA, map[string]any{"query": refundQuery})
		for _, h := range a.Hints {
			if h.Title == testdb.DocRefundTitle {
				t.Errorf("stale hit returned: %s", r.Body)
			}
		}
		if r.Status != 200 || a.Status != "ok" {
			t.Errorf("got %d %q; want 200 ok", r.Status, a.Status)
		}
		// Once Core re-indexes, the document is found again, quoting its new text.
		kw.Core.Reindex()
		_, h := kw.mustSearch(t, sc, testdb.RouteLegacy, kw.TokenA, map[string]any{"query": "human approver delivery dates"}, testdb.DocRefundTitle)
		if !strings.Contains(fresh, h.Summary) || h.Revision != corefacts.Revision(testdb.DocRefundTitle, fresh) {
			t.Errorf("re-indexed hint: summary %q revision %s; want an excerpt of the new body and its revision", h.Summary, h.Revision)
		}
	})

	t.Run("budget on a hostile corpus", func(t *testing.T) {
		titles := insertHostileCorpus(t, kw, 50)
		queries := []string{"alpha beta gamma", "delta \"quoted\" <tag> & 知识", "epsilon alpha"}
		sawTruncated, sawHints := false, 0
		for _, route := range []string{testdb.RouteMulti, testdb.RouteLegacy} {
			for _, q := range queries {
				for limit := 1; limit <= 3; limit++ {
					r, a := kw.search(t, sc, route, kw.TokenA, map[string]any{"query": q, "limit": limit})
					if r.Status != 200 {
						t.Fatalf("%s %q: got %d %s", route, q, r.Status, r.Body)
					}
					if len(r.Body) > protocol.SearchMaxBytes {
						t.Errorf("%s %q limit %d: body %d bytes; want ≤ %d", route, q, limit, len(r.Body), protocol.SearchMaxBytes)
					}
					if len(a.Hints) > limit {
						t.Errorf("%s %q: %d hints; want ≤ %d", route, q, len(a.Hints), limit)
					}
					sawHints += len(a.Hints)
					sawTruncated = sawTruncated || a.Truncated
					if !a.Truncated && len(a.Hints) < limit {
						t.Errorf("%s %q limit %d: %d hints and truncated false, but more documents match", route, q, limit, len(a.Hints))
					}
					for i, h := range a.Hints {
						if _, ok := titles[h.Title]; !ok {
							t.Errorf("hint title %q is not a stored title (titles are never cut)", clip(h.Title))
						}
						if len(h.Ref) > 512 || !utf8.ValidString(h.Summary) {
							t.Errorf("hint %d: ref %d bytes, summary valid UTF-8 %v", i, len(h.Ref), utf8.ValidString(h.Summary))
						}
						if i > 0 && h.Score > a.Hints[i-1].Score {
							t.Errorf("hints not ordered by score: %v after %v", h.Score, a.Hints[i-1].Score)
						}
					}
				}
			}
		}
		if sawHints == 0 || !sawTruncated {
			t.Errorf("hostile corpus: %d hints, truncated seen %v; want hints and at least one truncation", sawHints, sawTruncated)
		}
	})
}

// coreHits asks the fake Core directly (service token) which documents
// kbID returns for q, with Core's defaults.
func coreHits(t *testing.T, kw *kworld, kbID, q string) []int64 {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"kb_ids": []string{kbID}, "query": q, "top_k": 20, "min_score": 0.01})
	req := httptest.NewRequest("POST", "/kb/search", bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+kw.ServiceToken)
	rw := httptest.NewRecorder()
	kw.Core.ServeHTTP(rw, req)
	var res struct {
		Hits []struct {
			DocID int64 `json:"doc_id"`
		} `json:"hits"`
	}
	if rw.Code != 200 || json.Unmarshal(rw.Body.Bytes(), &res) != nil {
		t.Fatalf("fake /kb/search: %d %s", rw.Code, rw.Body)
	}
	var ids []int64
	for _, h := range res.Hits {
		ids = append(ids, h.DocID)
	}
	return ids
}

// insertHostileCorpus adds n ready documents to faq and manuals, in the
// database and in the fake Core, with titles and bodies made to be expensive
// on the wire (quotes, backslashes, HTML characters, U+2028, control
// characters, emoji, CJK, Markdown images). It returns the stored titles.
func insertHostileCorpus(t *testing.T, kw *kworld, n int) map[string]bool {
	t.Helper()
	pieces := []string{`"`, `\`, "<&>", "\u2028", "\u2029", "\x01", "😀", "知", "\t", "é"}
	titles := map[string]bool{}
	for i := 0; i < n; i++ {
		p := pieces[i%len(pieces)]
		// Up to VARCHAR(191) characters.
		title := fmt.Sprintf("T%02d ", i) + strings.Repeat(p, (187)/utf8.RuneCountInString(p))
		if r := []rune(title); len(r) > 191 {
			title = string(r[:191])
		}
		var b strings.Builder
		fmt.Fprintf(&b, "# Heading %d\n\nalpha beta gamma %s delta \"quoted\" <tag> & 知识 epsilon.\n\n", i, strings.Repeat(p, 40))
		b.WriteString("![diagram \"x\"](http://img.example/a.png) alpha beta gamma after the image.\n\n")
		for j := 0; j < 6; j++ {
			fmt.Fprintf(&b, "Paragraph %d: alpha %s beta \\ gamma \"%d\" <b>bold</b> & more text to fill the chunk. 知识库 内容。\n\n", j, strings.Repeat(p, 20), j)
		}
		content := b.String()
		kb := testdb.KBFAQ
		if i%2 == 1 {
			kb = testdb.KBManuals
		}
		id := int64(1000 + i)
		kw.DB.Exec(t, `INSERT INTO bz_kb_docs (doc_id, kb_id, title, content, content_hash, status, chunk_count, created_at, updated_at)
			VALUES (?, ?, ?, ?, MD5(CONCAT(?, CHAR(0), ?)), 'ready', 1, UTC_TIMESTAMP(), UTC_TIMESTAMP())`,
			id, kb, title, content, title, content)
		kw.Core.AddDoc(kb, id, title, content)
		kw.addPrivate(content[strings.Index(content, "alpha"):])
		titles[title] = true
	}
	return titles
}

// TestKnowledgeReadEndToEnd pages through the 300 000-character document at
// several max_bytes and reads a small document in one page.
func TestKnowledgeReadEndToEnd(t *testing.T) {
	kw := newKWorld(t, fakecore.Options{SystemInfo: true})
	sc := kw.start(t, kopts{})
	content := testdb.BigDocContent()
	want := content[:protocol.ReadChainMaxBytes]
	if !utf8.ValidString(want) {
		t.Fatal("precondition: the chain budget does not end on a character boundary of the fixture")
	}
	for _, maxBytes := range []int{4096, 7001, 0, 32768} { // 0: default 16384
		t.Run(fmt.Sprintf("max_bytes=%d", maxBytes), func(t *testing.T) {
			_, h := kw.mustSearch(t, sc, testdb.RouteMulti, kw.TokenA, map[string]any{"query": testdb.BigDocUnit, "limit": 1}, testdb.DocBigTitle)
			limit := maxBytes
			if limit == 0 {
				limit = protocol.ReadDefaultBytes
			}
			var got strings.Builder
			var cursor *string
			pages := 0
			for {
				req := map[string]any{"ref": h.Ref}
				if maxBytes != 0 {
					req["max_bytes"] = maxBytes
				}
				if cursor != nil {
					req["cursor"] = *cursor
				}
				r, p := kw.read(t, sc, testdb.RouteMulti, kw.TokenA, req)
				if r.Status != 200 {
					t.Fatalf("page %d: got %d %s", pages+1, r.Status, r.Body)
				}
				pages++
				if len(r.Body) > limit {
					t.Errorf("page %d: body %d bytes; want ≤ %d", pages, len(r.Body), limit)
				}
				if p.TotalContentBytes != int64(len(content)) || p.ReadChainMaxBytes != protocol.ReadChainMaxBytes ||
					p.Title != testdb.DocBigTitle || p.Ref != h.Ref || p.Revision != h.Revision || p.Trust != "reference_only" {
					t.Errorf("page %d envelope: total %d chain %d title %q", pages, p.TotalContentBytes, p.ReadChainMaxBytes, p.Title)
				}
				got.WriteString(p.Content)
				if p.NextCursor == nil {
					if !p.BudgetExhausted || !p.Truncated {
						t.Errorf("last page: budget_exhausted %v truncated %v; want true true", p.BudgetExhausted, p.Truncated)
					}
					break
				}
				if !p.Truncated || p.BudgetExhausted {
					t.Errorf("page %d: truncated %v budget_exhausted %v; want true false", pages, p.Truncated, p.BudgetExhausted)
				}
				if len(r.Body) < limit-64 {
					t.Errorf("page %d: body %d bytes; want the page filled close to %d", pages, len(r.Body), limit)
				}
				cursor = p.NextCursor
				if pages > 200 {
					t.Fatal("more than 200 pages")
				}
			}
			if got.String() != want {
				t.Errorf("pages concatenate to %d bytes; want exactly the first %d bytes of the content", got.Len(), len(want))
			}
			if atLeast := protocol.ReadChainMaxBytes / limit; pages < atLeast {
				t.Errorf("%d pages; want at least %d", pages, atLeast)
			}
		})
	}
	t.Run("small document in one page", func(t *testing.T) {
		_, h := kw.mustSearch(t, sc, testdb.RouteLegacy, kw.TokenA, map[string]any{"query": refundQuery}, testdb.DocRefundTitle)
		r, p := kw.read(t, sc, testdb.RouteLegacy, kw.TokenA, map[string]any{"ref": h.Ref, "max_bytes": 4096})
		if r.Status != 200 || p.Content != testdb.DocRefundContent || p.NextCursor != nil || p.Truncated || p.BudgetExhausted ||
			p.TotalContentBytes != int64(len(testdb.DocRefundContent)) {
			t.Errorf("got %d %s; want the whole body, next_cursor null, not truncated", r.Status, r.Body)
		}
		if !bytes.Contains(r.Body, []byte(`"next_cursor":null`)) {
			t.Errorf("next_cursor is not null on the wire: %s", r.Body)
		}
	})
}

// TestKnowledgeChangesBetweenSearchAndRead mutates the database (and keeps
// the fake Core in step) after a successful search and read.
func TestKnowledgeChangesBetweenSearchAndRead(t *testing.T) {
	later := testdb.DocRefundUpdatedAt.Add(time.Hour)
	cases := []struct {
		name   string
		runID  string
		change func(t *testing.T, kw *kworld)
		status int
		code   string
	}{
		{"content updated", "", func(t *testing.T, kw *kworld) {
			const body = "Refunds are accepted within 60 days of delivery."
			kw.DB.Exec(t, `UPDATE bz_kb_docs SET content = ?, content_hash = MD5(CONCAT(title, CHAR(0), ?)), updated_at = ? WHERE doc_id = ?`,
				body, body, later, testdb.DocRefund)
			kw.Core.UpdateDoc(testdb.KBFAQ, testdb.DocRefund, testdb.DocRefundTitle, body, false)
		}, 409, "knowledge_changed"},
		{"title updated", "", func(t *testing.T, kw *kworld) {
			kw.DB.Exec(t, `UPDATE bz_kb_docs SET title = 'Refund window (new)', updated_at = ? WHERE doc_id = ?`, later, testdb.DocRefund)
			kw.Core.UpdateDoc(testdb.KBFAQ, testdb.DocRefund, "Refund window (new)", testdb.DocRefundContent, false)
		}, 409, "knowledge_changed"},
		{"document deleted", "", func(t *testing.T, kw *kworld) {
			kw.DB.Exec(t, `DELETE FROM bz_kb_docs WHERE doc_id = ?`, testdb.DocRefund)
			kw.Core.RemoveDoc(testdb.KBFAQ, testdb.DocRefund, false)
		}, 409, "knowledge_changed"},
		{"document re-embedding", "", func(t *testing.T, kw *kworld) {
			kw.DB.Exec(t, `UPDATE bz_kb_docs SET status = 'embedding' WHERE doc_id = ?`, testdb.DocRefund)
		}, 409, "knowledge_changed"},
		{"knowledge base disabled", "", func(t *testing.T, kw *kworld) {
			kw.DB.Exec(t, `UPDATE bz_kb_bases SET enabled = 0 WHERE kb_id = ?`, testdb.KBFAQ)
			kw.Core.DisableKB(testdb.KBFAQ)
		}, 409, "knowledge_changed"},
		{"knowledge base deleted", "", func(t *testing.T, kw *kworld) {
			kw.DB.Exec(t, `DELETE FROM bz_kb_bases WHERE kb_id = ?`, testdb.KBFAQ)
			kw.Core.DeleteKB(testdb.KBFAQ)
		}, 409, "knowledge_changed"},
		{"route min_score changed", "", func(t *testing.T, kw *kworld) {
			kw.DB.Exec(t, `UPDATE bz_routes SET knowledge = ? WHERE route_key = ?`,
				`{"kb_ids":["faq","manuals","kb-disabled","kb-missing"],"top_k":8,"min_score":0.55,"inject":"doc","max_docs":2,"page_boost":true}`, testdb.RouteMulti)
		}, 409, "knowledge_scope_changed"},
		{"route kb_ids changed", "", func(t *testing.T, kw *kworld) {
			kw.DB.Exec(t, `UPDATE bz_routes SET knowledge = ? WHERE route_key = ?`,
				`{"kb_ids":["faq","manuals"],"top_k":8,"min_score":0.5,"inject":"doc","max_docs":2,"page_boost":true}`, testdb.RouteMulti)
		}, 409, "knowledge_scope_changed"},
		{"route knowledge removed", "", func(t *testing.T, kw *kworld) {
			kw.DB.Exec(t, `UPDATE bz_routes SET knowledge = NULL WHERE route_key = ?`, testdb.RouteMulti)
		}, 409, "knowledge_scope_changed"},
		{"run completed", testdb.RunActive, func(t *testing.T, kw *kworld) {
			kw.DB.Exec(t, `UPDATE bz_agent_client_runs SET status = 'completed', completed_at = UTC_TIMESTAMP() WHERE run_id = ?`, testdb.RunActive)
		}, 409, "run_not_active"},
		{"session revoked at Core", "", func(t *testing.T, kw *kworld) {
			kw.Core.RevokeSession(kw.TokenA)
		}, 401, "unauthorized"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			kw := newKWorld(t, fakecore.Options{SystemInfo: true})
			sc := kw.start(t, kopts{})
			req := map[string]any{"query": refundQuery}
			if tc.runID != "" {
				req["run_id"] = tc.runID
			}
			_, h := kw.mustSearch(t, sc, testdb.RouteMulti, kw.TokenA, req, testdb.DocRefundTitle)
			read := map[string]any{"ref": h.Ref}
			if tc.runID != "" {
				read["run_id"] = tc.runID
			}
			if r, _ := kw.read(t, sc, testdb.RouteMulti, kw.TokenA, read); r.Status != 200 {
				t.Fatalf("read before the change: got %d %s; want 200", r.Status, r.Body)
			}
			tc.change(t, kw)
			wantError(t, "read after the change", kw.call(t, "POST", sc.WS(testdb.RouteMulti)+"/knowledge/read", kw.TokenA, read), tc.status, tc.code)
		})
	}

	t.Run("change between pages", func(t *testing.T) {
		kw := newKWorld(t, fakecore.Options{SystemInfo: true})
		sc := kw.start(t, kopts{})
		_, h := kw.mustSearch(t, sc, testdb.RouteMulti, kw.TokenA, map[string]any{"query": testdb.BigDocUnit}, testdb.DocBigTitle)
		r, p := kw.read(t, sc, testdb.RouteMulti, kw.TokenA, map[string]any{"ref": h.Ref, "max_bytes": 8192})
		if r.Status != 200 || p.NextCursor == nil {
			t.Fatalf("first page: got %d; want 200 with a cursor", r.Status)
		}
		// Same length, one character different, a second later.
		kw.DB.Exec(t, `UPDATE bz_kb_docs SET content = CONCAT('X', SUBSTRING(content, 2)), updated_at = updated_at + INTERVAL 1 SECOND WHERE doc_id = ?`, testdb.DocBig)
		wantError(t, "next page after the change", kw.call(t, "POST", sc.WS(testdb.RouteMulti)+"/knowledge/read", kw.TokenA,
			map[string]any{"ref": h.Ref, "max_bytes": 8192, "cursor": *p.NextCursor}), 409, "knowledge_changed")
	})
}

// signingKey returns an explicit KNOWLEDGE_SIDECAR_SIGNING_KEYS entry.
func signingKey(t *testing.T, id string) string {
	t.Helper()
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return id + ":" + base64.StdEncoding.EncodeToString(b)
}

// TestKnowledgeSigningKeys: replicas sharing keys verify each other's refs
// and cursors; another key does not; rotation keeps old refs readable.
func TestKnowledgeSigningKeys(t *testing.T) {
	kw := newKWorld(t, fakecore.Options{SystemInfo: true})
	k1, k2 := signingKey(t, "k1"), signingKey(t, "k2")
	old, next := signingKey(t, "old"), signingKey(t, "new")
	for _, k := range []string{k1, k2, old, next} {
		kw.addSecret(k[strings.Index(k, ":")+1:])
	}
	start := func(spec string) *ksidecar {
		return kw.start(t, kopts{FeatureOptions: FeatureOptions{SigningKeys: spec}})
	}
	a, b, other := start(k1), start(k1), start(k2)
	oldOnly, rotated := start(old), start(next+","+old)
	dflt1, dflt2 := start(""), start("")

	// issue searches DocBig on from and returns the ref and the first page's cursor.
	issue := func(t *testing.T, from *ksidecar) (string, string) {
		t.Helper()
		_, h := kw.mustSearch(t, from, testdb.RouteMulti, kw.TokenA, map[string]any{"query": testdb.BigDocUnit, "limit": 1}, testdb.DocBigTitle)
		r, p := kw.read(t, from, testdb.RouteMulti, kw.TokenA, map[string]any{"ref": h.Ref, "max_bytes": 4096})
		if r.Status != 200 || p.NextCursor == nil {
			t.Fatalf("first page: got %d; want 200 with a cursor", r.Status)
		}
		return h.Ref, *p.NextCursor
	}
	cases := []struct {
		name     string
		from, to *ksidecar
		ok       bool
	}{
		{"same explicit key", a, b, true},
		{"same explicit key, other way", b, a, true},
		{"another key", a, other, false},
		{"another key, other way", other, a, false},
		{"rotation: new,old reads old", oldOnly, rotated, true},
		{"rotation: old-only cannot read new", rotated, oldOnly, false},
		{"derived from the same service token", dflt1, dflt2, true},
		{"derived key vs explicit key", dflt1, a, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ref, cursor := issue(t, tc.from)
			for _, req := range []map[string]any{
				{"ref": ref, "max_bytes": 4096},
				{"ref": ref, "max_bytes": 4096, "cursor": cursor},
			} {
				r, p := kw.read(t, tc.to, testdb.RouteMulti, kw.TokenA, req)
				if tc.ok {
					if r.Status != 200 || p.Content == "" {
						t.Errorf("read (cursor %v): got %d %s; want 200", req["cursor"] != nil, r.Status, clip(string(r.Body)))
					}
					continue
				}
				wantError(t, fmt.Sprintf("read (cursor %v)", req["cursor"] != nil), r, 400, "knowledge_reference_invalid")
			}
		})
	}
}

// TestKnowledgeRateLimit: per-session token bucket end to end.
func TestKnowledgeRateLimit(t *testing.T) {
	clock := testkit.NewClock(time.Now().UTC()) // frozen: no refill between the requests
	kw := newKWorld(t, fakecore.Options{SystemInfo: true})
	sc := kw.start(t, kopts{FeatureOptions: FeatureOptions{RateLimit: 1, RateBurst: 2, Now: clock.Now, NativeDetection: "never"}})
	search := func(token string) kresp {
		return kw.call(t, "POST", sc.WS(testdb.RouteMulti)+"/knowledge/search", token, map[string]any{"query": refundQuery})
	}
	for i := 1; i <= 2; i++ {
		if r := search(kw.TokenA); r.Status != 200 {
			t.Fatalf("session A request %d: got %d %s; want 200", i, r.Status, r.Body)
		}
	}
	kbBefore := kw.Core.Calls("/kb/search")
	wantError(t, "session A request 3", search(kw.TokenA), 429, "rate_limited")
	wantError(t, "session A capabilities", kw.call(t, "GET", sc.WS(testdb.RouteMulti)+"/knowledge/capabilities", kw.TokenA, nil), 429, "rate_limited")
	if got := kw.Core.Calls("/kb/search") - kbBefore; got != 0 {
		t.Errorf("rate-limited requests reached /kb/search %d times; want 0", got)
	}
	if r := search(kw.TokenB); r.Status != 200 {
		t.Errorf("session B: got %d %s; want 200 (its own bucket)", r.Status, r.Body)
	}
	clock.Advance(time.Second)
	if r := search(kw.TokenA); r.Status != 200 {
		t.Errorf("session A after 1s: got %d %s; want 200 (one token refilled)", r.Status, r.Body)
	}
}

// TestKnowledgeKeepAliveAfterEarlyAnswer: answers decided before the body is
// read (401, 403, 413) leave the keep-alive connection usable; an oversized
// body is not read past the limit, the connection is closed instead. (With
// full duplex on, net/http no longer drains unread bodies, and about one
// request in ten on a reused connection was reset.)
func TestKnowledgeKeepAliveAfterEarlyAnswer(t *testing.T) {
	kw := newKWorld(t, fakecore.Options{SystemInfo: true})
	sc := kw.start(t, kopts{})
	small := map[string]any{"query": refundQuery}
	big := strings.Repeat(" ", 64<<10)
	cases := []struct {
		name   string
		token  string
		route  string
		body   any
		status int
	}{
		{"unauthenticated", fakecore.Token("stranger"), testdb.RouteMulti, small, 401},
		{"route not allowed", kw.TokenB, testdb.RouteLegacy, nil, 403}, // a well-formed body per endpoint
		{"oversized", kw.TokenA, testdb.RouteMulti, big, 413},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for i := 0; i < 60; i++ {
				for _, ep := range []string{"search", "read"} {
					body := tc.body
					if body == nil {
						body = map[string]any{"search": small, "read": map[string]any{"ref": "kr2.AAAA"}}[ep]
					}
					r := kw.call(t, "POST", sc.WS(tc.route)+"/knowledge/"+ep, tc.token, body)
					if r.Status != tc.status {
						t.Fatalf("request %d %s: got %d; want %d", i, ep, r.Status, tc.status)
					}
				}
			}
		})
	}
}
