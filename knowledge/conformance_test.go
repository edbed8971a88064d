package knowledge

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/bailinghub/knowledge-sidecar/corefacts"
	"github.com/bailinghub/knowledge-sidecar/internal/testkit"
	"github.com/bailinghub/knowledge-sidecar/protocol"
)

// TestConformance has one row per MUST and per error code of SPEC §2–§6
// that a single request can show. Rows that need a sequence of requests
// (rate limit, paging, tampering, rotation) live in their own tests.
func TestConformance(t *testing.T) {
	type row struct {
		name     string
		endpoint string
		auth     string // "" → tokA; "-" → no header
		route    string // "" → routeKey
		body     func(e *env) string
		mutate   func(e *env) // runs after body (so a ref exists before the change)
		status   int          // 200 for success
		code     protocol.ErrorCode
	}
	q := func(s string) func(*env) string { return func(*env) string { return s } }
	refundRef := func(e *env) string { return e.refFor(tokA, routeKey, "", docRefund) }
	readOf := func(extra string) func(*env) string {
		return func(e *env) string { return `{"ref":"` + refundRef(e) + `"` + extra + `}` }
	}
	readWithRun := func(refRun, reqRun string) func(*env) string {
		return func(e *env) string {
			ref := e.refFor(tokA, routeKey, refRun, docRefund)
			if reqRun == "" {
				return `{"ref":"` + ref + `"}`
			}
			return `{"ref":"` + ref + `","run_id":"` + reqRun + `"}`
		}
	}
	coreErr := func(status int, code string) error {
		return &corefacts.CoreError{Status: status, Code: code, Message: "The route cannot be used."}
	}
	setSys := func(err error) func(*env) { return func(e *env) { e.id.sysInfo[routeKey] = err } }
	editRoute := func(fn func(k *corefacts.KnowledgeConfig)) func(*env) {
		return func(e *env) {
			e.cat.edit(func(c *fakeCatalog) {
				r := c.routes[routeKey]
				k := *r.Knowledge
				k.KBIDs = append([]string(nil), k.KBIDs...)
				fn(&k)
				r.Knowledge = &k
				c.routes[routeKey] = r
			})
		}
	}
	editDoc := func(fn func(d *corefacts.Document)) func(*env) {
		return func(e *env) { e.cat.editDoc(docRefund, fn) }
	}
	editRun := func(id string, fn func(r *corefacts.Run)) func(*env) {
		return func(e *env) {
			e.cat.edit(func(c *fakeCatalog) { r := c.runs[id]; fn(&r); c.runs[id] = r })
		}
	}
	exactly16KiB := func(*env) string {
		s := `{"query":"退款"`
		return s + strings.Repeat(" ", protocol.MaxRequestBytes-len(s)-1) + "}"
	}
	rows := []row{
		// §2 identity
		{name: "capabilities 401 bad bearer", endpoint: "capabilities", auth: "Bearer bha_nope", status: 401, code: protocol.CodeUnauthorized},
		{name: "search 401 missing bearer", endpoint: "search", auth: "-", body: q(`{"query":"x"}`), status: 401, code: protocol.CodeUnauthorized},
		{name: "read 401 bad bearer", endpoint: "read", auth: "Bearer bha_nope", body: q(`{"ref":"kr2.k1.x"}`), status: 401, code: protocol.CodeUnauthorized},
		{name: "identity unavailable 503", endpoint: "search", body: q(`{"query":"x"}`), mutate: func(e *env) { e.id.err = corefacts.ErrUnavailable }, status: 503, code: protocol.CodeUnavailable},
		{name: "identity breaker open 503", endpoint: "capabilities", mutate: func(e *env) { e.id.err = corefacts.ErrBreakerOpen }, status: 503, code: protocol.CodeUnavailable},
		// §2 route
		{name: "route uppercase 404", endpoint: "capabilities", route: "Order-assistant", status: 404, code: protocol.CodeRouteUnavailable},
		{name: "route one char 404", endpoint: "search", route: "a", body: q(`{"query":"x"}`), status: 404, code: protocol.CodeRouteUnavailable},
		{name: "route 65 chars 404", endpoint: "capabilities", route: "a" + strings.Repeat("b", 64), status: 404, code: protocol.CodeRouteUnavailable},
		{name: "route 64 chars syntax ok then unknown 404", endpoint: "capabilities", route: "a" + strings.Repeat("b", 63), status: 404, code: protocol.CodeRouteUnavailable},
		{name: "route leading dash 404", endpoint: "read", route: "-abc", body: q(`{"ref":"x"}`), status: 404, code: protocol.CodeRouteUnavailable},
		{name: "route with slash 404", endpoint: "search", route: "a/b", body: q(`{"query":"x"}`), status: 404, code: protocol.CodeRouteUnavailable},
		{name: "route unknown 404", endpoint: "search", route: "ghost-route", body: q(`{"query":"x"}`), status: 404, code: protocol.CodeRouteUnavailable},
		{name: "route disabled 404", endpoint: "capabilities", route: "off-route", status: 404, code: protocol.CodeRouteUnavailable},
		{name: "gate route_not_allowed relayed", endpoint: "search", body: q(`{"query":"x"}`), mutate: setSys(coreErr(403, "route_not_allowed")), status: 403, code: protocol.CodeRouteNotAllowed},
		{name: "gate audience code relayed", endpoint: "capabilities", mutate: setSys(coreErr(403, "audience_not_allowed")), status: 403, code: "audience_not_allowed"},
		{name: "gate route_unavailable relayed", endpoint: "read", body: q(`{"ref":"x"}`), mutate: setSys(coreErr(404, "route_unavailable")), status: 404, code: protocol.CodeRouteUnavailable},
		{name: "gate 401 from system-info", endpoint: "search", body: q(`{"query":"x"}`), mutate: setSys(corefacts.ErrUnauthorized), status: 401, code: protocol.CodeUnauthorized},
		{name: "gate unavailable 503", endpoint: "search", body: q(`{"query":"x"}`), mutate: setSys(corefacts.ErrUnavailable), status: 503, code: protocol.CodeUnavailable},
		{name: "gate odd 5xx CoreError is 503", endpoint: "search", body: q(`{"query":"x"}`), mutate: setSys(coreErr(500, "boom")), status: 503, code: protocol.CodeUnavailable},
		{name: "older core catalog gate denies", endpoint: "search", body: q(`{"query":"x"}`), mutate: func(e *env) {
			e.id.sysInfo[routeKey] = corefacts.ErrEndpointAbsent
			e.cat.gate[routeKey] = coreErr(403, "route_not_allowed")
		}, status: 403, code: protocol.CodeRouteNotAllowed},
		{name: "older core catalog gate allows", endpoint: "search", body: q(`{"query":"x"}`), mutate: setSys(corefacts.ErrEndpointAbsent), status: 200},
		{name: "older core catalog down 503", endpoint: "capabilities", mutate: func(e *env) {
			e.id.sysInfo[routeKey] = corefacts.ErrEndpointAbsent
			e.cat.down = true
		}, status: 503, code: protocol.CodeUnavailable},
		{name: "knowledge does not require agent_direct", endpoint: "search", body: q(`{"query":"x"}`), mutate: setSys(coreErr(403, "agent_direct_disabled")), status: 200},
		{name: "knowledge does not require agent client runtime", endpoint: "read", body: readOf(""), mutate: setSys(coreErr(403, "agent_client_disabled")), status: 200},
		{name: "agent_direct_disabled falls back to catalog gate", endpoint: "search", body: q(`{"query":"x"}`), mutate: func(e *env) {
			e.id.sysInfo[routeKey] = coreErr(403, "agent_direct_disabled")
			e.cat.gate[routeKey] = coreErr(403, "route_not_allowed")
		}, status: 403, code: protocol.CodeRouteNotAllowed},
		// §2 bodies
		{name: "search 413 over 16 KiB", endpoint: "search", body: q(`{"query":"` + strings.Repeat("x", protocol.MaxRequestBytes) + `"}`), status: 413, code: protocol.CodePayloadTooLarge},
		{name: "read 413 over 16 KiB", endpoint: "read", body: q(strings.Repeat(" ", protocol.MaxRequestBytes+1)), status: 413, code: protocol.CodePayloadTooLarge},
		{name: "exactly 16 KiB accepted", endpoint: "search", body: exactly16KiB, status: 200},
		{name: "malformed JSON 400", endpoint: "search", body: q(`{"query":`), status: 400, code: protocol.CodeInvalidRequest},
		{name: "empty body 400", endpoint: "search", body: q(``), status: 400, code: protocol.CodeInvalidRequest},
		{name: "array body 400", endpoint: "search", body: q(`["query"]`), status: 400, code: protocol.CodeInvalidRequest},
		{name: "unknown field 400", endpoint: "search", body: q(`{"query":"x","top_k":5}`), status: 400, code: protocol.CodeInvalidRequest},
		{name: "unknown read field 400", endpoint: "read", body: q(`{"ref":"x","offset":10}`), status: 400, code: protocol.CodeInvalidRequest},
		{name: "duplicate field 400", endpoint: "search", body: q(`{"query":"x","query":"y"}`), status: 400, code: protocol.CodeInvalidRequest},
		{name: "trailing data 400", endpoint: "search", body: q(`{"query":"x"} {}`), status: 400, code: protocol.CodeInvalidRequest},
		{name: "invalid UTF-8 400", endpoint: "search", body: q("{\"query\":\"\xff\"}"), status: 400, code: protocol.CodeInvalidRequest},
		// §4 search fields
		{name: "query missing 400", endpoint: "search", body: q(`{"limit":3}`), status: 400, code: protocol.CodeInvalidRequest},
		{name: "query number 400", endpoint: "search", body: q(`{"query":5}`), status: 400, code: protocol.CodeInvalidRequest},
		{name: "query null 400", endpoint: "search", body: q(`{"query":null}`), status: 400, code: protocol.CodeInvalidRequest},
		{name: "query empty 400", endpoint: "search", body: q(`{"query":""}`), status: 400, code: protocol.CodeInvalidRequest},
		{name: "query blank 400", endpoint: "search", body: q(`{"query":" \t\n "}`), status: 400, code: protocol.CodeInvalidRequest},
		{name: "query 2001 code points 400", endpoint: "search", body: q(`{"query":"` + strings.Repeat("退", 2001) + `"}`), status: 400, code: protocol.CodeInvalidRequest},
		{name: "query 2000 code points ok", endpoint: "search", body: q(`{"query":"` + strings.Repeat("退", 2000) + `"}`), status: 200},
		// Core counts UTF-16 code units: an emoji is 2, so 1000 emoji are
		// the limit and 1000 emoji plus one letter exceed it (1001 code points).
		{name: "query 1000 emoji (2000 UTF-16 units) ok", endpoint: "search", body: q(`{"query":"` + strings.Repeat("😀", 1000) + `"}`), status: 200},
		{name: "query 1000 emoji + 1 (2001 UTF-16 units) 400", endpoint: "search", body: q(`{"query":"a` + strings.Repeat("😀", 1000) + `"}`), status: 400, code: protocol.CodeInvalidRequest},
		{name: "query BOM only 400 (JavaScript trim removes U+FEFF)", endpoint: "search", body: q(`{"query":"\ufeff \u3000"}`), status: 400, code: protocol.CodeInvalidRequest},
		{name: "query NEL only ok (JavaScript trim keeps U+0085)", endpoint: "search", body: q(`{"query":"\u0085"}`), status: 200},
		{name: "query C0 control 400", endpoint: "search", body: q(`{"query":"a\u0001b"}`), status: 400, code: protocol.CodeInvalidRequest},
		{name: "query NUL 400", endpoint: "search", body: q(`{"query":"a\u0000"}`), status: 400, code: protocol.CodeInvalidRequest},
		{name: "query tab LF CR ok", endpoint: "search", body: q(`{"query":"a\tb\nc\rd"}`), status: 200},
		{name: "limit 0 400", endpoint: "search", body: q(`{"query":"x","limit":0}`), status: 400, code: protocol.CodeInvalidRequest},
		{name: "limit 4 400", endpoint: "search", body: q(`{"query":"x","limit":4}`), status: 400, code: protocol.CodeInvalidRequest},
		{name: "limit -1 400", endpoint: "search", body: q(`{"query":"x","limit":-1}`), status: 400, code: protocol.CodeInvalidRequest},
		{name: "limit 2.5 400", endpoint: "search", body: q(`{"query":"x","limit":2.5}`), status: 400, code: protocol.CodeInvalidRequest},
		{name: "limit 3.0 400", endpoint: "search", body: q(`{"query":"x","limit":3.0}`), status: 400, code: protocol.CodeInvalidRequest},
		{name: "limit 1e0 400", endpoint: "search", body: q(`{"query":"x","limit":1e0}`), status: 400, code: protocol.CodeInvalidRequest},
		{name: "limit string 400", endpoint: "search", body: q(`{"query":"x","limit":"3"}`), status: 400, code: protocol.CodeInvalidRequest},
		{name: "limit bool 400", endpoint: "search", body: q(`{"query":"x","limit":true}`), status: 400, code: protocol.CodeInvalidRequest},
		{name: "limit huge 400", endpoint: "search", body: q(`{"query":"x","limit":99999999999999999999}`), status: 400, code: protocol.CodeInvalidRequest},
		{name: "limit null is default", endpoint: "search", body: q(`{"query":"x","limit":null}`), status: 200},
		{name: "limit 1 ok", endpoint: "search", body: q(`{"query":"x","limit":1}`), status: 200},
		// §2/§4 run
		{name: "run_id not a UUID 400", endpoint: "search", body: q(`{"query":"x","run_id":"run-1"}`), status: 400, code: protocol.CodeInvalidRequest},
		{name: "run_id number 400", endpoint: "search", body: q(`{"query":"x","run_id":7}`), status: 400, code: protocol.CodeInvalidRequest},
		{name: "run_id unknown 404", endpoint: "search", body: q(`{"query":"x","run_id":"00000000-0000-4000-8000-000000000000"}`), status: 404, code: protocol.CodeRunNotFound},
		{name: "run of another session 404", endpoint: "search", body: q(`{"query":"x","run_id":"` + runOther + `"}`), status: 404, code: protocol.CodeRunNotFound},
		{name: "run of another client 404", endpoint: "search", auth: tokC, body: q(`{"query":"x","run_id":"` + runA + `"}`), status: 404, code: protocol.CodeRunNotFound},
		{name: "run of another route 404", endpoint: "search", route: routeTwin, body: q(`{"query":"x","run_id":"` + runA + `"}`), status: 404, code: protocol.CodeRunNotFound},
		{name: "run preparing 409", endpoint: "search", body: q(`{"query":"x","run_id":"` + runPrep + `"}`), status: 409, code: protocol.CodeRunNotActive},
		{name: "run completed 409", endpoint: "search", body: q(`{"query":"x","run_id":"` + runDone + `"}`), status: 409, code: protocol.CodeRunNotActive},
		{name: "run context_ready but completed_at set 409", endpoint: "search", body: q(`{"query":"x","run_id":"` + runA + `"}`),
			mutate: editRun(runA, func(r *corefacts.Run) { r.CompletedAt = &t0 }), status: 409, code: protocol.CodeRunNotActive},
		{name: "run uppercase UUID ok", endpoint: "search", body: q(`{"query":"x","run_id":"` + strings.ToUpper(runA) + `"}`), status: 200},
		{name: "run row absent 404", endpoint: "search", body: q(`{"query":"x","run_id":"` + runA + `"}`), mutate: func(e *env) {
			e.id.sysInfo[routeKey] = nil
			e.cat.edit(func(c *fakeCatalog) { c.runs = nil })
		}, status: 404, code: protocol.CodeRunNotFound},
		// §4 degraded
		{name: "search catalog down 503", endpoint: "search", body: q(`{"query":"x"}`), mutate: func(e *env) { e.cat.down = true }, status: 503, code: protocol.CodeUnavailable},
		{name: "search documents down 503", endpoint: "search", body: q(`{"query":"x"}`), mutate: func(e *env) { e.cat.docsDown = true }, status: 503, code: protocol.CodeUnavailable},
		{name: "search Core down is 200 unavailable", endpoint: "search", body: q(`{"query":"x"}`), mutate: func(e *env) {
			e.ret.errs["faq"], e.ret.errs["policy"] = corefacts.ErrBreakerOpen, corefacts.ErrUnavailable
		}, status: 200},
		// §6 read fields
		{name: "ref missing 400", endpoint: "read", body: q(`{"max_bytes":4096}`), status: 400, code: protocol.CodeInvalidRequest},
		{name: "ref number 400", endpoint: "read", body: q(`{"ref":12}`), status: 400, code: protocol.CodeInvalidRequest},
		{name: "ref empty 400", endpoint: "read", body: q(`{"ref":""}`), status: 400, code: protocol.CodeInvalidRequest},
		{name: "ref knowledge:1 invalid", endpoint: "read", body: q(`{"ref":"knowledge:1"}`), status: 400, code: protocol.CodeReferenceInvalid},
		{name: "ref plain base64 invalid", endpoint: "read", body: q(`{"ref":"kr2.k1.AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"}`), status: 400, code: protocol.CodeReferenceInvalid},
		{name: "ref over 512 bytes invalid", endpoint: "read", body: q(`{"ref":"kr2.k1.` + strings.Repeat("A", 506) + `"}`), status: 400, code: protocol.CodeReferenceInvalid},
		{name: "ref version 1 invalid", endpoint: "read", body: func(e *env) string {
			return `{"ref":"kr1.` + refundRef(e)[len(RefPrefix):] + `"}`
		}, status: 400, code: protocol.CodeReferenceInvalid},
		{name: "cursor version 1 invalid", endpoint: "read", body: func(e *env) string {
			ref := refundRef(e)
			return `{"ref":"` + ref + `","cursor":"kc1.` + cursorOf(e, ref, 0)[len(CursorPrefix):] + `"}`
		}, status: 400, code: protocol.CodeReferenceInvalid},
		{name: "max_bytes 4095 400", endpoint: "read", body: readOf(`,"max_bytes":4095`), status: 400, code: protocol.CodeInvalidRequest},
		{name: "max_bytes 32769 400", endpoint: "read", body: readOf(`,"max_bytes":32769`), status: 400, code: protocol.CodeInvalidRequest},
		{name: "max_bytes string 400", endpoint: "read", body: readOf(`,"max_bytes":"16384"`), status: 400, code: protocol.CodeInvalidRequest},
		{name: "max_bytes fraction 400", endpoint: "read", body: readOf(`,"max_bytes":16384.5`), status: 400, code: protocol.CodeInvalidRequest},
		{name: "max_bytes 4096 ok", endpoint: "read", body: readOf(`,"max_bytes":4096`), status: 200},
		{name: "max_bytes 32768 ok", endpoint: "read", body: readOf(`,"max_bytes":32768`), status: 200},
		{name: "cursor number 400", endpoint: "read", body: readOf(`,"cursor":5`), status: 400, code: protocol.CodeInvalidRequest},
		{name: "cursor empty 400", endpoint: "read", body: readOf(`,"cursor":""`), status: 400, code: protocol.CodeInvalidRequest},
		{name: "cursor null is absent", endpoint: "read", body: readOf(`,"cursor":null`), status: 200},
		{name: "cursor garbage invalid", endpoint: "read", body: readOf(`,"cursor":"kc2.k1.AAAA"`), status: 400, code: protocol.CodeReferenceInvalid},
		{name: "ref used as cursor invalid", endpoint: "read", body: func(e *env) string {
			ref := refundRef(e)
			return `{"ref":"` + ref + `","cursor":"` + ref + `"}`
		}, status: 400, code: protocol.CodeReferenceInvalid},
		{name: "cursor used as ref invalid", endpoint: "read", body: func(e *env) string {
			return `{"ref":"` + cursorOf(e, refundRef(e), 0) + `"}`
		}, status: 400, code: protocol.CodeReferenceInvalid},
		// §5 expiry
		{name: "ref at 300 s still valid", endpoint: "read", body: readOf(""), mutate: func(e *env) { e.clock.Advance(300 * time.Second) }, status: 200},
		{name: "ref after 300 s expired 410", endpoint: "read", body: readOf(""), mutate: func(e *env) { e.clock.Advance(301 * time.Second) }, status: 410, code: protocol.CodeReferenceExpired},
		{name: "cursor expired 410", endpoint: "read", body: func(e *env) string {
			ref := refundRef(e)
			cur, _ := e.svc.keys.SealCursor(CursorClaims{Expiry: e.clock.Now().Add(-time.Second), RefDigest: RefDigest(ref), NextOffset: 0})
			return `{"ref":"` + ref + `","cursor":"` + cur + `"}`
		}, status: 410, code: protocol.CodeReferenceExpired},
		// §5 binding
		{name: "ref of another session invalid", endpoint: "read", auth: tokB, body: readOf(""), status: 400, code: protocol.CodeReferenceInvalid},
		{name: "ref of another client invalid", endpoint: "read", auth: tokC, body: readOf(""), status: 400, code: protocol.CodeReferenceInvalid},
		{name: "ref of another route invalid", endpoint: "read", route: routeTwin, body: readOf(""), status: 400, code: protocol.CodeReferenceInvalid},
		{name: "ref after principal change invalid", endpoint: "read", body: readOf(""), mutate: func(e *env) {
			s := sessionA
			s.Principal.ID = "user-99"
			e.id.sessions[tokA] = s
		}, status: 400, code: protocol.CodeReferenceInvalid},
		{name: "ref after on_behalf_of change invalid", endpoint: "read", body: readOf(""), mutate: func(e *env) {
			s := sessionA
			s.OnBehalfOf = "t7:someone-else"
			e.id.sessions[tokA] = s
		}, status: 400, code: protocol.CodeReferenceInvalid},
		{name: "ref with run read with other run invalid", endpoint: "read", body: readWithRun(runA, runB), status: 400, code: protocol.CodeReferenceInvalid},
		{name: "ref with run read without run invalid", endpoint: "read", body: readWithRun(runA, ""), status: 400, code: protocol.CodeReferenceInvalid},
		{name: "ref without run read with run invalid", endpoint: "read", body: readWithRun("", runA), status: 400, code: protocol.CodeReferenceInvalid},
		{name: "ref with run read with same run ok", endpoint: "read", body: readWithRun(runA, runA), status: 200},
		{name: "ref with run read with uppercase run ok", endpoint: "read", body: readWithRun(runA, strings.ToUpper(runA)), status: 200},
		{name: "cursor of another ref invalid", endpoint: "read", body: func(e *env) string {
			refShip := e.refFor(tokA, routeKey, "", docShip)
			return `{"ref":"` + refundRef(e) + `","cursor":"` + cursorOf(e, refShip, 0) + `"}`
		}, status: 400, code: protocol.CodeReferenceInvalid},
		// §6 run re-check
		{name: "read run completed since 409", endpoint: "read", body: readWithRun(runA, runA),
			mutate: editRun(runA, func(r *corefacts.Run) { r.Status = "completed"; r.CompletedAt = &t0 }), status: 409, code: protocol.CodeRunNotActive},
		{name: "read run no longer owned 404", endpoint: "read", body: readWithRun(runA, runA),
			mutate: editRun(runA, func(r *corefacts.Run) { r.SessionID = "sess-z" }), status: 404, code: protocol.CodeRunNotFound},
		// §6 scope
		{name: "scope top_k changed 409", endpoint: "read", body: readOf(""), mutate: editRoute(func(k *corefacts.KnowledgeConfig) { k.TopK = 6 }), status: 409, code: protocol.CodeScopeChanged},
		{name: "scope min_score changed 409", endpoint: "read", body: readOf(""), mutate: editRoute(func(k *corefacts.KnowledgeConfig) { k.MinScore = 0.4 }), status: 409, code: protocol.CodeScopeChanged},
		{name: "scope inject changed 409", endpoint: "read", body: readOf(""), mutate: editRoute(func(k *corefacts.KnowledgeConfig) { k.Inject = "doc" }), status: 409, code: protocol.CodeScopeChanged},
		{name: "scope max_docs changed 409", endpoint: "read", body: readOf(""), mutate: editRoute(func(k *corefacts.KnowledgeConfig) { k.MaxDocs = 5 }), status: 409, code: protocol.CodeScopeChanged},
		{name: "scope page_boost changed 409", endpoint: "read", body: readOf(""), mutate: editRoute(func(k *corefacts.KnowledgeConfig) { k.PageBoost = true }), status: 409, code: protocol.CodeScopeChanged},
		{name: "scope kb order changed 409", endpoint: "read", body: readOf(""), mutate: editRoute(func(k *corefacts.KnowledgeConfig) { k.KBIDs = []string{"policy", "faq"} }), status: 409, code: protocol.CodeScopeChanged},
		{name: "scope kb removed from route 409", endpoint: "read", body: readOf(""), mutate: editRoute(func(k *corefacts.KnowledgeConfig) { k.KBIDs = []string{"policy"} }), status: 409, code: protocol.CodeScopeChanged},
		{name: "scope knowledge removed 409", endpoint: "read", body: readOf(""), mutate: func(e *env) {
			e.cat.edit(func(c *fakeCatalog) { r := c.routes[routeKey]; r.Knowledge = nil; c.routes[routeKey] = r })
		}, status: 409, code: protocol.CodeScopeChanged},
		// §6 document
		{name: "doc content updated 409", endpoint: "read", body: readOf(""), mutate: editDoc(func(d *corefacts.Document) { d.Content += " 新增" }), status: 409, code: protocol.CodeKnowledgeChanged},
		{name: "doc title updated 409", endpoint: "read", body: readOf(""), mutate: editDoc(func(d *corefacts.Document) { d.Title = "退款规则 v2" }), status: 409, code: protocol.CodeKnowledgeChanged},
		{name: "doc re-embedding 409", endpoint: "read", body: readOf(""), mutate: editDoc(func(d *corefacts.Document) { d.Status = "embedding" }), status: 409, code: protocol.CodeKnowledgeChanged},
		{name: "doc error state 409", endpoint: "read", body: readOf(""), mutate: editDoc(func(d *corefacts.Document) { d.Status = "error" }), status: 409, code: protocol.CodeKnowledgeChanged},
		{name: "doc moved to another KB 409", endpoint: "read", body: readOf(""), mutate: editDoc(func(d *corefacts.Document) { d.KBID = "policy" }), status: 409, code: protocol.CodeKnowledgeChanged},
		{name: "doc deleted 409", endpoint: "read", body: readOf(""), mutate: func(e *env) { e.cat.edit(func(c *fakeCatalog) { delete(c.docs, docRefund) }) }, status: 409, code: protocol.CodeKnowledgeChanged},
		{name: "kb disabled 409", endpoint: "read", body: readOf(""), mutate: func(e *env) { e.cat.edit(func(c *fakeCatalog) { c.kbs["faq"] = false }) }, status: 409, code: protocol.CodeKnowledgeChanged},
		{name: "kb deleted 409", endpoint: "read", body: readOf(""), mutate: func(e *env) { e.cat.edit(func(c *fakeCatalog) { delete(c.kbs, "faq") }) }, status: 409, code: protocol.CodeKnowledgeChanged},
		{name: "read catalog down 503", endpoint: "read", body: readOf(""), mutate: func(e *env) { e.cat.down = true }, status: 503, code: protocol.CodeUnavailable},
		{name: "read documents down 503", endpoint: "read", body: readOf(""), mutate: func(e *env) { e.cat.docsDown = true }, status: 503, code: protocol.CodeUnavailable},
		{name: "read Core retrieval down still reads", endpoint: "read", body: readOf(""), mutate: func(e *env) { e.ret.unusable = true }, status: 200},
		// §3 capabilities
		{name: "capabilities ok", endpoint: "capabilities", status: 200},
		{name: "capabilities route without knowledge ok", endpoint: "capabilities", route: routeNone, status: 200},
		{name: "capabilities catalog down nothing known 503", endpoint: "capabilities", mutate: func(e *env) { e.cat.down = true }, status: 503, code: protocol.CodeUnavailable},
	}
	for _, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			e := newEnv(t)
			auth := r.auth
			switch auth {
			case "":
				auth = tokA
			case "-":
				auth = ""
			}
			route := r.route
			if route == "" {
				route = routeKey
			}
			body := ""
			if r.body != nil {
				body = r.body(e)
			}
			if r.mutate != nil {
				r.mutate(e)
			}
			_, out, ke := e.call(r.endpoint, auth, route, body)
			if r.status == 200 {
				if ke != nil {
					t.Fatalf("got %d %s (%s); want 200", ke.Status, ke.Code, ke.Message)
				}
				assertNoSecrets(t, string(out))
				return
			}
			if ke == nil {
				t.Fatalf("got 200 %s; want %d %s", out, r.status, r.code)
			}
			if ke.Status != r.status || ke.Code != r.code {
				t.Fatalf("got %d %s (%s); want %d %s", ke.Status, ke.Code, ke.Message, r.status, r.code)
			}
			assertSafeError(t, ke)
		})
	}
}

