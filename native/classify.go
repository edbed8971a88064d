package native

import (
	"encoding/json"
	"net/http"

	"github.com/bailinghub/knowledge-sidecar/protocol"
)

// Kind is what Core's answer to a capabilities request says of its version.
type Kind int

const (
	// Relay: anything that is neither legacy nor native (401, 403, 5xx, an
	// unknown 200, a native Core's own 404 gate code): relayed to the caller
	// as is; it says nothing about the Core's version.
	Relay Kind = iota
	// Legacy: 404 not_found, 405 or 501 — the Core does not know the
	// endpoint; the sidecar serves the protocol.
	Legacy
	// Native: 200 with schema_version bailing.agent-knowledge-capabilities.v1.
	Native
)

func (k Kind) String() string {
	switch k {
	case Legacy:
		return "legacy"
	case Native:
		return "native"
	default:
		return "relay"
	}
}

// BodyLimit bounds a capabilities answer read to classify it (and, at the
// edge, to relay it): a larger one is no capabilities document.
const BodyLimit = 64 << 10

// Classify tells what Core's answer to a capabilities request says of its
// version: 405 and 501 → Legacy; 404 → Legacy unless its body is an Agent
// API error with a code other than "not_found" (a native Core's gate, e.g.
// route_unavailable, which must be relayed); 200 with the native schema →
// Native; everything else → Relay.
func Classify(status int, body []byte) Kind {
	switch status {
	case http.StatusMethodNotAllowed, http.StatusNotImplemented:
		return Legacy
	case http.StatusNotFound:
		var e struct {
			Error string `json:"error"`
		}
		if json.Unmarshal(body, &e) == nil && e.Error != "" && e.Error != "not_found" {
			return Relay
		}
		return Legacy
	case http.StatusOK:
		var v struct {
			SchemaVersion string `json:"schema_version"`
		}
		if json.Unmarshal(body, &v) == nil && v.SchemaVersion == protocol.CapabilitiesSchema {
			return Native
		}
		return Relay
	default:
		return Relay
	}
}
