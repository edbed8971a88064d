package coreclient

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/bailinghub/knowledge-sidecar/breaker"
	"github.com/bailinghub/knowledge-sidecar/telemetry"
)

// Operation labels of the core request metrics (a closed set).
const (
	OpSession    = "session"
	OpSystemInfo = "system_info"
	OpKBSearch   = "kb_search"
	OpProbe      = "probe"
	OpAgentAuth  = "agent_auth" // Agent Auth's sign-in calls (agentauth.go)
)

// Outcome labels of the core request metrics (a closed set).
const (
	OutcomeOK           = "ok"
	OutcomeClientError  = "client_error"
	OutcomeUnauthorized = "unauthorized"
	OutcomeUnavailable  = "unavailable"
	OutcomeOpen         = "open"
	OutcomeCanceled     = "canceled"
	OutcomeRateLimited  = "rate_limited" // Core's 429 on /kb/search (its per-client limit)
)

// The closed label sets, each series created with 0 when the collectors are
// built, so alert expressions and panels read 0 rather than "no data" before
// the first event.
var (
	requestOps      = []string{OpSession, OpSystemInfo, OpKBSearch, OpProbe, OpAgentAuth}
	requestOutcomes = []string{OutcomeOK, OutcomeClientError, OutcomeUnauthorized, OutcomeRateLimited, OutcomeUnavailable, OutcomeOpen, OutcomeCanceled}
)

// Metrics are the Prometheus collectors of package coreclient, with the
// breaker gauges of its two breakers (package breaker). All methods are safe
// on a nil *Metrics (they do nothing), so callers may pass nil to run
// without metrics.
//
// Series (namespace knowledge_sidecar):
//
//	core_requests_total{op,outcome}               counter; op ∈ session, system_info, kb_search, probe, agent_auth
//	core_request_duration_seconds{op}             histogram of requests that reached Core
//
// Label values come only from constants of this package: never a path,
// route, token, KB or document id.
type Metrics = breaker.CallMetrics

// NewMetrics builds the collectors and registers them on reg. A nil reg gives
// working but unregistered collectors. Registering twice on the same registry
// reuses the collectors already there.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	return breaker.NewCallMetrics(reg, telemetry.CallsOpts{
		Subsystem:    "core",
		TotalName:    "requests_total",
		TotalHelp:    "Calls to Core by operation and outcome (open: refused by the breaker without a request).",
		DurationName: "request_duration_seconds", DurationHelp: "Duration of calls that reached Core, by operation.",
		KeyLabel: "op", OutcomeLabel: "outcome",
		Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5},
		Keys:    requestOps, Outcomes: requestOutcomes,
	})
}
