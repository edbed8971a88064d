package proxy

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// AdminHandler serves /metrics (this server's own registry), /healthz (the
// process is up) and /readyz (configuration loaded, able to proxy, not
// draining). Readiness is deliberately not tied to Core retrieval health: a
// sick knowledge path must not take pass-through traffic out of rotation.
func (s *Server) AdminHandler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.registry, promhttp.HandlerOpts{}))
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
	return mux
}
