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
