package proxy

import (
	"runtime"
	"strconv"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bailinghub/knowledge-sidecar/internal/prom"
)

// metrics are the edge's own series. Labels come from closed sets only:
// handler names, status codes, error kinds — never paths, tokens or refs.
type metrics struct {
	requests       *prometheus.CounterVec
	duration       *prometheus.HistogramVec
	inFlight       prometheus.Gauge
	upstreamErrors *prometheus.CounterVec
	ready          prometheus.Gauge
	rollout        *prometheus.CounterVec
	reloads        *prometheus.CounterVec
	// byHandler: the pre-resolved series of each handler label (read-only
	// after newMetrics).
	byHandler map[string]*handlerSeries
}

// handlerSeries are one handler's series, resolved once: its duration
// histogram child at start, its request counter children by status code on
// their first use (when the series appears, as with WithLabelValues), so a
// request costs no label hashing or strconv.
type handlerSeries struct {
	name     string
	duration prometheus.Observer
	vec      *prometheus.CounterVec
	codes    [600]atomic.Pointer[prometheus.Counter]
}

func (h *handlerSeries) requests(status int) prometheus.Counter {
	if status < 0 || status >= len(h.codes) {
		return h.vec.WithLabelValues(h.name, strconv.Itoa(status))
	}
	if c := h.codes[status].Load(); c != nil {
		return *c
	}
	c := h.vec.WithLabelValues(h.name, strconv.Itoa(status))
	h.codes[status].Store(&c)
	return c
}

// handler is the series of a handler label; every label handlerName gives
// has one.
func (m *metrics) handler(name string) *handlerSeries {
	if hs := m.byHandler[name]; hs != nil {
		return hs
	}
	// Not reached (handlerName's set is closed); correct all the same.
	return &handlerSeries{name: name, duration: m.duration.WithLabelValues(name), vec: m.requests}
}

// Label values of the edge's metrics: closed sets, one constant each. The
// turn feature's series are package turn's (turn.Metrics), the native
// detector's package native's (native.StateMetric).
type rolloutDecision string // rollout_decisions_total{decision}

const (
	decisionEnabled      rolloutDecision = "enabled"
	decisionDisabled     rolloutDecision = "disabled"
	decisionNative       rolloutDecision = "native"
	decisionInvalidRoute rolloutDecision = "invalid_route"
)

// The other closed label sets, each series created at start with 0 (so an
// alert or a panel reads 0, not "no data", before the first event).
var (
	upstreamKinds = []string{"dial", "timeout", "canceled", "protocol", "other"} // classifyUpstreamError
	decisions     = []string{string(decisionEnabled), string(decisionDisabled), string(decisionNative), string(decisionInvalidRoute)}
	reloadResults = []string{"ok", "rejected"} // ObserveReload
)

func newMetrics(reg prometheus.Registerer, version string) *metrics {
	m := &metrics{
		requests: prom.CounterVec("http_requests_total",
			"Requests answered, by handler and status code (499: client went away mid-response).", "handler", "code"),
		duration: prom.HistogramVec("http_request_duration_seconds",
			"Time to answer (headers and body), by handler.", []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}, "handler"),
		inFlight: prom.Gauge("http_requests_in_flight", "Requests being served."),
		upstreamErrors: prom.ClosedCounter("upstream_errors_total",
			"Pass-through requests that got no answer from Core, by kind (dial, timeout, canceled, protocol, other).", "kind", upstreamKinds),
		ready: prom.Gauge("ready", "1 while /readyz answers 200."),
		rollout: prom.ClosedCounter("rollout_decisions_total",
			"Knowledge and turn requests by rollout decision (enabled, disabled, native, invalid_route).", "decision", decisions),
		reloads: prom.ClosedCounter("config_reloads_total",
			"SIGHUP configuration reloads by result (ok, rejected).", "result", reloadResults),
	}
	m.byHandler = map[string]*handlerSeries{}
	for _, name := range append(routeNames(), handlerPassthrough) {
		m.byHandler[name] = &handlerSeries{name: name, duration: m.duration.WithLabelValues(name), vec: m.requests}
	}
	build := prom.GaugeVec("build_info", "Build information; always 1.", "version", "goversion")
	build.WithLabelValues(version, runtime.Version()).Set(1)
	if reg != nil {
		reg.MustRegister(m.requests, m.duration, m.inFlight, m.upstreamErrors, m.ready, m.rollout, m.reloads, build)
	}
	return m
}

// ObserveReload counts a configuration reload ("ok" or "rejected").
func (s *Server) ObserveReload(result string) { s.m.reloads.WithLabelValues(result).Inc() }
