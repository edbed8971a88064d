package mcpserver

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel/trace"

	"github.com/bailinghub/knowledge-sidecar/protocol"
)

// MaxHTTPBody bounds a remote MCP request body (SPEC §10): the edge reads
// the body within it.
const MaxHTTPBody = protocol.MaxMCPBody

// HTTPOptions configure the remote endpoint's handler (NewHTTP).
type HTTPOptions struct {
	// Backend or Knowledge (exactly one) answers the tools' protocol
	// requests; for the sidecar it is the knowledge service in process
	// (Knowledge), reading the caller from the request's context.
	Backend   Backend
	Knowledge Knowledge
	Version   string
	Logger    *slog.Logger
	// Tracer, when set, starts one SERVER span per MCP request (SPEC §10).
	Tracer trace.Tracer
	// TrustMeta says whether the request's params._meta.traceparent may
	// parent its span (the peer is trusted for trace context, SPEC §9).
	// nil: never.
	TrustMeta func(ctx context.Context) bool
	// Observe, when set, counts each MCP request by method (MethodLabel)
	// and outcome (OutcomeOK, OutcomeToolError, OutcomeError).
	Observe func(method, outcome string)
	// Budget, when set, is the byte budget of answers in flight (budget.go):
	// a tool call past it is a tool error overloaded.
	Budget Budget
}

// HTTP is the stateless Streamable HTTP handler of SPEC §10 on the
// official SDK: no session, so any replica answers any request; JSON
// answers, no SSE; a batch is refused. The profile is the request's
// ?profile= (ProfileKnowledge when absent). The edge in front of it owns
// everything HTTP about the request — the method, the gates, the profile's
// validity (ValidProfile), reading the body within MaxHTTPBody — and hands
// over the body it read (Serve).
//
// The SDK's DNS-rebinding guard (403 to a loopback connection whose Host is
// not loopback) is off: the sidecar sits behind a mesh proxy or an ingress
// that connects over loopback with the public Host, and every request is
// authenticated with the host's bearer before it reaches this handler, so a
// rebound browser page has nothing to ride on (docs/decisions.md).
type HTTP struct {
	sdk    http.Handler
	obs    *observer
	budget Budget
}

// NewHTTP builds the handler with both profiles' servers.
func NewHTTP(o HTTPOptions) (*HTTP, error) {
	obs := &observer{tracer: o.Tracer, trustMeta: o.TrustMeta, count: o.Observe}
	servers := map[string]*mcp.Server{}
	for _, p := range []string{ProfileKnowledge, ProfileOpenAI} {
		srv, err := New(Options{Backend: o.Backend, Knowledge: o.Knowledge, Version: o.Version, Logger: o.Logger, Profile: p})
		if err != nil {
			return nil, err
		}
		srv.AddReceivingMiddleware(obs.middleware)
		servers[p] = srv
	}
	h := mcp.NewStreamableHTTPHandler(func(r *http.Request) *mcp.Server {
		return servers[profileOf(r)]
	}, &mcp.StreamableHTTPOptions{
		Stateless:                  true,
		JSONResponse:               true,
		DisableLocalhostProtection: true,
		MaxRequestBodyBytes:        MaxHTTPBody,
		Logger:                     sdkLogger(cmp.Or(o.Logger, slog.New(slog.DiscardHandler))),
	})
	return &HTTP{sdk: h, obs: obs, budget: o.Budget}, nil
}

// ValidProfile reports whether p names a profile ("" is the default).
func ValidProfile(p string) bool { return protocol.ValidMCPProfile(p) }

func profileOf(r *http.Request) string {
	if p := r.URL.Query().Get("profile"); p != "" {
		return p
	}
	return ProfileKnowledge
}

// serverMethods are the methods the SDK's server answers (go-sdk v1.8.0,
// serverMethodInfos): a request naming any other is refused here with
// -32601, where the SDK would answer plain text quoting the method back.
var serverMethods = map[string]bool{
	"completion/complete": true, "server/discover": true, "initialize": true, "ping": true,
	"prompts/list": true, "prompts/get": true, "tools/list": true, "tools/call": true,
	"resources/list": true, "resources/templates/list": true, "resources/read": true,
	"logging/setLevel": true, "resources/subscribe": true, "subscriptions/listen": true,
	"resources/unsubscribe": true, "notifications/cancelled": true, "notifications/initialized": true,
	"notifications/roots/list_changed": true, "notifications/progress": true,
}

