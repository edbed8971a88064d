package knowledge

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/bailinghub/knowledge-sidecar/internal/testkit"
	"github.com/bailinghub/knowledge-sidecar/protocol"
)

// recorder is an Auditor that keeps every disclosure and, with fail set,
// refuses them.
type recorder struct {
	mu   sync.Mutex
	got  []Disclosure
	fail error
}

func (r *recorder) Disclose(_ context.Context, d *Disclosure) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got = append(r.got, *d)
	return r.fail
}

// TestDisclosures: each answer of search and read is one disclosure with
// the documents the answer names; a refusal has none and its code; the
// endpoint of a caller's context (an MCP tool) wins.
func TestDisclosures(t *testing.T) {
	rec := &recorder{}
	e := newEnv(t, func(o *Options) { o.Auditor = rec })
	res := e.mustOK("search", tokA, routeKey, `{"query":"退款"}`)
	hints := res["hints"].([]any)
	ref := hints[0].(map[string]any)["ref"].(string)
	e.mustOK("read", tokA, routeKey, `{"ref":"`+ref+`","max_bytes":4096}`)
	e.call("read", tokA, routeKey, `{"ref":"kr2.forged"}`)
	ctx := WithEndpoint(context.Background(), MCPEndpoint(protocol.SearchTool))
	if _, err := e.svc.Search(ctx, tokA, testkit.RouteKey(routeKey), strings.NewReader(`{"query":"退款"}`)); err != nil {
		t.Fatal(err)
	}
	if len(rec.got) != 4 {
		t.Fatalf("disclosures: %d; want 4", len(rec.got))
	}
	s, r, bad, mcp := rec.got[0], rec.got[1], rec.got[2], rec.got[3]
	if s.Endpoint != "search" || s.Status != "ok" || len(s.Documents) != len(hints) || s.Documents[0].DocID != docRefund ||
		s.Documents[0].KBID != "faq" || s.Query != "退款" || !s.HasQuery || s.Session.SessionID != sessionA.SessionID {
		t.Errorf("search disclosure %+v", s)
	}
	if d := r.Documents; r.Endpoint != "read" || len(d) != 1 || d[0].DocID != docRefund || !d[0].Page || d[0].Start != 0 || d[0].End <= 0 || r.HasQuery {
		t.Errorf("read disclosure %+v", r)
	}
	if bad.Status != DisclosureRefused || bad.Error != protocol.CodeReferenceInvalid || len(bad.Documents) != 0 {
		t.Errorf("refused read disclosure %+v", bad)
	}
	if mcp.Endpoint != "mcp:knowledge_search" {
		t.Errorf("endpoint under WithEndpoint: %q", mcp.Endpoint)
	}

	// An auditor that cannot record: the answer becomes 503; a refused
	// answer stays what it was.
	rec.fail = errors.New("disk full")
	if _, _, ke := e.call("search", tokA, routeKey, `{"query":"退款"}`); ke == nil || ke.Status != 503 || ke.Code != protocol.CodeUnavailable {
		t.Errorf("search with a failing auditor: %v; want 503 knowledge_unavailable", ke)
	}
	if _, _, ke := e.call("read", tokA, routeKey, `{"ref":"kr2.forged"}`); ke == nil || ke.Status != 400 {
		t.Errorf("refused read with a failing auditor: %v; want its 400", ke)
	}
}

// TestPagesShown: a group's read pages become one range per document, from
// the shown page's skipped bytes to the last shown page's end.
func TestPagesShown(t *testing.T) {
	page := func(start, end int, exhausted bool) *Disclosure {
		return &Disclosure{Status: "ok", Documents: []DisclosedDocument{{DocID: 7, KBID: "kb", Page: true, Start: start, End: end, BudgetExhausted: exhausted}}}
	}
	ds := []*Disclosure{page(0, 100, false), page(100, 200, false), page(200, 300, true)}
	for _, tc := range []struct {
		name       string
		shown      *Shown
		start, end int
		exhausted  bool
	}{
		{"every page", nil, 0, 300, true},
		{"near miss: the first page", &Shown{First: 0, Skip: 0, Last: 0}, 0, 100, false},
		{"near hit on the second page", &Shown{First: 1, Skip: 40, Last: 1}, 140, 200, false},
		{"near hit across two pages", &Shown{First: 0, Skip: 90, Last: 1}, 90, 200, false},
		{"out of range: every page", &Shown{First: 2, Skip: 0, Last: 5}, 0, 300, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := pagesShown(ds, tc.shown)
			if len(got) != 1 || got[0].Start != tc.start || got[0].End != tc.end || got[0].BudgetExhausted != tc.exhausted {
				t.Errorf("got %+v; want one range [%d, %d) exhausted %v", got, tc.start, tc.end, tc.exhausted)
			}
		})
	}
}
