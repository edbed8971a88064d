package knowledge

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/bailinghub/knowledge-sidecar/corefacts"
	"github.com/bailinghub/knowledge-sidecar/protocol"
)

// bundlingCatalog is the fake catalog with RouteBundle (the SQL catalog's
// one-statement read of a route and the rows after it), composed of the
// fake's own answers. It counts bundles and the calls the service makes
// apart.
type bundlingCatalog struct {
	*fakeCatalog
	mu      sync.Mutex
	bundles int
	apart   map[string]int // KBs, KBEnabled, Document called by the service itself
}

func withBundler(o *Options) {
	o.Catalog = &bundlingCatalog{fakeCatalog: o.Catalog.(*fakeCatalog), apart: map[string]int{}}
}

func (b *bundlingCatalog) RouteBundle(ctx context.Context, key corefacts.RouteKey, kbIDs []string, docID int64) (corefacts.RouteBundle, error) {
	b.mu.Lock()
	b.bundles++
	b.mu.Unlock()
	return composeBundle(ctx, b.fakeCatalog, key, kbIDs, docID)
}

// composeBundle is a RouteBundle of c's own answers, read one by one.
func composeBundle(ctx context.Context, c Catalog, key corefacts.RouteKey, kbIDs []string, docID int64) (corefacts.RouteBundle, error) {
	r, err := c.Route(ctx, key)
	if err != nil {
		return corefacts.RouteBundle{}, err
	}
	kbs, err := c.KBs(ctx, kbIDs)
	if err != nil {
		return corefacts.RouteBundle{}, err
	}
	out := corefacts.RouteBundle{Route: r, KBs: kbs, Asked: kbIDs}
	if docID > 0 {
		out.Doc, out.DocErr = c.Document(ctx, docID, kbIDs)
		out.DocFound = out.DocErr == nil
		if errors.Is(out.DocErr, corefacts.ErrNotFound) {
			out.DocErr = nil
		}
	}
	return out, nil
}

func (b *bundlingCatalog) count(name string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.apart[name]++
}

func (b *bundlingCatalog) KBs(ctx context.Context, ids []string) (map[string]corefacts.KB, error) {
	b.count("KBs")
	return b.fakeCatalog.KBs(ctx, ids)
}

func (b *bundlingCatalog) KBEnabled(ctx context.Context, ids []string) (map[string]bool, error) {
	b.count("KBEnabled")
	return b.fakeCatalog.KBEnabled(ctx, ids)
}

func (b *bundlingCatalog) Document(ctx context.Context, id int64, kbIDs []string) (corefacts.Document, error) {
	b.count("Document")
	return b.fakeCatalog.Document(ctx, id, kbIDs)
}

func (b *bundlingCatalog) snapshot() (int, map[string]int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	m := map[string]int{}
	for k, v := range b.apart {
		m[k] = v
	}
	return b.bundles, m
}

