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
// failure Core swallowed, not "nothing relevant" (SPEC §4).
const UnfilteredMinScore = -1

// ScoreThreshold is the threshold Core's /kb/search applies for a route's
// min_score, the one copy of its quirks: Core parses min_score as
// `Number(x ?? 0.35) || 0.35`, so 0 (and NaN) become 0.35; the route's value
// is clamped to 0..1 first, as its configuration normalizer does (an
// out-of-range value can neither lower the threshold below 0 nor raise it
// past every score). Callers keep a hit iff KeepsScore(score, threshold).
func ScoreThreshold(minScore float64) float64 {
	if math.IsNaN(minScore) {
		return DefaultMinScore
	}
	t := math.Min(math.Max(minScore, 0), 1)
	if t == 0 {
		return DefaultMinScore
	}
	return t
}

// KeepsScore is Core's per-KB filter (CORE_FACTS §5.6): after taking its
// top k, a hit stays when its score is at least the threshold. Scores that
// are not finite never pass.
func KeepsScore(score, threshold float64) bool {
	return !math.IsNaN(score) && !math.IsInf(score, 0) && score >= threshold
}
