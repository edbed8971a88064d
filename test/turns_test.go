package test

// End-to-end tests of turn interception (SPEC §7): the request and response
// rewrite, the turn-mode ledger (memory and a real Redis shared by two
// replicas) and the lost-response retry, against the fake Core and a real
// MariaDB catalog.

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bailinghub/knowledge-sidecar/corefacts"
	"github.com/bailinghub/knowledge-sidecar/internal/fakecore"
	"github.com/bailinghub/knowledge-sidecar/internal/testkit"
	"github.com/bailinghub/knowledge-sidecar/internal/testkit/testdb"
	"github.com/bailinghub/knowledge-sidecar/ledger"
	"github.com/bailinghub/knowledge-sidecar/proxy"
	"github.com/bailinghub/knowledge-sidecar/sharedredis"
)

// turnConflictJSON is Core's exact 409 body (CORE_FACTS §3.4).
const turnConflictJSON = `{"error":"turn_conflict","message":"turn id or user message id is already bound to different input"}`

// invalidDeliveries are knowledge_delivery values the sidecar must refuse.
var invalidDeliveries = []string{`"off"`, `"hint"`, `"full"`, `1`, `null`, `true`, `{}`}

// --- coreTap: a recorder between the sidecar and the fake Core ---

// coreTap is an HTTP server in front of the fake Core that records the exact
// bytes of every exchange, so a test can compare what the client sent with
// what Core received and what Core answered with what the client got. Only
// proxied traffic is recorded: the sidecar (built with the tap as core.url)
// sends its own Core client's calls (identity, retrieval, probe) through it
// too, and those, the only requests without the X-Forwarded-For every
// proxied request carries, go straight to the fake.
type coreTap struct {
	URL  string
	core http.Handler

	mu sync.Mutex
	ex []*tapExchange
	// encoding, when set, re-encodes 2xx turn answers with this
	// Content-Encoding whatever the request accepted (a misbehaving Core).
	encoding string
	// hold, when set, is called with every request before it reaches Core
	// (outside the lock); it may block to keep the request in flight.
	hold func(*http.Request)
}

// tapExchange is one request through the tap and Core's answer to it.
type tapExchange struct {
	Method, Path string
	ReqHeader    http.Header
	ReqBody      []byte
	Answered     bool // Core answered (false: it hung until the caller left)
	Status       int
	RespHeader   http.Header
	RespBody     []byte // exactly the bytes sent on
}

func newCoreTap(t testing.TB, core http.Handler) *coreTap {
	t.Helper()
	tp := &coreTap{core: core}
	srv := httptest.NewServer(http.HandlerFunc(tp.serve))
	t.Cleanup(srv.Close)
	tp.URL = srv.URL
	return tp
}

func (tp *coreTap) serve(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("X-Forwarded-For") == "" {
		tp.core.ServeHTTP(w, r) // the sidecar's own Core client
		return
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return
	}
	e := &tapExchange{Method: r.Method, Path: r.URL.Path, ReqHeader: r.Header.Clone(), ReqBody: body}
	tp.mu.Lock()
	tp.ex = append(tp.ex, e)
	enc, hold := tp.encoding, tp.hold
	tp.mu.Unlock()
	if hold != nil {
		hold(r)
	}

	r.Body = io.NopCloser(bytes.NewReader(body))
	rec := httptest.NewRecorder()
	tp.core.ServeHTTP(rec, r)
	if r.Context().Err() != nil {
		return // Core hung and the sidecar gave up: nothing was answered
	}
	res := rec.Result()
	out := rec.Body.Bytes()
	h := res.Header.Clone()
	if enc != "" && res.StatusCode/100 == 2 && strings.HasSuffix(r.URL.Path, "/turns") {
		if enc == "gzip" {
			var buf bytes.Buffer
			zw := gzip.NewWriter(&buf)
			_, _ = zw.Write(out)
			_ = zw.Close()
			out = buf.Bytes()
		} // any other name: the bytes are left as they are, labelled enc
		h.Set("Content-Encoding", enc)
		h.Set("Content-Length", strconv.Itoa(len(out)))
	}
	tp.mu.Lock()
	e.Answered, e.Status, e.RespHeader, e.RespBody = true, res.StatusCode, h.Clone(), bytes.Clone(out)
	tp.mu.Unlock()
	for k, v := range h {
		w.Header()[k] = v
	}
	w.WriteHeader(res.StatusCode)
	_, _ = w.Write(out)
}

// setEncoding makes the tap re-encode 2xx turn answers ("" = off).
func (tp *coreTap) setEncoding(enc string) {
	tp.mu.Lock()
	defer tp.mu.Unlock()
	tp.encoding = enc
}

func (tp *coreTap) setHold(f func(*http.Request)) {
	tp.mu.Lock()
	defer tp.mu.Unlock()
	tp.hold = f
}

// count is the number of requests seen so far.
func (tp *coreTap) count() int {
	tp.mu.Lock()
	defer tp.mu.Unlock()
	return len(tp.ex)
}

// since returns copies of the exchanges after the first n.
func (tp *coreTap) since(n int) []tapExchange {
	tp.mu.Lock()
	defer tp.mu.Unlock()
	var out []tapExchange
	for _, e := range tp.ex[n:] {
		out = append(out, *e)
	}
	return out
}

// oneSince returns the single exchange after the first n, failing otherwise.
func (tp *coreTap) oneSince(t testing.TB, n int) tapExchange {
	t.Helper()
	got := tp.since(n)
	if len(got) != 1 {
		t.Fatalf("Core received %d requests; want 1", len(got))
	}
	return got[0]
}

// post sends a POST of body through the sidecar at url and returns the
// answer with the one exchange it caused with Core.
func (tp *coreTap) post(t testing.TB, c *http.Client, url, token string, body []byte, hdr map[string]string) (turnResult, tapExchange) {
	t.Helper()
	n := tp.count()
	r := send(t, c, "POST", url, token, body, hdr)
	return r, tp.oneSince(t, n)
}

// --- requests ---

// turnResult is a client's view of one answer.
type turnResult struct {
	Status int
	Header http.Header
	Body   []byte
}

// send posts body with the bearer and extra headers and reads the answer.
func send(t testing.TB, c *http.Client, method, url, token string, body []byte, hdr map[string]string) turnResult {
	t.Helper()
	r, err := trySend(c, method, url, token, body, hdr)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	return r
}

// mustTurn posts a turn through side to route and fails the test unless it
// is answered 200; what names the turn in the failure.
func mustTurn(t testing.TB, c *http.Client, side *Sidecar, route, token string, body []byte, what string) turnResult {
	t.Helper()
	r := send(t, c, "POST", turnsURL(side, route), token, body, nil)
	if r.Status != 200 {
		t.Fatalf("%s: got %d %s; want 200", what, r.Status, r.Body)
	}
	return r
}

// wantRunsSince checks that Core created want runs since it had created
// before.
func wantRunsSince(t testing.TB, w *World, before, want int) {
	t.Helper()
	if got := w.Core.RunsCreated() - before; got != want {
		t.Errorf("runs created: got %d; want %d", got, want)
	}
}

// trySend is send for goroutines other than the test's: it returns the error.
func trySend(c *http.Client, method, url, token string, body []byte, hdr map[string]string) (turnResult, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		return turnResult{}, err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := c.Do(req)
	if err != nil {
		return turnResult{}, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return turnResult{}, err
	}
	return turnResult{resp.StatusCode, resp.Header, raw}, nil
}

// turnInput names one Core turn: both idempotency keys and the input.
type turnInput struct {
	Conv, Turn, Msg, Input string
}

