package proxy

import (
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/bailinghub/knowledge-sidecar/mcpauth"
	"github.com/bailinghub/knowledge-sidecar/protocol"
)

// The paths the sidecar may serve itself; everything else is pass-through.
const (
	pathMCP = "/agent-api/v1/workspaces/:route/knowledge/mcp"
	// pathMCPMetadata is the RFC 9728 Protected Resource Metadata document
	// of pathMCP: the well-known prefix before the resource's path.
	pathMCPMetadata  = "/.well-known/oauth-protected-resource" + pathMCP
	pathCapabilities = "/agent-api/v1/workspaces/:route/knowledge/capabilities"
	pathSearch       = "/agent-api/v1/workspaces/:route/knowledge/search"
	pathRead         = "/agent-api/v1/workspaces/:route/knowledge/read"
	pathTurns        = "/agent-api/v1/workspaces/:route/turns"
)

// handlerPassthrough labels every request no route below claims.
const handlerPassthrough = "passthrough"

// passRoute is echo's route for everything the table does not claim.
const passRoute = "/*"

// route is one endpoint the sidecar claims: the table drives registration
// (assemble.go binds each row's name to its handler), what other methods
// on the path get, the `handler` metric label, the
// server span's name, how much of an unread request body the edge drains
// after the answer, and which paths the canonical-path check guards
// (canonical.go: every other spelling of a row's path is refused 400).
type route struct {
	method, path string
	name         string // the `handler` label, and its handler's name (assemble.go)
	// knowledge: another method on the path is 405 where the sidecar
	// serves the workspace; otherwise it passes through to Core.
	knowledge bool
	// drain bounds the post-answer drain of an unread body (bytes).
	drain int64
}

// routes is the route table. A new endpoint is one row here plus its
// handler (bound by name in assemble.go).
var routes = []route{
	{http.MethodGet, pathCapabilities, "capabilities", true, protocol.MaxRequestBytes},
	{http.MethodPost, pathSearch, "search", true, protocol.MaxRequestBytes},
	{http.MethodPost, pathRead, "read", true, protocol.MaxRequestBytes},
	{http.MethodPost, pathTurns, "turns", false, passDrainLimit},
	{http.MethodPost, pathMCP, "mcp", true, protocol.MaxMCPBody},
	{http.MethodGet, pathMCPMetadata, "mcp_metadata", true, protocol.MaxRequestBytes},
	{http.MethodGet, mcpauth.PathMetadata, "oauth_metadata", false, mcpauth.MaxBody},
	{http.MethodPost, mcpauth.PathRegister, "oauth_register", false, mcpauth.MaxBody},
	{http.MethodGet, mcpauth.PathAuthorize, "oauth_authorize", false, mcpauth.MaxBody},
	{http.MethodPost, mcpauth.PathToken, "oauth_token", false, mcpauth.MaxBody},
	{http.MethodPost, mcpauth.PathRevoke, "oauth_revoke", false, mcpauth.MaxBody},
}

// passDrainLimit bounds the drain of a pass-through request's unread body,
// like net/http's own post-handler drain.
const passDrainLimit = 256 << 10

// claimPrefixes are what the table's paths start with before their route
// segment, one per first path segment (/agent-api/…, /.well-known/…): a
// request path with none of them is never routed to a row (Server.ServeHTTP
// skips echo's router for it).
var claimPrefixes = claimPrefixesOf(routes)

func claimPrefixesOf(rows []route) []string {
	var out []string
	byFirst := map[string]int{} // first segment → index in out
	for _, rt := range rows {
		fixed, _, _ := strings.Cut(rt.path, ":")
		first, _, _ := strings.Cut(strings.TrimPrefix(fixed, "/"), "/")
		i, seen := byFirst[first]
		if !seen {
			byFirst[first] = len(out)
			out = append(out, fixed)
			continue
		}
		n := 0
		for n < len(out[i]) && n < len(fixed) && out[i][n] == fixed[n] {
			n++
		}
		out[i] = out[i][:n]
	}
	return out
}

// routeOf is the table row of the path echo matched, or nil.
func routeOf(path string) *route {
	for i := range routes {
		if routes[i].path == path {
			return &routes[i]
		}
	}
	return nil
}

// routeNames are the handler labels of the table's routes.
func routeNames() []string {
	names := make([]string, len(routes))
	for i, rt := range routes {
		names[i] = rt.name
	}
	return names
}

// handlerName labels a request by the route it matched (closed set).
func handlerName(c echo.Context) string {
	if rt := routeOf(c.Path()); rt != nil {
		return rt.name
	}
	return handlerPassthrough
}

// drainLimit is how much of an unread body the edge drains for a request.
func drainLimit(c echo.Context) int64 {
	if rt := routeOf(c.Path()); rt != nil {
		return rt.drain
	}
	return passDrainLimit
}
