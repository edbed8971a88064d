package proxy

import (
	"encoding/json"
	"net/http"
	"strconv"
)

// errorBody is Core's Agent API error convention: {"error","message"}.
type errorBody struct {
	Error   string `json:"error"`
	Message string `json:"message"`
}

// writeError writes a JSON error the way every sidecar-made answer is
// written: Core's flat error body, no-store, never an address or a cause.
func writeError(w http.ResponseWriter, status int, code, message string) {
	body, _ := json.Marshal(errorBody{Error: code, Message: message})
	writeJSON(w, status, body)
}

// writeJSON writes a sidecar-made JSON answer with the headers SPEC §2 requires.
func writeJSON(w http.ResponseWriter, status int, body []byte) {
	h := w.Header()
	h.Set("Content-Type", "application/json; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	_, _ = w.Write(body)
}
