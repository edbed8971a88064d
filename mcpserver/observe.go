package mcpserver

import (
	"context"
	"encoding/json"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/bailinghub/knowledge-sidecar/telemetry"
)

// The outcomes of an MCP request (mcp_requests_total's outcome label).
const (
	OutcomeOK        = "ok"
	OutcomeToolError = "tool_error" // a tools/call answered with isError
	OutcomeError     = "error"      // a JSON-RPC error
)

// methodOther labels every method outside MethodLabels.
const methodOther = "other"

// MethodLabels are the values of mcp_requests_total's method label: the
// methods a host of these tools sends, and "other" for any other.
var MethodLabels = []string{"initialize", "notifications/initialized", "server/discover", "ping",
	"tools/list", "tools/call", methodOther}

// MethodLabel is method as a metric label (closed set).
func MethodLabel(method string) string {
	for _, m := range MethodLabels {
		if m == method {
			return m
		}
	}
	return methodOther
}

// observer counts MCP requests and starts their spans (SPEC §10: the
// OpenTelemetry GenAI/MCP semantic conventions).
type observer struct {
	tracer    trace.Tracer // nil: no spans
	trustMeta func(context.Context) bool
	count     func(method, outcome string)
}

type toolKey struct{}

// ToolName is the tool a tools/call request names, for the calls its
// handler makes with ctx ("" outside a tools/call served by NewHTTP): the
// sidecar records disclosures under it (knowledge.MCPEndpoint).
func ToolName(ctx context.Context) string {
	name, _ := ctx.Value(toolKey{}).(string)
	return name
}

func (o *observer) counted(method, outcome string) {
	if o.count != nil {
		o.count(MethodLabel(method), outcome)
	}
}

func (o *observer) middleware(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		var tool string
		if call, ok := req.(*mcp.CallToolRequest); ok && call.Params != nil {
			tool = call.Params.Name
			ctx = context.WithValue(ctx, toolKey{}, tool)
		}
		var span trace.Span
		if o.tracer != nil {
			ctx, span = o.start(ctx, method, tool, req)
		}
		res, err := next(ctx, method, req)
		outcome := OutcomeOK
		if err != nil {
			outcome = OutcomeError
		} else if r, ok := res.(*mcp.CallToolResult); ok && r.IsError {
			outcome = OutcomeToolError
		}
		o.counted(method, outcome)
		if span != nil {
			if outcome != OutcomeOK {
				span.SetAttributes(attribute.String("error.type", outcome))
				span.SetStatus(codes.Error, outcome)
			}
			span.End()
		}
		return res, err
	}
}

// start begins the request's SERVER span: "{mcp.method.name} {tool}", its
// parent the params._meta trace context when the peer is trusted for it
// (the HTTP request's span is then a link), else the HTTP request's span.
func (o *observer) start(ctx context.Context, method, tool string, req mcp.Request) (context.Context, trace.Span) {
	name := method
	if tool != "" {
		name += " " + tool
	}
	var opts []trace.SpanStartOption
	if o.trustMeta != nil && o.trustMeta(ctx) {
		if meta := metaCarrier(req); meta != nil {
			if parent := telemetry.Propagator.Extract(context.Background(), meta); trace.SpanContextFromContext(parent).IsValid() {
				opts = append(opts, trace.WithLinks(trace.LinkFromContext(ctx)))
				ctx = trace.ContextWithRemoteSpanContext(ctx, trace.SpanContextFromContext(parent))
			}
		}
	}
	attrs := []attribute.KeyValue{attribute.String("mcp.method.name", method)}
	if tool != "" {
		attrs = append(attrs, attribute.String("gen_ai.tool.name", tool), attribute.String("gen_ai.operation.name", "execute_tool"))
	}
	if v := protocolVersion(req); v != "" {
		attrs = append(attrs, attribute.String("mcp.protocol.version", v))
	}
	if id, ok := ctx.Value(requestIDKey{}).(string); ok && id != "" {
		attrs = append(attrs, attribute.String("jsonrpc.request.id", id))
	}
	opts = append(opts, trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(attrs...))
	return o.tracer.Start(ctx, name, opts...)
}

// metaCarrier is the request's params._meta as a propagation carrier (nil
// when it carries no traceparent).
func metaCarrier(req mcp.Request) propagation.MapCarrier {
	p := req.GetParams()
	if p == nil {
		return nil
	}
	meta := p.GetMeta()
	tp, _ := meta["traceparent"].(string)
	if tp == "" {
		return nil
	}
	c := propagation.MapCarrier{"traceparent": tp}
	if ts, ok := meta["tracestate"].(string); ok {
		c["tracestate"] = ts
	}
	return c
}

// protocolVersion is the revision the request speaks: the one an
// initialize asks for, else the MCP-Protocol-Version header.
func protocolVersion(req mcp.Request) string {
	if init, ok := req.(*mcp.InitializeRequest); ok && init.Params != nil {
		return init.Params.ProtocolVersion
	}
	if x := req.GetExtra(); x != nil && x.Header != nil {
		return x.Header.Get("MCP-Protocol-Version")
	}
	return ""
}

type requestIDKey struct{}

// withRequestID holds the JSON-RPC id of body for the span (jsonrpc.request.id).
func withRequestID(ctx context.Context, body []byte) context.Context {
	var msg struct {
		ID json.RawMessage `json:"id"`
	}
	if json.Unmarshal(body, &msg) != nil || len(msg.ID) == 0 {
		return ctx
	}
	id := string(msg.ID)
	var s string
	if json.Unmarshal(msg.ID, &s) == nil {
		id = s
	}
	if len(id) > 64 {
		id = id[:64]
	}
	return context.WithValue(ctx, requestIDKey{}, id)
}