func newTurn(tag string) turnInput {
	// Core's id pattern is ^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$.
	tag = strings.Map(func(r rune) rune {
		if r < 0x80 && (r == '_' || r == '.' || r == ':' || r == '-' || r >= '0' && r <= '9' || r >= 'A' && r <= 'Z' || r >= 'a' && r <= 'z') {
			return r
		}
		return '-'
	}, tag)
	return turnInput{Conv: "conv-" + tag, Turn: "turn-" + tag, Msg: "msg-" + tag, Input: "What is the refund window? (" + tag + ")"}
}

// body renders the turn request with odd but valid spacing and a non-ASCII
// escape, so byte-for-byte forwarding is observable. delivery is the raw
// JSON value of knowledge_delivery, or "" to leave the field out. Removing
// the member from body(x) gives exactly body("").
func (ti turnInput) body(delivery string) []byte {
	q := func(s string) string { b, _ := json.Marshal(s); return string(b) }
	a := `{"client_conversation_id": ` + q(ti.Conv) + `,  "client_turn_id":` + q(ti.Turn)
	b := `"user_message_id":` + q(ti.Msg) + `,   "user_input": ` + q(ti.Input) + ` , "page_context": {"title": "Orders \u00e9", "url": "/orders"}, "renderers": ["markdown"] }`
	if delivery == "" {
		return []byte(a + ", " + b)
	}
	return []byte(a + ", " + `"knowledge_delivery":  ` + delivery + ", " + b)
}

// mode returns the JSON value of a delivery mode name.
func modeJSON(mode string) string { return `"` + mode + `"` }

func otherMode(mode string) string {
	if mode == "inline" {
		return "on_demand"
	}
	return "inline"
}

// turnsURL is the turns endpoint of route behind the sidecar.
func turnsURL(sc *Sidecar, route string) string { return sc.WS(route) + "/turns" }

func turnsPath(route string) string { return "/agent-api/v1/workspaces/" + route + "/turns" }

// scopeRevision asks the sidecar's capabilities endpoint for route's revision.
func scopeRevision(t testing.TB, c *http.Client, sc *Sidecar, route, token string) string {
	t.Helper()
	r := send(t, c, "GET", sc.WS(route)+"/knowledge/capabilities", token, nil, nil)
	var v struct {
		Schema string `json:"schema_version"`
		Rev    string `json:"knowledge_scope_revision"`
	}
	if r.Status != 200 || json.Unmarshal(r.Body, &v) != nil || v.Schema != "bailing.agent-knowledge-capabilities.v1" || len(v.Rev) != 64 {
		t.Fatalf("capabilities of %s: got %d %s; want the sidecar's capabilities", route, r.Status, r.Body)
	}
	return v.Rev
}

// deliveryJSON is the block SPEC §7 adds to a rewritten answer.
type deliveryJSON struct {
	SchemaVersion string          `json:"schema_version"`
	Mode          string          `json:"mode"`
	Protocol      string          `json:"protocol"`
	ScopeRevision string          `json:"knowledge_scope_revision"`
	Status        string          `json:"status"`
	Hints         json.RawMessage `json:"hints"`
}

// checkRewrite compares the client's answer with Core's: every member
// identical (raw bytes), context.knowledge and knowledge_refs [] in on_demand
// mode (Core's in inline mode), plus the knowledge_delivery block.
func checkRewrite(t testing.TB, core, got []byte, mode, wantStatus, wantRev string) {
	t.Helper()
	var cm, gm map[string]json.RawMessage
	if err := json.Unmarshal(core, &cm); err != nil {
		t.Fatalf("Core's answer is not a JSON object: %v", err)
	}
	if err := json.Unmarshal(got, &gm); err != nil {
		t.Fatalf("client's answer %q is not a JSON object: %v", got, err)
	}
	if _, ok := cm["knowledge_delivery"]; ok {
		t.Fatalf("Core's answer already has knowledge_delivery: the field reached Core")
	}
	if len(gm) != len(cm)+1 {
		t.Errorf("client's answer has %d members; want Core's %d + knowledge_delivery", len(gm), len(cm))
	}
	for k, v := range cm {
		if k == "context" {
			continue
		}
		if !bytes.Equal(gm[k], v) {
			t.Errorf("member %s: got %s; want Core's %s", k, gm[k], v)
		}
	}
	var cc, gc map[string]json.RawMessage
	if json.Unmarshal(cm["context"], &cc) != nil || json.Unmarshal(gm["context"], &gc) != nil {
		t.Fatalf("context is not an object: core %s, client %s", cm["context"], gm["context"])
	}
	if len(gc) != len(cc) {
		t.Errorf("context has %d members; want Core's %d", len(gc), len(cc))
	}
	for k, v := range cc {
		want := v
		if mode == "on_demand" && (k == "knowledge" || k == "knowledge_refs") {
			want = json.RawMessage(`[]`)
		}
		if !bytes.Equal(gc[k], want) {
			t.Errorf("context.%s: got %s; want %s", k, gc[k], want)
		}
	}
	if mode == "inline" {
		// The block is appended after Core's last member; nothing else moves.
		if !bytes.HasPrefix(got, core[:len(core)-1]) || !bytes.HasPrefix(got[len(core)-1:], []byte(`,"knowledge_delivery":{`)) {
			t.Errorf("inline answer is not Core's bytes plus the block:\n got %s\nwant %s + block", got, core)
		}
	}
	var d deliveryJSON
	dec := json.NewDecoder(bytes.NewReader(gm["knowledge_delivery"]))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&d); err != nil {
		t.Fatalf("knowledge_delivery %s: %v", gm["knowledge_delivery"], err)
	}
	want := deliveryJSON{"bailing.agent-knowledge-delivery.v1", mode, "bailing.agent-knowledge.v1", wantRev, wantStatus, json.RawMessage(`[]`)}
	if d.SchemaVersion != want.SchemaVersion || d.Mode != want.Mode || d.Protocol != want.Protocol ||
		d.ScopeRevision != want.ScopeRevision || d.Status != want.Status {
		t.Errorf("knowledge_delivery: got %+v (hints %s); want %+v", d, d.Hints, want)
	}
	if mode == "inline" && string(d.Hints) != "[]" {
		t.Errorf("inline hints: got %s; want []", d.Hints)
	}
	if mode == "on_demand" {
		// The world's documents are all current: one same-run hint per
		// document Core retrieved, best first (SPEC §7 "Same-run hints").
		hints := decodeTurnHints(t, d.Hints)
		if got, want := hintTitlesOf(hints), coreRefTitles(t, cc); got != want {
			t.Errorf("on_demand hints: got titles %q; want Core's documents %q", got, want)
		}
	}
}

// checkErrorJSON checks a sidecar-made error answer.
func checkErrorJSON(t testing.TB, r turnResult, status int, code string) {
	t.Helper()
	var eb struct {
		Error   string `json:"error"`
		Message string `json:"message"`
	}
	if r.Status != status || json.Unmarshal(r.Body, &eb) != nil || eb.Error != code || eb.Message == "" {
		t.Fatalf("got %d %s; want %d with error %q and a message", r.Status, r.Body, status, code)
	}
	if ct, cc := r.Header.Get("Content-Type"), r.Header.Get("Cache-Control"); ct != "application/json; charset=utf-8" || cc != "no-store" {
		t.Errorf("headers: got Content-Type %q Cache-Control %q; want application/json; charset=utf-8 and no-store", ct, cc)
	}
}

