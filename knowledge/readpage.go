package knowledge

import (
	"strconv"

	"github.com/bailinghub/knowledge-sidecar/protocol"
)

// ReadPage is one read response before serialization (SPEC §6).
type ReadPage struct {
	Route         string
	RunID         string // omitted from the body when empty
	ScopeRevision string
	Ref           string
	Revision      string
	Title         string
	Content       string // the whole current document content
	Offset        int    // byte offset where this page starts (a character boundary)
	Served        int    // content bytes already served along this reference's chain
}

// PagePlan is where a page ends and how it continues.
type PagePlan struct {
	End             int  // the page's content is Content[Offset:End]
	More            bool // a next_cursor follows (truncated: true)
	BudgetExhausted bool // the chain budget ended the read before the document did
}

// Truncated reports whether the page stops before the end of the document.
func (p PagePlan) Truncated() bool { return p.More || p.BudgetExhausted }

// Plan chooses the longest continuation of the content such that the whole
// body, serialized by AppendJSON with a next_cursor of cursorLen bytes when
// one is needed, is at most maxBytes, never splitting a character and never
// serving more than protocol.ReadChainMaxBytes content bytes along the chain. ok is
// false when not even one character fits (only possible with a pathological
// title and a small maxBytes). The cost is linear in the page size.
func (p *ReadPage) Plan(maxBytes, cursorLen int) (plan PagePlan, ok bool) {
	rest := p.Content[p.Offset:]
	chainRoom := protocol.ReadChainMaxBytes - p.Served
	fixed := p.fixedLen()
	// room is what the content may escape to on a page that continues (a
	// next_cursor, truncated true).
	room := maxBytes - fixed - (cursorLen + 2) - len("true") - len("false")
	limit := boundaryAtOrBefore(p.Content, p.Offset+min(len(rest), max(chainRoom, 0))) - p.Offset
	n := 0
	if len(rest) <= chainRoom {
		// This may be the final page: the whole rest (limit is len(rest)),
		// with next_cursor null, in finalRoom. One scan answers both that
		// and how much fits in room, because fitting is additive: the
		// longest prefix within the larger budget is the longest prefix
		// within the smaller one, continued from there with what is left
		// of the larger. (A negative budget fits nothing, so a negative
		// smaller one leaves all of the larger to the second step.) With a
		// real cursor room is the smaller, and the second step only goes
		// the few bytes a null saves over the cursor.
		finalRoom := maxBytes - fixed - len("null") - len("false") - len("false")
		var escaped int
		n, escaped = FitPrefix(rest, min(room, finalRoom))
		if finalRoom < room {
			if finalRoom >= 0 && n == len(rest) {
				return PagePlan{End: len(p.Content)}, true
			}
			more, _ := FitPrefix(rest[n:], room-escaped)
			n += more
		} else if finalRoom >= 0 {
			if more, _ := FitPrefix(rest[n:], finalRoom-escaped); n+more == len(rest) {
				return PagePlan{End: len(p.Content)}, true
			}
		}
	} else {
		n, _ = FitPrefix(rest[:limit], room) // nothing when room is negative
	}
	if n == limit && limit < len(rest) {
		// The chain budget, not the body, ends this page.
		room = maxBytes - fixed - len("null") - len("true") - len("true")
		if room < 0 {
			return PagePlan{}, false
		}
		return PagePlan{End: p.Offset + n, BudgetExhausted: true}, true
	}
	if n == 0 {
		return PagePlan{}, false
	}
	return PagePlan{End: p.Offset + n, More: true}, true
}

// fixedLen is the body size without the content characters (its quotes
// included) and without the next_cursor/truncated/budget_exhausted values.
func (p *ReadPage) fixedLen() int {
	// Measured on the stack: a head with the usual ref and title fits in
	// buf, and Plan then allocates nothing.
	var buf [1024]byte
	return len(p.appendHead(buf[:0])) + 2 + len(p.appendTail(buf[:0], PagePlan{}, "", true))
}

// AppendJSON appends the response body for plan, with keys in protocol
// order: schema_version, route, run_id (only when set),
// knowledge_scope_revision, ref, revision, title, content, trust,
// next_cursor, truncated, budget_exhausted, total_content_bytes,
// read_chain_max_bytes. cursor is the next_cursor when plan.More.
func (p *ReadPage) AppendJSON(b []byte, plan PagePlan, cursor string) []byte {
	b = p.appendHead(b)
	b = AppendJSONString(b, p.Content[p.Offset:plan.End])
	return p.appendTail(b, plan, cursor, false)
}

func (p *ReadPage) appendHead(b []byte) []byte {
	b = appendAnswerHead(b, `{"schema_version":"`+protocol.ReadSchema+`","route":`, p.Route, p.RunID, p.ScopeRevision)
	b = appendStringMember(b, `,"ref":`, p.Ref)
	b = appendStringMember(b, `,"revision":`, p.Revision)
	b = appendStringMember(b, `,"title":`, p.Title)
	return append(b, `,"content":`...)
}

// appendTail writes everything after content; with valuesOmitted the three
// plan-dependent values are left out (for measuring).
func (p *ReadPage) appendTail(b []byte, plan PagePlan, cursor string, valuesOmitted bool) []byte {
	b = append(b, `,"trust":"`+protocol.Trust+`","next_cursor":`...)
	if !valuesOmitted {
		if plan.More {
			b = AppendJSONString(b, cursor)
		} else {
			b = append(b, "null"...)
		}
	}
	b = append(b, `,"truncated":`...)
	if !valuesOmitted {
		b = appendBool(b, plan.Truncated())
	}
	b = append(b, `,"budget_exhausted":`...)
	if !valuesOmitted {
		b = appendBool(b, plan.BudgetExhausted)
	}
	b = append(b, `,"total_content_bytes":`...)
	b = strconv.AppendInt(b, int64(len(p.Content)), 10)
	b = append(b, `,"read_chain_max_bytes":`...)
	b = strconv.AppendInt(b, protocol.ReadChainMaxBytes, 10)
	return append(b, '}')
}
