package coreclient

import (
	"net/http"
	"strings"

	"go.opentelemetry.io/otel/attribute"
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

// startSpan starts the CLIENT span of one request to Core
// (telemetry.StartCoreSpan), named by its method and path template.
func (c *Client) startSpan(req *http.Request) (*http.Request, trace.Span) {
	tmpl := pathTemplate(strings.TrimPrefix(req.URL.Path, c.base.Path))
	ctx, span := telemetry.StartCoreSpan(req.Context(), c.tracer, req.Method+" "+tmpl, req.Method, c.base.Hostname(), req.Header,
		attribute.String("url.template", tmpl))
	return req.WithContext(ctx), span
}

// endSpan records the outcome: 4xx and 5xx are errors on a client span; a
// body that failed after a good status is "body", no answer "transport".
func endSpan(span trace.Span, resp *http.Response, err error) {
	status, errType := 0, ""
	switch {
	case resp != nil:
		status = resp.StatusCode
		if err != nil {
			errType = "body"
		}
	case err != nil:
		errType = "transport"
	}
	telemetry.EndCoreSpan(span, status, errType)
}
