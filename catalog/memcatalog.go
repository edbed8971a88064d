package catalog

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"

	"github.com/bailinghub/knowledge-sidecar/corefacts"
)

// MemCatalog is an in-memory catalog for the demo and for tests of other
// packages. It implements knowledge.Catalog with the same normalization, gate
// and document rules as SQLCatalog (shared code), and the same
// case-insensitive id matching as the database's collation. Safe for
// concurrent use; the zero value is not usable, call NewMemCatalog.
type MemCatalog struct {
	mu          sync.RWMutex
	routes      map[string]memRoute // by foldID(route key)
	audiences   map[string][]byte   // by foldID(route key)
	kbs         map[string]memKB    // by foldID(kb id)
	docs        map[int64]corefacts.Document
	runs        map[string]corefacts.Run // by foldID(run id)
	clients     map[string]gateClient
	nextDocID   int64
	unavailable bool
}

type memRoute struct {
	key       string
	enabled   bool
	knowledge []byte
}

type memKB struct {
	id      string
	enabled bool
}

// NewMemCatalog returns an empty catalog.
func NewMemCatalog() *MemCatalog {
	return &MemCatalog{
		routes:    map[string]memRoute{},
		audiences: map[string][]byte{},
		kbs:       map[string]memKB{},
		docs:      map[int64]corefacts.Document{},
		runs:      map[string]corefacts.Run{},
		clients:   map[string]gateClient{},
		nextDocID: 1,
	}
}

// PutRoute adds or replaces a route. knowledgeJSON is the raw bz_routes.knowledge
// column ("" = NULL); it is normalized on read, exactly like the SQL catalog.
func (m *MemCatalog) PutRoute(key string, enabled bool, knowledgeJSON string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.routes[foldID(key)] = memRoute{key: key, enabled: enabled, knowledge: rawColumn(knowledgeJSON)}
}

// DeleteRoute removes a route.
func (m *MemCatalog) DeleteRoute(key string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.routes, foldID(key))
}

// SetAudience sets the raw bz_routes.audience column of a route ("" = NULL).
func (m *MemCatalog) SetAudience(route, audienceJSON string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if audienceJSON == "" {
		delete(m.audiences, foldID(route))
		return
	}
	m.audiences[foldID(route)] = []byte(audienceJSON)
}

// PutKB adds or replaces a knowledge base row.
func (m *MemCatalog) PutKB(kbID string, enabled bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.kbs[foldID(kbID)] = memKB{id: kbID, enabled: enabled}
}

// DeleteKB removes a knowledge base row (its documents stay, as in Core's
// table without foreign keys).
func (m *MemCatalog) DeleteKB(kbID string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.kbs, foldID(kbID))
}

// PutDoc adds or replaces a document and returns its id. DocID 0 assigns the
// next free id. Revision is ignored: it is computed here, once per version,
// as the SQL catalog's revision cache does. UpdatedAt is stored as
// given (UTC); callers that change a document should move it, as Core does.
func (m *MemCatalog) PutDoc(d corefacts.Document) int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	if d.DocID == 0 {
		d.DocID = m.nextDocID
	}
	if d.DocID >= m.nextDocID {
		m.nextDocID = d.DocID + 1
	}
	d.UpdatedAt = d.UpdatedAt.UTC()
	d.Revision = corefacts.Revision(d.Title, d.Content)
	m.docs[d.DocID] = d
	return d.DocID
}

// DeleteDoc removes a document.
func (m *MemCatalog) DeleteDoc(docID int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.docs, docID)
}

// PutRun adds or replaces a run.
func (m *MemCatalog) PutRun(r corefacts.Run) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if r.CompletedAt != nil {
		t := r.CompletedAt.UTC()
		r.CompletedAt = &t
	}
	m.runs[foldID(r.RunID)] = r
}

