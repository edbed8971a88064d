package knowledge

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bailinghub/knowledge-sidecar/corefacts"
	"github.com/bailinghub/knowledge-sidecar/internal/testkit"
)

// Small in-memory fakes of the three ports. Each is safe for concurrent use.

type fakeIdentity struct {
	mu       sync.Mutex
	sessions map[string]corefacts.Session // by Authorization header
	err      error                        // Session fails with err when set
	sysInfo  map[string]error             // SystemInfo answer per route (absent: nil)
	calls    int
}

func (f *fakeIdentity) Session(_ context.Context, authorization string) (corefacts.Session, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	if f.err != nil {
		return corefacts.Session{}, f.err
	}
	s, ok := f.sessions[authorization]
	if !ok {
		return corefacts.Session{}, corefacts.ErrUnauthorized
	}
	return s, nil
}

func (f *fakeIdentity) SystemInfo(_ context.Context, _ string, route corefacts.RouteKey) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.sysInfo[route.String()]
}

type searchCall struct {
	KB    string
	Query string
	TopK  int
}

type fakeRetriever struct {
	mu       sync.Mutex
	hits     map[string][]corefacts.Hit
	errs     map[string]error
	hang     map[string]bool // block until the context ends
	barrier  *sync.WaitGroup // when set, every call waits for all others
	unusable bool
	calls    []searchCall
}

// SearchKB answers hits[kb] as Core's unfiltered top k (the fake keeps the
// order given; a KB absent from hits answers no hit at all).
func (f *fakeRetriever) SearchKB(ctx context.Context, kb, query string, topK int) ([]corefacts.Hit, error) {
	f.mu.Lock()
	f.calls = append(f.calls, searchCall{kb, query, topK})
	hits, err, hang, barrier := f.hits[kb], f.errs[kb], f.hang[kb], f.barrier
	f.mu.Unlock()
	if barrier != nil {
		barrier.Done()
		done := make(chan struct{})
		go func() { barrier.Wait(); close(done) }()
		select {
		case <-done:
		case <-ctx.Done():
			return nil, fmt.Errorf("%w: %w", corefacts.ErrUnavailable, ctx.Err())
		}
	}
	if hang {
		<-ctx.Done()
		return nil, fmt.Errorf("%w: %w", corefacts.ErrUnavailable, ctx.Err())
	}
	if err != nil {
		return nil, err
	}
	return append([]corefacts.Hit(nil), hits...), nil
}

func (f *fakeRetriever) Usable() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return !f.unusable
}

func (f *fakeRetriever) callList() []searchCall {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]searchCall(nil), f.calls...)
}

type fakeCatalog struct {
	mu        sync.Mutex
	routes    map[string]corefacts.Route
	kbs       map[string]bool
	docs      map[int64]corefacts.Document
	runs      map[string]corefacts.Run
	gate      map[string]error // RouteGate answer per route
	down      bool             // every call fails with ErrUnavailable
	docsDown  bool             // Documents/Document fail
	unusable  bool
	docsRead  []int64           // every id asked of Documents, in order
	docCalls  int               // Documents calls
	metaCalls int               // Route and KBEnabled calls
	readyAsks [][]string        // every ReadyKBs argument, in order
	readyDown bool              // ReadyKBs fails
	storedAs  map[string]string // KBs: a KB id as stored, when it differs from the route's spelling
	onRoute   func()            // called by Route, outside the lock
}

var errCatalogDown = fmt.Errorf("%w: test catalog down", corefacts.ErrUnavailable)

func (f *fakeCatalog) Route(_ context.Context, key corefacts.RouteKey) (corefacts.Route, error) {
	if f.onRoute != nil {
		f.onRoute()
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.metaCalls++
	if f.down {
		return corefacts.Route{}, errCatalogDown
	}
	r, ok := f.routes[key.String()]
	if !ok {
		return corefacts.Route{}, corefacts.ErrNotFound
	}
	if r.Knowledge != nil {
		k := *r.Knowledge
		k.KBIDs = append([]string(nil), k.KBIDs...)
		r.Knowledge = &k
	}
	return r, nil
}

func (f *fakeCatalog) RouteGate(_ context.Context, route corefacts.RouteKey, _ corefacts.Session) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down {
		return errCatalogDown
	}
	return f.gate[route.String()]
}