// cursorOf signs a cursor for ref at offset with the env's keys.
func cursorOf(e *env, ref string, offset int64) string {
	c, err := e.svc.keys.SealCursor(CursorClaims{Expiry: e.clock.Now().Add(protocol.ReferenceTTL), RefDigest: RefDigest(ref), NextOffset: offset, Served: offset})
	if err != nil {
		e.t.Fatal(err)
	}
	return c
}

// assertSafeError checks an error answer carries no document text, tokens
// or internals, and that its message is one English sentence.
func assertSafeError(t *testing.T, ke *Error) {
	t.Helper()
	text := string(ke.Code) + " " + ke.Message
	for _, bad := range []string{"退款", "Shipping", "Policy:", "bha_", "Bearer", "SELECT", "tcp(", "127.0.0.1", "test catalog"} {
		if strings.Contains(text, bad) {
			t.Errorf("error %q contains %q; want no document text, tokens or internals", text, bad)
		}
	}
	if ke.Message == "" || !strings.HasSuffix(ke.Message, ".") {
		t.Errorf("message %q; want one sentence ending in a period", ke.Message)
	}
	if ke.Unwrap() != ke.Err {
		t.Errorf("Unwrap got %v; want %v", ke.Unwrap(), ke.Err)
	}
}

func assertNoSecrets(t *testing.T, body string) {
	t.Helper()
	for _, bad := range []string{"bha_", "Bearer", "QUJD"} {
		if strings.Contains(body, bad) {
			t.Errorf("body contains %q; want no tokens or keys", bad)
		}
	}
}

