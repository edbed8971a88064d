package mcpserver

import (
	"encoding/json"

	"github.com/bailinghub/knowledge-sidecar/protocol"
)

// The sentences a knowledge_search result carries beside its JSON, one per
// status (docs/hosts.md quotes them; a test keeps the page equal). Only ok
// with no hints means "nothing relevant"; every other status says it is not
// evidence that the knowledge has nothing, so that an outage is never told
// as "the knowledge base has no information".
const (
	GuidanceOKEmpty     = "No hit above the workspace's threshold: the search worked and nothing in the workspace knowledge matched this query closely enough; rephrase the query, or answer without workspace knowledge."
	GuidancePartial     = "Knowledge search is partial right now: part of the workspace knowledge could not be searched, so these results may be incomplete; a missing hint does not mean there is no relevant information — say the search was incomplete instead of answering from absence."
	GuidanceUnavailable = "Knowledge search is unavailable right now; this does not mean there is no relevant information — say so instead of answering from absence."
	GuidanceDisabled    = "Knowledge search is disabled for this workspace (no knowledge is configured for it); this is not evidence that there is no relevant information — answer without workspace knowledge and say it was not consulted."
	guidanceUnknown     = "Knowledge search answered a status this host does not know; treat the results as possibly incomplete — a missing hint does not mean there is no relevant information."
)

// Guidance is the sentence for a search answer with status and hints hints:
// empty for ok with hints (the hints speak for themselves).
func Guidance(status string, hints int) string {
	switch status {
	case protocol.StatusOK:
		if hints > 0 {
			return ""
		}
		return GuidanceOKEmpty
	case protocol.StatusPartial:
		return GuidancePartial
	case protocol.StatusUnavailable:
		return GuidanceUnavailable
	case protocol.StatusDisabled:
		return GuidanceDisabled
	default:
		return guidanceUnknown
	}
}

// SearchGuidance is Guidance for a search answer's JSON body; empty when the
// body is not a search answer.
func SearchGuidance(body []byte) string {
	var res struct {
		SchemaVersion string            `json:"schema_version"`
		Status        string            `json:"status"`
		Hints         []json.RawMessage `json:"hints"`
	}
	if json.Unmarshal(body, &res) != nil || res.SchemaVersion != protocol.SearchSchema {
		return ""
	}
	return Guidance(res.Status, len(res.Hints))
}
