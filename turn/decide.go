package turn

import (
	"github.com/bailinghub/knowledge-sidecar/knowledge"
	"github.com/bailinghub/knowledge-sidecar/ledger"
	"github.com/bailinghub/knowledge-sidecar/protocol"
)

// Handling is how a parsed turn request is handled, by its field and ids.
type Handling int

const (
	// PassUnbound: no knowledge_delivery and an id missing. Core refuses
	// such a turn (400) and creates no run, so nothing is bound; the
	// client's bytes go to Core unchanged.
	PassUnbound Handling = iota
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

// HandlingOf decides how a parsed turn request is handled.
func HandlingOf(r Request) Handling {
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

// Reply is Core's 2xx answer to an intercepted turn, scanned once for the
// turn's mode (SPEC §7): what Core retrieved for the turn (RunID, Items: the
// input of same-run hints) is read from it, then it is rewritten (Rewrite)
// without a second scan.
type Reply struct {
	body []byte
	mode protocol.DeliveryMode
	p    *parsed // nil: not a turn context, relayed as Core sent it (inline)
}

// ReadReply scans Core's 2xx answer to a turn of mode. An answer that is not
// a turn context is ErrUnexpectedAnswer in on_demand mode (inline knowledge
// must never pass as on-demand); in inline mode it is a Reply that Rewrite
// leaves as Core sent it (what the host asked for).
func ReadReply(body []byte, mode protocol.DeliveryMode) (Reply, error) {
	if !mode.Valid() {
		return Reply{}, ErrInvalidDelivery
	}
	p, err := parseAnswer(body)
	if mode == protocol.DeliveryOnDemand {
		// An answer Rewrite would refuse is refused here, before its hints
		// are built (and audited as shown).
		if err == nil && (p.kN > 1 || p.rN > 1) {
			err = ErrUnexpectedAnswer
		}
		if err != nil {
			return Reply{}, err
		}
	}
	return Reply{body: body, mode: mode, p: p}, nil
}

// TakesHints reports whether the answer carries same-run hints: in
// on_demand mode only (in inline mode the host has the bodies, and "hints"
// stays []).
func (r Reply) TakesHints() bool { return r.mode == protocol.DeliveryOnDemand }

// RunID is the answer's run_id ("" when it has none, or is no turn context).
func (r Reply) RunID() string {
	if r.p == nil {
		return ""
	}
	return r.p.RunID()
}

// Items is what Core retrieved for the turn (parsed.Items; nil when the
// answer is no turn context).
func (r Reply) Items() []knowledge.TurnItem {
	if r.p == nil {
		return nil
	}
	return r.p.Items()
}

// Rewrite is the answer the host gets: the delivery block added with d's
// status and scope revision (the route's state taken before forwarding,
// knowledge.Service.Delivery) and, when TakesHints, hints (the serialized
// array; empty means []); in on_demand mode the inline knowledge emptied.
// An answer the splice refuses (a member it would have to choose between) is
// ErrUnexpectedAnswer in on_demand mode and Core's bytes unchanged in inline
// mode, like an answer that is no turn context.
func (r Reply) Rewrite(d knowledge.Delivery, hints []byte) ([]byte, error) {
	if r.p == nil {
		return r.body, nil
	}
	if !r.TakesHints() {
		hints = nil
	}
	block := appendDeliveryBlock(make([]byte, 0, 256+len(hints)), r.mode, d.ScopeRevision, d.Status, hints)
	out, err := r.p.Rewrite(r.mode, block)
	if err != nil {
		if r.mode == protocol.DeliveryOnDemand {
			return nil, err
		}
		return r.body, nil
	}
	return out, nil
}

// appendDeliveryBlock appends the turn's knowledge_delivery object: the keys
// and values encoding/json would write for the block (mode, revision and
// status are ASCII without characters it escapes differently), without its
// reflection and allocations. hints is the pre-serialized "hints" JSON
// array (knowledge.Service.TurnHintsFor); empty means [].
func appendDeliveryBlock(b []byte, mode protocol.DeliveryMode, scopeRevision, status string, hints []byte) []byte {
	b = append(b, `{"schema_version":"`+protocol.DeliverySchema+`","mode":`...)
	b = knowledge.AppendJSONString(b, string(mode))
	b = append(b, `,"protocol":`...)
	b = knowledge.AppendJSONString(b, protocol.Name)
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
