package proxy

import (
	"context"
	"net/http"
	"net/http/httputil"
	"sync/atomic"
	"time"

	"github.com/bailinghub/knowledge-sidecar/corefacts"
	"github.com/bailinghub/knowledge-sidecar/knowledge"
	"github.com/bailinghub/knowledge-sidecar/mcpauth"
	"github.com/bailinghub/knowledge-sidecar/native"
	"github.com/bailinghub/knowledge-sidecar/rollout"
	"github.com/bailinghub/knowledge-sidecar/turn"
)

// The parts the edge is handed (package sidecar builds them) and holds by
// small interfaces; the handlers (features.go, turns.go, mcp.go, …) use
// them, the edge only keeps them.

// Features are the knowledge endpoints and turn interception, built by the
// caller (package sidecar assembles them): the edge holds them by the small
// interfaces below and builds only its own HTTP parts (the turn and
// capabilities ReverseProxies).
type Features struct {
	Knowledge *knowledge.Service
	// Native is the native-detection verdict (a *native.Detector).
	Native Verdict
	// Turns decides intercepted turns (a *turn.Interceptor).
	Turns   Turns
	Rollout rollout.Policy
	// ProbeTimeout bounds a capabilities request forwarded as the probe
	// (config core.timeout, as for the detector's own probes). Default 3s.
	ProbeTimeout time.Duration
	// MCP configures the remote MCP endpoint (SPEC §10); MCPHandler serves
	// it (an *mcpserver.HTTP). nil: the endpoint is Core's.
	MCP        MCPOptions
	MCPHandler MCPHandler
	// OAuth, when set, is the sign-in front MCP hosts see (SPEC §12).
	OAuth OAuth
}

// Verdict is what the edge asks of native detection: the state as it
// stands, a verdict that may probe first, and a forwarded capabilities
// request as the probe (Claim, then Answer or Fail).
type Verdict interface {
	IsNative() bool
	Native(ctx context.Context, authorization string, route corefacts.RouteKey) bool
	Claim() (*native.Probe, bool)
	Answer(p *native.Probe, status int, body []byte) native.Kind
	Fail(p *native.Probe, err error)
}

// Turns is the turn feature as the edge drives it (turns.go): a turn's
// four calls start at Admit; SetHints is the turn_hints reload.
type Turns interface {
	Admit(ctx context.Context, in turn.Input) (*turn.Turn, turn.Plan)
	SetHints(on bool)
}

type features struct {
	k       *knowledge.Service
	rollout atomic.Pointer[rollout.Policy]
	native  Verdict
	turns   Turns // the turn feature's decisions (turns.go)
	// turnProxy forwards intercepted turns; caps forwards capabilities
	// requests as the probe.
	turnProxy, caps *httputil.ReverseProxy
	mcp             MCPHandler // the remote MCP endpoint's handler (mcp.go); nil: Core's
	mcpOpts         MCPOptions
	oauth           OAuth // nil: off
}

// MCPOptions configure the remote MCP endpoint (config mcp.*).
type MCPOptions struct {
	// AuthorizationServers, when set, are named in the metadata document,
	// and a 401 points hosts at that document.
	AuthorizationServers []string
	Scopes               []string
	// PublicURL is scheme://host as hosts reach the sidecar; "" takes the
	// request's own.
	PublicURL string
	// Native keeps the endpoint answering on a rolled-out workspace whose
	// Core is native (mcpnative.go): the handler's tools then call Core's
	// own knowledge endpoints (MCPCall.Native). false: such a request
	// passes through to Core.
	Native bool
}

// MCPHandler serves a remote MCP request the edge admitted: body is the
// request's body, read within protocol.MaxMCPBody; the caller is in the
// request's context (MCPCallOf). An *mcpserver.HTTP is one.
type MCPHandler interface {
	Serve(w http.ResponseWriter, r *http.Request, body []byte)
}

// OAuth is the sign-in front MCP hosts see (SPEC §12; mcpauth.Service):
// the edge reads the request into plain values, and writes the answer as
// it is. Nil in Features: the front's paths are Core's (pass-through).
type OAuth interface {
	Handle(ctx context.Context, r mcpauth.Request) mcpauth.Answer
}
