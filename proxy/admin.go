package proxy

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// AdminHandler serves /metrics (this server's own registry; OpenMetrics,
// with trace-id exemplars, to a scraper that asks for it), /healthz (the
// process is up), /readyz (configuration loaded, able to proxy, not
// draining), POST /-/reload (see SetReloader), GET /-/status and
// GET /-/explain?route=KEY (see SetStatus, SetExplainer). Readiness is deliberately not tied to Core retrieval health: a
// sick knowledge path must not take pass-through traffic out of rotation.
func (s *Server) AdminHandler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.registry, promhttp.HandlerOpts{EnableOpenMetrics: true}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, []byte(`{"status":"ok"}`))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		if !s.ready.Load() {
			writeJSON(w, http.StatusServiceUnavailable, []byte(`{"status":"draining"}`))
			return
		}
		writeJSON(w, http.StatusOK, []byte(`{"status":"ready"}`))
	})
	mux.HandleFunc("POST /-/reload", s.serveReload)
	mux.HandleFunc("GET /-/status", s.serveStatus)
	mux.HandleFunc("GET /-/explain", s.serveExplain)
	return mux
}

// Registry is the server's own metrics registry (served on /metrics).
func (s *Server) Registry() *prometheus.Registry { return s.registry }
