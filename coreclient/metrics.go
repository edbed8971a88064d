package coreclient

import (
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Operation labels of the core request metrics (a closed set).
const (
	OpSession    = "session"
	OpSystemInfo = "system_info"
	OpKBSearch   = "kb_search"
	OpProbe      = "probe"
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
// built (the breaker families when their breaker is), so alert expressions
// and panels read 0 rather than "no data" before the first event.
var (
	requestOps      = []string{OpSession, OpSystemInfo, OpKBSearch, OpProbe}
	requestOutcomes = []string{OutcomeOK, OutcomeClientError, OutcomeUnauthorized, OutcomeRateLimited, OutcomeUnavailable, OutcomeOpen, OutcomeCanceled}
	catalogQueries  = []string{QuerySchema, QueryRoute, QueryKBs, QueryDocMeta, QueryDocBody, QueryRun, QueryClient,
		QueryClientLimit, QueryRouteKBs, QueryReadyKBs, QueryTaskPresence, QueryTask}
	catalogOutcomes = []string{OutcomeOK, OutcomeNotFound, OutcomeUnavailable, OutcomeOpen, OutcomeCanceled, OutcomeQueryError} // outcomeOf
	breakerTargets  = []breakerState{stateClosed, stateHalfOpen, stateOpen}
)

// Metrics holds the Prometheus collectors of package coreclient. All methods
// are safe on a nil *Metrics (they do nothing), so callers may pass nil to
// run without metrics.
//
// Series (namespace knowledge_sidecar):
//
//	core_breaker_state{family}                    gauge: 0 closed, 1 half-open, 2 open
//	core_breaker_transitions_total{family,to}     counter; to ∈ closed, half_open, open
//	core_requests_total{op,outcome}               counter; op ∈ session, system_info, kb_search, probe
//	core_request_duration_seconds{op}             histogram of requests that reached Core
//	catalog_queries_total{query,outcome}          counter, fed by the SQL catalog
//	catalog_query_duration_seconds{query}         histogram, fed by the SQL catalog
//
// Label values come only from constants of this package or of the catalog
// code: never a path, route, token, KB or document id.
type Metrics struct {
	breakerState       *prometheus.GaugeVec
	breakerTransitions *prometheus.CounterVec
	requests           *prometheus.CounterVec
	requestDuration    *prometheus.HistogramVec
	catalogQueries     *prometheus.CounterVec
	catalogDuration    *prometheus.HistogramVec
}

const namespace = "knowledge_sidecar"

// NewMetrics builds the collectors and registers them on reg. A nil reg gives
// working but unregistered collectors. Registering twice on the same registry
// reuses the collectors already there.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		breakerState: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: namespace, Subsystem: "core", Name: "breaker_state",
			Help: "Circuit breaker state per operation family: 0 closed, 1 half-open, 2 open.",
		}, []string{"family"}),
		breakerTransitions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Subsystem: "core", Name: "breaker_transitions_total",
			Help: "Circuit breaker state changes per operation family and target state.",
		}, []string{"family", "to"}),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Subsystem: "core", Name: "requests_total",
			Help: "Calls to Core by operation and outcome (open: refused by the breaker without a request).",
		}, []string{"op", "outcome"}),
		requestDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: namespace, Subsystem: "core", Name: "request_duration_seconds",
			Help:    "Duration of calls that reached Core, by operation.",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5},
		}, []string{"op"}),
		catalogQueries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Subsystem: "catalog", Name: "queries_total",
			Help: "Catalog queries by query name and outcome.",
		}, []string{"query", "outcome"}),
		catalogDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: namespace, Subsystem: "catalog", Name: "query_duration_seconds",
			Help:    "Duration of catalog queries by query name.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5},
		}, []string{"query"}),
	}
	if reg != nil {
		m.breakerState = register(reg, m.breakerState)
		m.breakerTransitions = register(reg, m.breakerTransitions)
		m.requests = register(reg, m.requests)
		m.requestDuration = register(reg, m.requestDuration)
		m.catalogQueries = register(reg, m.catalogQueries)
		m.catalogDuration = register(reg, m.catalogDuration)
	}
	for _, op := range requestOps {
		m.requestDuration.WithLabelValues(op)
		for _, o := range requestOutcomes {
			m.requests.WithLabelValues(op, o)
		}
	}
	for _, q := range catalogQueries {
		m.catalogDuration.WithLabelValues(q)
		for _, o := range catalogOutcomes {
			m.catalogQueries.WithLabelValues(q, o)
		}
	}
	return m
}

// register registers c, or returns the equal collector already registered.
func register[C prometheus.Collector](reg prometheus.Registerer, c C) C {
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(C); ok {
				return existing
			}
		}
		panic(err) // a programming error: conflicting metric definitions
	}
	return c
}

// ObserveCatalog records one catalog query. query and outcome must come from
// a closed set of constants chosen by the catalog code.
func (m *Metrics) ObserveCatalog(query, outcome string, d time.Duration) {
	if m == nil {
		return
	}
	m.catalogQueries.WithLabelValues(query, outcome).Inc()
	m.catalogDuration.WithLabelValues(query).Observe(d.Seconds())
}

// observeRequest records one Core call; d < 0 means no request was sent.
// traceID, when not empty, is the duration's exemplar (a sampled request).
func (m *Metrics) observeRequest(op, outcome string, d time.Duration, traceID string) {
	if m == nil {
		return
	}
	m.requests.WithLabelValues(op, outcome).Inc()
	switch {
	case d < 0:
	case traceID != "":
		m.requestDuration.WithLabelValues(op).(prometheus.ExemplarObserver).ObserveWithExemplar(d.Seconds(), prometheus.Labels{"trace_id": traceID})
	default:
		m.requestDuration.WithLabelValues(op).Observe(d.Seconds())
	}
}

// breakerInit sets the state gauge of a new breaker to closed.
func (m *Metrics) breakerInit(family string) {
	if m == nil {
		return
	}
	m.breakerState.WithLabelValues(family).Set(0)
	for _, to := range breakerTargets {
		m.breakerTransitions.WithLabelValues(family, to.label())
	}
}

// breakerChanged records a state change. It runs under the breaker's lock,
// so it only touches collectors.
func (m *Metrics) breakerChanged(family string, to breakerState) {
	if m == nil {
		return
	}
	m.breakerState.WithLabelValues(family).Set(float64(to))
	m.breakerTransitions.WithLabelValues(family, to.label()).Inc()
}
