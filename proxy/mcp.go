package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"
	"github.com/modelcontextprotocol/go-sdk/oauthex"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/bailinghub/knowledge-sidecar/corefacts"
	"github.com/bailinghub/knowledge-sidecar/knowledge"
	"github.com/bailinghub/knowledge-sidecar/mcpserver"
	"github.com/bailinghub/knowledge-sidecar/protocol"
)

// The remote MCP endpoint (SPEC §10): the edge applies the knowledge
// endpoints' gates (rollout, native Core, identity) and hands the request to
// mcpserver's stateless Streamable HTTP handler, whose tools call the
// knowledge service in process (mcpKnowledge) with the identity the edge
// established — one look-up per HTTP request, as for search and read.

const (
	pathMCP = "/agent-api/v1/workspaces/:route/knowledge/mcp"
	// pathMCPMetadata is the RFC 9728 Protected Resource Metadata document
	// of pathMCP: the well-known prefix before the resource's path.
	pathMCPMetadata = "/.well-known/oauth-protected-resource" + pathMCP
)

// MCPOptions configure the remote MCP endpoint (config mcp.*).
type MCPOptions struct {
	// AuthorizationServers, when set, are named in the metadata document,
	// and a 401 points hosts at that document.
	AuthorizationServers []string
	Scopes               []string
	// PublicURL is scheme://host as hosts reach the sidecar; "" takes the
	// request's own.
	PublicURL string
	// AnswerBudget caps the bytes of MCP answers in flight (config
	// proxy.mcp_answer_budget; 0: its default, negative: no budget); one
	// client address holds at most a quarter of it, but at least 8 MiB.
	AnswerBudget int64
	// Native, when set, keeps the endpoint answering on a rolled-out
	// workspace whose Core is native: its tools then call Core's own
	// knowledge endpoints through it (mcpnative.go). nil: such a request
	// passes through to Core.
	Native NativeKnowledge
}

// mcpShareFloor is the least share of the MCP answer budget one client
// address has: room for a few answers of a whole read chain.
const mcpShareFloor = 8 << 20

// mcpBudget is mcpserver's answer budget, shared out by client address
// (mcpCall.client) like the turn body budget.
type mcpBudget struct {
	sh   *shares
	used prometheus.Gauge
}

func newMCPBudget(total int64, used prometheus.Gauge) mcpserver.Budget {
	switch {
	case total < 0:
		return nil
	case total == 0:
		total = DefaultMCPAnswerBudget
	}
	per := min(max(total/4, mcpShareFloor), total)
	return &mcpBudget{sh: newShares(total, per).withFloor(mcpShareFloor), used: used}
}

func (b *mcpBudget) Acquire(ctx context.Context, n int64) bool {
	if ok, _ := b.sh.acquire(mcpCallOf(ctx).client, n); !ok {
		return false
	}
	b.used.Add(float64(n))
	return true
}

func (b *mcpBudget) Release(ctx context.Context, n int64) {
	b.sh.release(mcpCallOf(ctx).client, n)
	b.used.Sub(float64(n))
}

var (
	errMCPProfile = &edgeError{status: http.StatusBadRequest, code: protocol.CodeInvalidRequest,
		message: `profile must be "knowledge" or "openai".`}
	errMCPTooLarge = &edgeError{status: http.StatusRequestEntityTooLarge, code: protocol.CodePayloadTooLarge,
		message: "The request body is over 64 KiB."}
)

func (s *Server) newMCP(o MCPOptions) (*mcpserver.HTTP, error) {
	return mcpserver.NewHTTP(mcpserver.HTTPOptions{
		Knowledge: mcpKnowledge{s},
		Version:   s.version,
		Logger:    s.log,
		Tracer:    s.tracer,
		TrustMeta: func(ctx context.Context) bool { return mcpCallOf(ctx).traceTrusted },
		Observe:   func(method, outcome string) { s.m.mcpRequests.WithLabelValues(method, outcome).Inc() },
		Budget:    newMCPBudget(o.AnswerBudget, s.m.mcpAnswerBudget),
	})
}

