package sidecar

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/bailinghub/knowledge-sidecar/catalog"
	"github.com/bailinghub/knowledge-sidecar/config"
	"github.com/bailinghub/knowledge-sidecar/corefacts"
	"github.com/bailinghub/knowledge-sidecar/internal/prom"
	"github.com/bailinghub/knowledge-sidecar/protocol"
	"github.com/bailinghub/knowledge-sidecar/rollout"
)

// Status is the document GET /-/status serves on the admin listener: what
// an operator checks on every pod after a rollout. It holds no secret: the
// configuration appears only as the SHA-256 of its canonical JSON without
// secrets (config.Config.Fingerprint), so two pods agree on it exactly when
// their non-secret settings agree. The dependency states are the values
// /metrics shows (breaker, protocol, schema and task-control gauges), the
// ledger's reachability a ping made for this request.
type Status struct {
	Version      string    `json:"version"`
	Revision     string    `json:"revision"`
	StartedAt    time.Time `json:"started_at"`
	ConfigSHA256 string    `json:"config_sha256"`
	// Knowledge is false for a pure pass-through proxy (KnowledgeOff says why).
	Knowledge       bool              `json:"knowledge"`
	KnowledgeOff    string            `json:"knowledge_off_reason,omitempty"`
	Rollout         string            `json:"rollout"`
	NativeDetection NativeStatus      `json:"native_detection"`
	Breakers        map[string]string `json:"breakers"` // family → closed, half-open, open
	Catalog         CatalogStatus     `json:"catalog"`
	Ledger          LedgerStatus      `json:"ledger"`
	Tracing         bool              `json:"tracing"`
	Audit           bool              `json:"audit"`
	LastReload      *ReloadStatus     `json:"last_reload"` // null: none since start
}

// NativeStatus is native detection's mode and the verdict it holds
// (unknown, legacy, native; "off" without the knowledge features).
type NativeStatus struct {
	Mode    string `json:"mode"`
	Verdict string `json:"verdict"`
}

// CatalogStatus: Schema is "ok", "unverified" (the knowledge endpoints
// answer 503 until it passes), "in-memory" (the demo) or "off";
// TaskControl is absent, partial, enforced, or "unknown" until probed.
type CatalogStatus struct {
	Schema      string `json:"schema"`
	TaskControl string `json:"task_control"`
}

// LedgerStatus is the turn ledger's backend (memory, redis; "off" without
// the knowledge features) and whether it answered a ping now.
type LedgerStatus struct {
	Backend   string `json:"backend"`
	Reachable bool   `json:"reachable"`
}

// ReloadStatus is the last configuration reload: "ok" or "rejected" (the
// running configuration kept; Problems counts what was wrong).
type ReloadStatus struct {
	At       time.Time `json:"at"`
	Result   string    `json:"result"`
	Problems int       `json:"problems,omitempty"`
}

// ledgerPingTimeout bounds the ledger ping of one status request.
const ledgerPingTimeout = 2 * time.Second

// Status assembles the status document now.
func (a *App) Status(ctx context.Context) Status {
	a.mu.Lock()
	cfg, last := a.cfg, a.lastReload
	a.mu.Unlock()
	st := Status{
		Version: a.version, Revision: a.revision, StartedAt: a.started,
		ConfigSHA256: cfg.Fingerprint(), Rollout: cfg.Rollout, Tracing: a.tp != nil, Audit: a.audit != nil,
		NativeDetection: NativeStatus{Mode: cfg.NativeDetection, Verdict: "off"},
		Breakers:        map[string]string{},
		Catalog:         CatalogStatus{Schema: "off", TaskControl: "unknown"},
		Ledger:          LedgerStatus{Backend: "off"},
		LastReload:      last,
	}
	if p, err := rollout.Parse(cfg.Rollout); err == nil {
		st.Rollout = p.String()
	}
	if a.knowledgeOff != "" {
		st.KnowledgeOff = a.knowledgeOff
		return st
	}
	st.Knowledge = true
	g := a.gauges()
	st.NativeDetection.Verdict = g.native
	for fam, v := range g.breakers {
		st.Breakers[fam] = breakerStateName(v)
	}
	switch {
	case !a.sqlCatalog:
		st.Catalog.Schema = "in-memory"
	case g.schemaOK:
		st.Catalog.Schema = "ok"
	default:
		st.Catalog.Schema = "unverified"
	}
	if g.taskControl != "" {
		st.Catalog.TaskControl = g.taskControl
	}
	st.Ledger.Backend = cfg.LedgerBackend()
	st.Ledger.Reachable = true // memory
	if a.rdb != nil && st.Ledger.Backend == "redis" {
		pctx, cancel := context.WithTimeout(ctx, ledgerPingTimeout)
		st.Ledger.Reachable = a.rdb.Ping(pctx) == nil // the error may name an address: not shown
		cancel()
	}
	return st
}

