package catalog_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/bailinghub/knowledge-sidecar/catalog"
	"github.com/bailinghub/knowledge-sidecar/corefacts"
	"github.com/bailinghub/knowledge-sidecar/internal/testkit"
)

func TestMemCatalogSetters(t *testing.T) {
	ctx := context.Background()
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	m := catalog.NewMemCatalog()
	m.PutRoute("help", true, `{"kb_ids":["faq"],"top_k":3}`)
	m.PutKB("faq", true)
	m.PutKB("old", false)
	id := m.PutDoc(corefacts.Document{DocMeta: corefacts.DocMeta{KBID: "faq", Title: "T", Status: "ready", UpdatedAt: at}, Content: "body"})
	id2 := m.PutDoc(corefacts.Document{DocMeta: corefacts.DocMeta{KBID: "faq", Title: "U", Status: "ready", UpdatedAt: at}, Content: "x"})
	m.PutDoc(corefacts.Document{DocMeta: corefacts.DocMeta{DocID: 50, KBID: "faq", Title: "V", Status: "error", UpdatedAt: at}})
	id4 := m.PutDoc(corefacts.Document{DocMeta: corefacts.DocMeta{KBID: "faq", Title: "W", Status: "ready", UpdatedAt: at}})
	m.PutClient("app", true, []string{"help"}, "https://app.example/authorize")
	m.PutRun(corefacts.Run{RunID: "r-1", SessionID: "s", ClientAppID: "app", RouteKey: "help", Status: "context_ready"})

	if id != 1 || id2 != 2 || id4 != 51 {
		t.Errorf("assigned ids: got %d, %d, %d; want 1, 2, 51", id, id2, id4)
	}
	r, err := m.Route(ctx, testkit.RouteKey("help"))
	if err != nil || r.Key != "help" || r.Knowledge == nil || r.Knowledge.TopK != 3 {
		t.Errorf("Route: got %+v, %v; want help with top_k 3", r, err)
	}
	// The database's collation matches a key case-insensitively and gives the
	// stored spelling (which Core, matching exactly, would not serve).
	m.PutRoute("Sales", true, `{"kb_id":"faq"}`)
	if r, err := m.Route(ctx, testkit.RouteKey("sales")); err != nil || r.Key != "Sales" {
		t.Errorf("Route(sales) of a row stored as Sales: got %+v, %v; want key Sales", r, err)
	}
	flags, err := m.KBEnabled(ctx, []string{"faq", "old", "gone"})
	if err != nil || !reflect.DeepEqual(flags, map[string]bool{"faq": true, "old": false}) {
		t.Errorf("KBEnabled: got %v, %v; want faq:true old:false", flags, err)
	}
	d, err := m.Document(ctx, id, []string{"faq"})
	if err != nil || d.Content != "body" || d.Revision != corefacts.Revision("T", "body") {
		t.Errorf("Document: got %+v, %v; want body with its revision", d, err)
	}
	s := corefacts.Session{ClientAppID: "app", Principal: corefacts.Principal{ID: "u"}, AllowedRoutes: []string{"help"}}
	if err := m.RouteGate(ctx, testkit.RouteKey("help"), s); err != nil {
		t.Errorf("RouteGate: got %v; want allowed", err)
	}

	// Mutations are visible at once.
	m.SetAudience("help", `{"roles":["admin"]}`)
	var ce *corefacts.CoreError
	if err := m.RouteGate(ctx, testkit.RouteKey("help"), s); !errors.As(err, &ce) || ce.Code != catalog.CodeAudienceNotAllowed {
		t.Errorf("RouteGate with audience: got %v; want audience_not_allowed", err)
	}
	m.SetAudience("help", "")
	if err := m.RouteGate(ctx, testkit.RouteKey("help"), s); err != nil {
		t.Errorf("RouteGate after clearing audience: got %v; want allowed", err)
	}
	m.DeleteDoc(id)
	if _, err := m.Document(ctx, id, []string{"faq"}); !errors.Is(err, corefacts.ErrNotFound) {
		t.Errorf("deleted doc: got %v; want ErrNotFound", err)
	}
	m.DeleteKB("faq")
	if flags, _ := m.KBEnabled(ctx, []string{"faq"}); len(flags) != 0 {
		t.Errorf("deleted KB: got %v; want absent", flags)
	}
	m.DeleteRoute("help")
	if _, err := m.Route(ctx, testkit.RouteKey("help")); !errors.Is(err, corefacts.ErrNotFound) {
		t.Errorf("deleted route: got %v; want ErrNotFound", err)
	}
	if run, err := m.Run(ctx, "R-1"); err != nil || run.RunID != "r-1" {
		t.Errorf("Run: got %+v, %v; want r-1", run, err)
	}
}

