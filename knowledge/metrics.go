package knowledge

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bailinghub/knowledge-sidecar/protocol"
)

// metrics are optional: every method is a no-op on a nil *metrics.
type metrics struct {
	requests  *prometheus.CounterVec   // endpoint, code
	duration  *prometheus.HistogramVec // endpoint
	kbCalls   *prometheus.CounterVec   // result
	dropped   *prometheus.CounterVec   // reason
	truncated *prometheus.CounterVec   // endpoint
	readBytes prometheus.Counter
	taskDeny  *prometheus.CounterVec // code
}

// Closed label sets.
var (
	endpointLabels = []string{"capabilities", "search", "read"}
	codeLabels     = []protocol.ErrorCode{statusOK, protocol.CodeInvalidRequest, protocol.CodeReferenceInvalid, protocol.CodeUnauthorized,
		protocol.CodeRouteNotAllowed, protocol.CodeRouteUnavailable, protocol.CodeRunNotFound, protocol.CodeRunNotActive, protocol.CodeScopeChanged,
		protocol.CodeKnowledgeChanged, protocol.CodeReferenceExpired, protocol.CodePayloadTooLarge, protocol.CodeRateLimited, protocol.CodeUnavailable, codeCoreGate,
		protocol.CodeTaskRequired, protocol.CodeTaskRecordInvalid, protocol.CodeTaskBindingConflict, protocol.CodeTaskRunInactive, protocol.CodeTaskMemberMismatch,
		protocol.CodeTaskScopeBlocked, protocol.CodeTaskPaused, protocol.CodeTaskCancelled, protocol.CodeTaskExpired, protocol.CodeTaskInvalidInput, protocol.CodeTaskUnavailable}
	kbResultLabels   = []string{"ok", "error", "timeout", "rate_limited", "skipped", kbEmptyFailure}
	dropReasonLabels = []string{"stale_fragment", "not_ready", "kb_unavailable", "missing", "budget"}
)

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	if reg == nil {
		return nil, nil
	}
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "knowledge_sidecar", Subsystem: "knowledge", Name: "requests_total",
			Help: "Knowledge endpoint requests by endpoint and answer code (ok or error code).",
		}, []string{"endpoint", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "knowledge_sidecar", Subsystem: "knowledge", Name: "request_duration_seconds",
			Help:    "Time spent answering knowledge endpoint requests.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5},
		}, []string{"endpoint"}),
		kbCalls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "knowledge_sidecar", Subsystem: "knowledge", Name: "search_kb_calls_total",
			Help: "Per-knowledge-base retrieval attempts during search by result.",
		}, []string{"result"}),
		dropped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "knowledge_sidecar", Subsystem: "knowledge", Name: "search_hits_dropped_total",
			Help: "Search hits or hints dropped by reason.",
		}, []string{"reason"}),
		truncated: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "knowledge_sidecar", Subsystem: "knowledge", Name: "truncated_responses_total",
			Help: "Responses (and turn hint arrays, endpoint \"turn\") shortened to fit a byte budget, by endpoint.",
		}, []string{"endpoint"}),
		readBytes: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "knowledge_sidecar", Subsystem: "knowledge", Name: "read_content_bytes_total",
			Help: "Document content bytes served by read pages.",
		}),
		taskDeny: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "knowledge_sidecar", Subsystem: "knowledge", Name: "task_denials_total",
			Help: "Knowledge searches and reads refused by the managed-task rules (Core ≥ 0.8), by TASK_* code.",
		}, []string{"code"}),
	}
	var err error
	m.requests, err = register(reg, m.requests)
	if err != nil {
		return nil, err
	}
	if m.duration, err = register(reg, m.duration); err != nil {
		return nil, err
	}
	if m.kbCalls, err = register(reg, m.kbCalls); err != nil {
		return nil, err
	}
	if m.dropped, err = register(reg, m.dropped); err != nil {
		return nil, err
	}
	if m.truncated, err = register(reg, m.truncated); err != nil {
		return nil, err
	}
	if m.readBytes, err = register(reg, m.readBytes); err != nil {
		return nil, err
	}
	if m.taskDeny, err = register(reg, m.taskDeny); err != nil {
		return nil, err
	}
	for _, c := range taskCodes {
		m.taskDeny.WithLabelValues(string(c))
	}
	// Pre-create the closed label sets so dashboards see zeros.
	for _, e := range endpointLabels {
		m.duration.WithLabelValues(e)
		for _, c := range codeLabels {
			m.requests.WithLabelValues(e, string(c))
		}
	}
	// Capabilities is never shortened; "turn" is same-run hints (TurnHintsFor).
	for _, e := range []string{"search", "read", "turn"} {
		m.truncated.WithLabelValues(e)
	}
	for _, r := range kbResultLabels {
		m.kbCalls.WithLabelValues(r)
	}
	for _, r := range dropReasonLabels {
		m.dropped.WithLabelValues(r)
	}
	return m, nil
}

// register registers c, or reuses an identical collector already registered
// (two Services on one registry share their metrics).
func register[C prometheus.Collector](reg prometheus.Registerer, c C) (C, error) {
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(C); ok {
				return existing, nil
			}
		}
		return c, err
	}
	return c, nil
}

func (m *metrics) observe(endpoint string, err error, seconds float64) {
	if m == nil {
		return
	}
	code := statusOK
	if err != nil {
		code = protocol.CodeUnavailable
		var ke *Error
		if errors.As(err, &ke) {
			code = codeCoreGate
			for _, c := range codeLabels {
				if c == ke.Code {
					code = c
					break
				}
			}
		}
	}
	m.requests.WithLabelValues(endpoint, string(code)).Inc()
	m.duration.WithLabelValues(endpoint).Observe(seconds)
}

func (m *metrics) kbCall(result string) {
	if m != nil {
		m.kbCalls.WithLabelValues(result).Inc()
	}
}

func (m *metrics) drop(reason string, n int) {
	if m != nil && n > 0 {
		m.dropped.WithLabelValues(reason).Add(float64(n))
	}
}

func (m *metrics) truncate(endpoint string) {
	if m != nil {
		m.truncated.WithLabelValues(endpoint).Inc()
	}
}

func (m *metrics) served(n int) {
	if m != nil {
		m.readBytes.Add(float64(n))
	}
}

func (m *metrics) taskDenied(code protocol.ErrorCode) {
	if m != nil {
		m.taskDeny.WithLabelValues(string(code)).Inc()
	}
}