func breakerStateName(v float64) string {
	switch v {
	case 0:
		return "closed"
	case 1:
		return "half-open"
	case 2:
		return "open"
	}
	return "unknown"
}

// gaugeValues are the gauges the status document reads from the registry.
type gaugeValues struct {
	native      string             // core_protocol_state's state at 1
	breakers    map[string]float64 // core_breaker_state by family
	schemaOK    bool               // catalog_schema_ok
	taskControl string             // task_control_state's state at 1
}

// gauges reads what /metrics would show now.
func (a *App) gauges() gaugeValues {
	g := gaugeValues{native: "unknown", breakers: map[string]float64{}}
	mfs, err := a.registry.Gather()
	if err != nil && len(mfs) == 0 {
		return g
	}
	ns := prom.Namespace + "_"
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			v := m.GetGauge().GetValue()
			switch mf.GetName() {
			case ns + "core_protocol_state":
				if v == 1 {
					g.native = labels["state"]
				}
			case ns + "core_breaker_state":
				g.breakers[labels["family"]] = v
			case ns + "catalog_schema_ok":
				g.schemaOK = v == 1
			case ns + "task_control_state":
				if v == 1 {
					g.taskControl = labels["state"]
				}
			}
		}
	}
	return g
}

// noteReload records a reload's outcome for the status document.
func (a *App) noteReload(result string, err error) {
	r := &ReloadStatus{At: a.now(), Result: result}
	var ce *config.Error
	if errors.As(err, &ce) {
		r.Problems = len(ce.Problems)
	}
	a.lastReload = r // under a.mu (Reload holds it)
}

// Explanation says whether a route is served and why, without touching
// traffic: the rollout rule's decision, the native-detection verdict, and
// what the catalog holds for the route. Served is what the next knowledge
// request of the route would get from this process.
type Explanation struct {
	Route   string           `json:"route"`
	Served  bool             `json:"served"`
	Reason  string           `json:"reason"`
	Rollout rollout.Decision `json:"rollout"`
	Native  NativeStatus     `json:"native_detection"`
	Catalog RouteCatalog     `json:"catalog"`
	// OversizedDocuments are the route's documents whose content is longer
	// than the read chain (protocol.ReadChainMaxBytes): the largest
	// MaxOversizedListed of them; OversizedCount is how many there are.
	// Both are absent when the catalog was not read or cannot list them.
	OversizedDocuments []OversizedDocument `json:"oversized_documents,omitempty"`
	OversizedCount     *int                `json:"oversized_count,omitempty"`
}

// OversizedDocument is a document whose text past the read chain's budget
// no knowledge_read reaches through one ref.
type OversizedDocument struct {
	DocID int64  `json:"doc_id"`
	Title string `json:"title"`
	Bytes int64  `json:"bytes"`
}

// MaxOversizedListed bounds Explanation.OversizedDocuments.
const MaxOversizedListed = 50

// OversizedLookup is a catalog that lists documents by content size
// (catalog.SQLCatalog, MemCatalog and SchemaGate).
type OversizedLookup interface {
	OversizedDocuments(ctx context.Context, kbIDs []string, overBytes int64, limit int) ([]catalog.DocSize, int, error)
}

// RouteCatalog is the route's row as the catalog holds it. Checked is false
// when no catalog was asked (check-config without one); Error is our own
// words, never a driver message (which may name an address).
type RouteCatalog struct {
	Checked             bool      `json:"checked"`
	Found               bool      `json:"found"`
	Enabled             bool      `json:"enabled"`
	KnowledgeConfigured bool      `json:"knowledge_configured"`
	KBs                 []KBState `json:"kbs,omitempty"`
	Error               string    `json:"error,omitempty"`
}

// KBState is one knowledge base of the route: Exists false means the id
// is configured but the KB was deleted.
type KBState struct {
	ID      string `json:"id"`
	Exists  bool   `json:"exists"`
	Enabled bool   `json:"enabled"`
}

// RouteLookup is what Explain reads from the catalog.
type RouteLookup interface {
	Route(ctx context.Context, key corefacts.RouteKey) (corefacts.Route, error)
	KBEnabled(ctx context.Context, kbIDs []string) (map[string]bool, error)
}

// ExplainInput is the state Explain decides from.
type ExplainInput struct {
	Config config.Config
	Policy rollout.Policy
	// KnowledgeOff says why the knowledge features are off ("": on).
	KnowledgeOff string
	// Verdict is native detection's verdict held (unknown, legacy, native).
	Verdict string
	// Catalog nil: the route's row is not looked up.
	Catalog RouteLookup
}

// ErrBadRoute is a route key outside Core's pattern.
var ErrBadRoute = errors.New("is not a route key: want ^[a-z0-9][a-z0-9_-]{1,63}$")