func (f *fakeCatalog) KBEnabled(_ context.Context, ids []string) (map[string]bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.metaCalls++
	if f.down {
		return nil, errCatalogDown
	}
	out := map[string]bool{}
	for _, id := range ids {
		if on, ok := f.kbs[id]; ok {
			out[id] = on
		}
	}
	return out, nil
}

// KBs: the fake's ids are stored as configured; storedAs overrides the
// spelling of some.
func (f *fakeCatalog) KBs(ctx context.Context, ids []string) (map[string]corefacts.KB, error) {
	flags, err := f.KBEnabled(ctx, ids)
	if err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[string]corefacts.KB{}
	for id, on := range flags {
		stored := id
		if s, ok := f.storedAs[id]; ok {
			stored = s
		}
		out[id] = corefacts.KB{ID: stored, Enabled: on}
	}
	return out, nil
}

// ReadyKBs: the asked KBs that exist and hold a document with status ready.
func (f *fakeCatalog) ReadyKBs(_ context.Context, ids []string) (map[string]bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.readyAsks = append(f.readyAsks, append([]string(nil), ids...))
	if f.down || f.readyDown {
		return nil, errCatalogDown
	}
	out := map[string]bool{}
	for _, id := range ids {
		if _, ok := f.kbs[id]; !ok {
			continue
		}
		for _, d := range f.docs {
			if d.KBID == id && d.Status == corefacts.StatusReady {
				out[id] = true
			}
		}
	}
	return out, nil
}

func (f *fakeCatalog) readyCalls() [][]string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([][]string(nil), f.readyAsks...)
}

func (f *fakeCatalog) Documents(_ context.Context, ids []int64, kbIDs []string) (map[int64]corefacts.Document, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down || f.docsDown {
		return nil, errCatalogDown
	}
	out := map[int64]corefacts.Document{}
	f.docsRead = append(f.docsRead, ids...)
	f.docCalls++
	for _, id := range ids {
		if d, ok := f.docs[id]; ok && contains(kbIDs, d.KBID) {
			out[id] = d
		}
	}
	return out, nil
}

func (f *fakeCatalog) Document(_ context.Context, id int64, kbIDs []string) (corefacts.Document, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down || f.docsDown {
		return corefacts.Document{}, errCatalogDown
	}
	d, ok := f.docs[id]
	if !ok || !contains(kbIDs, d.KBID) {
		return corefacts.Document{}, corefacts.ErrNotFound
	}
	return d, nil
}

func (f *fakeCatalog) Run(_ context.Context, id string) (corefacts.Run, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down {
		return corefacts.Run{}, errCatalogDown
	}
	r, ok := f.runs[id]
	if !ok {
		return corefacts.Run{}, corefacts.ErrNotFound
	}
	return r, nil
}

func (f *fakeCatalog) Usable() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return !f.unusable && !f.down
}

// setDoc stores a document with its revision computed like the catalog does.
func (f *fakeCatalog) setDoc(d corefacts.Document) {
	f.mu.Lock()
	defer f.mu.Unlock()
	d.Revision = corefacts.Revision(d.Title, d.Content)
	if d.Status == "" {
		d.Status = "ready"
	}
	f.docs[d.DocID] = d
}

// editDoc changes document id with fn and stores it as setDoc does.
func (f *fakeCatalog) editDoc(id int64, fn func(d *corefacts.Document)) {
	f.mu.Lock()
	d := f.docs[id]
	f.mu.Unlock()
	fn(&d)
	f.setDoc(d)
}

func (f *fakeCatalog) edit(fn func(c *fakeCatalog)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn(f)
}

