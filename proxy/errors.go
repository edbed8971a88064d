package proxy

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/bailinghub/knowledge-sidecar/knowledge"
	"github.com/bailinghub/knowledge-sidecar/protocol"
)

// Every answer the sidecar makes up itself goes through writeErr: handlers
// return errors, the edge middleware and the ReverseProxies' error handlers
// hand them over, and one switch turns each kind into a status, a code and a
// message. (echo's HTTPErrorHandler is never reached: the edge answers every
// error itself and returns nil.)

// edgeError is an answer the edge gives on its own.
type edgeError struct {
	status  int
	code    protocol.ErrorCode
	message string
	// close: the connection ends after the answer (the request's body, or
	// what follows it on the wire, is never read on).
	close bool
	allow string // Allow header of a 405
	// retryAfter, when not 0, is the Retry-After of the answer (seconds).
	retryAfter int
}

func (e *edgeError) Error() string { return "proxy: " + strconv.Itoa(e.status) + " " + string(e.code) }

var (
	errH2C = &edgeError{status: http.StatusBadRequest, code: protocol.CodeInvalidRequest,
		message: "HTTP/2 cleartext upgrade (h2c) is not supported."}
	errRequestLine = &edgeError{status: http.StatusBadRequest, code: protocol.CodeInvalidRequest,
		message: "The request line is not valid HTTP/1.1.", close: true}
	errNonCanonicalPath = &edgeError{status: http.StatusBadRequest, code: protocol.CodeInvalidRequest,
		message: "The request path must be in canonical form.", close: true}
	errBodyTimeout = &edgeError{status: http.StatusRequestTimeout, code: "request_timeout",
		message: "The request body was not received in time.", close: true}
	errBodyMalformed = &edgeError{status: http.StatusBadRequest, code: protocol.CodeInvalidRequest,
		message: "The request body is malformed.", close: true}
	errBodyIncomplete = &edgeError{status: http.StatusBadRequest, code: protocol.CodeInvalidRequest,
		message: "The request body was not received completely.", close: true}
	errBodyUnreadable = &edgeError{status: http.StatusBadRequest, code: protocol.CodeInvalidRequest,
		message: "The request body could not be read.", close: true}
	errUpstream = &edgeError{status: http.StatusBadGateway, code: "upstream_unavailable",
		message: "Core could not be reached."}
	// errUpstreamGone: the client's side ended before Core answered (it
	// went away, or half-closed after a complete request, which net/http
	// cannot tell apart). A half-closed client still reads this.
	errUpstreamGone = &edgeError{status: http.StatusBadGateway, code: "upstream_unavailable",
		message: "Core could not be reached.", close: true}
	errUpstreamTimeout = &edgeError{status: http.StatusGatewayTimeout, code: "upstream_timeout",
		message: "Core did not answer in time."}
	errNotProxied = &edgeError{status: http.StatusBadGateway, code: "upstream_unavailable",
		message: "The request could not be proxied.", close: true}
	// errOverloaded: a bound of the edge is reached (requests in flight,
	// the turn body budget); the client may retry shortly.
	errOverloaded = &edgeError{status: http.StatusServiceUnavailable, code: overloadCode,
		message: overloadMessage, close: true, retryAfter: retryAfterSeconds}
	errDeliveryFailedAnswer = &edgeError{status: http.StatusBadGateway, code: "knowledge_delivery_failed",
		message: "Core's turn answer could not be delivered with on-demand knowledge."}
)

func errMethodNotAllowed(allow string) *edgeError {
	return &edgeError{status: http.StatusMethodNotAllowed, code: protocol.CodeMethodNotAllowed,
		message: "This knowledge endpoint does not accept that method.", allow: allow}
}

