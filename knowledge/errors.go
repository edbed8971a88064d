package knowledge

import (
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/bailinghub/knowledge-sidecar/corefacts"
	"github.com/bailinghub/knowledge-sidecar/protocol"
)

const (
	codeCoreGate         protocol.ErrorCode = "core_gate" // metrics label for any relayed Core gate code
	statusOK             protocol.ErrorCode = "ok"        // metrics label for a success
	maxRelayedMessageLen                    = 200
)

// Error is every failure the knowledge endpoints answer with, on the wire
// as its Refusal: {"error":Code,"message":Message} with Status (the edge
// adds Cache-Control: no-store). Message is one English sentence and never contains internal
// addresses, SQL, credentials, tokens or document text; Err is the cause,
// for logs only.
type Error struct {
	Status  int                // HTTP status: 400, 401, 403, 404, 409, 410, 413, 429 or 503
	Code    protocol.ErrorCode // SPEC §2 code, or Core's relayed gate code
	Message string             // one English sentence, safe to show to clients
	Err     error              // cause, for logs (Unwrap)
	// RetryAfter, on a 429, is when the session's next token is back; the
	// edge sends it as Retry-After in whole seconds (at least 1).
	RetryAfter time.Duration
}

// RetryAfterSeconds is RetryAfter as the Retry-After header's value: whole
// seconds, rounded up, at least 1.
func (e *Error) RetryAfterSeconds() int {
	secs := int((e.RetryAfter + time.Second - 1) / time.Second)
	return max(secs, 1)
}

// Refusal is e as the knowledge endpoints answer it, the one wire form of
// an Error: its status, code and message, and on a 429 the Retry-After
// seconds. The edge writes it (proxy.writeErr); an MCP tool call answered
// in process renders it as the tool error (mcpserver).
func (e *Error) Refusal() protocol.Refusal {
	r := protocol.Refusal{Status: e.Status, Code: e.Code, Message: e.Message}
	if e.Status == 429 {
		r.RetryAfter = e.RetryAfterSeconds()
	}
	return r
}

func (e *Error) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("knowledge: %d %s: %v", e.Status, e.Code, e.Err)
	}
	return fmt.Sprintf("knowledge: %d %s", e.Status, e.Code)
}

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

func newError(status int, code protocol.ErrorCode, msg string, cause error) *Error {
	return &Error{Status: status, Code: code, Message: msg, Err: cause}
}

func errInvalid(msg string) *Error { return newError(400, protocol.CodeInvalidRequest, msg, nil) }

func errRefInvalid(cause error) *Error {
	return newError(400, protocol.CodeReferenceInvalid,
		"The knowledge reference or cursor is not valid for this request; search again.", cause)
}

func errRefExpired() *Error {
	return newError(410, protocol.CodeReferenceExpired,
		"The knowledge reference or cursor has expired; search again.", nil)
}

func errUnauthorized(cause error) *Error {
	return newError(401, protocol.CodeUnauthorized, "The Agent access token was rejected.", cause)
}

func errUnavailable(cause error) *Error {
	return newError(503, protocol.CodeUnavailable, "Knowledge is temporarily unavailable.", cause)
}

// Unavailable is the 503 knowledge_unavailable answer; cause is for logs.
func Unavailable(cause error) *Error { return errUnavailable(cause) }

// AsError is err as the knowledge error it is answered with: the *Error in
// its chain, else (a ledger or catalog failure) Unavailable(err).
func AsError(err error) *Error {
	var ke *Error
	if errors.As(err, &ke) {
		return ke
	}
	return Unavailable(err)
}

// RouteUnavailable is the 404 route_unavailable answer (an unknown,
// disabled or malformed route).
func RouteUnavailable() *Error { return errRouteUnavailable(nil) }

func errRouteUnavailable(cause error) *Error {
	return newError(404, protocol.CodeRouteUnavailable, "The configured route is unavailable.", cause)
}

func errRunNotFound(cause error) *Error {
	return newError(404, protocol.CodeRunNotFound, "The run was not found for this Agent Session and route.", cause)
}

func errRunNotActive() *Error {
	return newError(409, protocol.CodeRunNotActive, "The run is not active.", nil)
}

func errScopeChanged() *Error {
	return newError(409, protocol.CodeScopeChanged,
		"The route's knowledge configuration changed since the reference was issued; search again.", nil)
}

func errKnowledgeChanged(cause error) *Error {
	return newError(409, protocol.CodeKnowledgeChanged,
		"The referenced document changed or is no longer available; search again.", cause)
}

func errTooLarge() *Error {
	return newError(413, protocol.CodePayloadTooLarge, "The request body exceeds "+strconv.Itoa(protocol.MaxRequestBytes)+" bytes.", nil)
}

func errRateLimited(retryAfter time.Duration) *Error {
	e := newError(429, protocol.CodeRateLimited, "Too many knowledge requests for this Agent Session.", nil)
	e.RetryAfter = retryAfter
	return e
}

// classifyCore maps an error from Identity, Retriever or Catalog to an
// *Error using errors.Is/As only. notFound is the answer for
// corefacts.ErrNotFound (it differs per call site); nil means "unavailable".
func classifyCore(err error, notFound *Error) *Error {
	var ke *Error
	if errors.As(err, &ke) {
		return ke
	}
	var ce *corefacts.CoreError
	switch {
	case errors.Is(err, corefacts.ErrUnauthorized):
		return errUnauthorized(err)
	case errors.As(err, &ce):
		return relayCoreError(ce)
	case errors.Is(err, corefacts.ErrNotFound) && notFound != nil:
		if notFound.Err == nil {
			notFound.Err = err
		}
		return notFound
	default:
		return errUnavailable(err)
	}
}

// relayCoreError turns Core's gate answer into an *Error with Core's status
// and code. Only 4xx answers are relayed; anything else means Core is not
// usable right now.
func relayCoreError(ce *corefacts.CoreError) *Error {
	if ce.Status < 400 || ce.Status > 499 || ce.Code == "" || !safeCode(ce.Code) {
		return errUnavailable(ce)
	}
	msg := ce.Message
	if msg == "" || !safeMessage(msg) {
		switch ce.Status {
		case 403:
			msg = "The Agent Session is not allowed to use this route."
		case 404:
			msg = "The configured route is unavailable."
		default:
			msg = "The route cannot be used by this Agent Session."
		}
	}
	return newError(ce.Status, protocol.ErrorCode(ce.Code), msg, ce)
}

// safeCode accepts Core's snake_case / TASK_* codes only, so nothing odd
// reaches clients or metrics.
func safeCode(s string) bool {
	if len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_') {
			return false
		}
	}
	return true
}

// safeMessage accepts a short printable ASCII sentence, as Core's Agent API
// messages are.
func safeMessage(s string) bool {
	if len(s) > maxRelayedMessageLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}
