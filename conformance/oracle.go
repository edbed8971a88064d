package conformance

import (
	"strconv"
	"time"
)

// The protocol's wire facts as this checker knows them: an independent copy
// of package protocol, on purpose. The checker is the oracle for every
// implementation, this sidecar's included, so a wrong constant in package
// protocol must be caught here, not agreed with. Keep them written out in
// this one file and never import package protocol into conformance (a
// layering test says so); the checks and their rule texts use these names.

// Protocol is the protocol the checker checks.
const Protocol = "bailing.agent-knowledge.v1"

// Schema names, trust and delivery modes.
const (
	capabilitiesSchema = "bailing.agent-knowledge-capabilities.v1"
	searchSchema       = "bailing.agent-knowledge-search.v1"
	readSchema         = "bailing.agent-knowledge-read.v1"
	deliverySchema     = "bailing.agent-knowledge-delivery.v1"
	trustReferenceOnly = "reference_only"
	modeInline         = "inline"
	modeOnDemand       = "on_demand"
)

// Limits (SPEC §2–§6).
const (
	searchMaxResults = 3
	searchMaxBytes   = 4096
	pageDefault      = 16384
	pageMax          = 32768
	pageMin          = 4096
	chainMax         = 131072
	refTTL           = 300 * time.Second
	maxQueryUnits    = 2000
	maxRequestBytes  = 16 << 10
)

// ttlText is refTTL for rule texts: "300 s".
var ttlText = strconv.Itoa(int(refTTL/time.Second)) + " s"

// capsLimits is the limits object every capabilities answer carries.
var capsLimits = map[string]int64{
	"search_max_results": searchMaxResults, "search_max_bytes": searchMaxBytes, "read_default_bytes": pageDefault,
	"read_max_bytes": pageMax, "reference_ttl_seconds": int64(refTTL / time.Second), "read_chain_max_bytes": chainMax,
}

// Error codes (SPEC §2).
const (
	codeInvalidRequest   = "invalid_request"
	codeReferenceInvalid = "knowledge_reference_invalid"
	codeReferenceExpired = "knowledge_reference_expired"
	codeUnauthorized     = "unauthorized"
	codeRouteUnavailable = "route_unavailable"
	codeRunNotFound      = "run_not_found"
	codePayloadTooLarge  = "payload_too_large"
	codeMethodNotAllowed = "method_not_allowed"
)

// knownStatus reports whether s is one of the four statuses of SPEC §4.
func knownStatus(s string) bool {
	switch s {
	case "ok", "partial", "unavailable", "disabled":
		return true
	}
	return false
}

// The remote MCP endpoint's facts (SPEC §10).
const (
	mcpEndpoint    = "mcp"
	mcpSearchTool  = "knowledge_search"
	mcpReadTool    = "knowledge_read"
	mcpMaxBody     = 64 << 10
	mcpRefLifetime = "5 minutes" // as the tools' descriptions say it
	mcpChainText   = "128 KiB"
)

// mcpVersions are the initialize-era MCP revisions an endpoint negotiates.
var mcpVersions = []string{"2025-11-25", "2025-06-18", "2025-03-26"}
