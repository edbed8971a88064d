package corefacts

import "math"

// Knowledge defaults and bounds of Core's routeKnowledgeConfig (CORE_SCHEMA §4).
const (
	DefaultTopK     = 5
	DefaultMinScore = 0.35
	DefaultMaxDocs  = 4
)

// UnfilteredMinScore is the min_score SearchKB sends: Core accepts negative
// values and then keeps every hit of its top k (CORE_FACTS §5.2, §5.6), so
// an answer without any hit from a KB that holds a ready document is a
// failure Core swallowed, not "nothing relevant" (SPEC §4). /kb/search's
// body reads min_score as `Number(x ?? 0.35) || 0.35` (0 becomes 0.35 there
// only); -1 passes that parse unchanged.
const UnfilteredMinScore = -1

// ScoreThreshold is the threshold Core's own turn retrieval applies for a
// route whose stored min_score normalizes to minScore (SPEC §4). Core reads
// a stored route with routeKnowledgeConfig, whose numValue(min_score, 0.35,
// 0, 1) is JavaScript Number(), 0.35 when that is not finite, then a clamp
// to 0..1 — so 0 stays 0 (as do null, "" and false, which Number() makes 0);
// catalog.NormalizeKnowledge applies that to the stored JSON, and this
// function keeps its last two steps for any float (a value that is not
// finite is the default, the rest is clamped), so it can never lower the
// threshold below 0 nor raise it past every score. The `0 → 0.35` quirk of
// /kb/search's HTTP body does not apply: the sidecar sends
// UnfilteredMinScore there. Callers keep a hit iff KeepsScore(score,
// threshold).
func ScoreThreshold(minScore float64) float64 {
	if math.IsNaN(minScore) || math.IsInf(minScore, 0) {
		return DefaultMinScore
	}
	t := math.Min(math.Max(minScore, 0), 1)
	if t == 0 {
		return 0 // never -0
	}
	return t
}

// KeepsScore is Core's per-KB filter (src/services/kb.ts search, CORE_FACTS
// §5.6): after taking its top k, a hit stays when its score is at least the
// threshold. Scores that are not finite never pass.
//
// Core compares its unrounded score and then rounds it to 3 decimals; the
// sidecar only sees the rounded score, so a hit within 0.0005 of the
// threshold can fall on the other side of it: one up to 0.0005 below may pass
// here where Core's own filter dropped it, and, for a threshold off the
// 3-decimal grid (0.3504), one just above it may be dropped. That is the one
// documented difference (SPEC §4); nothing on the wire can remove it.
func KeepsScore(score, threshold float64) bool {
	return !math.IsNaN(score) && !math.IsInf(score, 0) && score >= threshold
}
