package sidecar

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/bailinghub/knowledge-sidecar/config"
	"github.com/bailinghub/knowledge-sidecar/corefacts"
	"github.com/bailinghub/knowledge-sidecar/hostclient"
	"github.com/bailinghub/knowledge-sidecar/knowledge"
	"github.com/bailinghub/knowledge-sidecar/mcpserver"
	"github.com/bailinghub/knowledge-sidecar/protocol"
	"github.com/bailinghub/knowledge-sidecar/proxy"
	"github.com/bailinghub/knowledge-sidecar/telemetry"
)

// The remote MCP endpoint's handler (SPEC §10): mcpserver's stateless
// Streamable HTTP handler, its tools answered by mcpBackend — the knowledge
// service in process, as the caller the edge established (proxy.MCPCallOf),
// or, after a flip to a native Core, Core's own knowledge endpoints.

// mcpBackend is the tools' backend (mcpserver.Knowledge and Recorder): a
// tool's protocol request goes to the knowledge service as the MCP
// request's caller; a failure comes back as the knowledge error it is
// answered with (its Refusal is the tool error), a 5xx cause logged here
// as on every path.
type mcpBackend struct {
	k *knowledge.Service
	// native asks a native Core's knowledge endpoint ("search" or "read");
	// nil when core.url is no URL hostclient takes (MCPCall.Native is then
	// never set: the edge passes such requests through).
	native nativeCaller
	log    *slog.Logger
}

// nativeCaller asks a native Core's knowledge endpoint ("search" or
// "read") as call, with body; err is no answer at all.
type nativeCaller func(ctx context.Context, call *proxy.MCPCall, endpoint string, body []byte) (*hostclient.Response, error)

// Core's knowledge endpoints the tools call after a flip (the last path
// segment).
const (
	nativeSearch = "search"
	nativeRead   = "read"
)

func (m *mcpBackend) Search(ctx context.Context, body []byte) ([]byte, error) {
	call, ctx := m.caller(ctx)
	if call.Native {
		return m.askNative(ctx, call, nativeSearch, body)
	}
	out, err := m.k.Search(ctx, call.Authorization, call.Route, bytes.NewReader(body))
	return out, m.fail(ctx, err)
}

// Read answers a read in process unless the request's Core is native and
// the ref (and cursor) are not the sidecar's own: a chain the sidecar
// issued before the flip ends here, as for a plain read (proxy/upgrade.go).
func (m *mcpBackend) Read(ctx context.Context, body []byte) ([]byte, error) {
	call, ctx := m.caller(ctx)
	if call.Native && !m.k.IssuedHere(body) {
		return m.askNative(ctx, call, nativeRead, body)
	}
	out, err := m.k.Read(ctx, call.Authorization, call.Route, bytes.NewReader(body))
	return out, m.fail(ctx, err)
}

// caller is the MCP request's caller, and ctx naming the tool as the
// endpoint its disclosures are recorded under.
func (m *mcpBackend) caller(ctx context.Context) (*proxy.MCPCall, context.Context) {
	if tool := mcpserver.ToolName(ctx); tool != "" {
		ctx = knowledge.WithEndpoint(ctx, knowledge.MCPEndpoint(tool))
	}
	return proxy.MCPCallOf(ctx), ctx
}

// fail is err as the knowledge error a tool reports, its 5xx cause logged
// as the edge logs it.
func (m *mcpBackend) fail(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	return proxy.KnowledgeError(ctx, m.log, err)
}

// Begin and End make mcpBackend an mcpserver.Recorder: a tool call's
// requests are audited as one event naming what its result showed.
func (m *mcpBackend) Begin(ctx context.Context) context.Context {
	return knowledge.WithDisclosureGroup(ctx)
}

func (m *mcpBackend) End(ctx context.Context, shown *mcpserver.Shown) error {
	return m.k.DiscloseGroup(ctx, (*knowledge.Shown)(shown))
}