// The JSON-RPC error codes of the refusals made here (SPEC §10).
const (
	codeParseError     = -32700
	codeInvalidRequest = -32600
	codeMethodNotFound = -32601
	codeInternalError  = -32603
)

// message is what the edge reads of a JSON-RPC message before the SDK does.
type message struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Method  *string         `json:"method"`
}

// request parses body as one JSON-RPC 2.0 request or notification: its id
// (null when absent or not a string or number) and method; ok is false for
// anything else (a response, a wrong version, a method that is no string).
func request(body []byte) (id json.RawMessage, method string, ok bool) {
	var m message
	if json.Unmarshal(body, &m) != nil {
		return jsonNull, "", false
	}
	id = jsonNull
	switch t := bytes.TrimSpace(m.ID); {
	case len(t) == 0:
	case t[0] == '"' || t[0] == '-' || t[0] >= '0' && t[0] <= '9':
		id = t
	default:
		return jsonNull, "", false
	}
	if m.JSONRPC != "2.0" || m.Method == nil || *m.Method == "" {
		return id, "", false
	}
	return id, *m.Method, true
}

var jsonNull = json.RawMessage("null")

// refuse answers a JSON-RPC error the SDK never saw: application/json,
// no-store, the request's id when it had one, and a message of ours (never
// the request quoted back).
func (h *HTTP) refuse(w http.ResponseWriter, status int, method string, id json.RawMessage, code int, msg string) {
	h.obs.counted(method, OutcomeError)
	body := errorFrame(id, code, msg) // the stdio server's frame: one line of JSON
	hd := w.Header()
	hd.Del("X-Content-Type-Options")
	hd.Set("Content-Type", "application/json")
	hd.Set("Cache-Control", "no-store")
	hd.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// Serve answers the POST r whose whole body the caller has read. What the
// SDK would refuse in plain text is refused here first as a JSON-RPC error
// (SPEC §10): a body that is no JSON -32700; a batch, a message that is no
// JSON-RPC request, a Content-Type other than JSON (415), an Accept without
// JSON and event streams, or an MCP-Protocol-Version the server does not
// speak -32600; an unknown method -32601. Every answer is no-store, and a
// refusal the SDK still writes itself becomes a JSON-RPC error (answerWriter).
func (h *HTTP) Serve(w http.ResponseWriter, r *http.Request, body []byte) {
	id, method, isRequest := request(body)
	label := methodOther
	if isRequest {
		label = method
	}
	switch t := bytes.TrimLeft(body, " \t\r\n"); {
	case !json.Valid(body):
		h.refuse(w, http.StatusBadRequest, label, jsonNull, codeParseError, "the request body is not valid JSON")
		return
	case t[0] == '[':
		h.refuse(w, http.StatusBadRequest, label, jsonNull, codeInvalidRequest, "JSON-RPC batches are not supported")
		return
	case !isRequest:
		h.refuse(w, http.StatusBadRequest, label, id, codeInvalidRequest, "the body is not a JSON-RPC 2.0 request or notification")
		return
	case !isJSON(r.Header.Get("Content-Type")):
		h.refuse(w, http.StatusUnsupportedMediaType, label, id, codeInvalidRequest, "Content-Type must be application/json")
		return
	case !accepts(r.Header.Values("Accept")):
		h.refuse(w, http.StatusBadRequest, label, id, codeInvalidRequest, "Accept must name both application/json and text/event-stream")
		return
	case !knownRevision(r.Header.Get("MCP-Protocol-Version")):
		h.refuse(w, http.StatusBadRequest, label, id, codeInvalidRequest,
			"unsupported MCP-Protocol-Version (supported: "+strings.Join(mcp.SupportedProtocolVersions(), ", ")+")")
		return
	case !serverMethods[method]:
		status := http.StatusBadRequest
		if v := r.Header.Get("MCP-Protocol-Version"); v >= revisionPerRequest {
			status = http.StatusNotFound // as the SDK answers it in that revision
		}
		h.refuse(w, status, methodOther, id, codeMethodNotFound, "method not found")
		return
	}
	if h.obs.tracer != nil {
		r = r.WithContext(withRequestID(r.Context(), body))
	}
	if h.budget != nil {
		// What the request's tool call holds of the budget is held until
		// its answer is written.
		l := &lease{b: h.budget, ctx: r.Context()}
		defer l.end()
		r = r.WithContext(context.WithValue(r.Context(), leaseKey{}, l))
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	r.ContentLength = int64(len(body))
	aw := &answerWriter{ResponseWriter: w, h: h, id: id, method: method}
	h.sdk.ServeHTTP(aw, r)
	aw.finish()
}

// revisionPerRequest is the first MCP revision without initialize
// (per-request _meta); the SDK takes a header naming it or a later one.
const revisionPerRequest = "2026-07-28"

// knownRevision reports whether the MCP-Protocol-Version header v passes
// the SDK's check (absent, a revision it speaks, or one from 2026-07-28 on,
// which it negotiates per request).
func knownRevision(v string) bool {
	return v == "" || v >= revisionPerRequest || slices.Contains(mcp.SupportedProtocolVersions(), v)
}

// isJSON reports whether the Content-Type's media type is application/json.
func isJSON(ct string) bool {
	mt, _, err := mime.ParseMediaType(ct)
	return err == nil && mt == "application/json"
}

// accepts reports whether the Accept values name JSON and event streams
// (directly or by a wildcard), as the Streamable HTTP transport requires.
func accepts(values []string) bool {
	var js, sse bool
	for _, v := range values {
		for part := range strings.SplitSeq(v, ",") {
			base, _, _ := strings.Cut(part, ";")
			switch strings.ToLower(strings.TrimSpace(base)) {
			case "application/json", "application/*":
				js = true
			case "text/event-stream", "text/*":
				sse = true
			case "*/*":
				js, sse = true, true
			}
		}
	}
	return js && sse
}

// answerWriter is the ResponseWriter the SDK writes to: every answer gets
// Cache-Control: no-store (the SDK sets no-cache), and a refusal the SDK
// writes as plain text (http.Error) is replaced by a JSON-RPC error with
// the request's id and a message of ours.
type answerWriter struct {
	http.ResponseWriter
	h       *HTTP
	id      json.RawMessage
	method  string
	wrote   bool
	swallow bool // the SDK's plain-text body is dropped
}

func (a *answerWriter) WriteHeader(status int) {
	if a.wrote {
		return
	}
	a.wrote = true
	hd := a.Header()
	if status >= 400 && !strings.HasPrefix(hd.Get("Content-Type"), "application/json") {
		a.swallow = true
		code, msg := codeInvalidRequest, "the request was refused: "+strings.ToLower(http.StatusText(status))
		if status >= 500 {
			code, msg = codeInternalError, "the request could not be served"
		}
		a.h.refuse(a.ResponseWriter, status, a.method, a.id, code, msg)
		return
	}
	hd.Set("Cache-Control", "no-store")
	a.ResponseWriter.WriteHeader(status)
}

func (a *answerWriter) Write(p []byte) (int, error) {
	if !a.wrote {
		a.WriteHeader(http.StatusOK)
	}
	if a.swallow {
		return len(p), nil
	}
	return a.ResponseWriter.Write(p)
}

// finish marks no-store on an answer the SDK left unwritten (net/http sends
// it as an empty 200 when the handler returns).
func (a *answerWriter) finish() {
	if !a.wrote {
		a.Header().Set("Cache-Control", "no-store")
	}
}

func (a *answerWriter) Flush() {
	if !a.swallow {
		if f, ok := a.ResponseWriter.(http.Flusher); ok {
			f.Flush()
		}
	}
}

func (a *answerWriter) Unwrap() http.ResponseWriter { return a.ResponseWriter }
