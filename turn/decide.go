package turn

import (
	"errors"
	"net/http"

	"github.com/bailinghub/knowledge-sidecar/knowledge"
	"github.com/bailinghub/knowledge-sidecar/ledger"
)

// Plan is what the edge does with a parsed turn request.
type Plan int

const (
	// PassUnbound: no knowledge_delivery and an id missing. Core refuses
	// such a turn (400) and creates no run, so nothing is bound; the
	// client's bytes go to Core unchanged.
	PassUnbound Plan = iota
	// BindInline: no knowledge_delivery, every id present. The bytes go to
	// Core and back unchanged, but the turn is bound to inline delivery
	// (what the host gets), so retrying it as on_demand is the mode switch
	// SPEC §7 refuses. Best effort: without identity or ledger it passes
	// unbound.
	BindInline
	// Deliver: knowledge_delivery present. The field is stripped, the mode
	// bound (when every id is present), and Core's answer rewritten.
	Deliver
)

// PlanFor decides how a parsed turn request is handled.
func PlanFor(r Request) Plan {
	switch {
	case r.Mode != "":
		return Deliver
	case r.Keyed():
		return BindInline
	default:
		return PassUnbound
	}
}

// Keyed reports whether the request carries both of Core's idempotency
// keys (conversation + turn id, and user message id).
func (r Request) Keyed() bool {
	return r.ConversationID != "" && r.TurnID != "" && r.UserMessageID != ""
}

// Key is the turn's ledger key: Core's two idempotency keys for the session
// and route.
func Key(sessionID, route string, r Request) ledger.Key {
	return ledger.Key{SessionID: sessionID, Route: route, ConversationID: r.ConversationID,
		TurnID: r.TurnID, UserMessageID: r.UserMessageID}
}

// Delivery resolves the status and scope revision the delivery block will
// carry, from the knowledge lookup made before forwarding
// (knowledge.Service.DeliveryStatus). ok is false when no revision can be
// had (the catalog is down and the route was never seen): the turn is then
// not forwarded, so no run exists the host could not be told about.
//
//   - A route the catalog does not know, or has disabled (404), has no
//     knowledge: "disabled" with the revision of an empty configuration; the
//     turn is forwarded and Core's own answer (its 404) relayed.
//   - A revision with a lookup error: "unavailable".
func Delivery(route, status, revision string, err error) (st, rev string, ok bool) {
	if ke, isKE := errors.AsType[*knowledge.Error](err); isKE && ke.Status == http.StatusNotFound {
		return knowledge.StatusDisabled, knowledge.ScopeRevision(route, nil), true
	}
	if revision == "" {
		return "", "", false
	}
	if err != nil {
		return knowledge.StatusUnavailable, revision, true
	}
	return status, revision, true
}

// ReleaseAfter reports whether an attempt's share of the turn's ledger
// records is released after Core answered it with status: any 4xx, Core's
// own 409 turn_conflict and TASK_* refusals included, says that this
// attempt created no run (SPEC §7). The ledger keeps the records while
// another attempt that joined them is unreleased, so a concurrent attempt
// that did create the run keeps the turn bound. 2xx, 5xx and no answer at
// all keep the share: Core may have created the run.
func ReleaseAfter(status int) bool {
	return status >= 400 && status < 500
}

// Hinter builds the serialized "hints" array of an on_demand answer from
// what Core retrieved for the turn (Parsed.Items) and the turn's run_id
// (SPEC §7 "Same-run hints"). It is best effort: it answers "[]" (or nil)
// rather than fail.
type Hinter func(runID string, items []knowledge.TurnItem) []byte

// Answer rewrites Core's 2xx answer for mode: the delivery block (status
// and revision of the route taken before forwarding) is added, and in
// on_demand mode the inline knowledge is emptied, its hints (when hints is
// not nil) built first from what the answer held. An answer that is not a
// turn context is ErrUnexpectedAnswer in on_demand mode (inline knowledge
// must never pass as on-demand) and Core's bytes unchanged in inline mode
// (what the host asked for). In inline mode hints stays [] (the host has
// the bodies) and hints is not called.
func Answer(body []byte, mode knowledge.DeliveryMode, status, revision string, hints Hinter) ([]byte, error) {
	p, err := ParseAnswer(body)
	var out []byte
	if err == nil {
		var arr []byte
		if mode == knowledge.DeliveryOnDemand && hints != nil {
			arr = hints(p.RunID(), p.Items())
		}
		block := AppendDeliveryBlock(make([]byte, 0, 256+len(arr)), mode, revision, status, arr)
		out, err = p.Rewrite(mode, block)
	}
	if err != nil {
		if mode == knowledge.DeliveryOnDemand {
			return nil, err
		}
		return body, nil
	}
	return out, nil
}

// AppendDeliveryBlock appends the turn's knowledge_delivery object: the keys
// and values encoding/json would write for the block (mode, revision and
// status are ASCII without characters it escapes differently), without its
// reflection and allocations. hints is the pre-serialized "hints" JSON
// array (knowledge.Service.TurnHints); empty means [].
func AppendDeliveryBlock(b []byte, mode knowledge.DeliveryMode, scopeRevision, status string, hints []byte) []byte {
	b = append(b, `{"schema_version":"bailing.agent-knowledge-delivery.v1","mode":`...)
	b = knowledge.AppendJSONString(b, string(mode))
	b = append(b, `,"protocol":`...)
	b = knowledge.AppendJSONString(b, knowledge.Protocol)
	b = append(b, `,"knowledge_scope_revision":`...)
	b = knowledge.AppendJSONString(b, scopeRevision)
	b = append(b, `,"status":`...)
	b = knowledge.AppendJSONString(b, status)
	b = append(b, `,"hints":`...)
	if len(hints) == 0 {
		hints = []byte("[]")
	}
	b = append(b, hints...)
	return append(b, '}')
}