// editKnowledge changes a copy of routeKey's knowledge configuration with
// fn (call it inside edit).
func (f *fakeCatalog) editKnowledge(fn func(k *corefacts.KnowledgeConfig)) {
	rt := f.routes[routeKey]
	k := *rt.Knowledge
	fn(&k)
	rt.Knowledge = &k
	f.routes[routeKey] = rt
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// ---- test environment ----

const (
	tokA      = "Bearer bha_session_a_0123456789012345678901234567890"
	tokB      = "Bearer bha_session_b_0123456789012345678901234567890"
	tokC      = "Bearer bha_session_c_same_session_other_client_000000"
	routeKey  = "order-assistant"
	routeNone = "plain-route"
	routeTwin = "twin-route" // same knowledge config as routeKey
	runA      = "6f1c2b9e-7a1d-4c3e-9b8a-2d4e6f8a0b1c"
	runB      = "0a0b0c0d-1111-4222-8333-444455556666"
	runDone   = "9e8d7c6b-5a49-4382-9716-aabbccddeeff"
	runPrep   = "12345678-aaaa-4bbb-8ccc-ddddeeeeffff"
	runOther  = "fedcba98-7654-4321-8fed-cba987654321"
	docRefund = int64(101)
	docShip   = int64(102)
	docPolicy = int64(201)
)

var (
	t0             = time.Date(2026, 9, 1, 12, 0, 0, 0, time.UTC)
	refundContent  = "# 退款规则\n\n退款窗口设为0时，订单不可退款。\n\n![流程图](https://cdn.example/flow.png)\n\n超过窗口的退款需要主管审批。"
	shipContent    = "Shipping takes 3-5 days.\n\nExpress shipping takes 1 day."
	policyContent  = "Policy: refunds over 1000 need two approvals."
	sessionA       = corefacts.Session{SessionID: "sess-a", ClientAppID: "app-1", Principal: corefacts.Principal{ID: "user-42", Tenant: "t7"}, OnBehalfOf: "t7:user-42", AllowedRoutes: []string{routeKey}}
	sessionB       = corefacts.Session{SessionID: "sess-b", ClientAppID: "app-1", Principal: corefacts.Principal{ID: "user-43"}, OnBehalfOf: "t7:user-43"}
	sessionC       = corefacts.Session{SessionID: "sess-a", ClientAppID: "app-2", Principal: corefacts.Principal{ID: "user-42", Tenant: "t7"}, OnBehalfOf: "t7:user-42"}
	defaultKBConfg = corefacts.KnowledgeConfig{KBIDs: []string{"faq", "policy"}, TopK: 5, MinScore: 0.35, Inject: "chunk", MaxDocs: 4}
)

type env struct {
	t   testing.TB
	id  *fakeIdentity
	ret *fakeRetriever
	cat *fakeCatalog
	svc *Service
	// clock is the service's clock, standing at t0 until a test moves it.
	clock *testkit.Clock
}

func testKeys(t testing.TB) *Keyring {
	t.Helper()
	k, err := NewKeyring("k1:"+strings.Repeat("QUJD", 11), "")
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func newEnv(t testing.TB, opts ...func(*Options)) *env {
	t.Helper()
	e := &env{t: t, clock: testkit.NewClock(t0)}
	kc := defaultKBConfg
	twin := defaultKBConfg
	e.id = &fakeIdentity{
		sessions: map[string]corefacts.Session{tokA: sessionA, tokB: sessionB, tokC: sessionC},
		sysInfo:  map[string]error{},
	}
	e.ret = &fakeRetriever{
		hits: map[string][]corefacts.Hit{
			"faq": {
				{KBID: "faq", DocID: docRefund, Seq: 0, Title: "退款规则", Content: "# 退款规则\n退款窗口设为0时，订单不可退款。", Score: 0.82},
				{KBID: "faq", DocID: docShip, Seq: 0, Title: "Shipping", Content: "Shipping takes 3-5 days.", Score: 0.61},
				{KBID: "faq", DocID: docRefund, Seq: 1, Title: "退款规则", Content: "[图：流程图]\n超过窗口的退款需要主管审批。", Score: 0.55},
			},
			"policy": {
				{KBID: "policy", DocID: docPolicy, Seq: 0, Title: "Policy", Content: "Policy: refunds over 1000 need two approvals.", Score: 0.7},
			},
		},
		errs: map[string]error{}, hang: map[string]bool{},
	}
	e.cat = &fakeCatalog{
		routes: map[string]corefacts.Route{
			routeKey:    {Key: routeKey, Enabled: true, Knowledge: &kc},
			routeTwin:   {Key: routeTwin, Enabled: true, Knowledge: &twin},
			routeNone:   {Key: routeNone, Enabled: true},
			"off-route": {Key: "off-route", Enabled: false, Knowledge: &kc},
		},
		kbs:  map[string]bool{"faq": true, "policy": true},
		docs: map[int64]corefacts.Document{},
		runs: map[string]corefacts.Run{
			runA:     {RunID: runA, SessionID: "sess-a", ClientAppID: "app-1", RouteKey: routeKey, Status: "context_ready"},
			runB:     {RunID: runB, SessionID: "sess-a", ClientAppID: "app-1", RouteKey: routeKey, Status: "context_ready"},
			runDone:  {RunID: runDone, SessionID: "sess-a", ClientAppID: "app-1", RouteKey: routeKey, Status: "completed", CompletedAt: &t0},
			runPrep:  {RunID: runPrep, SessionID: "sess-a", ClientAppID: "app-1", RouteKey: routeKey, Status: "preparing"},
			runOther: {RunID: runOther, SessionID: "sess-b", ClientAppID: "app-1", RouteKey: routeKey, Status: "context_ready"},
		},
		gate: map[string]error{},
	}
	e.cat.setDoc(corefacts.Document{DocMeta: corefacts.DocMeta{DocID: docRefund, KBID: "faq", Title: "退款规则"}, Content: refundContent})
	e.cat.setDoc(corefacts.Document{DocMeta: corefacts.DocMeta{DocID: docShip, KBID: "faq", Title: "Shipping"}, Content: shipContent})
	e.cat.setDoc(corefacts.Document{DocMeta: corefacts.DocMeta{DocID: docPolicy, KBID: "policy", Title: "Policy"}, Content: policyContent})
	o := Options{Identity: e.id, Retriever: e.ret, Catalog: e.cat, Keys: testKeys(t), Now: e.clock.Now}
	for _, fn := range opts {
		fn(&o)
	}
	svc, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	e.svc = svc
	return e
}

// call invokes one endpoint and decodes a success body.
func (e *env) call(endpoint, auth, route, body string) (map[string]any, []byte, *Error) {
	e.t.Helper()
	var (
		out []byte
		err error
	)
	ctx := context.Background()
	switch endpoint {
	case "capabilities":
		out, err = e.svc.Capabilities(ctx, auth, testkit.RouteKey(route))
	case "search":
		out, err = e.svc.Search(ctx, auth, testkit.RouteKey(route), strings.NewReader(body))
	case "read":
		out, err = e.svc.Read(ctx, auth, testkit.RouteKey(route), strings.NewReader(body))
	default:
		e.t.Fatalf("unknown endpoint %q", endpoint)
	}
	if err != nil {
		var ke *Error
		if !errors.As(err, &ke) {
			e.t.Fatalf("%s: got error of type %T (%v); want *Error", endpoint, err, err)
		}
		return nil, nil, ke
	}
	var m map[string]any
	if jerr := json.Unmarshal(out, &m); jerr != nil {
		e.t.Fatalf("%s: body is not JSON: %v: %s", endpoint, jerr, out)
	}
	return m, out, nil
}

// mustOK calls and fails the test on an *Error.
func (e *env) mustOK(endpoint, auth, route, body string) map[string]any {
	e.t.Helper()
	m, _, ke := e.call(endpoint, auth, route, body)
	if ke != nil {
		e.t.Fatalf("%s %s: got error %d %s (%s); want success", endpoint, body, ke.Status, ke.Code, ke.Message)
	}
	return m
}

// refFor searches and returns the ref of the hint for docID.
func (e *env) refFor(auth, route, runID string, docID int64) string {
	e.t.Helper()
	body := `{"query":"退款"}`
	if runID != "" {
		body = `{"query":"退款","run_id":"` + runID + `"}`
	}
	m := e.mustOK("search", auth, route, body)
	title := e.cat.docs[docID].Title
	for _, h := range m["hints"].([]any) {
		hm := h.(map[string]any)
		if hm["title"] == title {
			return hm["ref"].(string)
		}
	}
	e.t.Fatalf("no hint for doc %d in %v", docID, m)
	return ""
}

func readBodyJSON(fields map[string]any) string {
	b, err := json.Marshal(fields)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// failingReader fails the test if anything reads it.
type failingReader struct{ t testing.TB }

func (r failingReader) Read([]byte) (int, error) {
	r.t.Errorf("request body was read; want it untouched")
	return 0, io.EOF
}
