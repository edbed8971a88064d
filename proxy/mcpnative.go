package proxy

import (
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/bailinghub/knowledge-sidecar/corefacts"
)

// The remote MCP endpoint after a flip to a native Core (SPEC §8.2,
// docs/rollout.md "Upgrading Core to a native version"): Core has no MCP
// endpoint, so the sidecar keeps serving …/knowledge/mcp on a rolled-out
// workspace (MCPOptions.Native), and its tools ask the native Core's own
// knowledge endpoints with the caller's bearer — except a knowledge_read
// whose ref and cursor the sidecar issued, which it answers itself until
// they expire, as it does a plain read (upgrade.go). The verdict is read
// per MCP request (MCPCall.Native): a flip takes effect on the next one.

// nativeMCP reports whether the MCP endpoint (or its metadata) that the
// rollout decision passed through is still the sidecar's: the workspace is
// rolled out, the Core is native, and a native client is configured.
func (s *Server) nativeMCP(c echo.Context, key corefacts.RouteKey) bool {
	return s.feat.mcp != nil && s.feat.mcpOpts.Native && !key.IsZero() &&
		s.feat.rollout.Load().Enabled(c.Param("route")) && s.feat.native.IsNative()
}

// mcpWrongMethod answers the MCP endpoint asked with another method than
// POST: 405 with Allow wherever the endpoint is the sidecar's (as
// wrongMethod, and after a flip to native: nativeMCP), pass-through
// otherwise.
func (s *Server) mcpWrongMethod(c echo.Context) error {
	if key := routeKey(c); s.feat.mcp == nil || !s.decide(c, key) && !s.nativeMCP(c, key) {
		return s.passH(c)
	}
	return errMethodNotAllowed(http.MethodPost)
}
