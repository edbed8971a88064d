package proxy

import (
	"net"
	"net/http"
	"net/netip"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// AdminHandler serves /metrics (this server's own registry; OpenMetrics,
// with trace-id exemplars, to a scraper that asks for it), /healthz (the
// process is up), /readyz (configuration loaded, able to proxy, not
// draining), POST /-/reload (see SetReloader), GET /-/status and
// GET /-/explain?route=KEY (see SetStatus, SetExplainer). Readiness is deliberately not tied to Core retrieval health: a
// sick knowledge path must not take pass-through traffic out of rotation.
//
// A browser is no client of the admin listener: a request whose Host is
// not an IP literal, localhost or one of Options.AdminAllowedHosts is 403
// (a DNS-rebinding page names its own host), and a state-changing request
// from another origin (Sec-Fetch-Site, Origin) is 403 by
// http.CrossOriginProtection (a cross-site form cannot POST /-/reload).
func (s *Server) AdminHandler() http.Handler {
	return s.adminGuard(http.NewCrossOriginProtection().Handler(s.adminMux()))
}

// adminHostBody is the admin listener's answer to a Host it does not serve.
var adminHostBody = []byte(`{"error":"host_not_allowed","message":"The admin listener does not serve this Host."}`)

// adminGuard refuses requests whose Host the admin listener does not serve.
func (s *Server) adminGuard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !adminHostAllowed(r.Host, s.adminHosts) {
			writeJSON(w, http.StatusForbidden, adminHostBody)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// adminHostAllowed reports whether host (a Host header, with or without a
// port) names the admin listener: empty (HTTP/1.0), an IP literal,
// localhost, or a name in allowed (compared ignoring case and a final dot).
func adminHostAllowed(host string, allowed []string) bool {
	if host == "" {
		return true
	}
	name := host
	if h, _, err := net.SplitHostPort(host); err == nil {
		name = h
	}
	name = strings.TrimSuffix(strings.TrimSuffix(strings.TrimPrefix(name, "["), "]"), ".")
	if _, err := netip.ParseAddr(name); err == nil {
		return true
	}
	if strings.EqualFold(name, "localhost") {
		return true
	}
	for _, a := range allowed {
		if strings.EqualFold(name, strings.TrimSuffix(a, ".")) {
			return true
		}
	}
	return false
}

func (s *Server) adminMux() http.Handler {
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