// PutClient adds or replaces a client app row. allowedRoutes nil is SQL NULL
// (no routes); authorizeURL "" is NULL.
func (m *MemCatalog) PutClient(appID string, enabled bool, allowedRoutes []string, authorizeURL string) {
	var raw []byte
	if allowedRoutes != nil {
		raw, _ = json.Marshal(allowedRoutes) // []string always marshals
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.clients[foldID(appID)] = gateClient{Enabled: enabled, AllowedRoutes: raw, AuthorizeURL: authorizeURL}
}

// SetUnavailable simulates an outage: while true every call returns an error
// wrapping ErrUnavailable and Usable is false.
func (m *MemCatalog) SetUnavailable(down bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.unavailable = down
}

// errMemUnavailable is the simulated outage.
var errMemUnavailable = fmt.Errorf("%w: in-memory catalog switched off", corefacts.ErrUnavailable)

// rlock takes the read lock unless the catalog is switched off.
func (m *MemCatalog) rlock() error {
	m.mu.RLock()
	if m.unavailable {
		m.mu.RUnlock()
		return errMemUnavailable
	}
	return nil
}

// Usable is false while SetUnavailable(true) is in effect.
func (m *MemCatalog) Usable() bool {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return !m.unavailable
}

// Route implements knowledge.Catalog.
func (m *MemCatalog) Route(_ context.Context, key corefacts.RouteKey) (corefacts.Route, error) {
	if err := m.rlock(); err != nil {
		return corefacts.Route{}, err
	}
	r, ok := m.routes[foldID(key.String())]
	m.mu.RUnlock()
	if !ok {
		return corefacts.Route{}, fmt.Errorf("catalog %s: %w", QueryRoute, corefacts.ErrNotFound)
	}
	return routeOf(r.key, r.enabled, r.knowledge)
}

// RouteBundle reads the route and the rows after it one by one (the SQL
// catalog's single statement has no in-memory equivalent to save).
func (m *MemCatalog) RouteBundle(ctx context.Context, key corefacts.RouteKey, kbIDs []string, docID int64) (corefacts.RouteBundle, error) {
	return bundleApart(ctx, m, key, kbIDs, docID)
}

// RouteGate implements knowledge.Catalog (see decideGate).
func (m *MemCatalog) RouteGate(_ context.Context, route corefacts.RouteKey, s corefacts.Session) error {
	if err := m.rlock(); err != nil {
		return err
	}
	var gr *gateRoute
	if r, ok := m.routes[foldID(route.String())]; ok {
		gr = &gateRoute{Enabled: r.enabled, Audience: m.audiences[foldID(route.String())]}
	}
	var gc *gateClient
	if c, ok := m.clients[foldID(s.ClientAppID)]; ok && s.ClientAppID != "" {
		gc = &c
	}
	m.mu.RUnlock()
	return decideGate(route.String(), gr, gc, s)
}

// KBEnabled implements knowledge.Catalog.
func (m *MemCatalog) KBEnabled(ctx context.Context, kbIDs []string) (map[string]bool, error) {
	kbs, err := m.KBs(ctx, kbIDs)
	return enabledFlags(kbs), err
}

// KBs implements knowledge.Catalog: ID is the spelling given to PutKB.
func (m *MemCatalog) KBs(_ context.Context, kbIDs []string) (map[string]corefacts.KB, error) {
	if err := m.rlock(); err != nil {
		return nil, err
	}
	defer m.mu.RUnlock()
	out := make(map[string]corefacts.KB, len(kbIDs))
	for _, id := range kbIDs {
		if kb, ok := m.kbs[foldID(id)]; ok && id != "" {
			out[id] = corefacts.KB{ID: kb.id, Enabled: kb.enabled}
		}
	}
	return out, nil
}

// ReadyKBs implements knowledge.Catalog with SQLCatalog's rules: the
// requested KBs that have a row and at least one document with status ready.
func (m *MemCatalog) ReadyKBs(_ context.Context, kbIDs []string) (map[string]bool, error) {
	if err := m.rlock(); err != nil {
		return nil, err
	}
	defer m.mu.RUnlock()
	ready := map[string]bool{} // by foldID(kb id)
	for _, d := range m.docs {
		if d.Status == corefacts.StatusReady {
			ready[foldID(d.KBID)] = true
		}
	}
	out := make(map[string]bool, len(kbIDs))
	for _, id := range kbIDs {
		if _, ok := m.kbs[foldID(id)]; ok && id != "" && ready[foldID(id)] {
			out[id] = true
		}
	}
	return out, nil
}

// Documents implements knowledge.Catalog with SQLCatalog's rules: fenced to
// kbIDs, KBID in the fence's spelling, body and revision only when ready.
func (m *MemCatalog) Documents(_ context.Context, docIDs []int64, kbIDs []string) (map[int64]corefacts.Document, error) {
	if err := m.rlock(); err != nil {
		return nil, err
	}
	defer m.mu.RUnlock()
	out := make(map[int64]corefacts.Document, len(docIDs))
	for _, id := range docIDs {
		if d, ok := m.fenced(id, kbIDs); ok {
			out[id] = d
		}
	}
	return out, nil
}

// Document implements knowledge.Catalog.
func (m *MemCatalog) Document(_ context.Context, docID int64, kbIDs []string) (corefacts.Document, error) {
	if err := m.rlock(); err != nil {
		return corefacts.Document{}, err
	}
	defer m.mu.RUnlock()
	d, ok := m.fenced(docID, kbIDs)
	if !ok {
		return corefacts.Document{}, fmt.Errorf("catalog document: %w", corefacts.ErrNotFound)
	}
	return d, nil
}

// fenced is called with the read lock held.
func (m *MemCatalog) fenced(docID int64, kbIDs []string) (corefacts.Document, bool) {
	d, ok := m.docs[docID]
	if !ok {
		return corefacts.Document{}, false
	}
	for _, kb := range kbIDs {
		if kb != "" && corefacts.SameID(kb, d.KBID) {
			d.KBID = kb
			if d.Status != corefacts.StatusReady {
				return corefacts.Document{DocMeta: d.DocMeta}, true
			}
			return d, true
		}
	}
	return corefacts.Document{}, false
}

// Run implements knowledge.Catalog.
func (m *MemCatalog) Run(_ context.Context, runID string) (corefacts.Run, error) {
	if err := m.rlock(); err != nil {
		return corefacts.Run{}, err
	}
	r, ok := m.runs[foldID(runID)]
	m.mu.RUnlock()
	if !ok || runID == "" {
		return corefacts.Run{}, fmt.Errorf("catalog %s: %w", QueryRun, corefacts.ErrNotFound)
	}
	return r, nil
}

func rawColumn(s string) []byte {
	if s == "" {
		return nil
	}
	return []byte(s)
}
