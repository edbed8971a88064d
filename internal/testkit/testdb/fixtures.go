package testdb

import (
	"strings"
	"time"
)

// Route keys (bz_routes.route_key).
const (
	RouteNull        = "kb-null"         // knowledge NULL: no knowledge
	RouteLegacy      = "kb-legacy"       // {"kb_id":" faq "} only: [faq], defaults
	RouteMulti       = "kb-multi"        // kb_ids faq, manuals, kb-disabled, kb-missing; top_k 8, min_score 0.5, doc, max_docs 2, page_boost
	RouteEmptyKBIDs  = "kb-empty"        // {"kb_ids":[],"kb_id":"faq"}: no knowledge (no fallback)
	RouteDisabled    = "kb-off"          // enabled = 0
	RouteAudience    = "kb-audience"     // audience roles [manager], tenants "tenant-7, tenant-8"
	RouteAudienceOff = "kb-audience-off" // audience policy with enabled:false
	RouteCaseStored  = "KB-Case"         // stored spelling; its kb_ids is ["FAQ"]
	RouteCase        = "kb-case"         // requested spelling of RouteCaseStored
	RouteQuirky      = "kb-quirky"       // non-numeric / out-of-range knowledge values
	RouteMissing     = "kb-nowhere"      // no row
)

// Knowledge base ids (bz_kb_bases.kb_id).
const (
	KBFAQ      = "faq"
	KBFAQUpper = "FAQ" // case variant of KBFAQ, used by RouteCaseStored
	KBManuals  = "manuals"
	KBDisabled = "kb-disabled" // enabled = 0
	KBMissing  = "kb-missing"  // listed by RouteMulti, no row
	KBOther    = "other-kb"    // exists, in no route
)

// Document ids (bz_kb_docs.doc_id).
const (
	DocRefund     int64 = 101 // faq, ready, content_hash set
	DocMultiByte  int64 = 102 // faq, ready, CJK + emoji, content_hash NULL
	DocEmbedding  int64 = 103 // faq, status embedding
	DocError      int64 = 104 // manuals, status error
	DocBig        int64 = 105 // manuals, ready, 300 000 characters
	DocDisabledKB int64 = 106 // kb-disabled, ready
	DocOtherKB    int64 = 107 // other-kb, ready
	DocMissing    int64 = 999 // no row
)

// Document texts.
const (
	DocRefundTitle      = "Refund window"
	DocRefundContent    = "Refunds are accepted within 30 days of delivery."
	DocMultiByteTitle   = "退款政策 🚀"
	DocMultiByteContent = "退款窗口为三十天。设为0表示不允许退款 🙅‍♀️ — ça va?"
	DocBigTitle         = "Big manual"
	BigDocUnit          = "知识库0123456" // 10 characters, 16 bytes
	BigDocRepeat        = 30000
	BigDocChars         = 300000
)

// BigDocContent is the body of DocBig.
func BigDocContent() string { return strings.Repeat(BigDocUnit, BigDocRepeat) }

// DocRefundUpdatedAt is DocRefund's updated_at.
var DocRefundUpdatedAt = time.Date(2026, 1, 1, 0, 10, 0, 0, time.UTC)

// Sessions (bz_agent_sessions.session_id) and client apps (bz_clients.app_id).
const (
	SessionA = "a0000000-0000-4000-8000-00000000000a" // app-a, principal user-42 tenant-7 [manager]
	SessionB = "b0000000-0000-4000-8000-00000000000b" // app-b, principal user-7

	AppA          = "app-a"     // explicit allowed_routes (every fixture route but KB-Case)
	AppB          = "app-b"     // allowed_routes [kb-multi]
	AppStar       = "app-star"  // allowed_routes ["*"]
	AppDisabled   = "app-off"   // enabled = 0
	AppNoURL      = "app-nourl" // agent_authorize_url NULL
	AppNullRoutes = "app-null"  // allowed_routes NULL
	AppCaseStored = "App-Case"  // stored spelling, ["*"]
	AppCase       = "app-case"  // requested spelling of AppCaseStored
	AppMissing    = "app-nowhere"
)

// Runs (bz_agent_client_runs.run_id), all on RouteMulti.
const (
	RunActive    = "c0ffee00-0000-4000-8000-000000000001" // SessionA/AppA, context_ready
	RunCompleted = "c0ffee00-0000-4000-8000-000000000002" // SessionA/AppA, completed
	RunForeign   = "c0ffee00-0000-4000-8000-000000000003" // SessionB/AppB, context_ready
	RunPreparing = "c0ffee00-0000-4000-8000-000000000004" // SessionA/AppA, preparing
	RunMissing   = "c0ffee00-0000-4000-8000-0000000000ff"
)

// RunCompletedAt is RunCompleted's completed_at.
var RunCompletedAt = time.Date(2026, 1, 1, 0, 5, 0, 0, time.UTC)

// RequiredMigrations are the migration rows the catalog's schema check needs.
var RequiredMigrations = []string{
	"008_kb.sql", "018_kb_ingest.sql", "019_kb_datasources.sql",
	"055_agent_auth.sql", "056_agent_client_runtime.sql",
}
