package fakecore_test

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bailinghub/knowledge-sidecar/corefacts"
	"github.com/bailinghub/knowledge-sidecar/internal/fakecore"
	"github.com/bailinghub/knowledge-sidecar/protocol"
)

const serviceToken = "svc-token-for-tests"

var alice = fakecore.Token("alice")

func newCore(t *testing.T, o fakecore.Options) (*fakecore.Core, *httptest.Server) {
	t.Helper()
	o.ServiceToken = serviceToken
	c := fakecore.New(o)
	c.AddSession(alice, corefacts.Session{
		SessionID: "s-1", ClientAppID: "app-1",
		Principal:     corefacts.Principal{ID: "user-42", Tenant: "t-7", Roles: []string{"manager"}},
		OnBehalfOf:    "t-7:user-42",
		AllowedRoutes: []string{"orders"},
	})
	c.SetRoute("orders", fakecore.GateAllowed)
	srv := httptest.NewServer(c)
	t.Cleanup(srv.Close)
	return c, srv
}

type answer struct {
	status int
	header http.Header
	body   map[string]any
	raw    []byte
}

func do(t *testing.T, srv *httptest.Server, method, path, auth, body string, hdr ...string) answer {
	t.Helper()
	req, err := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := srv.Client().Transport.RoundTrip(req) // no transparent gzip
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	a := answer{status: resp.StatusCode, header: resp.Header, raw: raw}
	_ = json.Unmarshal(raw, &a.body)
	return a
}

func TestHeadersOnEveryJSONAnswer(t *testing.T) {
	_, srv := newCore(t, fakecore.Options{})
	for _, p := range []string{"/agent-auth/v1/session", "/agent-api/v1/nope", "/kb/search", "/other"} {
		a := do(t, srv, http.MethodGet, p, "", "")
		if got := a.header.Get("Content-Type"); got != "application/json; charset=utf-8" {
			t.Errorf("%s: content-type got %q; want application/json; charset=utf-8", p, got)
		}
		if got := a.header.Get("Cache-Control"); got != "no-store" {
			t.Errorf("%s: cache-control got %q; want no-store", p, got)
		}
	}
}

func TestSession(t *testing.T) {
	c, srv := newCore(t, fakecore.Options{})
	tests := []struct {
		name, auth string
		want       int
	}{
		{"valid", "Bearer " + alice, 200},
		{"lowercase scheme", "bearer " + alice, 200},
		{"missing", "", 401},
		{"not bha", "Bearer " + serviceToken, 401},
		{"unknown", "Bearer " + fakecore.Token("bob"), 401},
		{"two spaces", "Bearer  " + alice, 401},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := do(t, srv, http.MethodGet, "/agent-auth/v1/session", tt.auth, "")
			if a.status != tt.want {
				t.Fatalf("status got %d; want %d", a.status, tt.want)
			}
			if tt.want == 401 && string(a.raw) != `{"error":"unauthorized"}` {
				t.Errorf("body got %s; want {\"error\":\"unauthorized\"}", a.raw)
			}
			if tt.want == 200 {
				p := a.body["principal"].(map[string]any)
				if a.body["session_id"] != "s-1" || a.body["client_app_id"] != "app-1" || p["id"] != "user-42" {
					t.Errorf("body got %s; want session s-1 of app-1 for user-42", a.raw)
				}
			}
		})
	}
	c.RevokeSession(alice)
	if a := do(t, srv, http.MethodGet, "/agent-auth/v1/session", "Bearer "+alice, ""); a.status != 401 {
		t.Errorf("revoked: status got %d; want 401", a.status)
	}
}

