package proxy

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"
	"github.com/modelcontextprotocol/go-sdk/oauthex"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/bailinghub/knowledge-sidecar/corefacts"
	"github.com/bailinghub/knowledge-sidecar/internal/prom"
	"github.com/bailinghub/knowledge-sidecar/knowledge"
	"github.com/bailinghub/knowledge-sidecar/protocol"
)

// The remote MCP endpoint (SPEC §10): the edge applies the knowledge
// endpoints' gates (rollout, native Core, identity), reads the body and
// hands the request to the MCP handler (Features.MCPHandler: mcpserver's
// stateless Streamable HTTP handler, built by package sidecar) with its
// caller in the context (MCPCallOf): the identity the edge established —
// one look-up per HTTP request, as for search and read — and the client
// whose share of the answer budget (NewMCPBudget) its tool calls take.

// mcpShareFloor is the least share of the MCP answer budget one client
// address has: room for a few answers of a whole read chain.
const mcpShareFloor = 8 << 20

// MCPBudget is mcpserver's answer budget, shared out by client address
// (MCPCall.client) like the turn body budget.
type MCPBudget struct {
	sh   *shares
	used prometheus.Gauge
}

// NewMCPBudget is the answer budget of the MCP handler, an
// mcpserver.Budget (config proxy.mcp_answer_budget; 0:
// DefaultMCPAnswerBudget; negative: none, a nil *MCPBudget, which admits
// everything), shared out by the client of each request the edge
// admitted: one client address holds at most a quarter of it, but at
// least 8 MiB. Its gauge mcp_answer_budget_used_bytes is registered with
// reg (nil: none).
func NewMCPBudget(total int64, reg prometheus.Registerer) *MCPBudget {
	switch {
	case total < 0:
		return nil
	case total == 0:
		total = DefaultMCPAnswerBudget
	}
	used := prom.Gauge("mcp_answer_budget_used_bytes",
		"Bytes of proxy.mcp_answer_budget held by MCP tool calls being answered (the pages they keep, their results and the results' encodings).")
	if reg != nil {
		reg.MustRegister(used)
	}
	per := min(max(total/4, mcpShareFloor), total)
	return &MCPBudget{sh: newShares(total, per).withFloor(mcpShareFloor), used: used}
}

// Acquire takes n bytes for the caller of ctx, or reports false when the
// budget or the caller's share has no room.
func (b *MCPBudget) Acquire(ctx context.Context, n int64) bool {
	if b == nil {
		return true
	}
	if ok, _ := b.sh.acquire(MCPCallOf(ctx).client, n); !ok {
		return false
	}
	b.used.Add(float64(n))
	return true
}

// Release gives n bytes of the caller of ctx back.
func (b *MCPBudget) Release(ctx context.Context, n int64) {
	if b == nil {
		return
	}
	b.sh.release(MCPCallOf(ctx).client, n)
	b.used.Sub(float64(n))
}

var (
	errMCPProfile = &edgeError{status: http.StatusBadRequest, code: protocol.CodeInvalidRequest,
		message: `profile must be "knowledge" or "openai".`}
	errMCPTooLarge = &edgeError{status: http.StatusRequestEntityTooLarge, code: protocol.CodePayloadTooLarge,
		message: "The request body is over 64 KiB."}
)

// mcp serves POST …/knowledge/mcp: rollout and native detection as for the
// other knowledge endpoints, then identity (401 with its challenge), the
// profile and the body (413), then the SDK's handler with the caller in the
// context. After a flip to a native Core the endpoint is still served
// (nativeMCP), with the verdict in the caller. With no MCP handler the
// endpoint is Core's.
func (s *Server) mcp(c echo.Context) error {
	if s.feat.mcp == nil {
		return s.passH(c)
	}
	key := routeKey(c)
	native := false
	if !s.decide(c, key) {
		if !s.nativeMCP(c, key) {
			return s.passH(c)
		}
		native = true // served still, its tools asking the native Core
	}
	r := c.Request()
	authz := r.Header.Get("Authorization")
	call := &MCPCall{Authorization: authz, Route: key, TraceTrusted: s.fw.traceTrusted(s.fw.isTrusted(r.RemoteAddr)),
		Native: native, client: s.fw.clientOf(r)}
	ctx := r.Context()
	sess, err := s.feat.k.Authenticate(ctx, authz)
	// The edge's own refusals below are audited; a tool call audits its
	// own answer (SPEC §11).
	auditRefusals(ctx, knowledge.EndpointMCP, key, sess)
	var ke *knowledge.Error
	switch {
	case err == nil:
		ctx = knowledge.WithIdentity(ctx, authz, sess)
	case errors.As(err, &ke) && ke.Status == http.StatusUnauthorized:
		c.Response().Header().Set("WWW-Authenticate", s.mcpChallenge(r, key))
		return err
	default:
		// Core's identity could not be asked: the request goes on with no
		// identity held, so a tool call asks again through the service and
		// answers an outage as a tool error telling the model to wait (SPEC
		// §10: a call's failure is never an HTTP 5xx; it is audited like any
		// failed answer). initialize and tools/list need no identity.
	}
	if !protocol.ValidMCPProfile(r.URL.Query().Get("profile")) {
		return errMCPProfile
	}
	// Read through the edge's body watch: a stalled or broken body is
	// answered as on every path (writeErr: 408, 400).
	body, err := io.ReadAll(io.LimitReader(r.Body, protocol.MaxMCPBody+1))
	switch {
	case err != nil:
		return errBodyUnreadable
	case len(body) > protocol.MaxMCPBody:
		return errMCPTooLarge
	}
	auditRefusals(ctx, "", key, sess) // from here on, each tool call audits its answer
	s.feat.mcp.Serve(c.Response(), r.WithContext(WithMCPCall(ctx, call)), body)
	return nil
}