// askNative sends a tool's protocol request to the native Core as the MCP
// request's caller. Core's refusal comes back as a refusal (its code,
// message and Retry-After become the tool error); an answer that is no
// protocol refusal, or no answer, is knowledge_unavailable, its cause
// logged. Nothing is audited here: what a native Core discloses is Core's
// to record (SPEC §11 covers what the sidecar disclosed).
func (m *mcpBackend) askNative(ctx context.Context, call *proxy.MCPCall, endpoint string, body []byte) ([]byte, error) {
	if m.native == nil { // not reached: the edge sets Native only with a client
		return nil, m.fail(ctx, knowledge.Unavailable(fmt.Errorf("%w: no native client", corefacts.ErrUnavailable)))
	}
	res, err := m.native(ctx, call, endpoint, body)
	switch {
	case err != nil && ctx.Err() != nil:
		return nil, ctx.Err()
	case err != nil:
		return nil, m.fail(ctx, knowledge.Unavailable(fmt.Errorf("%w: native %s: %w", corefacts.ErrUnavailable, endpoint, err)))
	case res.Status == http.StatusOK:
		return res.Body, nil
	}
	var r protocol.Refusal
	if json.Unmarshal(res.Body, &r) != nil || r.Code == "" {
		return nil, m.fail(ctx, knowledge.Unavailable(fmt.Errorf("%w: native %s answered HTTP %d without a protocol error body",
			corefacts.ErrUnavailable, endpoint, res.Status)))
	}
	r.Status = res.Status
	if n, err := strconv.Atoi(res.Header.Get("Retry-After")); err == nil && n > 0 {
		r.RetryAfter = n
	}
	return nil, nativeRefusal{r}
}

// nativeRefusal is a native Core's refusal of a tool's request, as the
// tool error it becomes (mcpserver reads its Refusal).
type nativeRefusal struct{ r protocol.Refusal }

func (e nativeRefusal) Error() string             { return "native Core refused: " + string(e.r.Code) }
func (e nativeRefusal) Refusal() protocol.Refusal { return e.r }

// nativeCallTimeout bounds one tool request to a native Core's knowledge
// endpoint, answer read included (hostclient's default for a host).
const nativeCallTimeout = 30 * time.Second

// newNativeMCP is the backend's client of a native Core's knowledge
// endpoints: hostclient's requests, each with the bearer of the MCP request
// it serves, over a pool of its own to core.url that waits for Core's
// answer as long as the pass-through does (proxy.response_header_timeout),
// verifying Core with tlsCfg when core.ca_file is set (nil: the system
// roots). core.url is validated as hostclient wants it (absolute http(s),
// no query or fragment); were it refused, the result is nil and the MCP
// endpoint of a native Core passes through. Its errors are hostclient's:
// they name the method, Core's host and a reason, never the bearer or the
// body. Each call is a CLIENT span (telemetry.StartCoreSpan, as every
// other request to Core: SPEC §9) when tracer is set; either way the MCP
// request's trace context goes to Core as traceparent and tracestate, so
// Core's spans of a tool call join the host's trace.
func newNativeMCP(cfg config.Config, tlsCfg *tls.Config, tracer trace.Tracer) nativeCaller {
	t := coreTransport(cfg, tlsCfg, cfg.Proxy.ResponseHeaderTimeout)
	// No token of its own: every call sends its caller's Authorization.
	c, err := hostclient.New(cfg.Core.URL, "", "", &http.Client{Transport: t, Timeout: nativeCallTimeout})
	if err != nil {
		return nil
	}
	host := ""
	if u, err := url.Parse(cfg.Core.URL); err == nil {
		host = u.Hostname()
	}
	return func(ctx context.Context, call *proxy.MCPCall, endpoint string, body []byte) (*hostclient.Response, error) {
		h := http.Header{"Authorization": {call.Authorization}}
		req := hostclient.Request{Method: http.MethodPost, URL: c.URL(call.Route.String(), endpoint), Body: body, Header: h}
		if tracer == nil {
			telemetry.Propagator.Inject(ctx, propagation.HeaderCarrier(h))
			return c.Do(ctx, req)
		}
		tmpl := "/agent-api/v1/workspaces/{route}/knowledge/" + endpoint
		ctx, span := telemetry.StartCoreSpan(ctx, tracer, http.MethodPost+" "+tmpl, http.MethodPost, host, h,
			attribute.String("url.template", tmpl))
		res, err := c.Do(ctx, req)
		status, errType := 0, ""
		if err != nil {
			errType = "transport"
		} else {
			status = res.Status
		}
		telemetry.EndCoreSpan(span, status, errType)
		return res, err
	}
}