func TestAgentAPIAuthenticatesBeforeRouting(t *testing.T) {
	_, srv := newCore(t, fakecore.Options{})
	if a := do(t, srv, http.MethodGet, "/agent-api/v1/unknown", "", ""); a.status != 401 {
		t.Errorf("unknown path without token: got %d; want 401", a.status)
	}
	a := do(t, srv, http.MethodGet, "/agent-api/v1/unknown", "Bearer "+alice, "")
	if a.status != 404 || string(a.raw) != `{"error":"not_found"}` {
		t.Errorf("unknown path: got %d %s; want 404 {\"error\":\"not_found\"}", a.status, a.raw)
	}
}

func TestSystemInfoAndCapabilities(t *testing.T) {
	tests := []struct {
		name       string
		opts       fakecore.Options
		path, gate string
		want       int
		code       string
	}{
		{"old core", fakecore.Options{}, "/agent-api/v1/workspaces/orders/system-info", "", 404, "not_found"},
		{"allowed", fakecore.Options{SystemInfo: true}, "/agent-api/v1/workspaces/orders/system-info", "", 200, ""},
		{"gate", fakecore.Options{SystemInfo: true}, "/agent-api/v1/workspaces/orders/system-info", fakecore.GateAudienceNotAllowed, 403, "audience_not_allowed"},
		{"not in session", fakecore.Options{SystemInfo: true}, "/agent-api/v1/workspaces/billing/system-info", "", 403, "route_not_allowed"},
		{"unknown route", fakecore.Options{SystemInfo: true}, "/agent-api/v1/workspaces/ghost/system-info", "-", 404, "route_unavailable"},
		{"legacy capabilities", fakecore.Options{SystemInfo: true}, "/agent-api/v1/workspaces/orders/knowledge/capabilities", "", 404, "not_found"},
		{"native capabilities", fakecore.Options{Native: true}, "/agent-api/v1/workspaces/orders/knowledge/capabilities", "", 200, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, srv := newCore(t, tt.opts)
			c.SetRoute("billing", fakecore.GateAllowed)
			if tt.gate != "-" {
				c.SetRoute("orders", tt.gate)
			}
			a := do(t, srv, http.MethodGet, tt.path, "Bearer "+alice, "")
			if a.status != tt.want {
				t.Fatalf("status got %d; want %d (%s)", a.status, tt.want, a.raw)
			}
			if got, _ := a.body["error"].(string); got != tt.code {
				t.Errorf("error got %q; want %q", got, tt.code)
			}
			if tt.code != "" && tt.code != "not_found" && a.body["message"] == nil {
				t.Errorf("gate body %s lacks message", a.raw)
			}
			if strings.HasSuffix(tt.path, "capabilities") && tt.want == 200 && a.body["schema_version"] != protocol.CapabilitiesSchema {
				t.Errorf("schema_version got %v; want %s", a.body["schema_version"], protocol.CapabilitiesSchema)
			}
		})
	}
}

