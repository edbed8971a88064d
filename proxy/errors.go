package proxy

import (
	"encoding/json"
	"net/http"
	"strconv"
	"time"
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

// closeConn makes the answer the connection's last: Connection: close, and
// the read deadline expired, so that net/http gives up at once on whatever
// of the request body is still unread (its post-handler drain would
// otherwise wait for a body that trickles or never comes).
func closeConn(w http.ResponseWriter) {
	w.Header().Set("Connection", "close")
	_ = http.NewResponseController(w).SetReadDeadline(time.Now())
}
