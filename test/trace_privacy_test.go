package test

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/bailinghub/knowledge-sidecar/internal/fakecore"
	"github.com/bailinghub/knowledge-sidecar/internal/testkit/testdb"
)

var refField = regexp.MustCompile(`"(?:ref|next_cursor|cursor)"\s*:\s*"([^"]+)"`)

// TestTracePrivacy walks every span of a full scenario (search, a paged
// read, an on_demand turn through the Redis ledger, errors) and fails on
// any bearer token, Core credential, ref or cursor, query, document text,
// DSN or Redis URL in a span name, attribute, event, status, link or the
// resource.
func TestTracePrivacy(t *testing.T) {
	w := NewWorld(t, WorldOptions{Core: fakecore.Options{SystemInfo: true}})
	tc := startTraced(t, w, sdktrace.AlwaysSample())
	ws := tc.WS(testdb.RouteMulti)
	var bodies [][]byte
	secret := []string{w.TokenA, w.TokenB, w.ServiceToken, w.DB.ReadOnlyDSN, tc.redis, "127.0.0.1:6379"}
	if i := strings.LastIndex(w.DB.ReadOnlyDSN, "@"); i > 0 {
		secret = append(secret, w.DB.ReadOnlyDSN[:i]) // user:password
	}
	step := func(what, method, url, token string, body []byte, want int) []byte {
		t.Helper()
		code, got := callH(t, method, url, token, body, nil)
		if code != want {
			t.Fatalf("%s: got %d %s; want %d", what, code, clip(string(got)), want)
		}
		bodies = append(bodies, got)
		tc.awaitServer(t)
		return got
	}
	const query = "refunds accepted within days of delivery"
	secret = append(secret, query, testdb.BigDocUnit)
	step("search", "POST", ws+"/knowledge/search", w.TokenA, []byte(`{"query":"`+query+`"}`), 200)
	big := step("search big", "POST", ws+"/knowledge/search", w.TokenA, []byte(`{"query":"`+testdb.BigDocUnit+`"}`), 200)
	ref := hintRef(t, big, testdb.DocBigTitle)
	var page struct {
		Content    string  `json:"content"`
		NextCursor *string `json:"next_cursor"`
	}
	raw := step("read", "POST", ws+"/knowledge/read", w.TokenA, []byte(`{"ref":"`+ref+`","max_bytes":4096}`), 200)
	if err := json.Unmarshal(raw, &page); err != nil || page.NextCursor == nil || len(page.Content) < 64 {
		t.Fatalf("read: want a page with a cursor: %s", clip(string(raw)))
	}
	secret = append(secret, page.Content[:48])
	raw = step("read page 2", "POST", ws+"/knowledge/read", w.TokenA, []byte(`{"ref":"`+ref+`","cursor":"`+*page.NextCursor+`","max_bytes":4096}`), 200)
	if json.Unmarshal(raw, &page) == nil && len(page.Content) >= 48 {
		secret = append(secret, page.Content[:48])
	}
	ti := newTurn(t.Name())
	secret = append(secret, ti.Input)
	step("turn", "POST", tc.WS(testdb.RouteMulti)+"/turns", w.TokenA, ti.body(modeJSON("on_demand")), 200)
	// Errors: a bearer Core rejects, a tampered ref, a route that is no row.
	step("bad bearer", "POST", ws+"/knowledge/search", "not-a-token-"+w.TokenB[:8], []byte(`{"query":"`+query+`"}`), 401)
	secret = append(secret, "not-a-token-"+w.TokenB[:8])
	step("bad ref", "POST", ws+"/knowledge/read", w.TokenA, []byte(`{"ref":"`+ref[:len(ref)-4]+`AAAA"}`), 400)
	step("unknown route", "POST", tc.WS(testdb.RouteMissing)+"/knowledge/search", w.TokenA, []byte(`{"query":"`+query+`"}`), 404)
	step("pass-through", "GET", tc.URL+"/agent-auth/v1/session?token="+w.TokenB, w.TokenA, nil, 200)

	for _, b := range bodies {
		for _, m := range refField.FindAllSubmatch(b, -1) {
			secret = append(secret, string(m[1]))
		}
	}
	spans := tc.rec.Ended()
	kinds := map[string]bool{}
	for _, s := range spans {
		switch {
		case s.SpanKind() == trace.SpanKindServer:
			kinds["server"] = true
		case hasAttr(s, "db.system.name", "redis"):
			kinds["redis"] = true
		case hasAttr(s, "db.system.name", "mysql"):
			kinds["mysql"] = true
		case s.SpanKind() == trace.SpanKindClient:
			kinds["http"] = true
		}
	}
	if len(kinds) != 4 {
		t.Fatalf("the scenario recorded span kinds %v; want server, http, mysql and redis: %s", kinds, spanNames(spans))
	}
	for _, s := range spans {
		var texts []string
		texts = append(texts, s.Name(), s.Status().Description)
		for _, a := range s.Attributes() {
			texts = append(texts, string(a.Key)+"="+a.Value.String())
		}
		for _, e := range s.Events() {
			texts = append(texts, e.Name)
			for _, a := range e.Attributes {
				texts = append(texts, string(a.Key)+"="+a.Value.String())
			}
		}
		for _, l := range s.Links() {
			for _, a := range l.Attributes {
				texts = append(texts, a.Value.String())
			}
		}
		for _, a := range s.Resource().Attributes() {
			texts = append(texts, a.Value.String())
		}
		all := strings.Join(texts, "\n")
		for _, sec := range secret {
			if sec != "" && strings.Contains(all, sec) {
				t.Errorf("span %q carries a secret (%d bytes, starts %.6q…)", s.Name(), len(sec), sec)
			}
		}
		if strings.Contains(strings.ToLower(all), "bearer") || strings.Contains(all, "SELECT") {
			t.Errorf("span %q carries a bearer or SQL:\n%s", s.Name(), all)
		}
	}
}
