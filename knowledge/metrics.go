package knowledge

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bailinghub/knowledge-sidecar/internal/prom"
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
	m := &metrics{}
	var err error
	if m.requests, err = prom.TryRegister(reg, prom.CounterVec("knowledge_requests_total",
		"Knowledge endpoint requests by endpoint and answer code (ok or error code).", "endpoint", "code")); err != nil {
		return nil, err
	}
	if m.duration, err = prom.TryRegister(reg, prom.HistogramVec("knowledge_request_duration_seconds",
		"Time spent answering knowledge endpoint requests.", []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5}, "endpoint")); err != nil {
		return nil, err
	}
	// Pre-create the closed label sets so dashboards see zeros.
	for _, e := range endpointLabels {
		m.duration.WithLabelValues(e)
		for _, c := range codeLabels {
			m.requests.WithLabelValues(e, string(c))
		}
	}
	if m.kbCalls, err = counterVec(reg, "search_kb_calls_total",
		"Per-knowledge-base retrieval attempts during search by result.", "result", kbResultLabels); err != nil {
		return nil, err
	}
	if m.dropped, err = counterVec(reg, "search_hits_dropped_total",
		"Search hits or hints dropped by reason.", "reason", dropReasonLabels); err != nil {
		return nil, err
	}
	// Capabilities is never shortened; "turn" is same-run hints (TurnHintsFor).
	if m.truncated, err = counterVec(reg, "truncated_responses_total",
		"Responses (and turn hint arrays, endpoint \"turn\") shortened to fit a byte budget, by endpoint.",
		"endpoint", []string{"search", "read", "turn"}); err != nil {
		return nil, err
	}
	if m.taskDeny, err = counterVec(reg, "task_denials_total",
		"Knowledge searches and reads refused by the managed-task rules (Core ≥ 0.8), by TASK_* code.",
		"code", labels(taskCodes)); err != nil {
		return nil, err
	}
	m.readBytes, err = prom.TryRegister(reg, prom.Counter("knowledge_read_content_bytes_total",
		"Document content bytes served by read pages."))
	if err != nil {
		return nil, err
	}
	return m, nil
}

// counterVec builds knowledge_sidecar_knowledge_<name>{label} with the
// series of each closed label value at 0 and registers it on reg, reusing
// an identical one (two Services on one registry share their metrics).
func counterVec(reg prometheus.Registerer, name, help, label string, values []string) (*prometheus.CounterVec, error) {
	return prom.TryRegister(reg, prom.ClosedCounter("knowledge_"+name, help, label, values))
}

// labels are codes as label values.
func labels[S ~string](codes []S) []string {
	out := make([]string, len(codes))
	for i, c := range codes {
		out[i] = string(c)
	}
	return out
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