// mcpChallenge is the 401's WWW-Authenticate: Bearer, and the metadata
// document's address when authorization servers are configured. The
// address is the route table's metadata path with the parsed route key
// (a-z, 0-9, '_', '-'), never the request's own path: a route segment
// spelling '"' or ',' (%22) cannot add auth-params. A segment that is no
// route key gets the bare challenge (its endpoint answers 404 anyway).
// The origin is mcp.public_url, or the request's scheme and Host, which
// net/http admits only with host characters; the value is still quoted
// as a quoted-string (RFC 9110 §5.6.4).
func (s *Server) mcpChallenge(r *http.Request, key corefacts.RouteKey) string {
	if len(s.feat.mcpOpts.AuthorizationServers) == 0 || key.IsZero() {
		return "Bearer"
	}
	u := s.publicURL(r) + strings.Replace(pathMCPMetadata, ":route", key.String(), 1)
	return `Bearer resource_metadata="` + quotedStringEscape(u) + `"`
}

// quotedStringEscape escapes '"' and '\' for an HTTP quoted-string and drops
// controls.
func quotedStringEscape(v string) string {
	if !strings.ContainsAny(v, "\"\\") && !hasCtlOrSpace(v) {
		return v
	}
	var b strings.Builder
	for i := 0; i < len(v); i++ {
		switch c := v[i]; {
		case c == '"' || c == '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c < ' ' || c == 0x7f:
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

// mcpMetadata serves the RFC 9728 document of a workspace's MCP endpoint
// when authorization servers are configured; otherwise, and for a
// workspace whose MCP endpoint the sidecar does not serve (mcp), the
// request is Core's.
func (s *Server) mcpMetadata(c echo.Context) error {
	key := routeKey(c)
	if s.feat.mcp == nil || len(s.feat.mcpOpts.AuthorizationServers) == 0 || !s.decide(c, key) && !s.nativeMCP(c, key) {
		return s.passH(c)
	}
	r := c.Request()
	o := s.feat.mcpOpts
	// The resource is the route table's path with the parsed key, as in the
	// 401's challenge; a segment that is no key is named as the request
	// spelled it (JSON-escaped: its endpoint answers 404).
	resource := strings.TrimPrefix(r.URL.Path, strings.TrimSuffix(pathMCPMetadata, pathMCP))
	if !key.IsZero() {
		resource = strings.Replace(pathMCP, ":route", key.String(), 1)
	}
	doc, err := json.Marshal(oauthex.ProtectedResourceMetadata{
		Resource:               s.publicURL(r) + resource,
		AuthorizationServers:   o.AuthorizationServers,
		ScopesSupported:        o.Scopes,
		BearerMethodsSupported: []string{"header"},
	})
	if err != nil {
		return err
	}
	writeJSON(c.Response(), http.StatusOK, doc)
	return nil
}

// publicURL is scheme://host as the host reached the sidecar: config
// mcp.public_url, else the request's Host with https when the connection
// is TLS or a trusted proxy says X-Forwarded-Proto: https.
func (s *Server) publicURL(r *http.Request) string {
	if u := s.feat.mcpOpts.PublicURL; u != "" {
		return strings.TrimSuffix(u, "/")
	}
	scheme := "http"
	if r.TLS != nil || (s.fw.isTrusted(r.RemoteAddr) && strings.EqualFold(r.Header.Get("X-Forwarded-Proto"), "https")) {
		scheme = "https"
	}
	return scheme + "://" + r.Host
}

type mcpCallKey struct{}

// MCPCall is the caller of one remote MCP request as the edge established
// it, in the request's context for the handler's parts (MCPCallOf): the
// tools' backend asks the knowledge service as Authorization on Route (or,
// Native, the native Core's endpoints), mcpserver reads TraceTrusted, the
// answer budget takes from the client's share.
type MCPCall struct {
	Authorization string
	Route         corefacts.RouteKey
	// TraceTrusted: the request's params._meta.traceparent may parent its
	// span (the peer is trusted for trace context, SPEC §9).
	TraceTrusted bool
	// Native: the Core was native when the request was decided; its tools
	// ask Core's knowledge endpoints (package sidecar).
	Native bool
	client clientKey // the answer budget's share it takes from
}

// WithMCPCall is ctx carrying c, as the edge hands a request to the MCP
// handler.
func WithMCPCall(ctx context.Context, c *MCPCall) context.Context {
	return context.WithValue(ctx, mcpCallKey{}, c)
}

// MCPCallOf is the caller of the MCP request ctx belongs to; outside one,
// the zero MCPCall (no bearer, no route).
func MCPCallOf(ctx context.Context) *MCPCall {
	if c, ok := ctx.Value(mcpCallKey{}).(*MCPCall); ok {
		return c
	}
	return &MCPCall{}
}