// TestCheckOrder sends requests that are wrong in two ways at once; the
// earlier check in SPEC §2's order must win.
func TestCheckOrder(t *testing.T) {
	type step struct {
		name   string
		auth   string
		route  string
		body   func(e *env) string
		mutate func(e *env)
		code   protocol.ErrorCode
	}
	big := `{"query":"` + strings.Repeat("x", protocol.MaxRequestBytes) + `"}`
	steps := []step{
		{name: "identity before route syntax", auth: "Bearer bha_bad", route: "BAD", code: protocol.CodeUnauthorized},
		{name: "identity before route gate", auth: "Bearer bha_bad", mutate: func(e *env) {
			e.id.sysInfo[routeKey] = &corefacts.CoreError{Status: 403, Code: "route_not_allowed"}
		}, code: protocol.CodeUnauthorized},
		{name: "identity before body size", auth: "Bearer bha_bad", body: func(*env) string { return big }, code: protocol.CodeUnauthorized},
		{name: "rate limit before route syntax", route: "BAD", mutate: exhaustRate, code: protocol.CodeRateLimited},
		// SPEC §2 (changed with managed tasks): the body is checked before the
		// route, as on Core's own search endpoint.
		{name: "body size before route syntax", route: "BAD", body: func(*env) string { return big }, code: protocol.CodePayloadTooLarge},
		{name: "body size before route gate", body: func(*env) string { return big }, mutate: func(e *env) {
			e.id.sysInfo[routeKey] = &corefacts.CoreError{Status: 403, Code: "route_not_allowed"}
		}, code: protocol.CodePayloadTooLarge},
		{name: "body shape before route existence", route: "ghost-route", body: func(*env) string { return `{` }, code: protocol.CodeInvalidRequest},
		{name: "run_id format before route gate", body: func(*env) string { return `{"query":"x","run_id":"nope"}` }, mutate: func(e *env) {
			e.id.sysInfo[routeKey] = &corefacts.CoreError{Status: 403, Code: "route_not_allowed"}
		}, code: protocol.CodeInvalidRequest},
		{name: "route syntax after a valid body", route: "BAD", code: protocol.CodeRouteUnavailable},
		{name: "body size before shape", body: func(*env) string { return big[:len(big)-1] }, code: protocol.CodePayloadTooLarge},
		{name: "shape before ref MAC", body: func(*env) string { return `{"ref":"kr2.k1.AAAA","max_bytes":1}` }, code: protocol.CodeInvalidRequest},
		{name: "shape before run", body: func(*env) string { return `{"query":"x","limit":9,"run_id":"` + runDone + `"}` }, code: protocol.CodeInvalidRequest},
		{name: "ref MAC before expiry", body: func(e *env) string {
			return `{"ref":"` + flipLast(e.refFor(tokA, routeKey, "", docRefund)) + `"}`
		}, mutate: func(e *env) { e.clock.Advance(time.Hour) }, code: protocol.CodeReferenceInvalid},
		{name: "cursor MAC before ref expiry", body: func(e *env) string {
			return `{"ref":"` + e.refFor(tokA, routeKey, "", docRefund) + `","cursor":"kc2.k1.AAAA"}`
		}, mutate: func(e *env) { e.clock.Advance(time.Hour) }, code: protocol.CodeReferenceInvalid},
		{name: "expiry before binding", auth: tokB, body: func(e *env) string {
			return `{"ref":"` + e.refFor(tokA, routeKey, "", docRefund) + `"}`
		}, mutate: func(e *env) { e.clock.Advance(time.Hour) }, code: protocol.CodeReferenceExpired},
		{name: "binding before run", body: func(e *env) string {
			return `{"ref":"` + e.refFor(tokA, routeKey, runA, docRefund) + `","run_id":"` + runOther + `"}`
		}, code: protocol.CodeReferenceInvalid},
		{name: "run before scope", body: func(e *env) string {
			return `{"ref":"` + e.refFor(tokA, routeKey, runA, docRefund) + `","run_id":"` + runA + `"}`
		}, mutate: func(e *env) {
			e.cat.edit(func(c *fakeCatalog) {
				r := c.runs[runA]
				r.Status = "completed"
				c.runs[runA] = r
				c.editKnowledge(func(k *corefacts.KnowledgeConfig) { k.TopK = 9 })
			})
		}, code: protocol.CodeRunNotActive},
		{name: "scope before document", body: func(e *env) string {
			return `{"ref":"` + e.refFor(tokA, routeKey, "", docRefund) + `"}`
		}, mutate: func(e *env) {
			e.cat.edit(func(c *fakeCatalog) {
				delete(c.docs, docRefund)
				c.editKnowledge(func(k *corefacts.KnowledgeConfig) { k.MaxDocs = 9 })
			})
		}, code: protocol.CodeScopeChanged},
	}
	// Each step also runs over a catalog that reads the route with the rows
	// that follow it in one statement (RouteBundler, as the SQL catalog
	// does): prefetching must not change which check answers.
	for _, bundled := range []bool{false, true} {
		for _, s := range steps {
			name := s.name
			var opts []func(*Options)
			if bundled {
				name += "/bundled"
				opts = append(opts, withBundler)
			}
			t.Run(name, func(t *testing.T) {
				e := newEnv(t, opts...)
				auth, route := s.auth, s.route
				if auth == "" {
					auth = tokA
				}
				if route == "" {
					route = routeKey
				}
				body := `{"query":"x"}`
				if s.body != nil {
					body = s.body(e)
				}
				if s.mutate != nil {
					s.mutate(e)
				}
				endpoint := "search"
				if strings.Contains(body, `"ref"`) {
					endpoint = "read"
				}
				_, _, ke := e.call(endpoint, auth, route, body)
				if ke == nil || ke.Code != s.code {
					t.Fatalf("got %v; want %s", ke, s.code)
				}
			})
		}
	}
	t.Run("unauthenticated body is never read", func(t *testing.T) {
		e := newEnv(t)
		for _, ep := range []string{"search", "read"} {
			var err error
			if ep == "search" {
				_, err = e.svc.Search(t.Context(), "Bearer bha_bad", testkit.RouteKey(routeKey), failingReader{t})
			} else {
				_, err = e.svc.Read(t.Context(), "Bearer bha_bad", testkit.RouteKey(routeKey), failingReader{t})
			}
			var ke *Error
			if !errors.As(err, &ke) || ke.Status != 401 {
				t.Fatalf("%s: got %v; want 401", ep, err)
			}
		}
	})
	t.Run("body of a rate-limited session is never read", func(t *testing.T) {
		e := newEnv(t)
		exhaustRate(e)
		_, err := e.svc.Search(t.Context(), tokA, testkit.RouteKey("NOT_A_ROUTE"), failingReader{t})
		var ke *Error
		if !errors.As(err, &ke) || ke.Status != 429 {
			t.Fatalf("got %v; want 429", err)
		}
	})
}

