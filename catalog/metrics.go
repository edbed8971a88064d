package catalog

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/bailinghub/knowledge-sidecar/breaker"
	"github.com/bailinghub/knowledge-sidecar/telemetry"
)

// Outcome labels of the catalog metrics (a closed set, outcomeOf).
const (
	OutcomeOK          = "ok"
	OutcomeNotFound    = "not_found"
	OutcomeUnavailable = "unavailable"
	OutcomeOpen        = "open"
	OutcomeCanceled    = "canceled"
	// OutcomeQueryError: the database answered a task query with an error (tasks.go).
	OutcomeQueryError = "query_error"
)

// The closed label sets, each series created with 0 when the collectors are
// built, so alert expressions and panels read 0 rather than "no data".
var (
	catalogQueries = []string{QuerySchema, QueryRoute, QueryKBs, QueryDocMeta, QueryDocBody, QueryRun, QueryClient,
		QueryClientLimit, QueryRouteKBs, QueryReadyKBs, QueryTaskPresence, QueryTask, QueryOversized}
	catalogOutcomes = []string{OutcomeOK, OutcomeNotFound, OutcomeUnavailable, OutcomeOpen, OutcomeCanceled, OutcomeQueryError}
)

// Metrics are the catalog's collectors, with the gauges of its breaker
// (package breaker). All methods are safe on a nil *Metrics.
//
// Series (namespace knowledge_sidecar):
//
//	catalog_queries_total{query,outcome}          counter
//	catalog_query_duration_seconds{query}         histogram
//
// Label values come only from this package's constants.
type Metrics = breaker.CallMetrics

// NewMetrics builds the collectors and registers them on reg (nil:
// unregistered). Registering twice on the same registry reuses them.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	return breaker.NewCallMetrics(reg, telemetry.CallsOpts{
		Subsystem: "catalog",
		TotalName: "queries_total", TotalHelp: "Catalog queries by query name and outcome.",
		DurationName: "query_duration_seconds", DurationHelp: "Duration of catalog queries by query name.",
		KeyLabel: "query", OutcomeLabel: "outcome",
		Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5},
		Keys:    catalogQueries, Outcomes: catalogOutcomes,
	})
}