// writeErr is the one place an error becomes an answer.
//
//   - A request whose own body failed (stalled past the idle timeout,
//     malformed framing, cut off) is answered for that, whatever the
//     handler made of it: 408 or 400.
//   - *edgeError: as it says. *knowledge.Error: its status, code and
//     message (Retry-After on a 429; 5xx causes logged, never sent).
//     (Package turn answers its refusals, Core's own 409 turn_conflict
//     included, as *knowledge.Error.) An echo error
//     (none of our handlers returns one; a guard): 502. Anything else,
//     which only the knowledge features produce (a ledger or catalog
//     failure): 503 knowledge_unavailable.
//   - An answer decided before the request body was read to its end goes
//     out at once and closes the connection, rather than wait on a body
//     that may trickle forever.
func (s *Server) writeErr(w http.ResponseWriter, r *http.Request, err error) {
	ctx := r.Context()
	st := stateOf(ctx)
	if st != nil {
		if be := bodyFailure(st, ctx); be != nil {
			err = be
		}
		if r.ContentLength != 0 && !st.bodyEOF.Load() {
			closeConn(w)
		}
	}
	var (
		ee *edgeError
		he *echo.HTTPError
	)
	switch {
	case errors.As(err, &ee):
	case errors.As(err, &he):
		s.log.Error("unhandled edge error", slog.String("request_id", requestID(ctx)), slog.Any("error", err))
		ee = errNotProxied
	default:
		ref := s.knowledgeError(ctx, err).Refusal()
		s.auditRefusal(r, ref.Status, ref.Code)
		writeRefusal(w, ref)
		return
	}
	s.auditRefusal(r, ee.status, ee.code)
	if ee.close {
		closeConn(w)
	}
	if ee.allow != "" {
		w.Header().Set("Allow", ee.allow)
	}
	writeRefusal(w, protocol.Refusal{Status: ee.status, Code: ee.code, Message: ee.message, RetryAfter: ee.retryAfter})
}

// bodyFailure is the answer for a request whose own body failed, or nil.
func bodyFailure(st *reqState, ctx context.Context) error {
	switch {
	case st.bodyTimeout.Load():
		return errBodyTimeout
	case st.bodyBad.Load() && ctx.Err() == nil:
		return errBodyMalformed
	case st.bodyGone.Load(), st.bodyBad.Load():
		return errBodyIncomplete
	}
	return nil
}

// writeRefusal writes a JSON error the way every sidecar-made answer is
// written: Core's flat error body (protocol.Refusal, the one wire form of a
// knowledge error), its Retry-After, no-store, never an address or a cause.
func writeRefusal(w http.ResponseWriter, r protocol.Refusal) {
	if r.RetryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(r.RetryAfter))
	}
	writeJSON(w, r.Status, r.Body())
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

// earlyAnswerLinger bounds how long net/http may go on reading the unread
// part of a request body after an answer decided before the body was read
// (the answer itself is already sent by then).
const earlyAnswerLinger = time.Second

// closeConn makes the answer the connection's last: Connection: close, and
// a read deadline earlyAnswerLinger away. After the answer is flushed,
// net/http reads on to the end of the request body (up to 256 KiB) before it
// closes the socket: closing with unread bytes in the kernel's receive
// buffer sends a TCP reset, which can reach a client that is still writing
// its body before it has read the answer (it then sees "connection reset"
// instead of, say, its 413). A body that trickles or never comes is cut at
// the deadline, so it holds the connection for at most earlyAnswerLinger; a
// longer body than 256 KiB gets net/http's own lingering close (FIN, then
// 500 ms before the reset).
func closeConn(w http.ResponseWriter) {
	w.Header().Set("Connection", "close")
	_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(earlyAnswerLinger))
}

// knowledgeError is err as the knowledge error it is answered with
// (KnowledgeError with the edge's logger).
func (s *Server) knowledgeError(ctx context.Context, err error) *knowledge.Error {
	return KnowledgeError(ctx, s.log, err)
}

// KnowledgeError is err as the knowledge error it is answered with: a
// ledger or catalog failure is 503 knowledge_unavailable. A 5xx cause is
// logged to log with the request's id, never sent: on every path that
// answers a knowledge request (the edge's, the MCP tools' backend).
func KnowledgeError(ctx context.Context, log *slog.Logger, err error) *knowledge.Error {
	ke := knowledge.AsError(err)
	if ke.Status >= 500 {
		log.LogAttrs(ctx, slog.LevelWarn, "knowledge request failed", slog.String("request_id", requestID(ctx)),
			slog.String("code", string(ke.Code)), slog.Any("cause", ke.Err))
	}
	return ke
}