func TestMemCatalogMalformedKnowledge(t *testing.T) {
	m := catalog.NewMemCatalog()
	m.PutRoute("bad", true, `{"kb_ids":[`)
	_, err := m.Route(context.Background(), testkit.RouteKey("bad"))
	if !errors.Is(err, corefacts.ErrUnavailable) || !errors.Is(err, catalog.ErrMalformedJSON) {
		t.Errorf("got %v; want ErrUnavailable and ErrMalformedJSON", err)
	}
}

func TestMemCatalogUnavailable(t *testing.T) {
	ctx := context.Background()
	m := catalog.NewMemCatalog()
	m.PutRoute("help", true, `{"kb_id":"faq"}`)
	m.SetUnavailable(true)
	if m.Usable() {
		t.Errorf("Usable: got true; want false")
	}
	calls := []struct {
		name string
		call func() error
	}{
		{"route", func() error { _, err := m.Route(ctx, testkit.RouteKey("help")); return err }},
		{"gate", func() error { return m.RouteGate(ctx, testkit.RouteKey("help"), corefacts.Session{}) }},
		{"kbs", func() error { _, err := m.KBEnabled(ctx, []string{"faq"}); return err }},
		{"documents", func() error { _, err := m.Documents(ctx, []int64{1}, []string{"faq"}); return err }},
		{"document", func() error { _, err := m.Document(ctx, 1, []string{"faq"}); return err }},
		{"run", func() error { _, err := m.Run(ctx, "r"); return err }},
	}
	for _, c := range calls {
		t.Run(c.name, func(t *testing.T) {
			if err := c.call(); !errors.Is(err, corefacts.ErrUnavailable) {
				t.Errorf("got %v; want ErrUnavailable", err)
			}
		})
	}
	m.SetUnavailable(false)
	if _, err := m.Route(ctx, testkit.RouteKey("help")); err != nil || !m.Usable() {
		t.Errorf("after recovery: got %v, usable %v; want nil, true", err, m.Usable())
	}
}

// Run with -race: writers and readers at once.
func TestMemCatalogConcurrent(t *testing.T) {
	ctx := context.Background()
	m := catalog.NewMemCatalog()
	m.PutKB("faq", true)
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(2)
		go func() {
			defer wg.Done()
			for i := range 100 {
				m.PutRoute(fmt.Sprintf("r%d", w), i%2 == 0, `{"kb_id":"faq"}`)
				m.PutDoc(corefacts.Document{DocMeta: corefacts.DocMeta{DocID: int64(w + 1), KBID: "faq", Title: "t", Status: "ready"}, Content: fmt.Sprint(i)})
				m.SetUnavailable(i%10 == 9)
			}
		}()
		go func() {
			defer wg.Done()
			for range 100 {
				_, _ = m.Route(ctx, testkit.RouteKey(fmt.Sprintf("r%d", w)))
				_, _ = m.Documents(ctx, []int64{1, 2, 3, 4}, []string{"faq"})
				_, _ = m.KBEnabled(ctx, []string{"faq"})
				_ = m.Usable()
			}
		}()
	}
	wg.Wait()
}
