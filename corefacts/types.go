package corefacts

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// Session is Core's answer to GET /agent-auth/v1/session (CORE_FACTS §1.2),
// reduced to the fields the sidecar binds references to and gates on.
type Session struct {
	SessionID     string
	ClientAppID   string
	Principal     Principal
	OnBehalfOf    string
	AllowedRoutes []string
	ExpiresAt     time.Time
}

// Principal is the business identity inside a Session.
type Principal struct {
	ID       string
	Tenant   string
	Roles    []string
	Audience string
	Channel  string
}

// Hit is one chunk returned by Core's POST /kb/search.
type Hit struct {
	KBID    string
	DocID   int64
	Seq     int
	Title   string
	Content string // image-stripped chunk text, about ≤ 700 characters
	Score   float64
}

// KnowledgeConfig is a route's knowledge configuration normalized exactly as
// Core's routeKnowledgeConfig does (CORE_SCHEMA §4). A route without knowledge
// has a nil *KnowledgeConfig.
type KnowledgeConfig struct {
	KBIDs     []string // configured order, trimmed, empties dropped, never empty
	TopK      int      // 1..20, default 5
	MinScore  float64  // 0..1, default 0.35
	Inject    string   // "chunk" or "doc"
	MaxDocs   int      // 1..20, default 4
	PageBoost bool
}

// Route is what the catalog knows about one workspace.
type Route struct {
	Key       string
	Enabled   bool
	Knowledge *KnowledgeConfig // nil: no knowledge configured
}

// KB is a knowledge base row (bz_kb_bases) as the catalog read it.
type KB struct {
	// ID is the kb_id as stored. Core matches ids case-insensitively but
	// keys its vector index cache by the spelling a search sends, and a write
	// refreshes only the stored spelling's entry (CORE_FACTS Addendum 2), so
	// /kb/search is called with this spelling.
	ID      string
	Enabled bool // enabled <> 0
}

// DocMeta is a document's metadata row, without its body.
type DocMeta struct {
	DocID       int64
	KBID        string
	Title       string
	Status      string // "embedding" | "ready" | "error"
	ContentHash string // md5 hex, empty when NULL
	UpdatedAt   time.Time
}

// Document is a document's current state: metadata, body and revision.
type Document struct {
	DocMeta
	Content  string
	Revision string // sha256 hex of Title + "\x00" + Content
}

// Run is an Agent run row (bz_agent_client_runs).
type Run struct {
	RunID       string
	SessionID   string
	ClientAppID string
	RouteKey    string
	Status      string // preparing | context_ready | completed | failed | cancelled
	CompletedAt *time.Time
}

// Active reports whether the run may still be used: context_ready and not completed.
func (r Run) Active() bool { return r.Status == "context_ready" && r.CompletedAt == nil }

// Sentinel errors. Callers classify with errors.Is; messages never carry
// addresses, credentials or SQL.
var (
	// ErrUnauthorized: Core rejected the caller's bearer (401).
	ErrUnauthorized = errors.New("core rejected the credentials")
	// ErrUnavailable: transport error, timeout, 5xx, unusable answer or an open breaker.
	ErrUnavailable = errors.New("core or catalog unavailable")
	// ErrBreakerOpen wraps ErrUnavailable when a breaker refused the call without I/O.
	ErrBreakerOpen = fmt.Errorf("%w: circuit open", ErrUnavailable)
	// ErrNotFound: the catalog has no such row (route, document, run, KB).
	ErrNotFound = errors.New("not found")
	// ErrEndpointAbsent: Core answered 404 not_found for the endpoint itself
	// (an older Core without system-info or the knowledge protocol).
	ErrEndpointAbsent = errors.New("core endpoint absent")
	// ErrRequestRefused: Core (or its HTTP front) refused a request whose
	// shape the caller chose — a 4xx that is none of the endpoint's
	// documented answers, such as Node's 431 for headers over 16 KiB or a
	// 400/413/414 for a body or query. Core is up: a breaker never counts
	// it (package breaker excludes it), so no caller can open a breaker
	// others depend on. On an identity call it also wraps ErrUnauthorized
	// (the caller's credential did not authenticate: 401).
	ErrRequestRefused = errors.New("core refused the request")
)

// CoreError is a 4xx answer from Core's Agent API that must be relayed as is
// (e.g. 403 route_not_allowed, 404 route_unavailable), or a gate decision of
// the catalog fallback expressed the same way.
type CoreError struct {
	Status  int
	Code    string
	Message string
}

func (e *CoreError) Error() string {
	return fmt.Sprintf("core answered %d %s", e.Status, e.Code)
}

// ErrKBMissing: Core does not know the knowledge base (it was deleted, or
// never existed). It wraps ErrNotFound; the breaker counts it as a success.
var ErrKBMissing = fmt.Errorf("knowledge base missing: %w", ErrNotFound)

// ErrRateLimited: Core answered 429 to /kb/search, its per-client rate limit
// on the sidecar's own credential (bz_clients.rate_limit_per_min, shared by
// every session's searches and consumed once per KB). It does not wrap
// ErrUnavailable: Core is up and answering, so the breaker counts it as a
// success and never opens on it; the KB counts as failed for that search.
var ErrRateLimited = errors.New("core rate limit reached")

// StatusReady is the only document status whose body the catalog returns.
const StatusReady = "ready"

// SameID reports whether two ids name the same row under the database's
// case-insensitive, PAD SPACE collation (utf8mb4_*_ci): case-folded equality
// ignoring trailing spaces. Ids in Core are ASCII, where this is exact.
func SameID(a, b string) bool {
	return strings.EqualFold(strings.TrimRight(a, " "), strings.TrimRight(b, " "))
}

// RouteBundle is a route read together with the rows a knowledge request
// needs after it (the SQL catalog's RouteBundle): the KB rows of the ids asked for and,
// when a document was asked for, that document fenced to those KBs. All of
// it comes from one consistent read; nothing is cached across requests
// (bodies come from the revision cache, keyed by the fresh metadata).
type RouteBundle struct {
	Route Route
	// KBs holds the rows of the ids in Asked (keys as asked, matched like
	// KBs); an asked id without a row was deleted. Ids not in Asked were not
	// looked up.
	KBs   map[string]KB
	Asked []string
	// Doc is the document asked for when DocFound (absent, out of the fence
	// or vanished: DocFound false). DocErr is a failure to read its body;
	// callers report it at their document step, after the checks before it.
	Doc      Document
	DocFound bool
	DocErr   error
}