// Explain decides for route as a knowledge request would be decided now.
func Explain(ctx context.Context, in ExplainInput, route string) (Explanation, error) {
	key, ok := corefacts.ParseRouteKey(route)
	if !ok {
		if len(route) > 64 {
			route = route[:64] + "…"
		}
		return Explanation{}, fmt.Errorf("route %q %w", route, ErrBadRoute)
	}
	ex := Explanation{Route: route, Rollout: in.Policy.Explain(route),
		Native: NativeStatus{Mode: in.Config.NativeDetection, Verdict: in.Verdict}}
	if in.Catalog != nil {
		ex.Catalog = lookupRoute(ctx, in.Catalog, key)
		listOversized(ctx, in.Catalog, &ex)
	}
	switch {
	case in.KnowledgeOff != "":
		ex.Reason = "not served: the knowledge features are off (" + in.KnowledgeOff + "); everything is passed through"
	case !ex.Rollout.Enabled:
		ex.Reason = "not served: not rolled out (" + ex.Rollout.Reason + "); passed through to Core"
	case in.Verdict == "native":
		ex.Reason = "not served: Core serves the protocol itself (native); passed through"
	default:
		ex.Served = true
		ex.Reason = "served: rolled out (" + ex.Rollout.Reason + ")"
		switch {
		case !ex.Catalog.Checked:
		case ex.Catalog.Error != "":
			ex.Reason += "; the catalog could not be read: " + ex.Catalog.Error
		case !ex.Catalog.Found:
			ex.Reason += "; but Core has no such route: search and read answer 404"
		case !ex.Catalog.KnowledgeConfigured:
			ex.Reason += "; the route has no knowledge bases configured: capabilities report enabled:false"
		}
	}
	return ex, nil
}

// listOversized fills ex's oversized documents from the route's KBs that
// exist, when the catalog can list them.
func listOversized(ctx context.Context, cat RouteLookup, ex *Explanation) {
	o, ok := cat.(OversizedLookup)
	if !ok || !ex.Catalog.Found || ex.Catalog.Error != "" {
		return
	}
	var ids []string
	for _, kb := range ex.Catalog.KBs {
		if kb.Exists {
			ids = append(ids, kb.ID)
		}
	}
	docs, n, err := o.OversizedDocuments(ctx, ids, protocol.ReadChainMaxBytes, MaxOversizedListed)
	if err != nil {
		if !errors.Is(err, corefacts.ErrNotFound) {
			ex.Catalog.Error = "the catalog is unavailable"
		}
		return
	}
	ex.OversizedDocuments = make([]OversizedDocument, 0, len(docs))
	for _, d := range docs {
		ex.OversizedDocuments = append(ex.OversizedDocuments, OversizedDocument{DocID: d.DocID, Title: d.Title, Bytes: d.Bytes})
	}
	ex.OversizedCount = &n
}

func lookupRoute(ctx context.Context, cat RouteLookup, key corefacts.RouteKey) RouteCatalog {
	rc := RouteCatalog{Checked: true}
	r, err := cat.Route(ctx, key)
	switch {
	case errors.Is(err, corefacts.ErrNotFound):
		return rc
	case errors.Is(err, catalog.ErrSchemaUnverified):
		rc.Error = "the catalog schema is not verified yet"
		return rc
	case err != nil:
		rc.Error = "the catalog is unavailable"
		return rc
	}
	rc.Found, rc.Enabled = true, r.Enabled
	if r.Knowledge == nil {
		return rc
	}
	rc.KnowledgeConfigured = true
	ids := r.Knowledge.KBIDs
	en, err := cat.KBEnabled(ctx, ids)
	if err != nil {
		rc.Error = "the catalog is unavailable"
		return rc
	}
	for _, id := range ids {
		e, exists := en[id]
		rc.KBs = append(rc.KBs, KBState{ID: id, Exists: exists, Enabled: e})
	}
	return rc
}

// Explain is Explain with this process's state: the running rollout, the
// verdict held, and the catalog the knowledge endpoints use.
func (a *App) Explain(ctx context.Context, route string) (Explanation, error) {
	a.mu.Lock()
	cfg := a.cfg
	a.mu.Unlock()
	pol, _ := rollout.Parse(cfg.Rollout) // validated
	in := ExplainInput{Config: cfg, Policy: pol, KnowledgeOff: a.knowledgeOff, Verdict: "off"}
	if a.knowledgeOff == "" {
		in.Verdict, in.Catalog = a.gauges().native, a.routes
	}
	return Explain(ctx, in, route)
}

// registerOps enables /-/status and /-/explain on the admin listener.
func (a *App) registerOps() {
	a.Server.SetStatus(func(ctx context.Context) any { return a.Status(ctx) })
	a.Server.SetExplainer(func(ctx context.Context, route string) (any, error) { return a.Explain(ctx, route) })
}
