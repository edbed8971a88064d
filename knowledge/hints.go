package knowledge

import (
	"context"
	"log/slog"
	"strings"

	"github.com/bailinghub/knowledge-sidecar/corefacts"
	"github.com/bailinghub/knowledge-sidecar/protocol"
)

// TurnItem is one piece of what Core retrieved for a turn (SPEC §7
// "Same-run hints"): a context.knowledge_refs entry (doc_id, title, score)
// joined by ref with its context.knowledge item's content, the hit text.
// Core's refs carry no KB id: the document's KB comes from the catalog.
type TurnItem struct {
	DocID   int64
	Title   string
	Content string
	Score   float64
}

// Outcomes of TurnHintsFor (the closed label set of turn_hints_total, with
// the edge's own "off" for turn_hints: false).
const (
	// HintsMinted: at least one hint.
	HintsMinted = "minted"
	// HintsNone: nothing usable (no items, every document gone, stale, not
	// ready or out of the route, a route without knowledge).
	HintsNone = "none"
	// HintsFailed: the catalog or retrieval was down when the turn was
	// forwarded, the catalog could not be asked, or a ref could not be
	// sealed.
	HintsFailed = "failed"
)

// emptyHints is the serialized hints array when there are none.
var emptyHints = []byte("[]")

// TurnHintsFor builds the same-run hints of an on_demand turn (SPEC §7) from
// what Core retrieved for it (items and runID, read from Core's answer), for
// the route's state d taken before the turn was forwarded (Service.Delivery):
// the route and its knowledge bases' flags are not read again, so hints cost
// one catalog query (the documents) and no Core HTTP call. Items are grouped
// by document keeping the best score, documents kept only when ready, in an
// enabled KB of the route and still holding the hit text (the search rules
// and pipeline: rank), at most protocol.SearchMaxResults, each ref bound to sess, the
// route and runID, carrying d's scope revision and expiring like a search
// ref. It returns the serialized "hints" JSON array, fitted within
// protocol.SearchMaxBytes (summaries shortened first, then the lowest ranks dropped),
// and an outcome (HintsMinted, HintsNone, HintsFailed).
//
// A route without knowledge ("disabled") has none, one whose catalog or
// retrieval was down ("unavailable") fails, neither reading Core's answer
// further. Best effort: every failure is "[]" with HintsFailed, never an
// error.
//
// With an Auditor, every call is one disclosure (endpoint turn, the
// delivery status, the documents of the hints) recorded before the hints
// are returned; when the auditor refuses to let them go unrecorded the
// turn gets "[]" (HintsFailed): SPEC §7 never fails a turn over its hints,
// and Core has created the run already.
func (s *Service) TurnHintsFor(ctx context.Context, sess corefacts.Session, d Delivery, runID string, items []TurnItem) (hints []byte, outcome string) {
	hints, outcome, minted := s.turnHints(ctx, sess, d, runID, items)
	if s.audit == nil {
		return hints, outcome
	}
	ev := &Disclosure{Endpoint: EndpointTurn, Route: d.key, Session: sess, RunID: runID}
	ev.hints(d.Status, minted)
	if name, ok := ctx.Value(endpointKey{}).(string); ok {
		ev.Endpoint = name
	}
	if err := s.audit.Disclose(ctx, ev); err != nil && len(minted) > 0 {
		return emptyHints, HintsFailed
	}
	return hints, outcome
}

// turnHints is TurnHintsFor without the audit; minted are the hints served.
func (s *Service) turnHints(ctx context.Context, sess corefacts.Session, d Delivery, runID string, items []TurnItem) (hints []byte, outcome string, minted []Hint) {
	switch {
	case d.Status == protocol.StatusDisabled: // no knowledge configured
		return emptyHints, HintsNone, nil
	case d.Status != protocol.StatusOK && d.Status != protocol.StatusPartial,
		d.route == nil || d.route.Knowledge == nil || d.flags == nil: // d is not Delivery's
		// "unavailable": the catalog or retrieval was down.
		return emptyHints, HintsFailed, nil
	case len(items) == 0:
		return emptyHints, HintsNone, nil
	case !uuidPattern.MatchString(runID) || sess.SessionID == "":
		return emptyHints, HintsFailed, nil
	}
	runID = strings.ToLower(runID) // as read's run_id is compared
	r := *d.route
	kbs := uniqueStrings(r.Knowledge.KBIDs)
	flags := d.flags
	hits := make([]corefacts.Hit, 0, len(items))
	for _, it := range items {
		hits = append(hits, corefacts.Hit{DocID: it.DocID, Title: it.Title, Content: it.Content, Score: it.Score})
	}
	groups, err := s.rank(ctx, []kbAnswer{{hits: hits}}, flags, kbs, protocol.SearchMaxResults, 0)
	if err != nil {
		hints, outcome = s.hintsFailed(ctx, "documents", err)
		return hints, outcome, nil
	}
	if len(groups) == 0 {
		return emptyHints, HintsNone, nil
	}
	a := admitted{sess: sess, route: r}
	minted, err = s.mint(groups, s.binding(a, runID), d.ScopeRevision)
	if err != nil {
		hints, outcome = s.hintsFailed(ctx, "seal", err)
		return hints, outcome, nil
	}
	out := AppendHints(make([]byte, 0, protocol.SearchMaxBytes), minted)
	if len(out) <= protocol.SearchMaxBytes { // the common case: nothing to fit
		return out, HintsMinted, minted
	}
	before := len(minted)
	minted, _ = fitHints(minted, len(emptyHints), protocol.SearchMaxBytes)
	s.m.drop("budget", before-len(minted))
	s.m.truncate("turn")
	if len(minted) == 0 {
		return emptyHints, HintsNone, nil
	}
	return AppendHints(out[:0], minted), HintsMinted, minted
}

func (s *Service) hintsFailed(ctx context.Context, step string, err error) ([]byte, string) {
	s.log.LogAttrs(ctx, slog.LevelWarn, "turn hints unavailable",
		slog.String("step", step), slog.String("error_class", errorClass(err)))
	return emptyHints, HintsFailed
}

// AppendHints appends hints as a JSON array, each in the search hint shape.
func AppendHints(b []byte, hints []Hint) []byte {
	b = append(b, '[')
	for i := range hints {
		if i > 0 {
			b = append(b, ',')
		}
		b = hints[i].appendJSON(b)
	}
	return append(b, ']')
}
