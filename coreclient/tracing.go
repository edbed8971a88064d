package coreclient

import (
	"net/http"
	"strconv"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/bailinghub/knowledge-sidecar/telemetry"
)

// Tracing of Core calls (SPEC §9; the catalog's query spans are in
// catalog/tracing.go). Every function here
// runs only with a tracer set; attributes are constants, a method, a path
// template, a status or a query label: never a URL with its route or
// query, a credential, a KB or document id, a query text or SQL.

const workspacesPrefix = "/agent-api/v1/workspaces/"

// pathTemplate is path with its workspace route segment as {route}.
func pathTemplate(path string) string {
	i := strings.Index(path, workspacesPrefix)
	if i < 0 {
		return path
	}
	rest := path[i+len(workspacesPrefix):]
	j := strings.IndexByte(rest, '/')
	if j < 0 {
		return path[:i] + workspacesPrefix + "{route}"
	}
	return path[:i] + workspacesPrefix + "{route}" + rest[j:]
}

// startSpan starts the CLIENT span of one request to Core, child of the
// span in its context, and injects traceparent/tracestate. When the parent
// is not sampled only the headers are injected (no span is recorded).
func (c *Client) startSpan(req *http.Request) (*http.Request, trace.Span) {
	ctx := req.Context()
	tmpl := pathTemplate(strings.TrimPrefix(req.URL.Path, c.base.Path))
	ctx, span := c.tracer.Start(ctx, req.Method+" "+tmpl, trace.WithSpanKind(trace.SpanKindClient))
	if span.IsRecording() {
		span.SetAttributes(
			attribute.String("http.request.method", req.Method),
			attribute.String("url.template", tmpl),
			attribute.String("server.address", c.base.Hostname()),
			attribute.String("knowledge_sidecar.peer", "core"),
		)
	}
	req = req.WithContext(ctx)
	telemetry.Propagator.Inject(ctx, propagation.HeaderCarrier(req.Header))
	return req, span
}

// endSpan records the outcome: 4xx and 5xx are errors on a client span.
func endSpan(span trace.Span, resp *http.Response, err error) {
	if span.IsRecording() {
		switch {
		case resp != nil:
			span.SetAttributes(attribute.Int("http.response.status_code", resp.StatusCode))
			if resp.StatusCode >= 400 {
				span.SetAttributes(attribute.String("error.type", strconv.Itoa(resp.StatusCode)))
				span.SetStatus(codes.Error, "")
			} else if err != nil {
				span.SetAttributes(attribute.String("error.type", "body"))
				span.SetStatus(codes.Error, "")
			}
		case err != nil:
			span.SetAttributes(attribute.String("error.type", "transport"))
			span.SetStatus(codes.Error, "")
		}
	}
	span.End()
}
