package knowledge

import (
	"sort"
	"time"

	"github.com/bailinghub/knowledge-sidecar/protocol"
)

// Hint is one search result (SPEC §4): exactly ref, title, summary,
// revision, score and expires_at on the wire.
type Hint struct {
	Ref       string
	Title     string
	Summary   string
	Revision  string
	Score     float64
	ExpiresAt time.Time

	// The document behind the ref, for the disclosure audit (never serialized).
	docID int64
	kbID  string
}

// SearchBody is a search response before serialization. Hints are in rank
// order, best first.
type SearchBody struct {
	Route         string
	RunID         string // omitted from the body when empty
	ScopeRevision string
	Status        string
	Hints         []Hint
	Truncated     bool
}

// appendTo is the body in dst's memory when it has room for
// protocol.SearchMaxBytes, else in a new buffer of that size.
func (r *SearchBody) appendTo(dst []byte) []byte {
	if cap(dst) < protocol.SearchMaxBytes {
		dst = make([]byte, 0, protocol.SearchMaxBytes)
	}
	return r.AppendJSON(dst[:0])
}

// AppendJSON appends the response body with keys in protocol order:
// schema_version, route, run_id (only when set), knowledge_scope_revision,
// trust, status, hints, truncated.
func (r *SearchBody) AppendJSON(b []byte) []byte {
	b = appendAnswerHead(b, `{"schema_version":"`+protocol.SearchSchema+`","route":`, r.Route, r.RunID, r.ScopeRevision)
	b = append(b, `,"trust":"`+protocol.Trust+`","status":`...)
	b = AppendJSONString(b, r.Status)
	b = append(b, `,"hints":`...)
	b = AppendHints(b, r.Hints)
	b = append(b, `,"truncated":`...)
	b = appendBool(b, r.Truncated)
	return append(b, '}')
}

func (h *Hint) appendJSON(b []byte) []byte {
	b = appendStringMember(b, `{"ref":`, h.Ref)
	b = appendStringMember(b, `,"title":`, h.Title)
	b = appendStringMember(b, `,"summary":`, h.Summary)
	b = appendStringMember(b, `,"revision":`, h.Revision)
	b = append(b, `,"score":`...)
	b = appendJSONFloat(b, h.Score)
	b = appendStringMember(b, `,"expires_at":`, h.ExpiresAt.UTC().Format(time.RFC3339))
	return append(b, '}')
}

// Fit makes the serialized body at most maxBytes long (SPEC §4): it first
// shortens summaries (on character boundaries, sharing the room left
// equally among the hints whose summaries do not fit), then drops the
// lowest-ranked hints. A hint that cannot fit even alone with an empty
// summary (a pathological title) is dropped first, whatever its rank.
// Truncated is set iff anything was shortened or dropped.
func (r *SearchBody) Fit(maxBytes int) {
	truncated := r.Truncated
	r.Truncated = false // measure with "false", the longer literal
	hints := r.Hints
	r.Hints = nil
	base := len(r.AppendJSON(nil)) // the body without hints
	r.Hints, r.Truncated = fitHints(hints, base, maxBytes)
	r.Truncated = r.Truncated || truncated
}

// fitHints is the budgeter of Fit for any envelope: base is the size of the
// serialization without hints (an empty "hints" array), maxBytes the budget
// of the whole. It returns the hints that fit (a prefix of hints, in rank
// order, summaries possibly shortened; hints' backing array is reused) and
// whether anything was shortened or dropped.
func fitHints(hints []Hint, base, maxBytes int) (fitted []Hint, truncated bool) {
	// bare[i] is hint i's size with an empty summary.
	bare := make([]int, len(hints))
	kept := hints[:0]
	for _, h := range hints {
		e := h
		e.Summary = ""
		n := len(e.appendJSON(nil))
		if base+n > maxBytes {
			truncated = true
			continue
		}
		bare[len(kept)] = n
		kept = append(kept, h)
	}
	hints = kept
	bare = bare[:len(kept)]
	for len(hints) > 0 {
		fixed := base + len(hints) - 1
		for _, n := range bare {
			fixed += n
		}
		if fixed > maxBytes {
			hints = hints[:len(hints)-1]
			bare = bare[:len(hints)]
			truncated = true
			continue
		}
		room := maxBytes - fixed
		need := make([]int, len(hints))
		total := 0
		for i, h := range hints {
			need[i] = JSONStringLen(h.Summary) - 2
			total += need[i]
		}
		if total <= room {
			break
		}
		truncated = true
		for i, allowance := range shareRoom(need, room) {
			n, _ := FitPrefix(hints[i].Summary, allowance)
			hints[i].Summary = hints[i].Summary[:n]
		}
		break
	}
	return hints, truncated
}

// shareRoom splits room among need by water-filling: small needs are met in
// full, the rest share what is left equally.
func shareRoom(need []int, room int) []int {
	order := make([]int, len(need))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool { return need[order[a]] < need[order[b]] })
	out := make([]int, len(need))
	for k, i := range order {
		share := room / (len(need) - k)
		give := min(need[i], share)
		out[i] = give
		room -= give
	}
	return out
}

// appendAnswerHead appends the keys search and read answers begin with:
// open (`{"schema_version":"…","route":`), then route, run_id (only when
// set) and knowledge_scope_revision.
func appendAnswerHead(b []byte, open, route, runID, scope string) []byte {
	b = append(b, open...)
	b = AppendJSONString(b, route)
	if runID != "" {
		b = appendStringMember(b, `,"run_id":`, runID)
	}
	return appendStringMember(b, `,"knowledge_scope_revision":`, scope)
}