func TestKBSearchQuirks(t *testing.T) {
	c, srv := newCore(t, fakecore.Options{})
	c.AddDoc("faq", 1, "退款规则", "退款窗口为七天。\n\n超过窗口不能退款。")
	c.AddDoc("faq", 2, "Shipping", "Parcels ship within two days.")
	c.AddDoc("off", 3, "退款", "退款窗口")
	c.DisableKB("off")
	bearer := "Bearer " + serviceToken
	tests := []struct {
		name, auth, path, body string
		want                   int
		wantBody               string // exact, when set
		check                  func(t *testing.T, a answer)
	}{
		{name: "agent token refused", auth: "Bearer " + alice, path: "/kb/search", body: `{"kb_id":"faq","query":"x"}`, want: 401, wantBody: `{"error":"unauthorized"}`},
		{name: "query token", path: "/kb/search?token=" + serviceToken, body: `{"kb_id":"faq","query":"ship"}`, want: 200},
		{name: "missing query", auth: bearer, path: "/kb/search", body: `{"kb_id":"faq","query":"  "}`, want: 400, wantBody: `{"error":"kb_id（或 kb_ids）/ query 必填"}`},
		{name: "none exists", auth: bearer, path: "/kb/search", body: `{"kb_ids":["nope"],"query":"x"}`, want: 400, wantBody: `{"error":"知识库不可用：nope"}`},
		{name: "invalid json", auth: bearer, path: "/kb/search", body: `{"kb_id":`, want: 500, check: func(t *testing.T, a answer) {
			if a.body["error"] != "internal_error" || a.body["request_id"] != a.header.Get("X-Request-Id") || a.header.Get("X-Request-Id") == "" {
				t.Errorf("got %s with x-request-id %q; want internal_error with matching request id", a.raw, a.header.Get("X-Request-Id"))
			}
		}},
		{name: "kb_ids wins and unknown ids dropped", auth: bearer, path: "/kb/search", body: `{"kb_id":"off","kb_ids":["nope","faq"],"query":"退款窗口","min_score":0.5}`, want: 200, check: func(t *testing.T, a answer) {
			if ids, _ := json.Marshal(a.body["kb_ids"]); string(ids) != `["faq"]` {
				t.Errorf("kb_ids got %s; want [\"faq\"]", ids)
			}
			hits := a.body["hits"].([]any)
			if len(hits) != 1 || hits[0].(map[string]any)["doc_id"] != float64(1) || hits[0].(map[string]any)["score"] != float64(1) {
				t.Errorf("hits got %v; want doc 1 with score 1", hits)
			}
		}},
		{name: "min_score 0 becomes 0.35", auth: bearer, path: "/kb/search", body: `{"kb_id":"faq","query":"ship refund policy now","min_score":0}`, want: 200, check: func(t *testing.T, a answer) {
			// "ship" matches 1 of 4 terms: 0.25 < 0.35, so no hit.
			if hits := a.body["hits"].([]any); len(hits) != 0 {
				t.Errorf("hits got %v; want none (0 → 0.35)", hits)
			}
		}},
		{name: "tiny min_score keeps low hits", auth: bearer, path: "/kb/search", body: `{"kb_id":"faq","query":"ship refund policy now","min_score":1e-9}`, want: 200, check: func(t *testing.T, a answer) {
			hits := a.body["hits"].([]any)
			if len(hits) == 0 || hits[0].(map[string]any)["score"] != 0.25 {
				t.Errorf("hits got %v; want the 0.25 hit first", hits)
			}
		}},
		{name: "negative min_score keeps the whole top k", auth: bearer, path: "/kb/search", body: `{"kb_id":"faq","query":"ship refund policy now","min_score":-1}`, want: 200, check: func(t *testing.T, a answer) {
			// doc 2 at 0.25 and doc 1 at 0: nothing is filtered out.
			hits := a.body["hits"].([]any)
			if len(hits) != 2 || hits[0].(map[string]any)["score"] != 0.25 || hits[1].(map[string]any)["score"] != float64(0) {
				t.Errorf("hits got %v; want both chunks, 0.25 then 0", hits)
			}
		}},
		{name: "top_k clamped", auth: bearer, path: "/kb/search", body: `{"kb_id":"faq","query":"x","min_score":-1,"top_k":0.5}`, want: 200, check: func(t *testing.T, a answer) {
			if hits := a.body["hits"].([]any); len(hits) != 1 {
				t.Errorf("hits got %d; want 1 (top_k 0.5 clamps to 1)", len(hits))
			}
		}},
		{name: "disabled kb silent", auth: bearer, path: "/kb/search", body: `{"kb_id":"off","query":"退款"}`, want: 200, check: func(t *testing.T, a answer) {
			if string(a.raw) != `{"kb_ids":["off"],"hits":[]}` {
				t.Errorf("got %s; want the id listed and no hits", a.raw)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := do(t, srv, http.MethodPost, tt.path, tt.auth, tt.body, "Content-Type", "application/json")
			if a.status != tt.want {
				t.Fatalf("status got %d; want %d (%s)", a.status, tt.want, a.raw)
			}
			if tt.wantBody != "" && string(a.raw) != tt.wantBody {
				t.Errorf("body got %s; want %s", a.raw, tt.wantBody)
			}
			if tt.check != nil {
				tt.check(t, a)
			}
		})
	}
}

// An embeddings outage answers like Core's swallowed per-KB failure: 200,
// the KB listed, no hit from it, even unfiltered; other KBs still answer.
func TestKBSearchEmbeddingsOutage(t *testing.T) {
	c, srv := newCore(t, fakecore.Options{})
	c.AddDoc("faq", 1, "退款规则", "退款窗口为七天。")
	c.AddDoc("manuals", 2, "Manual", "退款 manual")
	search := func(ids string) string {
		t.Helper()
		a := do(t, srv, http.MethodPost, "/kb/search", "Bearer "+serviceToken, `{"kb_ids":`+ids+`,"query":"退款","min_score":-1}`)
		if a.status != 200 {
			t.Fatalf("status %d (%s); want 200", a.status, a.raw)
		}
		return string(a.raw)
	}
	c.SetEmbeddingsOutage(true, "faq")
	if got := search(`["faq"]`); got != `{"kb_ids":["faq"],"hits":[]}` {
		t.Errorf("faq down: got %s; want the id listed and no hits", got)
	}
	if got := search(`["faq","manuals"]`); !strings.Contains(got, `"kb_ids":["faq","manuals"]`) || !strings.Contains(got, `"doc_id":2`) || strings.Contains(got, `"doc_id":1`) {
		t.Errorf("faq down: got %s; want manuals' hit only, both ids listed", got)
	}
	c.SetEmbeddingsOutage(true)
	c.AddDoc("later", 3, "Later", "退款 later") // a KB created during the outage
	if got := search(`["manuals","later"]`); got != `{"kb_ids":["manuals","later"],"hits":[]}` {
		t.Errorf("all down: got %s; want no hits", got)
	}
	c.SetEmbeddingsOutage(false)
	if got := search(`["faq","manuals","later"]`); !strings.Contains(got, `"doc_id":1`) || !strings.Contains(got, `"doc_id":2`) || !strings.Contains(got, `"doc_id":3`) {
		t.Errorf("outage over: got %s; want every KB's hit", got)
	}
}

func TestStaleIndex(t *testing.T) {
	c, srv := newCore(t, fakecore.Options{})
	c.AddDoc("faq", 1, "Old", "alpha beta")
	c.UpdateDoc("faq", 1, "New", "gamma delta", true)
	search := func() string {
		a := do(t, srv, http.MethodPost, "/kb/search", "Bearer "+serviceToken, `{"kb_id":"faq","query":"alpha"}`)
		return string(a.raw)
	}
	if got := search(); !strings.Contains(got, `"content":"alpha beta"`) || !strings.Contains(got, `"title":"New"`) {
		t.Errorf("stale: got %s; want the old chunk under the new title", got)
	}
	c.Reindex()
	if got := search(); strings.Contains(got, "alpha beta") {
		t.Errorf("reindexed: got %s; want no stale chunk", got)
	}
}

func TestChunks(t *testing.T) {
	long := strings.Repeat("很长的句子。", 150) // 900 characters
	tests := []struct {
		name, in string
		want     []string
	}{
		{"images", "看图 ![示意图](a.png) 和 ![](b.png) 完", []string{"看图 [图：示意图] 和  完"}},
		{"packing", "a\n\n\n\nb\n\n# H\nc", []string{"a\nb\n# H\nc"}},
		{"heading glued", "# Title\n\nbody", []string{"# Title\nbody"}},
		{"long paragraph", long, []string{long[:len("很长的句子。")*116], long[len("很长的句子。")*116:]}},
		{"hard cut", strings.Repeat("x", 1500), []string{strings.Repeat("x", 700), strings.Repeat("x", 700), strings.Repeat("x", 100)}},
		{"empty", "  \n ", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := fakecore.Chunks(tt.in)
			if len(got) != len(tt.want) {
				t.Fatalf("got %d chunks %q; want %d", len(got), got, len(tt.want))
			}
			for i := range got {
				if got[i] != tt.want[i] {
					t.Errorf("chunk %d got %q; want %q", i, got[i], tt.want[i])
				}
			}
		})
	}
	// A long text splits into chunks of at most 700 characters, in order.
	text := strings.Repeat("段落内容，足够长。\n\n", 200)
	chunks := fakecore.Chunks(text)
	if len(chunks) < 2 || strings.Join(chunks, "\n") != strings.ReplaceAll(strings.TrimSpace(text), "\n\n", "\n") {
		t.Errorf("got %d chunks that do not rejoin to the text; want several that do", len(chunks))
	}
	for i, ch := range chunks {
		if n := len([]rune(ch)); n > fakecore.ChunkMax {
			t.Errorf("chunk %d has %d characters; want ≤ %d", i, n, fakecore.ChunkMax)
		}
	}
}

