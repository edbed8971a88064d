package turn

import (
	"context"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/bailinghub/knowledge-sidecar/internal/prom"
)

// Metrics is the Recorder that counts, traces and logs the turn feature's
// work (docs/metrics.md): turns_total{mode,outcome},
// ledger_conflicts_total, ledger_errors_total, ledger_fail_open_total
// {reason}, ledger_releases_total{reason} and turn_hints_total{outcome},
// every series at 0 from the start (MetricLabels).
type Metrics struct {
	turns     *prometheus.CounterVec
	conflicts prometheus.Counter
	errors    prometheus.Counter
	failOpen  *prometheus.CounterVec
	releases  *prometheus.CounterVec
	hints     *prometheus.CounterVec
	log       *slog.Logger
	requestID func(context.Context) string
}

// NewMetrics registers the turn feature's series with reg (nil: none) and
// logs a failed release to log (nil: discarded) with the request id
// requestID reads from the request's context (nil: none).
func NewMetrics(reg prometheus.Registerer, log *slog.Logger, requestID func(context.Context) string) *Metrics {
	m := &Metrics{
		turns: prom.CounterVec("turns_total",
			"Intercepted turns by knowledge delivery mode and outcome.", "mode", "outcome"),
		conflicts: prom.Counter("ledger_conflicts_total",
			"Turn retries refused because the turn is bound to another delivery mode."),
		errors: prom.Counter("ledger_errors_total", "Turn-mode ledger backend failures."),
		failOpen: prom.ClosedCounter("ledger_fail_open_total",
			"Turns without knowledge_delivery forwarded unbound because identity or the ledger could not be reached (reason: identity, ledger).",
			"reason", MetricLabels.FailOpen),
		releases: prom.ClosedCounter("ledger_releases_total",
			"Turn attempts whose share of the turn's ledger records was released, by reason (refused: Core answered 4xx; not_sent: Core never received the request).",
			"reason", MetricLabels.Releases),
		hints: prom.ClosedCounter("turn_hints_total",
			"On-demand turns answered by same-run hints outcome (minted, none, failed, off).",
			"outcome", MetricLabels.Hints),
		log:       log,
		requestID: requestID,
	}
	for _, mode := range MetricLabels.Modes {
		for _, o := range MetricLabels.Outcomes {
			m.turns.WithLabelValues(mode, o)
		}
	}
	if m.log == nil {
		m.log = slog.New(slog.DiscardHandler)
	}
	if m.requestID == nil {
		m.requestID = func(context.Context) string { return "" }
	}
	if reg != nil {
		reg.MustRegister(m.turns, m.conflicts, m.errors, m.failOpen, m.releases, m.hints)
	}
	return m
}

// FailOpen counts a field-less turn forwarded unbound, with an event on the
// request's span when it is traced.
func (m *Metrics) FailOpen(ctx context.Context, reason string) {
	m.failOpen.WithLabelValues(reason).Inc()
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		span.AddEvent("ledger_fail_open", trace.WithAttributes(attribute.String("knowledge_sidecar.reason", reason)))
	}
}

// LedgerError counts a failed ledger call.
func (m *Metrics) LedgerError() { m.errors.Inc() }

// Released counts an attempt whose ledger share was released.
func (m *Metrics) Released(reason string) { m.releases.WithLabelValues(reason).Inc() }

// ReleaseFailed logs a release that is left to the retrying ledger.
func (m *Metrics) ReleaseFailed(ctx context.Context, err error) {
	m.log.LogAttrs(ctx, slog.LevelWarn, "turn ledger release failed; it is retried until it succeeds or the record expires",
		slog.String("request_id", m.requestID(ctx)), slog.Any("error", err))
}

// Hints counts an on_demand answer's same-run hints outcome.
func (m *Metrics) Hints(outcome string) { m.hints.WithLabelValues(outcome).Inc() }

// Conflict counts a turn answered 409 turn_conflict.
func (m *Metrics) Conflict() { m.conflicts.Inc() }

// Turn counts a turn whose handling ended.
func (m *Metrics) Turn(mode, outcome string) { m.turns.WithLabelValues(mode, outcome).Inc() }
