package coreclient

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/bailinghub/knowledge-sidecar/corefacts"
	"github.com/bailinghub/knowledge-sidecar/protocol"
)

// ProbeKind classifies Core's answer to a forwarded capabilities request.
type ProbeKind int

const (
	// ProbeRelay: anything that is neither legacy nor native (401, 403, 5xx,
	// an unknown 200, a native Core's own 404 gate code): relay it to the
	// caller as is; it says nothing about the Core's version.
	ProbeRelay ProbeKind = iota
	// ProbeLegacy: 404 not_found, 405 or 501 — the Core does not know the
	// endpoint; the sidecar serves the protocol.
	ProbeLegacy
	// ProbeNative: 200 with schema_version bailing.agent-knowledge-capabilities.v1.
	ProbeNative
)

func (k ProbeKind) String() string {
	switch k {
	case ProbeLegacy:
		return "legacy"
	case ProbeNative:
		return "native"
	default:
		return "relay"
	}
}

// ProbeCapabilities sends a capabilities probe for route to Core with the
// caller's Authorization header (sent as is, even when empty) and
// classifies the answer (ClassifyProbe); nothing of it is kept: a
// capabilities request is itself relayed by the edge's ReverseProxy, this
// only decides the other requests that find no verdict held. It is not
// under a breaker. Transport errors, timeouts and oversized answers are
// ErrUnavailable. The zero route key (a segment outside Core's workspace pattern) is not sent (Core
// would answer 404 not_found whatever its version): it is a *CoreError 404
// route_unavailable.
func (c *Client) ProbeCapabilities(ctx context.Context, authorization string, route corefacts.RouteKey) (ProbeKind, error) {
	if route.IsZero() {
		return ProbeRelay, errNoRouteKey()
	}
	kind := ProbeRelay
	err := c.call(ctx, nil, OpProbe, func(ctx context.Context) error {
		req, err := c.newRequest(ctx, http.MethodGet, "/agent-api/v1/workspaces/"+route.String()+"/knowledge/capabilities", nil)
		if err != nil {
			return err
		}
		if authorization != "" {
			if !headerValueOK(authorization) {
				return fmt.Errorf("%w: malformed authorization header", corefacts.ErrUnauthorized)
			}
			req.Header.Set("Authorization", authorization)
		}
		req.Header.Set("Accept", "application/json")
		status, body, err := c.do(req, ProbeBodyLimit)
		if err != nil {
			return err
		}
		kind = ClassifyProbe(status, body)
		return nil
	})
	return kind, err
}

// ProbeBodyLimit bounds a capabilities answer read to classify it (and, at
// the edge, to relay it): a larger one is no capabilities document.
const ProbeBodyLimit = 64 << 10

// ClassifyProbe tells what Core's answer to a capabilities request says of
// its version: 405 and 501 → legacy; 404 → legacy unless its body is an
// Agent API error with a code other than "not_found" (a native Core's gate,
// e.g. route_unavailable, which must be relayed); 200 with the native schema
// → native; everything else → relay.
func ClassifyProbe(status int, body []byte) ProbeKind {
	switch status {
	case http.StatusMethodNotAllowed, http.StatusNotImplemented:
		return ProbeLegacy
	case http.StatusNotFound:
		var e agentError
		if json.Unmarshal(body, &e) == nil && e.Error != "" && e.Error != "not_found" {
			return ProbeRelay
		}
		return ProbeLegacy
	case http.StatusOK:
		var v struct {
			SchemaVersion string `json:"schema_version"`
		}
		if json.Unmarshal(body, &v) == nil && v.SchemaVersion == protocol.CapabilitiesSchema {
			return ProbeNative
		}
		return ProbeRelay
	default:
		return ProbeRelay
	}
}