// checkRelayed checks that the client got exactly Core's answer.
// sendRelayed sends a request that must pass through unchanged: Core
// receives exactly the client's bytes and the client gets Core's answer.
func (tp *coreTap) sendRelayed(t testing.TB, c *http.Client, method, url, token string, body []byte) turnResult {
	t.Helper()
	n := tp.count()
	r := send(t, c, method, url, token, body, nil)
	e := tp.oneSince(t, n)
	if !bytes.Equal(e.ReqBody, body) {
		t.Errorf("Core received %q; want the client's bytes %q", e.ReqBody, body)
	}
	checkRelayed(t, r, e)
	return r
}

func checkRelayed(t testing.TB, r turnResult, e tapExchange) {
	t.Helper()
	if !e.Answered {
		t.Fatalf("Core did not answer")
	}
	if r.Status != e.Status || !bytes.Equal(r.Body, e.RespBody) {
		t.Fatalf("client got %d %q; want Core's %d %q", r.Status, r.Body, e.Status, e.RespBody)
	}
	for _, h := range []string{"Content-Type", "Content-Length", "Content-Encoding", "Cache-Control", "Vary"} {
		if g, w := r.Header.Values(h), e.RespHeader.Values(h); strings.Join(g, ",") != strings.Join(w, ",") {
			t.Errorf("header %s: got %q; want Core's %q", h, g, w)
		}
	}
}

// --- the matrix ---

// turnScenario is one Core behaviour of the matrix.
type turnScenario struct {
	name string
	core fakecore.Options
	// transport of the sidecar (a short response-header timeout for "timeout").
	transport proxy.TransportOptions
	hdr       map[string]string // extra client headers
	// prepare runs before each case: inject a fault, pre-create a turn, …
	// It may change the turn (e.g. an invalid id).
	prepare func(t *testing.T, w *World, ti *turnInput)
	// outcome of inline/on_demand: "rewrite" (2xx), "relay" (non-2xx, Core's
	// bytes), "timeout" (504 from the sidecar).
	outcome string
	// kept: after inline/on_demand the ledger record stays (a switch of mode
	// is 409 without a Core call); false: it was released.
	kept bool
}

func turnScenarios() []turnScenario {
	multi := testdb.RouteMulti
	return []turnScenario{
		{name: "core_2xx", outcome: "rewrite", kept: true},
		{name: "core_4xx", outcome: "relay", kept: false,
			prepare: func(t *testing.T, w *World, ti *turnInput) { ti.Turn = "!" + ti.Turn }}, // Core: 400 invalid_request
		// Core's own 409 for a fresh turn id: no run from this attempt, so
		// its record is released (SPEC §7) and Core answers the switch.
		{name: "core_409", outcome: "relay", kept: false,
			prepare: func(t *testing.T, w *World, ti *turnInput) {
				// The same ids already hold another input at Core.
				first := *ti
				first.Input = "an earlier, different question"
				r := send(t, newClient(t), "POST", w.CoreURL+turnsPath(multi), w.TokenA, first.body(""), nil)
				if r.Status != 200 {
					t.Fatalf("pre-create at Core: got %d %s", r.Status, r.Body)
				}
			}},
		{name: "core_500", outcome: "relay", kept: true,
			prepare: func(t *testing.T, w *World, ti *turnInput) {
				w.Core.SetFault(turnsPath(multi), fakecore.Fault{Status: 500})
			}},
		{name: "core_503", outcome: "relay", kept: true,
			prepare: func(t *testing.T, w *World, ti *turnInput) {
				w.Core.SetFault(turnsPath(multi), fakecore.Fault{Status: 503, Body: []byte(`{"error":"hub_paused","status":"paused"}`)})
			}},
		{name: "timeout", outcome: "timeout", kept: true,
			transport: proxy.TransportOptions{ResponseHeaderTimeout: 300 * time.Millisecond},
			prepare: func(t *testing.T, w *World, ti *turnInput) {
				w.Core.SetFault(turnsPath(multi), fakecore.Fault{Hang: true})
			}},
		{name: "gzip", outcome: "rewrite", kept: true, core: fakecore.Options{GzipTurns: true},
			hdr: map[string]string{"Accept-Encoding": "gzip"}},
	}
}

// TestTurnMatrix: {field absent, inline, on_demand, invalid values} ×
// {Core 2xx, 4xx, 409, 500, 503, timeout, gzip} with exact expectations on
// what Core receives and what the client gets, and on the ledger record
// left behind.
func TestTurnMatrix(t *testing.T) {
	route := testdb.RouteMulti
	for _, sc := range turnScenarios() {
		t.Run(sc.name, func(t *testing.T) {
			w := NewWorld(t, WorldOptions{Core: sc.core})
			tap := newCoreTap(t, w.Core)
			side := StartSidecar(t, SidecarOptions{CoreURL: tap.URL, Features: w.Features(t, FeatureOptions{}), TransportOptions: sc.transport})
			c := newClient(t)
			rev := scopeRevision(t, c, side, route, w.TokenA)

			t.Run("absent", func(t *testing.T) {
				ti := newTurn(sc.name + "-absent")
				if sc.prepare != nil {
					sc.prepare(t, w, &ti)
				}
				defer w.Core.ClearFaults()
				sent := ti.body("")
				r, e := tap.post(t, c, turnsURL(side, route), w.TokenA, sent, sc.hdr)
				if !bytes.Equal(e.ReqBody, sent) {
					t.Errorf("Core received %q; want the client's bytes %q", e.ReqBody, sent)
				}
				if got, want := e.ReqHeader.Get("Accept-Encoding"), sc.hdr["Accept-Encoding"]; got != want {
					t.Errorf("Core's Accept-Encoding: got %q; want the client's %q", got, want)
				}
				if sc.outcome == "timeout" {
					checkErrorJSON(t, r, http.StatusGatewayTimeout, "upstream_timeout")
					return
				}
				checkRelayed(t, r, e)
				if sc.name == "core_2xx" && !bytes.Contains(r.Body, []byte(`"ref":"knowledge:1"`)) {
					t.Errorf("pass-through answer lacks Core's inline knowledge: %s", r.Body)
				}
				if sc.name == "gzip" && r.Header.Get("Content-Encoding") != "gzip" {
					t.Errorf("Content-Encoding: got %q; want Core's gzip passed through", r.Header.Get("Content-Encoding"))
				}
			})

			for _, mode := range []string{"inline", "on_demand"} {
				t.Run(mode, func(t *testing.T) {
					ti := newTurn(sc.name + "-" + mode)
					if sc.prepare != nil {
						sc.prepare(t, w, &ti)
					}
					defer w.Core.ClearFaults()
					r, e := tap.post(t, c, turnsURL(side, route), w.TokenA, ti.body(modeJSON(mode)), sc.hdr)
					if want := ti.body(""); !bytes.Equal(e.ReqBody, want) {
						t.Errorf("Core received %q; want the body without the field %q", e.ReqBody, want)
					}
					if g := e.ReqHeader.Get("Accept-Encoding"); g != "identity" {
						t.Errorf("Core's Accept-Encoding: got %q; want identity", g)
					}
					switch sc.outcome {
					case "rewrite":
						if r.Status != 200 || e.Status != 200 {
							t.Fatalf("got %d %s (Core %d); want 200", r.Status, r.Body, e.Status)
						}
						if !bytes.Contains(e.RespBody, []byte(`"ref":"knowledge:1"`)) {
							t.Fatalf("Core's answer has no inline knowledge, the test cannot tell a rewrite: %s", e.RespBody)
						}
						checkRewrite(t, e.RespBody, r.Body, mode, "partial", rev)
						if ce := r.Header.Get("Content-Encoding"); ce != "" {
							t.Errorf("Content-Encoding: got %q; want none after the rewrite", ce)
						}
						if cl := r.Header.Get("Content-Length"); cl != strconv.Itoa(len(r.Body)) {
							t.Errorf("Content-Length: got %q; want %d", cl, len(r.Body))
						}
					case "relay":
						if e.Status/100 == 2 {
							t.Fatalf("Core answered %d; the scenario wants an error", e.Status)
						}
						checkRelayed(t, r, e)
					case "timeout":
						checkErrorJSON(t, r, http.StatusGatewayTimeout, "upstream_timeout")
					}

					// The ledger: switch the mode under the same ids.
					n := tap.count()
					calls := w.Core.Calls(turnsPath(route))
					r2 := send(t, c, "POST", turnsURL(side, route), w.TokenA, ti.body(modeJSON(otherMode(mode))), sc.hdr)
					if sc.kept {
						if r2.Status != http.StatusConflict || string(r2.Body) != turnConflictJSON {
							t.Errorf("mode switch: got %d %s; want 409 %s", r2.Status, r2.Body, turnConflictJSON)
						}
						if got := w.Core.Calls(turnsPath(route)); got != calls || tap.count() != n {
							t.Errorf("mode switch reached Core (%d calls; want %d)", got, calls)
						}
					} else {
						// Released: the other mode is forwarded, and Core refuses it again.
						e2 := tap.oneSince(t, n)
						checkRelayed(t, r2, e2)
					}
				})
			}

			for _, v := range invalidDeliveries {
				t.Run("invalid_"+v, func(t *testing.T) {
					ti := newTurn(sc.name + "-invalid")
					if sc.prepare != nil {
						sc.prepare(t, w, &ti)
					}
					defer w.Core.ClearFaults()
					// Identity is asked before the body is read; nothing else
					// reaches Core.
					beyondIdentity := func() int { return w.Core.Calls("") - w.Core.Calls("/agent-auth/") }
					n, calls := tap.count(), beyondIdentity()
					r := send(t, c, "POST", turnsURL(side, route), w.TokenA, ti.body(v), sc.hdr)
					checkErrorJSON(t, r, http.StatusBadRequest, "invalid_request")
					if tap.count() != n || beyondIdentity() != calls {
						t.Errorf("Core was called for an invalid knowledge_delivery")
					}
				})
			}
		})
	}
}

