package proxy

import (
	"encoding/json"
	"errors"
	"net/http"
	"sync/atomic"
)

// Reloader applies the configuration file and environment again, like
// SIGHUP. It returns nil when applied; an error listing the problems (see
// ProblemLister) when the configuration is invalid, or the audit file
// cannot be reopened, and the running one kept.
type Reloader func() error

// ProblemLister is an error that lists configuration problems, each a
// "field.path: message" that never contains a secret.
type ProblemLister interface {
	error
	List() []string
}

// SetReloader enables POST /-/reload on the admin listener (never on the
// proxy listener, where /-/reload is an ordinary pass-through path).
func (s *Server) SetReloader(r Reloader) { s.reloader.Store(&r) }

type reloaderSlot = atomic.Pointer[Reloader]

// serveReload answers 200 {"status":"reloaded"}, 400 {"status":"rejected",
// "problems":[…]} for an invalid configuration (the running one is kept),
// 500 {"status":"failed"} otherwise, and 404 when no reloader is set.
func (s *Server) serveReload(w http.ResponseWriter, r *http.Request) {
	rp := s.reloader.Load()
	if rp == nil {
		writeJSON(w, http.StatusNotFound, []byte(`{"status":"reload is not enabled"}`))
		return
	}
	err := (*rp)()
	if err == nil {
		writeJSON(w, http.StatusOK, []byte(`{"status":"reloaded"}`))
		return
	}
	var pl ProblemLister
	if errors.As(err, &pl) {
		body, _ := json.Marshal(struct {
			Status   string   `json:"status"`
			Problems []string `json:"problems"`
		}{"rejected", pl.List()})
		writeJSON(w, http.StatusBadRequest, body)
		return
	}
	s.log.Error("configuration reload failed", "error", err)
	writeJSON(w, http.StatusInternalServerError, []byte(`{"status":"failed"}`))
}
