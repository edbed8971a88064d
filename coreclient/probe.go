package coreclient

import (
	"context"
	"fmt"

	"github.com/bailinghub/knowledge-sidecar/corefacts"
)

// ProbeCapabilities sends a capabilities probe for route to Core with the
// caller's Authorization header (sent as is, even when empty) and returns
// Core's answer as it came, status and body (at most probeBodyLimit bytes):
// package native judges what it says of Core's version, for the requests
// that find no verdict held (a capabilities request is itself relayed by the
// edge's ReverseProxy). It is not under a breaker. Transport errors, timeouts and oversized answers are
// ErrUnavailable. The zero route key (a segment outside Core's workspace pattern) is not sent (Core
// would answer 404 not_found whatever its version): it is a *CoreError 404
// route_unavailable.
func (c *Client) ProbeCapabilities(ctx context.Context, authorization string, route corefacts.RouteKey) (status int, body []byte, err error) {
	if route.IsZero() {
		return 0, nil, errNoRouteKey()
	}
	err = c.call(ctx, nil, OpProbe, func(ctx context.Context) error {
		if authorization != "" && !headerValueOK(authorization) {
			return fmt.Errorf("%w: malformed authorization header", corefacts.ErrUnauthorized)
		}
		status, body, err = c.get(ctx, "/agent-api/v1/workspaces/"+route.String()+"/knowledge/capabilities", authorization, probeBodyLimit)
		return err
	})
	if err != nil {
		return 0, nil, err
	}
	return status, body, nil
}

// probeBodyLimit bounds a capabilities answer read (native.BodyLimit, the
// bound the edge relays one under; coreclient knows nothing of the
// protocol): a larger one is no capabilities document.
const probeBodyLimit = 64 << 10