// TestTurnDeliveryStatusPerRoute: the block's status and scope revision
// follow the route at that moment (kb-multi: a disabled and a missing KB →
// partial; kb-legacy → ok; kb-null has no knowledge → disabled), and equal
// what the capabilities endpoint says.
func TestTurnDeliveryStatusPerRoute(t *testing.T) {
	w := NewWorld(t, WorldOptions{})
	token := fakecore.Token("session-a-all-routes")
	w.Core.AddSession(token, corefacts.Session{
		SessionID: testdb.SessionA, ClientAppID: testdb.AppA,
		Principal:     corefacts.Principal{ID: "user-42", Tenant: "tenant-7", Roles: []string{"manager"}, Audience: "internal"},
		OnBehalfOf:    "tenant-7:user-42",
		AllowedRoutes: []string{testdb.RouteMulti, testdb.RouteLegacy, testdb.RouteNull},
		ExpiresAt:     time.Now().Add(15 * time.Minute),
	})
	tap, side := w.startTapped(t, FeatureOptions{})
	c := newClient(t)
	for _, tc := range []struct{ route, status string }{
		{testdb.RouteMulti, "partial"},
		{testdb.RouteLegacy, "ok"},
		{testdb.RouteNull, "disabled"},
	} {
		for _, mode := range []string{"on_demand", "inline"} {
			t.Run(tc.route+"/"+mode, func(t *testing.T) {
				rev := scopeRevision(t, c, side, tc.route, token)
				ti := newTurn(tc.route + "-" + mode)
				r, e := tap.post(t, c, turnsURL(side, tc.route), token, ti.body(modeJSON(mode)), nil)
				if r.Status != 200 {
					t.Fatalf("got %d %s; want 200", r.Status, r.Body)
				}
				checkRewrite(t, e.RespBody, r.Body, mode, tc.status, rev)
			})
		}
	}
}

