package proxy

import (
	"context"
	"encoding/json"
	"net/http"
	"sync/atomic"
)

// StatusFunc returns the document GET /-/status serves on the admin
// listener (what an operator checks after a rollout; sidecar.App builds it).
// It must never hold a secret.
type StatusFunc func(ctx context.Context) any

// ExplainFunc says whether route is served and why, without touching
// traffic, for GET /-/explain?route=KEY. A non-nil error is a bad route key,
// answered 400 with its message (which must not hold a secret).
type ExplainFunc func(ctx context.Context, route string) (any, error)

// opsSlots hold the admin listener's status and explain handlers.
type opsSlots struct {
	status  atomic.Pointer[StatusFunc]
	explain atomic.Pointer[ExplainFunc]
}

// SetStatus enables GET /-/status on the admin listener.
func (s *Server) SetStatus(f StatusFunc) { s.ops.status.Store(&f) }

// SetExplainer enables GET /-/explain on the admin listener.
func (s *Server) SetExplainer(f ExplainFunc) { s.ops.explain.Store(&f) }

func (s *Server) serveStatus(w http.ResponseWriter, r *http.Request) {
	f := s.ops.status.Load()
	if f == nil {
		writeJSON(w, http.StatusNotFound, []byte(`{"status":"status is not enabled"}`))
		return
	}
	s.writeDoc(w, http.StatusOK, (*f)(r.Context()))
}

func (s *Server) serveExplain(w http.ResponseWriter, r *http.Request) {
	f := s.ops.explain.Load()
	if f == nil {
		writeJSON(w, http.StatusNotFound, []byte(`{"status":"explain is not enabled"}`))
		return
	}
	route := r.URL.Query().Get("route")
	doc, err := (*f)(r.Context(), route)
	if err != nil {
		s.writeDoc(w, http.StatusBadRequest, struct {
			Error string `json:"error"`
		}{err.Error()})
		return
	}
	s.writeDoc(w, http.StatusOK, doc)
}

func (*Server) writeDoc(w http.ResponseWriter, code int, doc any) {
	body, err := json.MarshalIndent(doc, "", "  ")
	if err != nil { // plain structs of strings, numbers and times: not expected
		writeJSON(w, http.StatusInternalServerError, []byte(`{"status":"failed"}`))
		return
	}
	writeJSON(w, code, append(body, '\n'))
}