func exhaustRate(e *env) {
	for i := 0; i < DefaultRateBurst; i++ {
		e.svc.limiter.allow(e.t.Context(), sessionA.SessionID)
	}
}

func flipLast(s string) string {
	b := []byte(s)
	if b[len(b)-1] == 'A' {
		b[len(b)-1] = 'B'
	} else {
		b[len(b)-1] = 'A'
	}
	return string(b)
}

// TestRateLimit: token bucket per session_id, default 10/s burst 20, 429
// rate_limited, clock injected.
func TestRateLimit(t *testing.T) {
	e := newEnv(t)
	for i := 0; i < DefaultRateBurst; i++ {
		if _, _, ke := e.call("capabilities", tokA, routeKey, ""); ke != nil {
			t.Fatalf("request %d: got %v; want success within the burst", i+1, ke)
		}
	}
	_, _, ke := e.call("capabilities", tokA, routeKey, "")
	if ke == nil || ke.Status != 429 || ke.Code != protocol.CodeRateLimited {
		t.Fatalf("request %d: got %v; want 429 rate_limited", DefaultRateBurst+1, ke)
	}
	// Another session has its own bucket.
	if _, _, ke := e.call("capabilities", tokB, routeKey, ""); ke != nil {
		t.Fatalf("other session: got %v; want success", ke)
	}
	// The same session on another client is the same session_id: limited.
	if _, _, ke := e.call("capabilities", tokC, routeKey, ""); ke == nil || ke.Code != protocol.CodeRateLimited {
		t.Fatalf("same session_id via other token: got %v; want rate_limited", ke)
	}
	// 10 tokens per second refill.
	e.clock.Advance(time.Second)
	for i := 0; i < DefaultRateLimit; i++ {
		if _, _, ke := e.call("search", tokA, routeKey, `{"query":"x"}`); ke != nil {
			t.Fatalf("after refill request %d: got %v; want success", i+1, ke)
		}
	}
	if _, _, ke := e.call("read", tokA, routeKey, `{"ref":"x"}`); ke == nil || ke.Code != protocol.CodeRateLimited {
		t.Fatalf("after refill: got %v; want rate_limited", ke)
	}
	// Configured limits are honoured.
	e2 := newEnv(t, func(o *Options) { o.RateLimit, o.RateBurst = 1, 2 })
	for i := 0; i < 2; i++ {
		if _, _, ke := e2.call("capabilities", tokA, routeKey, ""); ke != nil {
			t.Fatalf("custom burst request %d: got %v", i+1, ke)
		}
	}
	if _, _, ke := e2.call("capabilities", tokA, routeKey, ""); ke == nil || ke.Code != protocol.CodeRateLimited {
		t.Fatalf("custom burst exceeded: got %v; want rate_limited", ke)
	}
}