// TestTurnUnusableAnswer: a 2xx that is not a turn context cannot carry
// on-demand delivery → 502 knowledge_delivery_failed (Core's inline
// knowledge is never handed over as if it were on-demand); in inline mode
// Core's answer goes through as it is.
func TestTurnUnusableAnswer(t *testing.T) {
	w := NewWorld(t, WorldOptions{})
	side := w.StartSidecar(t, FeatureOptions{})
	c := newClient(t)
	route := testdb.RouteMulti
	for _, tc := range []struct{ name, body string }{
		{"not_json", `<html>maintenance</html>`},
		{"not_turn_context", `{"ok":true}`},
		{"wrong_schema", `{"schema_version":"bailing.agent-turn-context.v2","context":{"knowledge":[{"ref":"knowledge:1","content":"secret"}]}}`},
		{"context_not_object", `{"schema_version":"bailing.agent-turn-context.v1","context":[]}`},
		{"trailing_data", `{"schema_version":"bailing.agent-turn-context.v1","context":{}} {}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w.Core.SetFault(turnsPath(route), fakecore.Fault{Status: 200, Body: []byte(tc.body)})
			defer w.Core.ClearFaults()
			r := send(t, c, "POST", turnsURL(side, route), w.TokenA, newTurn(tc.name+"-od").body(`"on_demand"`), nil)
			checkErrorJSON(t, r, http.StatusBadGateway, "knowledge_delivery_failed")
			if bytes.Contains(r.Body, []byte("secret")) || bytes.Contains(r.Body, []byte("html")) {
				t.Errorf("error body leaks Core's answer: %s", r.Body)
			}
			r = send(t, c, "POST", turnsURL(side, route), w.TokenA, newTurn(tc.name+"-in").body(`"inline"`), nil)
			if r.Status != 200 || string(r.Body) != tc.body {
				t.Errorf("inline: got %d %q; want Core's 200 %q", r.Status, r.Body, tc.body)
			}
			if cl := r.Header.Get("Content-Length"); cl != strconv.Itoa(len(r.Body)) {
				t.Errorf("inline Content-Length: got %q; want %d", cl, len(r.Body))
			}
		})
	}
	// A turn is counted when its handling ends, just after the answer.
	testkit.WaitMetric(t, side.Registry, "knowledge_sidecar_turns_total", map[string]string{"mode": "on_demand", "outcome": "delivery_failed"}, 5)
}

// TestTurnCompressedDespiteIdentity: a Core that gzips the answer although
// the sidecar asked for identity is decoded and rewritten; the client gets
// no Content-Encoding and the right Content-Length. An encoding the sidecar
// cannot decode fails on-demand delivery rather than leaking knowledge.
func TestTurnCompressedDespiteIdentity(t *testing.T) {
	w, tap, side, c := tappedWorld(t)
	route := testdb.RouteMulti
	rev := scopeRevision(t, c, side, route, w.TokenA)

	tap.setEncoding("gzip")
	for _, mode := range []string{"inline", "on_demand"} {
		t.Run("gzip/"+mode, func(t *testing.T) {
			r, e := tap.post(t, c, turnsURL(side, route), w.TokenA, newTurn("gz-"+mode).body(modeJSON(mode)), map[string]string{"Accept-Encoding": "gzip"})
			if e.RespHeader.Get("Content-Encoding") != "gzip" {
				t.Fatalf("the tap did not compress")
			}
			zr, err := gzip.NewReader(bytes.NewReader(e.RespBody))
			if err != nil {
				t.Fatal(err)
			}
			plain, err := io.ReadAll(zr)
			if err != nil {
				t.Fatal(err)
			}
			if r.Status != 200 {
				t.Fatalf("got %d %s; want 200", r.Status, r.Body)
			}
			checkRewrite(t, plain, r.Body, mode, "partial", rev)
			if ce := r.Header.Get("Content-Encoding"); ce != "" {
				t.Errorf("Content-Encoding: got %q; want none", ce)
			}
			if cl := r.Header.Get("Content-Length"); cl != strconv.Itoa(len(r.Body)) {
				t.Errorf("Content-Length: got %q; want %d", cl, len(r.Body))
			}
		})
	}
	tap.setEncoding("br")
	t.Run("br/on_demand", func(t *testing.T) {
		r := send(t, c, "POST", turnsURL(side, route), w.TokenA, newTurn("br-od").body(`"on_demand"`), nil)
		checkErrorJSON(t, r, http.StatusBadGateway, "knowledge_delivery_failed")
	})
}

// TestTurnLostResponseRetry: a retry with the same mode reaches Core, which
// replays the frozen run (same run_id, one run); a different mode under
// either idempotency key is Core's exact 409 without contacting Core; a
// record is released when Core refuses the turn with any 4xx (its own 409s included).
func TestTurnLostResponseRetry(t *testing.T) {
	w := NewWorld(t, WorldOptions{})
	side := w.StartSidecar(t, FeatureOptions{})
	c := newClient(t)
	route := testdb.RouteMulti
	url := turnsURL(side, route)

	for _, mode := range []string{"on_demand", "inline"} {
		t.Run(mode, func(t *testing.T) {
			ti := newTurn("retry-" + mode)
			runs := w.Core.RunsCreated()
			first := send(t, c, "POST", url, w.TokenA, ti.body(modeJSON(mode)), nil)
			if first.Status != 200 {
				t.Fatalf("first attempt: got %d %s", first.Status, first.Body)
			}
			calls := w.Core.Calls(turnsPath(route))
			again := send(t, c, "POST", url, w.TokenA, ti.body(modeJSON(mode)), nil)
			if again.Status != 200 {
				t.Fatalf("retry: got %d %s", again.Status, again.Body)
			}
			if got, want := runIDOf(t, again.Body), runIDOf(t, first.Body); got != want {
				t.Errorf("retry run_id: got %s; want %s", got, want)
			}
			// Same bytes, but for the same-run hints' refs and expiry,
			// minted afresh for the replay (same documents).
			if !bytes.Equal(maskHintRefs(t, again.Body), maskHintRefs(t, first.Body)) {
				t.Errorf("retry answer differs from the lost one:\n got %s\nwant %s", again.Body, first.Body)
			}
			wantRunsSince(t, w, runs, 1)
			if got := w.Core.Calls(turnsPath(route)) - calls; got != 1 {
				t.Errorf("the retry reached Core %d times; want 1", got)
			}

			other := modeJSON(otherMode(mode))
			for _, k := range []struct {
				name string
				ti   turnInput
			}{
				{"same_turn_key", turnInput{Conv: ti.Conv, Turn: ti.Turn, Msg: ti.Msg + "-x", Input: ti.Input}},
				{"same_user_message_key", turnInput{Conv: ti.Conv + "-x", Turn: ti.Turn + "-x", Msg: ti.Msg, Input: ti.Input}},
				{"both_keys", ti},
				// Core trims ids; so does the ledger.
				{"trimmed_ids", turnInput{Conv: " " + ti.Conv + "\t", Turn: ti.Turn + " ", Msg: "\u00a0" + ti.Msg, Input: ti.Input}},
			} {
				t.Run("switch/"+k.name, func(t *testing.T) {
					calls, turnCalls := w.Core.Calls(""), w.Core.Calls(turnsPath(route))
					r := send(t, c, "POST", url, w.TokenA, k.ti.body(other), nil)
					if r.Status != http.StatusConflict || string(r.Body) != turnConflictJSON {
						t.Fatalf("got %d %s; want 409 %s", r.Status, r.Body, turnConflictJSON)
					}
					if ct := r.Header.Get("Content-Type"); ct != "application/json; charset=utf-8" {
						t.Errorf("Content-Type: got %q", ct)
					}
					// Only the identity look-up reaches Core, never the turn.
					if got := w.Core.Calls(turnsPath(route)); got != turnCalls {
						t.Errorf("the conflicting turn reached Core")
					}
					if got := w.Core.Calls("") - calls; got != 1 {
						t.Errorf("Core calls during the conflict: got %d; want 1 (the identity look-up)", got)
					}
				})
			}
		})
	}

	// A turn without the field is an inline turn: its bytes pass unchanged,
	// but switching it to on_demand on a retry (or an on_demand turn to no
	// field) is the mode switch SPEC §7 refuses; inline ↔ absent is not.
	t.Run("absent_field", func(t *testing.T) {
		cases := []struct {
			name          string
			first, second string // "" = no field
			wantConflict  bool
		}{
			{"absent_then_on_demand", "", `"on_demand"`, true},
			{"on_demand_then_absent", `"on_demand"`, "", true},
			{"absent_then_inline", "", `"inline"`, false},
			{"inline_then_absent", `"inline"`, "", false},
			{"absent_then_absent", "", "", false},
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				ti := newTurn("absent-" + tc.name)
				runs := w.Core.RunsCreated()
				if r := send(t, c, "POST", url, w.TokenA, ti.body(tc.first), nil); r.Status != 200 {
					t.Fatalf("first: got %d %s", r.Status, r.Body)
				}
				turnCalls := w.Core.Calls(turnsPath(route))
				r := send(t, c, "POST", url, w.TokenA, ti.body(tc.second), nil)
				if tc.wantConflict {
					if r.Status != http.StatusConflict || string(r.Body) != turnConflictJSON {
						t.Fatalf("got %d %s; want 409 %s", r.Status, r.Body, turnConflictJSON)
					}
					if w.Core.Calls(turnsPath(route)) != turnCalls {
						t.Error("the conflicting turn reached Core")
					}
				} else if r.Status != 200 {
					t.Fatalf("got %d %s; want 200 (same delivery)", r.Status, r.Body)
				}
				wantRunsSince(t, w, runs, 1)
			})
		}
	})

	t.Run("released_after_400", func(t *testing.T) {
		ti := newTurn("released")
		bad := ti
		bad.Input = "   " // Core: user_input must not be empty → 400, no run
		runs := w.Core.RunsCreated()
		r := send(t, c, "POST", url, w.TokenA, bad.body(`"on_demand"`), nil)
		if r.Status != 400 || !bytes.Contains(r.Body, []byte(`"invalid_request"`)) {
			t.Fatalf("bad input: got %d %s; want Core's 400", r.Status, r.Body)
		}
		r = send(t, c, "POST", url, w.TokenA, ti.body(`"inline"`), nil)
		if r.Status != 200 || !bytes.Contains(r.Body, []byte(`"mode":"inline"`)) {
			t.Fatalf("other mode after a refusal: got %d %s; want 200 inline", r.Status, r.Body)
		}
		wantRunsSince(t, w, runs, 1)
	})

	t.Run("released_after_core_409", func(t *testing.T) {
		// Core's 409 turn_conflict for a fresh turn id: the ids hold a run
		// of another input, none from this attempt. Its record is released,
		// so the other mode reaches Core, which answers its own 409 again.
		ti := newTurn("released-409")
		first := ti
		first.Input = "an earlier question"
		if r := send(t, c, "POST", w.CoreURL+turnsPath(route), w.TokenA, first.body(""), nil); r.Status != 200 {
			t.Fatalf("pre-create: got %d", r.Status)
		}
		r := send(t, c, "POST", url, w.TokenA, ti.body(`"on_demand"`), nil)
		if r.Status != 409 || string(r.Body) != turnConflictJSON {
			t.Fatalf("got %d %s; want Core's 409", r.Status, r.Body)
		}
		calls := w.Core.Calls(turnsPath(route))
		r = send(t, c, "POST", url, w.TokenA, ti.body(`"inline"`), nil)
		if r.Status != 409 || string(r.Body) != turnConflictJSON || w.Core.Calls(turnsPath(route)) != calls+1 {
			t.Errorf("other mode after Core's 409: got %d %s, Core called %d times; want Core's own 409 (one call)", r.Status, r.Body, w.Core.Calls(turnsPath(route))-calls)
		}
	})

	t.Run("no_ids_not_bound", func(t *testing.T) {
		// A turn missing an id creates no run at Core (400), so nothing is bound.
		body := []byte(`{"client_conversation_id":"c-noid","client_turn_id":"t-noid","user_input":"hi","knowledge_delivery":"on_demand"}`)
		for _, mode := range []string{"on_demand", "inline"} {
			b := bytes.Replace(body, []byte(`"on_demand"`), []byte(modeJSON(mode)), 1)
			r := send(t, c, "POST", url, w.TokenA, b, nil)
			if r.Status != 400 || !bytes.Contains(r.Body, []byte("undeclared")) {
				t.Errorf("%s: got %d %s; want Core's 400 for the missing field", mode, r.Status, r.Body)
			}
		}
	})

	if got := testkit.Metric(t, side.Registry, "knowledge_sidecar_ledger_conflicts_total", nil); got < 9 {
		t.Errorf("ledger_conflicts_total: got %v; want at least 9", got)
	}
}

// TestTurnConcurrentFirstAttempts: N first attempts of one turn race through
// the sidecar with different modes; exactly one mode wins (every attempt
// with it gets the same run), every other attempt is 409, and Core creates
// one run.
func TestTurnConcurrentFirstAttempts(t *testing.T) {
	w := NewWorld(t, WorldOptions{})
	side := w.StartSidecar(t, FeatureOptions{})
	for round := range 3 {
		t.Run(fmt.Sprint("round", round), func(t *testing.T) {
			raceTurns(t, w, []*Sidecar{side}, fmt.Sprint("race-", round))
		})
	}
}

// raceTurns sends 12 first attempts of one turn (tag names it) at once,
// alternating inline and on_demand and spread over sides: exactly one mode
// wins, every attempt with it gets the same run, every other attempt is
// Core's 409 turn_conflict, and Core creates one run.
func raceTurns(t *testing.T, w *World, sides []*Sidecar, tag string) {
	t.Helper()
	c := newClient(t)
	const n = 12
	ti := newTurn(tag)
	runs := w.Core.RunsCreated()
	start := make(chan struct{})
	results := make([]turnResult, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			mode := []string{"inline", "on_demand"}[i%2]
			r, err := trySend(c, "POST", turnsURL(sides[(i/2)%len(sides)], testdb.RouteMulti), w.TokenA, ti.body(modeJSON(mode)), nil)
			if err != nil {
				t.Errorf("attempt %d: %v", i, err)
			}
			results[i] = r
		})
	}
	close(start)
	wg.Wait()
	winner, run := "", ""
	for i, r := range results {
		mode := []string{"inline", "on_demand"}[i%2]
		switch r.Status {
		case 200:
			var v struct {
				RunID string       `json:"run_id"`
				KD    deliveryJSON `json:"knowledge_delivery"`
			}
			if json.Unmarshal(r.Body, &v) != nil || v.KD.Mode != mode {
				t.Fatalf("attempt %d (%s): answer %s", i, mode, r.Body)
			}
			if winner == "" {
				winner, run = mode, v.RunID
			}
			if mode != winner || v.RunID != run {
				t.Errorf("attempt %d: %s run %s succeeded; want only %s run %s", i, mode, v.RunID, winner, run)
			}
		case 409:
			if string(r.Body) != turnConflictJSON {
				t.Errorf("attempt %d: 409 body %s", i, r.Body)
			}
		default:
			t.Errorf("attempt %d: got %d %s", i, r.Status, r.Body)
		}
	}
	if winner == "" {
		t.Fatal("no attempt succeeded")
	}
	for i, r := range results {
		mode := []string{"inline", "on_demand"}[i%2]
		if (mode == winner) != (r.Status == 200) {
			t.Errorf("attempt %d (%s): got %d; want 200 exactly for the winning mode %s", i, mode, r.Status, winner)
		}
	}
	wantRunsSince(t, w, runs, 1)
}

// --- shared Redis ledger ---

func redisTestURL() string {
	if u := os.Getenv("KS_TEST_REDIS_URL"); u != "" {
		return u
	}
	return "redis://127.0.0.1:6379/15"
}

// sharedRedisLedger returns a Redis ledger on KS_TEST_REDIS_URL under prefix.
// Redis unreachable: t.Fatal when CI=true, else skip.
func sharedRedisLedger(t *testing.T, prefix string) *ledger.Redis {
	t.Helper()
	l, err := newRedisLedger(sharedredis.Options{URL: redisTestURL()}, ledger.RedisOptions{KeyPrefix: prefix, TTL: 10 * time.Minute})
	if err != nil {
		t.Fatalf("ledger.NewRedis: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if err := l.Ping(ctx); err != nil {
		l.Close()
		testkit.RequireService(t, "Redis at KS_TEST_REDIS_URL", err)
	}
	return l
}

// newRedisLedger is a Redis ledger on a client of its own built from so
// (the ledger's Close closes it), as the sidecar builds one.
func newRedisLedger(so sharedredis.Options, lo ledger.RedisOptions) (*ledger.Redis, error) {
	c, err := sharedredis.New(so)
	if err != nil {
		return nil, err
	}
	l, err := ledger.NewRedis(c, lo)
	if err != nil {
		c.Close()
		return nil, err
	}
	return l, nil
}

// TestTurnLedgerSharedRedis: two sidecar replicas share a Redis ledger: a
// mode switch on B after A is 409 without a Core call, a same-mode retry on
// B replays A's run, and refs issued by A are read on B.
func TestTurnLedgerSharedRedis(t *testing.T) {
	prefix := testdb.RedisPrefix(t)
	la := sharedRedisLedger(t, prefix)
	lb := sharedRedisLedger(t, prefix)
	w := NewWorld(t, WorldOptions{})
	// sidecar.Deps hook: two Redis ledgers under a per-test key prefix
	a := w.StartSidecar(t, FeatureOptions{Ledger: la})
	b := w.StartSidecar(t, FeatureOptions{Ledger: lb})
	c := newClient(t)
	route := testdb.RouteMulti

	ti := newTurn("redis-replicas")
	ra := send(t, c, "POST", turnsURL(a, route), w.TokenA, ti.body(`"on_demand"`), nil)
	if ra.Status != 200 {
		t.Fatalf("replica A: got %d %s", ra.Status, ra.Body)
	}
	for _, k := range []struct {
		name string
		ti   turnInput
	}{
		{"same_turn_key", turnInput{Conv: ti.Conv, Turn: ti.Turn, Msg: "other-msg", Input: ti.Input}},
		{"same_user_message_key", turnInput{Conv: "other-conv", Turn: "other-turn", Msg: ti.Msg, Input: ti.Input}},
	} {
		t.Run("switch_on_B/"+k.name, func(t *testing.T) {
			calls := w.Core.Calls(turnsPath(route))
			r := send(t, c, "POST", turnsURL(b, route), w.TokenA, k.ti.body(`"inline"`), nil)
			if r.Status != 409 || string(r.Body) != turnConflictJSON {
				t.Fatalf("got %d %s; want 409 %s", r.Status, r.Body, turnConflictJSON)
			}
			if w.Core.Calls(turnsPath(route)) != calls {
				t.Errorf("the conflicting turn reached Core")
			}
		})
	}
	t.Run("retry_on_B", func(t *testing.T) {
		runs := w.Core.RunsCreated()
		rb := send(t, c, "POST", turnsURL(b, route), w.TokenA, ti.body(`"on_demand"`), nil)
		if rb.Status != 200 || !bytes.Equal(maskHintRefs(t, rb.Body), maskHintRefs(t, ra.Body)) {
			t.Fatalf("retry on B: got %d %s; want A's answer %s", rb.Status, rb.Body, ra.Body)
		}
		if w.Core.RunsCreated() != runs {
			t.Errorf("the retry created a run")
		}
	})
	t.Run("refs_from_A_read_on_B", func(t *testing.T) {
		code, _, body := Call(t, c, "POST", a.WS(route)+"/knowledge/search", w.TokenA,
			map[string]any{"query": "refunds accepted within days of delivery"})
		var sr struct {
			Hints []struct {
				Ref string `json:"ref"`
			} `json:"hints"`
		}
		if code != 200 || json.Unmarshal(body, &sr) != nil || len(sr.Hints) == 0 {
			t.Fatalf("search on A: got %d %s", code, body)
		}
		code, _, body = Call(t, c, "POST", b.WS(route)+"/knowledge/read", w.TokenA, map[string]any{"ref": sr.Hints[0].Ref})
		if code != 200 || !bytes.Contains(body, []byte(`"schema_version":"bailing.agent-knowledge-read.v1"`)) {
			t.Fatalf("read on B: got %d %s; want 200", code, body)
		}
	})
	if got := testkit.Metric(t, b.Registry, "knowledge_sidecar_ledger_conflicts_total", nil); got != 2 {
		t.Errorf("B's ledger_conflicts_total: got %v; want 2", got)
	}
}

// TestTurnLedgerRedisDown: with the ledger's Redis unreachable, turns that
// need it answer 503 knowledge_unavailable without reaching Core, while
// pass-through traffic and turns without the field keep working.
func TestTurnLedgerRedisDown(t *testing.T) {
	l, err := newRedisLedger(sharedredis.Options{URL: "redis://" + deadAddr(t) + "/0", DialTimeout: 500 * time.Millisecond, OpTimeout: time.Second}, ledger.RedisOptions{})
	if err != nil {
		t.Fatal(err)
	}
	w := NewWorld(t, WorldOptions{})
	// sidecar.Deps hook: a ledger on a dead Redis with short timeouts
	side := w.StartSidecar(t, FeatureOptions{Ledger: l})
	c := newClient(t)
	route := testdb.RouteMulti
	for _, mode := range []string{"inline", "on_demand"} {
		t.Run(mode, func(t *testing.T) {
			calls := w.Core.Calls(turnsPath(route))
			r := send(t, c, "POST", turnsURL(side, route), w.TokenA, newTurn("down-"+mode).body(modeJSON(mode)), nil)
			checkErrorJSON(t, r, http.StatusServiceUnavailable, "knowledge_unavailable")
			if w.Core.Calls(turnsPath(route)) != calls {
				t.Errorf("the turn reached Core without a ledger record")
			}
			for _, leak := range []string{"redis", "127.0.0.1", "dial", "refused"} {
				if bytes.Contains(bytes.ToLower(r.Body), []byte(leak)) {
					t.Errorf("error body %s reveals %q", r.Body, leak)
				}
			}
		})
	}
	t.Run("field_absent", func(t *testing.T) {
		r := send(t, c, "POST", turnsURL(side, route), w.TokenA, newTurn("down-absent").body(""), nil)
		if r.Status != 200 || !bytes.Contains(r.Body, []byte(`"ref":"knowledge:1"`)) || bytes.Contains(r.Body, []byte("knowledge_delivery")) {
			t.Fatalf("got %d %s; want Core's own answer", r.Status, r.Body)
		}
	})
	t.Run("pass_through", func(t *testing.T) {
		code, _, body := Call(t, c, "GET", side.URL+"/agent-auth/v1/session", w.TokenA, nil)
		if code != 200 || !bytes.Contains(body, []byte(testdb.SessionA)) {
			t.Fatalf("got %d %s; want Core's session", code, body)
		}
	})
	// Three: the two turns with the field, and the field-less one, whose
	// inline binding is attempted and skipped (it passes anyway).
	if got := testkit.Metric(t, side.Registry, "knowledge_sidecar_ledger_errors_total", nil); got != 3 {
		t.Errorf("ledger_errors_total: got %v; want 3", got)
	}
	if got := testkit.Metric(t, side.Registry, "knowledge_sidecar_turns_total", map[string]string{"mode": "inline", "outcome": "ledger_unavailable"}); got != 1 {
		t.Errorf("turns_total{inline,ledger_unavailable}: got %v; want 1", got)
	}
	// The field-less turn went through unbound: counted as a fail-open.
	if got := testkit.Metric(t, side.Registry, "knowledge_sidecar_ledger_fail_open_total", map[string]string{"reason": "ledger"}); got != 1 {
		t.Errorf("ledger_fail_open_total{reason=ledger}: got %v; want 1", got)
	}
}

// Old clients see Core (SPEC §7, issue 19 item 4): a turn without
// knowledge_delivery that the sidecar cannot decide for goes to Core
// untouched and Core's answer comes back byte for byte.

// sameAnswer compares what the client got through the sidecar with Core's
// direct answer to the same request: status, the headers that matter and
// the body bytes.
func sameAnswer(t testing.TB, got, direct turnResult) {
	t.Helper()
	if got.Status != direct.Status || !bytes.Equal(got.Body, direct.Body) {
		t.Fatalf("through the sidecar: %d %q; Core directly: %d %q", got.Status, got.Body, direct.Status, direct.Body)
	}
	for _, h := range []string{"Content-Type", "Content-Length", "Content-Encoding", "Cache-Control", "WWW-Authenticate", "Retry-After"} {
		if g, w := got.Header.Values(h), direct.Header.Values(h); strings.Join(g, ",") != strings.Join(w, ",") {
			t.Errorf("header %s: got %q; Core directly %q", h, g, w)
		}
	}
}

// TestTurnOldClientsSeeCore: for each thing the sidecar cannot decide for a
// field-less turn, Core receives the client's exact bytes and the client
// gets exactly what Core answers that request directly. A caller whose
// bearer is missing or refused gets the same with the field too (SPEC
// §8.3: it holds nothing of the sidecar's; Core authenticates first). An
// authenticated turn with the field on a bad route is the sidecar's 404.
func TestTurnOldClientsSeeCore(t *testing.T) {
	w := NewWorld(t, WorldOptions{})
	revoked := fakecore.Token("revoked-session")
	w.Core.AddSession(revoked, corefacts.Session{
		SessionID: testdb.SessionA, ClientAppID: testdb.AppA, Principal: corefacts.Principal{ID: "user-42"},
		AllowedRoutes: []string{testdb.RouteMulti}, ExpiresAt: time.Now().Add(15 * time.Minute),
	})
	w.Core.RevokeSession(revoked)
	deadRedis, err := newRedisLedger(sharedredis.Options{URL: "redis://" + deadAddr(t) + "/0", DialTimeout: 300 * time.Millisecond, OpTimeout: 500 * time.Millisecond}, ledger.RedisOptions{})
	if err != nil {
		t.Fatal(err)
	}
	tap, side := w.startTapped(t, FeatureOptions{})
	// sidecar.Deps hook: a ledger on a dead Redis with short timeouts
	sideNoLedger := StartSidecar(t, SidecarOptions{CoreURL: tap.URL, Features: w.Features(t, FeatureOptions{Ledger: deadRedis})})
	c := newClient(t)
	route := testdb.RouteMulti

	cases := []struct {
		name    string
		side    *Sidecar
		route   string
		token   string
		prepare func()
		// replay: Core's direct answer is its replay of the run the
		// forwarded turn created (same bytes).
		replay bool
		// unauth: the bearer is missing or refused, so the turn with the
		// field goes to Core too.
		unauth bool
	}{
		{name: "unknown_bearer", side: side, route: route, token: fakecore.Token("nobody"), unauth: true},
		{name: "no_bearer", side: side, route: route, token: "", unauth: true},
		{name: "malformed_bearer", side: side, route: route, token: "not-a-token", unauth: true},
		{name: "revoked_session", side: side, route: route, token: revoked, unauth: true},
		{name: "route_upper_case", side: side, route: "Alpha", token: w.TokenA},
		{name: "route_too_short", side: side, route: "a", token: w.TokenA},
		{name: "route_bad_and_unauthenticated", side: side, route: "Alpha", token: fakecore.Token("nobody"), unauth: true},
		{name: "identity_down", side: side, route: route, token: w.TokenA, replay: true,
			prepare: func() { w.Core.SetFault("/agent-auth/v1/session", fakecore.Fault{Status: 503}) }},
		{name: "ledger_down", side: sideNoLedger, route: route, token: w.TokenA, replay: true},
	}
	for _, tc := range cases {
		fields := []string{""}
		if tc.unauth {
			fields = append(fields, `"on_demand"`, `"sometimes"`)
		}
		for _, field := range fields {
			name := tc.name
			if field != "" {
				name += "/field_" + strings.Trim(field, `"`)
			}
			t.Run(name, func(t *testing.T) {
				defer w.Core.ClearFaults()
				if tc.prepare != nil {
					tc.prepare()
				}
				ti := newTurn("old-" + name)
				sent := ti.body(field)
				got, e := tap.post(t, c, turnsURL(tc.side, tc.route), tc.token, sent, nil)
				if e.Path != turnsPath(tc.route) || !bytes.Equal(e.ReqBody, sent) {
					t.Fatalf("Core received %s %q; want the client's %s %q", e.Path, e.ReqBody, turnsPath(tc.route), sent)
				}
				if g, w := e.ReqHeader.Get("Authorization"), tc.token; (w == "" && g != "") || (w != "" && g != "Bearer "+w) {
					t.Errorf("Core's Authorization: got %q", g)
				}
				checkRelayed(t, got, e)
				w.Core.ClearFaults()
				direct := send(t, c, "POST", w.CoreURL+turnsPath(tc.route), tc.token, sent, nil)
				sameAnswer(t, got, direct)
				if tc.replay && got.Status != 200 {
					t.Fatalf("got %d %s; want Core's 200", got.Status, got.Body)
				}
				if !tc.replay && got.Status/100 != 4 {
					t.Fatalf("got %d %s; want Core's refusal", got.Status, got.Body)
				}
			})
		}
	}

	// An authenticated turn with the field on a bad route is the
	// protocol's: the sidecar answers it, and it never reaches Core.
	for _, tc := range []struct {
		name, route, token, code string
		status                   int
	}{
		{"field_route_upper_case", "Alpha", w.TokenA, "route_unavailable", 404},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := tap.count()
			r := send(t, c, "POST", turnsURL(side, tc.route), tc.token, newTurn("old-"+tc.name).body(`"on_demand"`), nil)
			checkErrorJSON(t, r, tc.status, tc.code)
			if tap.count() != n {
				t.Errorf("the turn with the field reached Core")
			}
		})
	}
	// A percent-encoded route segment is no literal path: Core could decode
	// it into the route key, so even a field-less turn stays refused.
	t.Run("encoded_route_refused", func(t *testing.T) {
		for _, seg := range []string{"kb%2Dmulti", "%6Bb-multi"} {
			n := tap.count()
			r := send(t, c, "POST", side.URL+"/agent-api/v1/workspaces/"+seg+"/turns", w.TokenA, newTurn("old-enc").body(""), nil)
			checkErrorJSON(t, r, http.StatusNotFound, "route_unavailable")
			if tap.count() != n {
				t.Errorf("%s: the turn reached Core", seg)
			}
		}
	})
	// The one answer the sidecar gives a field-less turn: the mode switch.
	t.Run("mode_switch_is_409", func(t *testing.T) {
		ti := newTurn("old-switch")
		mustTurn(t, c, side, route, w.TokenA, ti.body(`"on_demand"`), "on_demand")
		n := tap.count()
		r := send(t, c, "POST", turnsURL(side, route), w.TokenA, ti.body(""), nil)
		if r.Status != http.StatusConflict || string(r.Body) != turnConflictJSON || tap.count() != n {
			t.Fatalf("got %d %s (Core called %d times); want 409 %s from the sidecar", r.Status, r.Body, tap.count()-n, turnConflictJSON)
		}
	})
}