func turnBody(conv, turn, msg, input string, extra string) string {
	return `{"client_conversation_id":"` + conv + `","client_turn_id":"` + turn + `","user_message_id":"` + msg + `","user_input":"` + input + `"` + extra + `}`
}

func TestTurns(t *testing.T) {
	c, srv := newCore(t, fakecore.Options{})
	c.SetTurnKnowledge("orders", []fakecore.TurnKnowledge{{DocID: 9, Title: "Refunds", Content: "Seven days.", Score: 0.82}})
	post := func(body string) answer {
		return do(t, srv, http.MethodPost, "/agent-api/v1/workspaces/orders/turns", "Bearer "+alice, body, "Content-Type", "application/json")
	}
	first := post(turnBody("c1", "t1", "m1", "hello", ""))
	if first.status != 200 {
		t.Fatalf("first turn: got %d %s; want 200", first.status, first.raw)
	}
	if !bytes.HasPrefix(first.raw, []byte(`{"schema_version":"bailing.agent-turn-context.v1","run_id":"`)) {
		t.Errorf("key order: got %.80s…; want schema_version then run_id", first.raw)
	}
	ctx := first.body["context"].(map[string]any)
	if k := ctx["knowledge"].([]any); len(k) != 1 || k[0].(map[string]any)["ref"] != "knowledge:1" {
		t.Errorf("knowledge got %v; want one knowledge:1 item", k)
	}
	tests := []struct {
		name, body string
		want       int
		code, msg  string
	}{
		{"replay", turnBody("c1", "t1", "m1", "hello", ""), 200, "", ""},
		{"conflict same turn", turnBody("c1", "t1", "m1", "changed", ""), 409, "turn_conflict", "turn id or user message id is already bound to different input"},
		{"conflict same message", turnBody("c1", "t2", "m1", "hello", ""), 409, "turn_conflict", "turn id or user message id is already bound to different input"},
		{"undeclared knowledge_delivery", turnBody("c1", "t3", "m3", "hi", `,"knowledge_delivery":"on_demand"`), 400, "invalid_request", "The Agent turn contains missing or undeclared fields."},
		{"missing field", `{"client_conversation_id":"c1","client_turn_id":"t4","user_input":"x"}`, 400, "invalid_request", "The Agent turn contains missing or undeclared fields."},
		{"invalid json", `{"a":`, 400, "invalid_request", "The request body must be valid JSON."},
		{"not object", `[1]`, 400, "invalid_request", "The request body must be a JSON object."},
		{"bad id", turnBody("c1", "-bad", "m5", "hi", ""), 400, "invalid_request", "client_turn_id must be a 1..128 character stable identifier."},
		{"empty input", turnBody("c1", "t6", "m6", "  ", ""), 400, "invalid_request", "user_input must not be empty."},
		{"too large", turnBody("c1", "t7", "m7", strings.Repeat("x", 512<<10), ""), 413, "arguments_too_large", "The Agent tool request exceeds 524288 bytes."},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := post(tt.body)
			if a.status != tt.want {
				t.Fatalf("status got %d; want %d (%s)", a.status, tt.want, a.raw)
			}
			if tt.want == 200 {
				if !bytes.Equal(a.raw, first.raw) {
					t.Errorf("replay got a different answer; want the frozen one")
				}
				return
			}
			if a.body["error"] != tt.code || a.body["message"] != tt.msg {
				t.Errorf("body got %s; want %s / %s", a.raw, tt.code, tt.msg)
			}
		})
	}
	if got := c.RunsCreated(); got != 1 {
		t.Errorf("runs created got %d; want 1", got)
	}
}

