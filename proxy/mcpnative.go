package proxy

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"

	"github.com/labstack/echo/v4"

	"github.com/bailinghub/knowledge-sidecar/corefacts"
	"github.com/bailinghub/knowledge-sidecar/knowledge"
	"github.com/bailinghub/knowledge-sidecar/protocol"
)

// The remote MCP endpoint after a flip to a native Core (SPEC §8.2,
// docs/rollout.md "Upgrading Core to a native version"): Core has no MCP
// endpoint, so the sidecar keeps serving …/knowledge/mcp on a rolled-out
// workspace, and its tools ask the native Core's own knowledge endpoints
// with the caller's bearer (MCPOptions.Native) — except a knowledge_read
// whose ref and cursor the sidecar issued, which it answers itself until
// they expire, as it does a plain read (upgrade.go). The verdict is read
// per MCP request (mcpCall.native): a flip takes effect on the next one.

// NativeKnowledge is a native Core's knowledge endpoints as the remote MCP
// endpoint's tools call them after a flip. The sidecar builds it over HTTP
// (package sidecar); proxy only sees this interface.
type NativeKnowledge interface {
	// Call POSTs body to Core's knowledge endpoint ("search" or "read") of
	// route, with authorization as the Authorization header, and returns
	// Core's answer. err is a failure to get an answer (transport, the
	// context); it never names the bearer or the body.
	Call(ctx context.Context, authorization string, route corefacts.RouteKey, endpoint string, body []byte) (NativeAnswer, error)
}

// NativeAnswer is a native Core's HTTP answer to a NativeKnowledge call.
type NativeAnswer struct {
	Status     int
	RetryAfter string // the Retry-After header
	Body       []byte
}

// Core's knowledge endpoints the MCP tools call (the last path segment).
const (
	nativeSearch = "search"
	nativeRead   = "read"
)

// nativeMCP reports whether the MCP endpoint (or its metadata) that the
// rollout decision passed through is still the sidecar's: the workspace is
// rolled out, the Core is native, and a native client is configured.
func (s *Server) nativeMCP(c echo.Context, key corefacts.RouteKey) bool {
	return s.feat.mcpOpts.Native != nil && !key.IsZero() &&
		s.feat.rollout.Load().Enabled(c.Param("route")) && s.feat.native.IsNative()
}

// mcpWrongMethod answers the MCP endpoint asked with another method than
// POST: 405 with Allow wherever the endpoint is the sidecar's (as
// wrongMethod, and after a flip to native: nativeMCP), pass-through
// otherwise.
func (s *Server) mcpWrongMethod(c echo.Context) error {
	if key := routeKey(c); !s.decide(c, key) && !s.nativeMCP(c, key) {
		return s.passH(c)
	}
	return errMethodNotAllowed(http.MethodPost)
}

// askNative sends a tool's protocol request to the native Core as the MCP
// request's caller. Core's refusal comes back as a refusal (its code,
// message and Retry-After become the tool error); an answer that is no
// protocol refusal, or no answer, is knowledge_unavailable, its cause
// logged. Nothing is audited here: what a native Core discloses is Core's
// to record (SPEC §11 covers what the sidecar disclosed).
func (m mcpKnowledge) askNative(ctx context.Context, call *mcpCall, endpoint string, body []byte) ([]byte, error) {
	ans, err := m.s.feat.mcpOpts.Native.Call(ctx, call.authorization, call.route, endpoint, body)
	switch {
	case err != nil && ctx.Err() != nil:
		return nil, ctx.Err()
	case err != nil:
		return nil, m.fail(ctx, knowledge.Unavailable(fmt.Errorf("%w: native %s: %w", corefacts.ErrUnavailable, endpoint, err)))
	case ans.Status == http.StatusOK:
		return ans.Body, nil
	}
	var r protocol.Refusal
	if json.Unmarshal(ans.Body, &r) != nil || r.Code == "" {
		return nil, m.fail(ctx, knowledge.Unavailable(fmt.Errorf("%w: native %s answered HTTP %d without a protocol error body",
			corefacts.ErrUnavailable, endpoint, ans.Status)))
	}
	r.Status = ans.Status
	if n, err := strconv.Atoi(ans.RetryAfter); err == nil && n > 0 {
		r.RetryAfter = n
	}
	return nil, nativeRefusal{r}
}

// nativeRefusal is a native Core's refusal of a tool's request, as the
// tool error it becomes (mcpserver reads its Refusal).
type nativeRefusal struct{ r protocol.Refusal }

func (e nativeRefusal) Error() string             { return "native Core refused: " + string(e.r.Code) }
func (e nativeRefusal) Refusal() protocol.Refusal { return e.r }
