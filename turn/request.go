package turn

// Turn requests (SPEC §7): the delivery mode and ids read, the field stripped.

import (
	"errors"

	"github.com/bailinghub/knowledge-sidecar/corefacts/jsstring"
	"github.com/bailinghub/knowledge-sidecar/internal/jsonscan"
	"github.com/bailinghub/knowledge-sidecar/protocol"
)

var (
	// ErrInvalidDelivery: the request's knowledge_delivery is present but is not
	// the JSON string "inline" or "on_demand", or appears more than once at the
	// top level. The proxy answers 400 invalid_request.
	ErrInvalidDelivery = errors.New(`knowledge_delivery must be "inline" or "on_demand"`)
	// ErrNotJSONObject: the request body is not a valid JSON object, and a
	// top-level knowledge_delivery member was seen before the error. Core
	// would answer 400 invalid_request for the broken body as well.
	ErrNotJSONObject = errors.New("turn request body is not a valid json object")
	// ErrTooDeep: the request body nests deeper than the scanner follows, so
	// whether it carries knowledge_delivery cannot be told. It is refused
	// (400) rather than forwarded with a field that might be unstripped.
	ErrTooDeep = errors.New("turn request body nests too deeply")
)

// Request is what the proxy needs from a turn request body.
type Request struct {
	// Mode is "" when the field is absent (or the body cannot be parsed),
	// else the validated value ("inline" | "on_demand").
	Mode protocol.DeliveryMode
	// ConversationID, TurnID and UserMessageID are client_conversation_id,
	// client_turn_id and user_message_id trimmed like Core trims them
	// (ECMAScript String.prototype.trim, jsstring.Trim: the ledger must see the id Core sees, or one Core turn could get two records under different spellings); "" when absent or
	// not strings. With duplicate keys the last one wins, as in Core's
	// JSON.parse.
	ConversationID, TurnID, UserMessageID string
	// Body is the body with the top-level knowledge_delivery member (and one
	// separating comma) removed, every other byte unchanged. When Mode is ""
	// it is the input slice itself.
	Body []byte
	// kd, kdPrev locate the field in Body until it is cut (cutInPlace):
	// the member and the value end of the member before it (-1: none).
	kd     jsonscan.Member
	kdPrev int
}

// ParseRequest inspects a turn request body.
//
//   - No top-level knowledge_delivery → Mode "" and Body == body (byte for byte,
//     the same slice), nil error.
//   - knowledge_delivery is the JSON string "inline" or "on_demand" (escapes
//     allowed, no trimming or case folding) → that Mode, and Body without the
//     member.
//   - Any other value (other strings, null, numbers, objects, …) or the key
//     twice → ErrInvalidDelivery.
//   - Not valid JSON, or trailing data after the object: when a top-level
//     knowledge_delivery member was seen before the error → ErrNotJSONObject;
//     otherwise the field's presence cannot be told, so Mode "" and the
//     original bytes, nil error, and Core produces its own 400. A valid JSON
//     value that is not an object likewise goes to Core unchanged.
//   - Nesting deeper than encoding/json's limit (10000) → ErrTooDeep, with or
//     without the field: whether it is there cannot be told.
//
// body is never modified.
func ParseRequest(body []byte) (Request, error) { return parseRequest(body, true) }

// parseRequest is ParseRequest; with cut false the field is only located,
// Body being body itself, until cutInPlace.
func parseRequest(body []byte, cut bool) (Request, error) {
	passthrough := Request{Body: body}
	i := jsonscan.SkipWS(body, 0)
	if i >= len(body) || body[i] != '{' {
		return passthrough, nil
	}
	var (
		tr       Request
		kd       jsonscan.Member
		kdCount  int
		prevEnd  = -1 // value end of the member before the current one
		kdPrev   = -1 // value end of the member before knowledge_delivery
		convRaw  jsonscan.Member
		raw      jsonscan.Member
		msgRaw   jsonscan.Member
		haveConv bool
		haveTurn bool
		haveMsg  bool
	)
	end, err := scanObject(body, i, 1, func(m jsonscan.Member) {
		switch {
		case m.KeyIs(body, "knowledge_delivery"):
			kdCount++
			if kdCount == 1 {
				kd, kdPrev = m, prevEnd
			}
		case m.KeyIs(body, "client_conversation_id"):
			convRaw, haveConv = m, true
		case m.KeyIs(body, "client_turn_id"):
			raw, haveTurn = m, true
		case m.KeyIs(body, "user_message_id"):
			msgRaw, haveMsg = m, true
		}
		prevEnd = m.ValEnd
	})
	if err == nil && jsonscan.SkipWS(body, end) != len(body) {
		err = jsonscan.ErrSyntax
	}
	if err != nil {
		if errors.Is(err, jsonscan.ErrDeep) {
			return Request{}, ErrTooDeep
		}
		if kdCount > 0 {
			return Request{}, ErrNotJSONObject
		}
		return passthrough, nil
	}
	if haveConv {
		tr.ConversationID = idValue(body, convRaw)
	}
	if haveTurn {
		tr.TurnID = idValue(body, raw)
	}
	if haveMsg {
		tr.UserMessageID = idValue(body, msgRaw)
	}
	if kdCount == 0 {
		tr.Body = body
		return tr, nil
	}
	if kdCount > 1 {
		return Request{}, ErrInvalidDelivery
	}
	v, ok := stringOf(body, kd)
	mode := protocol.DeliveryMode(v)
	if !ok || !mode.Valid() {
		return Request{}, ErrInvalidDelivery
	}
	tr.Mode = mode
	tr.Body, tr.kd, tr.kdPrev = body, kd, kdPrev
	if cut {
		tr.Body = removeMember(body, kd, kdPrev, false)
	}
	return tr, nil
}

// cutInPlace removes the located field from Body itself (its array's bytes
// past the new end are left over), so a stripped turn costs no second
// buffer. Only for a Request of parseRequest(body, false) with a Mode.
func (r *Request) cutInPlace() { r.Body = removeMember(r.Body, r.kd, r.kdPrev, true) }

// idValue decodes an id member's value: "" unless it is a JSON string.
func idValue(b []byte, m jsonscan.Member) string {
	s, ok := stringOf(b, m)
	if !ok {
		return ""
	}
	return jsstring.Trim(s)
}

// removeMember returns b without member m: a copy, or b itself cut
// (inPlace). prevEnd is the value end of the member before m, or -1 when m
// is the object's first member. Requires b to be valid JSON (it was
// scanned).
func removeMember(b []byte, m jsonscan.Member, prevEnd int, inPlace bool) []byte {
	var from, to int
	switch {
	case prevEnd >= 0:
		// Not first: drop the comma before it, from the previous value's end.
		from, to = prevEnd, m.ValEnd
	default:
		from, to = m.KeyStart, m.ValEnd
		if j := jsonscan.SkipWS(b, m.ValEnd); j < len(b) && b[j] == ',' {
			// First of several: drop through the comma and the blanks after it.
			to = jsonscan.SkipWS(b, j+1)
		}
	}
	if inPlace {
		n := copy(b[from:], b[to:])
		return b[:from+n]
	}
	out := make([]byte, 0, len(b)-(to-from))
	out = append(out, b[:from]...)
	return append(out, b[to:]...)
}