// TestTurnUnauthenticatedStreamsToCore: a turn whose bearer Core rejects
// is never read by the sidecar (SPEC §8.3): its body streams to Core as it
// arrives, holding none of the turn body budget, and Core's own 401 comes
// back byte for byte — with or without the field.
func TestTurnUnauthenticatedStreamsToCore(t *testing.T) {
	w := NewWorld(t, WorldOptions{})
	first := make(chan struct{}, 1)
	core := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/turns") {
			var b [1]byte
			if _, err := io.ReadFull(r.Body, b[:]); err == nil {
				first <- struct{}{} // Core has the body's first byte while the client still sends
			}
			r.Body = io.NopCloser(io.MultiReader(bytes.NewReader(b[:]), r.Body))
		}
		w.Core.ServeHTTP(rw, r)
	}))
	t.Cleanup(core.Close)
	side := StartSidecar(t, SidecarOptions{CoreURL: core.URL, Features: w.Features(t, FeatureOptions{}), BodyIdleTimeout: time.Minute})
	path := turnsPath(testdb.RouteMulti)
	for _, field := range []string{`"on_demand"`, ""} {
		full := newTurn("unauth-stream-" + strings.Trim(field, `"`)).body(field)
		conn := dialRaw(t, side.Addr)
		conn.send(t, "POST "+path+" HTTP/1.1\r\nHost: ks\r\nContent-Type: application/json\r\nContent-Length: "+strconv.Itoa(len(full))+
			"\r\nAuthorization: Bearer "+fakecore.Token("nobody")+"\r\n\r\n"+string(full[:40]))
		waitFor(t, first, "Core receiving the first bytes of the unauthenticated turn")
		if used := testkit.Metric(t, side.Registry, "knowledge_sidecar_turn_body_budget_used_bytes", nil); used != 0 {
			t.Errorf("field %q: the unauthenticated turn holds %v bytes of the turn body budget; want 0", field, used)
		}
		conn.send(t, string(full[40:]))
		res, body := conn.response(t)
		if res.StatusCode != 401 || string(body) != `{"error":"unauthorized"}` {
			t.Fatalf("field %q: got %d %s; want Core's own 401", field, res.StatusCode, body)
		}
	}
}
