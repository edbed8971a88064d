package knowledge

import (
	"context"

	"github.com/bailinghub/knowledge-sidecar/corefacts"
)

// The small interfaces the protocol needs from the outside world. They are
// declared here, by the consumer, in the values of package corefacts; the
// adapters satisfy them (coreclient's HTTP client for Identity and Retriever,
// package catalog's SQL and in-memory catalogs for Catalog).
//
// Error contract (classify with errors.Is / errors.As only):
//   - corefacts.ErrUnauthorized   Core rejected the bearer → 401 unauthorized
//   - corefacts.ErrUnavailable    transport error, timeout, 5xx, open breaker → 503 knowledge_unavailable
//   - corefacts.ErrNotFound       the catalog has no such row
//   - corefacts.ErrEndpointAbsent Core has no system-info endpoint (older Core) → use Catalog.RouteGate
//   - *corefacts.CoreError        a Core gate answer (403/404 + code) to relay as is

// Identity asks Core who the caller is and whether the route is theirs.
type Identity interface {
	// Session forwards the caller's Authorization header to GET /agent-auth/v1/session.
	Session(ctx context.Context, authorization string) (corefacts.Session, error)
	// SystemInfo asks GET /agent-api/v1/workspaces/:route/system-info with the
	// caller's header. nil means the route is allowed.
	SystemInfo(ctx context.Context, authorization string, route corefacts.RouteKey) error
}

// Retriever searches one knowledge base through Core's POST /kb/search.
type Retriever interface {
	// SearchKB returns Core's unfiltered top topK hits of one KB (it sends
	// min_score -1): the route's threshold is the caller's to apply
	// (corefacts.ScoreThreshold), and an answer with no hit at all from a KB
	// that holds a ready document is a silent failure (SPEC §4). The slice
	// is the caller's: the service edits and filters it in place.
	SearchKB(ctx context.Context, kbID, query string, topK int) ([]corefacts.Hit, error)
	// Usable is false while the retrieval breaker is open.
	Usable() bool
}

// Catalog is the read-only view of Core's database.
type Catalog interface {
	// Route returns the route row with its normalized knowledge config; ErrNotFound when unknown.
	Route(ctx context.Context, key corefacts.RouteKey) (corefacts.Route, error)
	// RouteGate is the gate for Cores without system-info: route enabled, client
	// and session allow-lists (with "*"), client enabled with an authorize URL,
	// audience policy. nil means allowed; otherwise a *corefacts.CoreError.
	RouteGate(ctx context.Context, route corefacts.RouteKey, s corefacts.Session) error
	// KBEnabled maps each existing KB id to its enabled flag; a missing id was deleted.
	KBEnabled(ctx context.Context, kbIDs []string) (map[string]bool, error)
	// KBs is KBEnabled with each KB's id as stored in bz_kb_bases, the
	// spelling /kb/search must be called with (keys: the ids as requested).
	KBs(ctx context.Context, kbIDs []string) (map[string]corefacts.KB, error)
	// ReadyKBs reports which of kbIDs hold at least one document with status
	// ready (keys as requested, only true values). Search asks it only for
	// KBs that answered no hit at all.
	ReadyKBs(ctx context.Context, kbIDs []string) (map[string]bool, error)
	// Documents returns the current documents among docIDs, fenced to kbIDs.
	// Missing (or out-of-fence) documents are absent from the map.
	Documents(ctx context.Context, docIDs []int64, kbIDs []string) (map[int64]corefacts.Document, error)
	// Document returns one current document fenced to kbIDs; ErrNotFound when absent.
	Document(ctx context.Context, docID int64, kbIDs []string) (corefacts.Document, error)
	// Run returns a run row; ErrNotFound when absent.
	Run(ctx context.Context, runID string) (corefacts.Run, error)
	// Usable is false while the catalog breaker is open.
	Usable() bool
}