func TestTurnsGzipAndNativeDelivery(t *testing.T) {
	c, srv := newCore(t, fakecore.Options{GzipTurns: true, Native: true})
	c.SetTurnKnowledge("orders", []fakecore.TurnKnowledge{{DocID: 9, Title: "Refunds", Content: "Seven days."}})
	a := do(t, srv, http.MethodPost, "/agent-api/v1/workspaces/orders/turns", "Bearer "+alice,
		turnBody("c1", "t1", "m1", "hi", `,"knowledge_delivery":"on_demand"`), "Accept-Encoding", "gzip")
	if a.status != 200 || a.header.Get("Content-Encoding") != "gzip" {
		t.Fatalf("got %d with content-encoding %q; want 200 gzip", a.status, a.header.Get("Content-Encoding"))
	}
	zr, err := gzip.NewReader(bytes.NewReader(a.raw))
	if err != nil {
		t.Fatal(err)
	}
	plain, _ := io.ReadAll(zr)
	var v struct {
		Context struct {
			Knowledge []any `json:"knowledge"`
		} `json:"context"`
		KnowledgeDelivery struct {
			Mode string `json:"mode"`
		} `json:"knowledge_delivery"`
	}
	if err := json.Unmarshal(plain, &v); err != nil {
		t.Fatal(err)
	}
	if len(v.Context.Knowledge) != 0 || v.KnowledgeDelivery.Mode != "on_demand" {
		t.Errorf("got %d knowledge items and mode %q; want none and on_demand", len(v.Context.Knowledge), v.KnowledgeDelivery.Mode)
	}
}

