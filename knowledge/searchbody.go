package knowledge

import (
	"sort"
	"time"
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

func (r *SearchBody) body() []byte { return r.AppendJSON(make([]byte, 0, SearchMaxBytes)) }

// AppendJSON appends the response body with keys in protocol order:
// schema_version, route, run_id (only when set), knowledge_scope_revision,
// trust, status, hints, truncated.
func (r *SearchBody) AppendJSON(b []byte) []byte {
	b = append(b, `{"schema_version":"bailing.agent-knowledge-search.v1","route":`...)
	b = AppendJSONString(b, r.Route)
	if r.RunID != "" {
		b = append(b, `,"run_id":`...)
		b = AppendJSONString(b, r.RunID)
	}
	b = append(b, `,"knowledge_scope_revision":`...)
	b = AppendJSONString(b, r.ScopeRevision)
	b = append(b, `,"trust":"reference_only","status":`...)
	b = AppendJSONString(b, r.Status)
	b = append(b, `,"hints":[`...)
	for i := range r.Hints {
		if i > 0 {
			b = append(b, ',')
		}
		b = r.Hints[i].appendJSON(b)
	}
	b = append(b, `],"truncated":`...)
	b = appendBool(b, r.Truncated)
	return append(b, '}')
}

func (h *Hint) appendJSON(b []byte) []byte {
	b = append(b, `{"ref":`...)
	b = AppendJSONString(b, h.Ref)
	b = append(b, `,"title":`...)
	b = AppendJSONString(b, h.Title)
	b = append(b, `,"summary":`...)
	b = AppendJSONString(b, h.Summary)
	b = append(b, `,"revision":`...)
	b = AppendJSONString(b, h.Revision)
	b = append(b, `,"score":`...)
	b = appendJSONFloat(b, h.Score)
	b = append(b, `,"expires_at":`...)
	b = AppendJSONString(b, h.ExpiresAt.UTC().Format(time.RFC3339))
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
	r.Hints = hints
	// bare[i] is hint i's size with an empty summary.
	bare := make([]int, len(r.Hints))
	kept := r.Hints[:0]
	for _, h := range r.Hints {
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
	r.Hints = kept
	bare = bare[:len(kept)]
	for len(r.Hints) > 0 {
		fixed := base + len(r.Hints) - 1
		for _, n := range bare {
			fixed += n
		}
		if fixed > maxBytes {
			r.Hints = r.Hints[:len(r.Hints)-1]
			bare = bare[:len(r.Hints)]
			truncated = true
			continue
		}
		room := maxBytes - fixed
		need := make([]int, len(r.Hints))
		total := 0
		for i, h := range r.Hints {
			need[i] = JSONStringLen(h.Summary) - 2
			total += need[i]
		}
		if total <= room {
			break
		}
		truncated = true
		for i, allowance := range shareRoom(need, room) {
			n, _ := FitPrefix(r.Hints[i].Summary, allowance)
			r.Hints[i].Summary = r.Hints[i].Summary[:n]
		}
		break
	}
	r.Truncated = truncated
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
