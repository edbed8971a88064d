package coreclient

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"github.com/bailinghub/knowledge-sidecar/corefacts"
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

// Probe is Core's full answer to a forwarded capabilities request, ready to
// be relayed: status, end-to-end headers (hop-by-hop ones removed) and body.
type Probe struct {
	Kind   ProbeKind
	Status int
	Header http.Header
	Body   []byte
}

// hopHeaders are not relayed (RFC 9110 §7.6.1 and the usual extras).
var hopHeaders = []string{
	"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate",
	"Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade",
}

// ProbeCapabilities forwards the caller's
// GET /agent-api/v1/workspaces/:route/knowledge/capabilities to Core with the
// caller's Authorization header (sent as is, even when empty: Core's 401 is
// then relayed) and classifies the answer. It is not under a breaker.
// Transport errors, timeouts and oversized answers are ErrUnavailable.
//
// Classification: 405 and 501 → legacy; 404 → legacy unless its body is an
// Agent API error with a code other than "not_found" (a native Core's gate,
// e.g. route_unavailable, which must be relayed); 200 with the native schema →
// native; everything else → relay. A route outside Core's workspace pattern is
// not sent (Core would answer 404 not_found whatever its version): it is a
// *CoreError 404 route_unavailable.
func (c *Client) ProbeCapabilities(ctx context.Context, authorization, route string) (*Probe, error) {
	if !corefacts.ValidRouteKey(route) {
		return nil, &corefacts.CoreError{Status: http.StatusNotFound, Code: "route_unavailable", Message: "The configured route is unavailable."}
	}
	var p *Probe
	err := c.call(ctx, nil, OpProbe, func(ctx context.Context) error {
		req, err := c.newRequest(ctx, http.MethodGet, "/agent-api/v1/workspaces/"+route+"/knowledge/capabilities", nil)
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
		resp, body, err := c.doResponse(req, probeBodyLimit)
		if err != nil {
			return err
		}
		h := resp.Header.Clone()
		for _, v := range h.Values("Connection") {
			for _, k := range strings.Split(v, ",") {
				if k = strings.TrimSpace(k); k != "" {
					h.Del(k)
				}
			}
		}
		for _, k := range hopHeaders {
			h.Del(k)
		}
		p = &Probe{Kind: classifyProbe(resp.StatusCode, body), Status: resp.StatusCode, Header: h, Body: body}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return p, nil
}

func classifyProbe(status int, body []byte) ProbeKind {
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
		if json.Unmarshal(body, &v) == nil && v.SchemaVersion == corefacts.CapabilitiesSchema {
			return ProbeNative
		}
		return ProbeRelay
	default:
		return ProbeRelay
	}
}