func TestFaultsAndRecording(t *testing.T) {
	c, srv := newCore(t, fakecore.Options{})
	c.SetFault("/kb/", fakecore.Fault{Status: 503})
	a := do(t, srv, http.MethodPost, "/kb/search", "Bearer "+serviceToken, `{"kb_id":"x","query":"q"}`)
	if a.status != 503 {
		t.Errorf("status fault: got %d; want 503", a.status)
	}
	c.SetFault("/kb/", fakecore.Fault{Reset: true})
	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/kb/search", strings.NewReader(`{}`))
	if resp, err := srv.Client().Do(req); err == nil {
		resp.Body.Close()
		t.Errorf("reset fault: got status %d; want a transport error", resp.StatusCode)
	}
	c.ClearFaults()
	if got := c.Calls("/kb/"); got != 2 {
		t.Errorf("calls got %d; want 2 (faulted requests count)", got)
	}
	r, ok := c.LastRequest("/kb/search")
	if !ok || r.Method != http.MethodPost || string(r.Body) != `{}` {
		t.Errorf("last request got %+v, %v; want the POST with body {}", r, ok)
	}
}

func TestCloseEndsHangs(t *testing.T) {
	c, srv := newCore(t, fakecore.Options{})
	c.SetFault("", fakecore.Fault{Hang: true})
	done := make(chan error, 1)
	go func() {
		resp, err := srv.Client().Get(srv.URL + "/agent-auth/v1/session")
		if err == nil {
			resp.Body.Close()
		}
		done <- err
	}()
	for c.Calls("/") == 0 {
		runtime.Gosched() // wait until the request is inside the fake
	}
	c.Close()
	if err := <-done; err != nil {
		t.Errorf("hanging request after Close: got %v; want it to end", err)
	}
}