// mcp serves POST …/knowledge/mcp: rollout and native detection as for the
// other knowledge endpoints, then identity (401 with its challenge), the
// profile and the body (413), then the SDK's handler with the caller in the
// context. After a flip to a native Core the endpoint is still served
// (nativeMCP), with the verdict in the caller.
func (s *Server) mcp(c echo.Context) error {
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
	call := &mcpCall{authorization: authz, route: key, traceTrusted: s.fw.traceTrusted(s.fw.isTrusted(r.RemoteAddr)),
		client: s.fw.clientOf(r), native: native}
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
	if !mcpserver.ValidProfile(r.URL.Query().Get("profile")) {
		return errMCPProfile
	}
	// Read through the edge's body watch: a stalled or broken body is
	// answered as on every path (writeErr: 408, 400).
	body, err := io.ReadAll(io.LimitReader(r.Body, mcpserver.MaxHTTPBody+1))
	switch {
	case err != nil:
		return errBodyUnreadable
	case len(body) > mcpserver.MaxHTTPBody:
		return errMCPTooLarge
	}
	auditRefusals(ctx, "", key, sess) // from here on, each tool call audits its answer
	s.feat.mcp.Serve(c.Response(), r.WithContext(context.WithValue(ctx, mcpCallKey{}, call)), body)
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
	if len(s.feat.mcpOpts.AuthorizationServers) == 0 || !s.decide(c, key) && !s.nativeMCP(c, key) {
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

// mcpCall is the caller of one MCP request, for its tool call.
type mcpCall struct {
	authorization string
	route         corefacts.RouteKey
	traceTrusted  bool
	client        clientKey // the answer budget's share it takes from
	// native: the Core was native when the request was decided; its tools
	// ask Core's knowledge endpoints (mcpnative.go).
	native bool
}

func mcpCallOf(ctx context.Context) *mcpCall {
	if c, ok := ctx.Value(mcpCallKey{}).(*mcpCall); ok {
		return c
	}
	return &mcpCall{}
}

// mcpKnowledge is mcpserver's Knowledge in process: a tool's protocol
// request goes to the knowledge service as the caller of the MCP request
// (after a flip to native, to Core's endpoints: mcpnative.go);
// a failure comes back as the knowledge error it is answered with (its
// Refusal is the tool error), a 5xx cause logged here as on every path.
type mcpKnowledge struct{ s *Server }

func (m mcpKnowledge) Search(ctx context.Context, body []byte) ([]byte, error) {
	call, ctx := m.caller(ctx)
	if call.native {
		return m.askNative(ctx, call, nativeSearch, body)
	}
	out, err := m.s.feat.k.Search(ctx, call.authorization, call.route, bytes.NewReader(body))
	return out, m.fail(ctx, err)
}

// Read answers a read in process unless the request's Core is native and
// the ref (and cursor) are not the sidecar's own: a chain the sidecar
// issued before the flip ends here, as for a plain read (upgrade.go).
func (m mcpKnowledge) Read(ctx context.Context, body []byte) ([]byte, error) {
	call, ctx := m.caller(ctx)
	if call.native && !m.s.feat.k.IssuedHere(body) {
		return m.askNative(ctx, call, nativeRead, body)
	}
	out, err := m.s.feat.k.Read(ctx, call.authorization, call.route, bytes.NewReader(body))
	return out, m.fail(ctx, err)
}

// caller is the MCP request's caller, and ctx naming the tool as the
// endpoint its disclosures are recorded under.
func (m mcpKnowledge) caller(ctx context.Context) (*mcpCall, context.Context) {
	if tool := mcpserver.ToolName(ctx); tool != "" {
		ctx = knowledge.WithEndpoint(ctx, knowledge.MCPEndpoint(tool))
	}
	return mcpCallOf(ctx), ctx
}

func (m mcpKnowledge) fail(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	return m.s.knowledgeError(ctx, err)
}

// Begin and End make mcpKnowledge an mcpserver.Recorder: a tool call's
// requests are audited as one event naming what its result showed.
func (m mcpKnowledge) Begin(ctx context.Context) context.Context {
	return knowledge.WithDisclosureGroup(ctx)
}

func (m mcpKnowledge) End(ctx context.Context, shown *mcpserver.Shown) error {
	return m.s.feat.k.DiscloseGroup(ctx, (*knowledge.Shown)(shown))
}

// knowledgeError is err as the knowledge error it is answered with: a
// ledger or catalog failure is 503 knowledge_unavailable. A 5xx cause is
// logged here, never sent.
func (s *Server) knowledgeError(ctx context.Context, err error) *knowledge.Error {
	var ke *knowledge.Error
	if !errors.As(err, &ke) {
		ke = knowledge.Unavailable(err)
	}
	if ke.Status >= 500 {
		s.log.LogAttrs(ctx, slog.LevelWarn, "knowledge request failed", slog.String("request_id", requestID(ctx)),
			slog.String("code", string(ke.Code)), slog.Any("cause", ke.Err))
	}
	return ke
}
