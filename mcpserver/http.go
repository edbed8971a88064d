package mcpserver

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel/trace"
)

// MaxHTTPBody bounds a remote MCP request body (SPEC §10): 64 KiB, far
// above any tool call's arguments (a query of 2000 UTF-16 units, a ref and
// a cursor of 512 bytes each).
const MaxHTTPBody = 64 << 10

// HTTPOptions configure the remote endpoint's handler (NewHTTP).
type HTTPOptions struct {
	// Backend answers the tools' protocol requests; for the sidecar it is
	// the knowledge service in process, reading the caller from the
	// request's context.
	Backend Backend
	Version string
	Logger  *slog.Logger
	// Tracer, when set, starts one SERVER span per MCP request (SPEC §10).
	Tracer trace.Tracer
	// TrustMeta says whether the request's params._meta.traceparent may
	// parent its span (the peer is trusted for trace context, SPEC §9).
	// nil: never.
	TrustMeta func(ctx context.Context) bool
	// Observe, when set, counts each MCP request by method (MethodLabel)
	// and outcome (OutcomeOK, OutcomeToolError, OutcomeError).
	Observe func(method, outcome string)
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
	sdk http.Handler
	obs *observer
}

// NewHTTP builds the handler with both profiles' servers.
func NewHTTP(o HTTPOptions) (*HTTP, error) {
	obs := &observer{tracer: o.Tracer, trustMeta: o.TrustMeta, count: o.Observe}
	servers := map[string]*mcp.Server{}
	for _, p := range []string{ProfileKnowledge, ProfileOpenAI} {
		srv, err := New(Options{Backend: o.Backend, Version: o.Version, Logger: o.Logger, Profile: p})
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
		Logger:                     o.Logger,
	})
	return &HTTP{sdk: h, obs: obs}, nil
}

// ValidProfile reports whether p names a profile ("" is the default).
func ValidProfile(p string) bool {
	return p == "" || p == ProfileKnowledge || p == ProfileOpenAI
}

func profileOf(r *http.Request) string {
	if p := r.URL.Query().Get("profile"); p != "" {
		return p
	}
	return ProfileKnowledge
}

// Answers made before the SDK sees a body: a batch (SPEC §10; the SDK would
// take one from a client of the 2025-03-26 revision), and a body that is not
// JSON (the SDK's own answer is plain text quoting the body back).
var (
	batchRefusal = []byte(`{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"JSON-RPC batches are not supported"}}`)
	parseError   = []byte(`{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"the request body is not valid JSON"}}`)
)

// refuse answers a JSON-RPC error the SDK never saw.
func (h *HTTP) refuse(w http.ResponseWriter, body []byte) {
	h.obs.counted(methodOther, OutcomeError)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusBadRequest)
	_, _ = w.Write(body)
}

// Serve answers the POST r whose whole body the caller has read.
func (h *HTTP) Serve(w http.ResponseWriter, r *http.Request, body []byte) {
	switch t := bytes.TrimLeft(body, " \t\r\n"); {
	case !json.Valid(body):
		h.refuse(w, parseError)
		return
	case t[0] == '[':
		h.refuse(w, batchRefusal)
		return
	}
	if h.obs.tracer != nil {
		r = r.WithContext(withRequestID(r.Context(), body))
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	r.ContentLength = int64(len(body))
	h.sdk.ServeHTTP(w, r)
}