// TestKBIDSpelling: ids match case-insensitively and are echoed as sent, but
// a write refreshes only the stored spelling's index (CORE_FACTS Addendum 2).
func TestKBIDSpelling(t *testing.T) {
	c, srv := newCore(t, fakecore.Options{})
	c.AddDoc("kb-a", 1, "Doc", "alpha beta")
	search := func(id string) string {
		a := do(t, srv, http.MethodPost, "/kb/search", "Bearer "+serviceToken, `{"kb_ids":["`+id+`"],"query":"alpha gamma","min_score":-1}`)
		return string(a.raw)
	}
	if got := search("KB-A"); !strings.Contains(got, `"kb_ids":["KB-A"]`) || !strings.Contains(got, `"content":"alpha beta"`) || !strings.Contains(got, `"kb_id":"KB-A"`) {
		t.Fatalf("other spelling: got %s; want the hit, echoed as KB-A", got)
	}
	c.UpdateDoc("kb-a", 1, "Doc", "gamma delta", false)
	if got := search("kb-a"); !strings.Contains(got, `"content":"gamma delta"`) {
		t.Errorf("stored spelling after the write: got %s; want the new chunk", got)
	}
	if got := search("KB-A"); !strings.Contains(got, `"content":"alpha beta"`) {
		t.Errorf("other spelling after the write: got %s; want the stale chunk (its cache was not refreshed)", got)
	}
	c.Reindex()
	if got := search("KB-A"); !strings.Contains(got, `"content":"gamma delta"`) {
		t.Errorf("other spelling after the cache expired: got %s; want the new chunk", got)
	}
}

// TestKBSearchRateLimit: the service credential's client bucket, per minute.
func TestKBSearchRateLimit(t *testing.T) {
	var now atomic.Int64
	now.Store(time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC).Unix())
	c, srv := newCore(t, fakecore.Options{RateLimitPerMin: 2, Now: func() time.Time { return time.Unix(now.Load(), 0) }})
	c.AddDoc("faq", 1, "Doc", "alpha")
	search := func() answer {
		return do(t, srv, http.MethodPost, "/kb/search", "Bearer "+serviceToken, `{"kb_id":"faq","query":"alpha"}`)
	}
	for i := range 2 {
		if a := search(); a.status != 200 {
			t.Fatalf("call %d: got %d %s; want 200", i+1, a.status, a.raw)
		}
	}
	if a := search(); a.status != 429 || string(a.raw) != `{"error":"超出限速（2/分钟）"}` {
		t.Errorf("call 3: got %d %s; want 429 超出限速（2/分钟）", a.status, a.raw)
	}
	now.Add(60)
	if a := search(); a.status != 200 {
		t.Errorf("next minute: got %d %s; want 200", a.status, a.raw)
	}
}

// TestScoreIgnoresStopWords: a question's function words do not rank, in
// English or Chinese; a query of stop-words only still counts them.
func TestScoreIgnoresStopWords(t *testing.T) {
	for _, tc := range []struct {
		query, text string
		want        float64
	}{
		{"Can I get a refund?", "Refunds: a refund is granted within 14 days.", 1},
		{"Can I get a refund?", "Can I get the order shipped? You get a tracking number.", 0},
		{"我可以退款吗", "退款需要人工审批", 1},
		{"what is the", "what is the answer", 1},
		{"refund window policy", "the refund window", 0.667},
	} {
		if got := fakecore.Score(tc.query, tc.text); got != tc.want {
			t.Errorf("Score(%q, %q) = %v; want %v", tc.query, tc.text, got, tc.want)
		}
	}
}