// A read over a bundling catalog reads its route, KB and document in one
// call; a search reads its route with the KBs of the configuration seen
// last, and looks up apart only ids the fresh route added.
func TestBundledReadsAndSearches(t *testing.T) {
	e := newEnv(t, withBundler)
	bc := e.svc.catalog.(*bundlingCatalog)

	e.mustOK("search", tokA, routeKey, `{"query":"退款"}`) // no configuration seen yet
	bundles, apart := bc.snapshot()
	if bundles != 0 || apart["KBs"] != 1 {
		t.Fatalf("first search: got %d bundles, %v apart; want the route and KBs apart", bundles, apart)
	}
	ref := e.refFor(tokA, routeKey, "", docRefund) // second search: bundled
	bundles, apart = bc.snapshot()
	if bundles != 1 || apart["KBs"] != 1 {
		t.Fatalf("second search: got %d bundles, %v apart; want one bundle and no KBs call", bundles, apart)
	}
	m := e.mustOK("read", tokA, routeKey, readBodyJSON(map[string]any{"ref": ref}))
	if m["content"] != refundContent {
		t.Fatalf("read: got %v; want the refund document", m["content"])
	}
	bundles, apart = bc.snapshot()
	if bundles != 2 || apart["KBs"] != 1 || apart["KBEnabled"] != 0 || apart["Document"] != 0 {
		t.Fatalf("read: got %d bundles, %v apart; want one bundle and nothing apart", bundles, apart)
	}

	// The route gains a KB: the guess misses it, so the fresh list is read
	// apart and the new KB is searched.
	e.cat.edit(func(c *fakeCatalog) {
		c.editKnowledge(func(k *corefacts.KnowledgeConfig) { k.KBIDs = append(append([]string(nil), k.KBIDs...), "extra") })
		c.kbs["extra"] = true
	})
	m = e.mustOK("search", tokA, routeKey, `{"query":"退款"}`)
	bundles, apart = bc.snapshot()
	if bundles != 3 || apart["KBs"] != 2 {
		t.Fatalf("search after a KB was added: got %d bundles, %v apart; want the KBs read apart", bundles, apart)
	}
	extra := 0
	for _, c := range e.ret.callList() {
		if c.KB == "extra" {
			extra++
		}
	}
	if extra != 1 {
		t.Errorf("searches of the added KB: got %d; want 1", extra)
	}
	if m["status"] != protocol.StatusOK {
		t.Errorf("status: got %v; want %s", m["status"], protocol.StatusOK)
	}

	// A disabled KB and a changed document are seen through the bundle (a
	// new ref: the added KB changed the scope).
	ref = e.refFor(tokA, routeKey, "", docRefund)
	e.cat.edit(func(c *fakeCatalog) { c.kbs["faq"] = false })
	if _, _, ke := e.call("read", tokA, routeKey, readBodyJSON(map[string]any{"ref": ref})); ke == nil || ke.Code != protocol.CodeKnowledgeChanged {
		t.Fatalf("read of a disabled KB: got %v; want %s", ke, protocol.CodeKnowledgeChanged)
	}
	e.cat.edit(func(c *fakeCatalog) { c.kbs["faq"] = true })
	e.cat.setDoc(corefacts.Document{DocMeta: corefacts.DocMeta{DocID: docRefund, KBID: "faq", Title: "退款规则"}, Content: refundContent + " changed"})
	if _, _, ke := e.call("read", tokA, routeKey, readBodyJSON(map[string]any{"ref": ref})); ke == nil || ke.Code != protocol.CodeKnowledgeChanged {
		t.Fatalf("read of a changed document: got %v; want %s", ke, protocol.CodeKnowledgeChanged)
	}
	e.cat.edit(func(c *fakeCatalog) { delete(c.docs, docRefund) })
	if _, _, ke := e.call("read", tokA, routeKey, readBodyJSON(map[string]any{"ref": ref})); ke == nil || ke.Code != protocol.CodeKnowledgeChanged {
		t.Fatalf("read of a deleted document: got %v; want %s", ke, protocol.CodeKnowledgeChanged)
	}
	// A body the bundle could not read is the document step's 503.
	e.cat.setDoc(corefacts.Document{DocMeta: corefacts.DocMeta{DocID: docRefund, KBID: "faq", Title: "退款规则"}, Content: refundContent})
	e.cat.edit(func(c *fakeCatalog) { c.docsDown = true })
	if _, _, ke := e.call("read", tokA, routeKey, readBodyJSON(map[string]any{"ref": ref})); ke == nil || ke.Code != protocol.CodeUnavailable {
		t.Fatalf("read with the body unreadable: got %v; want %s", ke, protocol.CodeUnavailable)
	}
	// …but only there: a binding error before it still wins.
	if _, _, ke := e.call("read", tokB, routeKey, readBodyJSON(map[string]any{"ref": ref})); ke == nil || ke.Code != protocol.CodeReferenceInvalid {
		t.Fatalf("read under another identity with the body unreadable: got %v; want %s", ke, protocol.CodeReferenceInvalid)
	}
}
