package knowledge

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"

	"github.com/bailinghub/knowledge-sidecar/corefacts"
	"github.com/bailinghub/knowledge-sidecar/protocol"
)

// ScopeRevision is the route's knowledge scope revision (SPEC §3): the
// lowercase SHA-256 hex of the canonical JSON of its normalized knowledge
// configuration plus the protocol name.
//
// Canonical form: one JSON object, keys sorted by byte order, no
// insignificant whitespace, strings escaped by AppendJSONString, integers in
// decimal, min_score as the shortest decimal that round-trips a float64
// without exponent (strconv 'f', -1: 0.35, 1, 0), kb_ids in configured
// order. For a route with knowledge:
//
//	{"inject":"chunk","kb_ids":["a","b"],"max_docs":4,"min_score":0.35,
//	 "page_boost":false,"protocol":"bailing.agent-knowledge.v1",
//	 "route":"order-assistant","top_k":5}
//
// A route without knowledge (nil config) still has a revision:
//
//	{"knowledge":null,"protocol":"bailing.agent-knowledge.v1","route":"order-assistant"}
func ScopeRevision(route string, k *corefacts.KnowledgeConfig) string {
	sum := sha256.Sum256(canonicalScope(route, k))
	return hex.EncodeToString(sum[:])
}

func canonicalScope(route string, k *corefacts.KnowledgeConfig) []byte {
	b := make([]byte, 0, 256)
	if k == nil {
		b = appendStringMember(b, `{"knowledge":null,"protocol":`, protocol.Name)
		b = appendStringMember(b, `,"route":`, route)
		return append(b, '}')
	}
	b = appendStringMember(b, `{"inject":`, k.Inject)
	b = append(b, `,"kb_ids":[`...)
	for i, id := range k.KBIDs {
		if i > 0 {
			b = append(b, ',')
		}
		b = AppendJSONString(b, id)
	}
	b = append(b, `],"max_docs":`...)
	b = strconv.AppendInt(b, int64(k.MaxDocs), 10)
	b = append(b, `,"min_score":`...)
	b = strconv.AppendFloat(b, k.MinScore, 'f', -1, 64)
	b = append(b, `,"page_boost":`...)
	b = appendBool(b, k.PageBoost)
	b = appendStringMember(b, `,"protocol":`, protocol.Name)
	b = appendStringMember(b, `,"route":`, route)
	b = append(b, `,"top_k":`...)
	b = strconv.AppendInt(b, int64(k.TopK), 10)
	return append(b, '}')
}