// TestTurnRetrievalFromUserInput: with SetTurnRetrieval a turn's inline
// knowledge is what /kb/search finds for its query (page context, then the
// user input), ranked the same way and cut to top_k and min_score.
func TestTurnRetrievalFromUserInput(t *testing.T) {
	c, srv := newCore(t, fakecore.Options{})
	c.AddDoc("kb1", 1, "Operations handbook", "Step 1 of the procedure: verify the order and inform the customer.")
	c.AddDoc("kb1", 2, "Refund policy", "A refund is granted within 14 days of delivery.")
	c.AddDoc("kb1", 3, "Shipping", "Express shipping takes 2 days; a lost parcel gets a refund or a replacement.")
	c.SetTurnRetrieval("orders", fakecore.TurnRetrieval{KBIDs: []string{"kb1", "no-such-kb"}, TopK: 2, MinScore: 0.3})
	turn := func(id, input, extra string) []string {
		t.Helper()
		a := do(t, srv, http.MethodPost, "/agent-api/v1/workspaces/orders/turns", "Bearer "+alice, turnBody("c-"+id, "t-"+id, "m-"+id, input, extra))
		if a.status != 200 {
			t.Fatalf("turn %q: %d %s", input, a.status, a.raw)
		}
		var titles []string
		for _, k := range a.body["context"].(map[string]any)["knowledge"].([]any) {
			titles = append(titles, k.(map[string]any)["title"].(string))
		}
		return titles
	}
	if got := turn("1", "Can I get a refund?", ""); strings.Join(got, "|") != "Refund policy|Shipping" {
		t.Errorf("refund question: %q; want [Refund policy Shipping]", got)
	}
	if got := turn("2", "How long does express shipping take?", ""); strings.Join(got, "|") != "Shipping" {
		t.Errorf("shipping question: %q; want [Shipping]", got)
	}
	if got := turn("3", "Anything?", ""); len(got) != 0 {
		t.Errorf("unrelated question: %q; want nothing above min_score", got)
	}
	if got := turn("4", "and then?", `,"page_context":{"title":"Operations handbook procedure"}`); strings.Join(got, "|") != "Operations handbook" {
		t.Errorf("page context: %q; want the page title to count in the query", got)
	}
	c.SetEmbeddingsOutage(true, "kb1")
	if got := turn("5", "Can I get a refund?", ""); len(got) != 0 {
		t.Errorf("embeddings outage: %q; want nothing", got)
	}
}

// TestNodeHeaderBound: like Node's HTTP parser, the fake answers a request
// whose request line and headers pass MaxHeaderSize (default 16 KiB) with a
// bare 431 and a closed connection, before any route or record.
func TestNodeHeaderBound(t *testing.T) {
	for _, tc := range []struct {
		name string
		max  int
		pad  int
		want int
	}{
		{"default bound, under", 0, 15 << 10, http.StatusUnauthorized},
		{"default bound, over", 0, 17 << 10, http.StatusRequestHeaderFieldsTooLarge},
		{"smaller bound", 1 << 10, 2 << 10, http.StatusRequestHeaderFieldsTooLarge},
		{"no bound", -1, 64 << 10, http.StatusUnauthorized},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := fakecore.New(fakecore.Options{MaxHeaderSize: tc.max})
			srv := httptest.NewServer(c)
			defer srv.Close()
			req, _ := http.NewRequest(http.MethodGet, srv.URL+"/agent-auth/v1/session", nil)
			req.Header.Set("Authorization", "Bearer "+fakecore.Token("x")+strings.Repeat("a", tc.pad))
			res, err := srv.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(res.Body)
			res.Body.Close()
			if res.StatusCode != tc.want {
				t.Fatalf("got %d; want %d", res.StatusCode, tc.want)
			}
			refused := tc.want == http.StatusRequestHeaderFieldsTooLarge
			if refused && (len(body) != 0 || !res.Close || c.Calls("/") != 0 || c.HeaderRefusals() != 1) {
				t.Errorf("431: body %q, close %v, calls %d, refusals %d; want no body, closed, no call, 1 refusal", body, res.Close, c.Calls("/"), c.HeaderRefusals())
			}
		})
	}
}