func TestNewValidatesOptions(t *testing.T) {
	e := newEnv(t)
	good := Options{Identity: e.id, Retriever: e.ret, Catalog: e.cat, Keys: testKeys(t)}
	tests := []struct {
		name string
		edit func(o *Options)
	}{
		{"no identity", func(o *Options) { o.Identity = nil }},
		{"no retriever", func(o *Options) { o.Retriever = nil }},
		{"no catalog", func(o *Options) { o.Catalog = nil }},
		{"no keys", func(o *Options) { o.Keys = nil }},
		{"negative rate", func(o *Options) { o.RateLimit = -1 }},
		{"negative burst", func(o *Options) { o.RateBurst = -1 }},
		{"negative timeout", func(o *Options) { o.RetrievalTimeout = -time.Second }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := good
			tc.edit(&o)
			if _, err := New(o); err == nil {
				t.Fatalf("got nil error; want one")
			}
		})
	}
	if _, err := New(good); err != nil {
		t.Fatalf("good options: got %v; want nil", err)
	}
}

func TestErrorString(t *testing.T) {
	e := &Error{Status: 503, Code: protocol.CodeUnavailable, Message: "m.", Err: fmt.Errorf("x: %w", corefacts.ErrUnavailable)}
	if !errors.Is(e, corefacts.ErrUnavailable) {
		t.Fatalf("errors.Is through *Error: got false; want true")
	}
	if got := e.Error(); !strings.Contains(got, "503 knowledge_unavailable") {
		t.Fatalf("Error() = %q; want status and code", got)
	}
}
