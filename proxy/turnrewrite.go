package proxy

// Turn-body rewriting for SPEC §7, as pure functions over bytes.
//
// Both directions splice byte ranges instead of re-marshaling: a small JSON
// scanner (same grammar and nesting limit as encoding/json.Valid) finds the
// exact bytes of the members it needs, and everything else is copied as is,
// so memory, tool schemas and every other field keep their exact encoding,
// key order and whitespace. Only top-level members (and the members of the
// response's top-level "context" object) are ever looked at; a
// "knowledge_delivery" key nested anywhere else is ordinary data. Keys are
// compared after JSON unescaping, so "knowledge\u005fdelivery" is the field.

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"slices"
	"strings"
)

// Knowledge delivery modes of a turn request (SPEC §7).
const (
	turnModeInline   = "inline"
	turnModeOnDemand = "on_demand"
)

// turnContextSchema is the schema_version of Core's turn answer.
const turnContextSchema = "bailing.agent-turn-context.v1"

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
	// ErrUnexpectedTurnBody: Core's 2xx turn answer is not a JSON object with
	// schema_version "bailing.agent-turn-context.v1" and an object "context"
	// (or has duplicate members the rewrite would have to choose between).
	ErrUnexpectedTurnBody = errors.New("turn answer is not a bailing.agent-turn-context.v1 json object")
	// ErrInvalidDeliveryBlock: the pre-serialized knowledge_delivery block
	// given to RewriteTurnResponse is not a JSON object (a caller bug).
	ErrInvalidDeliveryBlock = errors.New("knowledge delivery block is not a json object")
)

// TurnRequest is what the proxy needs from a turn request body.
type TurnRequest struct {
	// Mode is "" when the field is absent (or the body cannot be parsed),
	// else the validated value ("inline" | "on_demand").
	Mode string
	// ConversationID, TurnID and UserMessageID are client_conversation_id,
	// client_turn_id and user_message_id trimmed like Core trims them
	// (ECMAScript String.prototype.trim, see turnTrimID); "" when absent or
	// not strings. With duplicate keys the last one wins, as in Core's
	// JSON.parse.
	ConversationID, TurnID, UserMessageID string
	// Body is the body with the top-level knowledge_delivery member (and one
	// separating comma) removed, every other byte unchanged. When Mode is ""
	// it is the input slice itself.
	Body []byte
}

// ParseTurnRequest inspects a turn request body.
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
//
// body is never modified.
func ParseTurnRequest(body []byte) (TurnRequest, error) {
	passthrough := TurnRequest{Body: body}
	i := turnSkipWS(body, 0)
	if i >= len(body) || body[i] != '{' {
		return passthrough, nil
	}
	var (
		tr       TurnRequest
		kd       turnMember
		kdCount  int
		prevEnd  = -1 // value end of the member before the current one
		kdPrev   = -1 // value end of the member before knowledge_delivery
		convRaw  turnMember
		turnRaw  turnMember
		msgRaw   turnMember
		haveConv bool
		haveTurn bool
		haveMsg  bool
	)
	end, err := turnScanObject(body, i, 1, func(m turnMember) {
		switch {
		case m.keyIs(body, "knowledge_delivery"):
			kdCount++
			if kdCount == 1 {
				kd, kdPrev = m, prevEnd
			}
		case m.keyIs(body, "client_conversation_id"):
			convRaw, haveConv = m, true
		case m.keyIs(body, "client_turn_id"):
			turnRaw, haveTurn = m, true
		case m.keyIs(body, "user_message_id"):
			msgRaw, haveMsg = m, true
		}
		prevEnd = m.valEnd
	})
	if err == nil && turnSkipWS(body, end) != len(body) {
		err = errTurnJSON
	}
	if err != nil {
		if errors.Is(err, errTurnDeep) {
			return TurnRequest{}, ErrTooDeep
		}
		if kdCount > 0 {
			return TurnRequest{}, ErrNotJSONObject
		}
		return passthrough, nil
	}
	if haveConv {
		tr.ConversationID = turnID(body, convRaw)
	}
	if haveTurn {
		tr.TurnID = turnID(body, turnRaw)
	}
	if haveMsg {
		tr.UserMessageID = turnID(body, msgRaw)
	}
	if kdCount == 0 {
		tr.Body = body
		return tr, nil
	}
	if kdCount > 1 {
		return TurnRequest{}, ErrInvalidDelivery
	}
	mode, ok := turnStringValue(body, kd.valStart, kd.valEnd)
	if !ok || (mode != turnModeInline && mode != turnModeOnDemand) {
		return TurnRequest{}, ErrInvalidDelivery
	}
	tr.Mode = mode
	tr.Body = turnRemoveMember(body, kd, kdPrev)
	return tr, nil
}

// turnID decodes an id member's value: "" unless it is a JSON string.
func turnID(b []byte, m turnMember) string {
	s, ok := turnStringValue(b, m.valStart, m.valEnd)
	if !ok {
		return ""
	}
	return turnTrimID(s)
}

// turnRemoveMember returns a copy of b without member m. prevEnd is the value
// end of the member before m, or -1 when m is the object's first member.
// Requires b to be valid JSON (it was scanned).
func turnRemoveMember(b []byte, m turnMember, prevEnd int) []byte {
	var from, to int
	switch {
	case prevEnd >= 0:
		// Not first: drop the comma before it, from the previous value's end.
		from, to = prevEnd, m.valEnd
	default:
		from, to = m.keyStart, m.valEnd
		if j := turnSkipWS(b, m.valEnd); j < len(b) && b[j] == ',' {
			// First of several: drop through the comma and the blanks after it.
			to = turnSkipWS(b, j+1)
		}
	}
	out := make([]byte, 0, len(b)-(to-from))
	out = append(out, b[:from]...)
	return append(out, b[to:]...)
}

// turnTrimID trims s the way Core's String.prototype.trim does: ECMAScript
// WhiteSpace and LineTerminator code points. This differs from
// strings.TrimSpace in two code points (U+FEFF is trimmed, U+0085 is not), and
// the ledger must see the id Core sees, or one Core turn could get two ledger
// records under different spellings.
func turnTrimID(s string) string {
	return strings.TrimFunc(s, turnIsECMASpace)
}

func turnIsECMASpace(r rune) bool {
	switch r {
	case '\t', '\n', '\v', '\f', '\r', ' ',
		0x00A0, 0x1680, 0x2028, 0x2029, 0x202F, 0x205F, 0x3000, 0xFEFF:
		return true
	}
	return r >= 0x2000 && r <= 0x200A
}

// RewriteTurnResponse rewrites a 2xx bailing.agent-turn-context.v1 body
// (SPEC §7):
//
//   - mode "on_demand": context.knowledge and context.knowledge_refs become []
//     whatever they held; a missing one is added as [] at the end of context,
//     because the protocol promises both empty arrays in on-demand mode.
//   - mode "inline": context is left as Core sent it.
//   - both modes: the top-level "knowledge_delivery" member is set to
//     deliveryBlock (a pre-serialized JSON object): its value is replaced if
//     the member exists, else the member is appended after the last member.
//
// Every other byte is kept. Not JSON, not an object, schema_version missing or
// not "bailing.agent-turn-context.v1", context missing or not an object, or a
// duplicated schema_version/context/knowledge_delivery/knowledge/
// knowledge_refs member → ErrUnexpectedTurnBody. A mode other than the two →
// ErrInvalidDelivery; a block that is not a JSON object →
// ErrInvalidDeliveryBlock. body is never modified.
func RewriteTurnResponse(body []byte, mode string, deliveryBlock []byte) ([]byte, error) {
	if mode != turnModeInline && mode != turnModeOnDemand {
		return nil, ErrInvalidDelivery
	}
	block, ok := turnObjectBytes(deliveryBlock)
	if !ok {
		return nil, ErrInvalidDeliveryBlock
	}

	i := turnSkipWS(body, 0)
	if i >= len(body) || body[i] != '{' {
		return nil, ErrUnexpectedTurnBody
	}
	var (
		schemaN, ctxN, kdN int
		schemaOK           bool
		ctxM, kdM          turnMember
		lastEnd            = i + 1 // insertion point for a new top-level member
		// The members of context, collected during the same scan (on_demand).
		kN, rN     int
		kM, rM     turnMember
		ctxLastEnd = -1 // value end of context's last member
	)
	isContext := func(m turnMember) bool { return mode == turnModeOnDemand && m.keyIs(body, "context") }
	inContext := func(m turnMember) {
		switch {
		case m.keyIs(body, "knowledge"):
			kN++
			kM = m
		case m.keyIs(body, "knowledge_refs"):
			rN++
			rM = m
		}
		ctxLastEnd = m.valEnd
	}
	end, err := turnScanMembers(body, i, 1, func(m turnMember) {
		switch {
		case m.keyIs(body, "schema_version"):
			schemaN++
			s, ok := turnStringValue(body, m.valStart, m.valEnd)
			schemaOK = ok && s == turnContextSchema
		case m.keyIs(body, "context"):
			ctxN++
			ctxM = m
		case m.keyIs(body, "knowledge_delivery"):
			kdN++
			kdM = m
		}
		lastEnd = m.valEnd
	}, isContext, inContext)
	if err != nil || turnSkipWS(body, end) != len(body) ||
		schemaN != 1 || !schemaOK || ctxN != 1 || kdN > 1 || body[ctxM.valStart] != '{' {
		return nil, ErrUnexpectedTurnBody
	}

	edits := make([]turnEdit, 0, 4)
	if mode == turnModeOnDemand {
		// context is the only one (ctxN == 1), so the counts are its own.
		if kN > 1 || rN > 1 {
			return nil, ErrUnexpectedTurnBody
		}
		if ctxLastEnd < 0 {
			ctxLastEnd = ctxM.valStart + 1 // empty context
		}
		if kN == 1 {
			edits = append(edits, turnEdit{kM.valStart, kM.valEnd, "[]", nil})
		}
		if rN == 1 {
			edits = append(edits, turnEdit{rM.valStart, rM.valEnd, "[]", nil})
		}
		if kN == 0 || rN == 0 {
			var add strings.Builder
			sep := ctxLastEnd != ctxM.valStart+1 // context has members
			for _, name := range [...]string{"knowledge", "knowledge_refs"} {
				if (name == "knowledge" && kN == 1) || (name == "knowledge_refs" && rN == 1) {
					continue
				}
				if sep {
					add.WriteByte(',')
				}
				add.WriteString(`"` + name + `":[]`)
				sep = true
			}
			edits = append(edits, turnEdit{ctxLastEnd, ctxLastEnd, add.String(), nil})
		}
	}
	if kdN == 1 {
		edits = append(edits, turnEdit{kdM.valStart, kdM.valEnd, "", block})
	} else {
		prefix := `"knowledge_delivery":`
		if lastEnd != i+1 {
			prefix = "," + prefix
		}
		edits = append(edits, turnEdit{lastEnd, lastEnd, prefix, block})
	}
	return turnApplyEdits(body, edits), nil
}

// turnEdit replaces body[from:to] with text followed by raw.
type turnEdit struct {
	from, to int
	text     string
	raw      []byte
}

// turnApplyEdits builds the output in one allocation. Edits must not overlap.
func turnApplyEdits(b []byte, edits []turnEdit) []byte {
	slices.SortFunc(edits, func(x, y turnEdit) int { return x.from - y.from })
	n := len(b)
	for _, e := range edits {
		n += len(e.text) + len(e.raw) - (e.to - e.from)
	}
	out := make([]byte, 0, n)
	pos := 0
	for _, e := range edits {
		out = append(out, b[pos:e.from]...)
		out = append(out, e.text...)
		out = append(out, e.raw...)
		pos = e.to
	}
	return append(out, b[pos:]...)
}

// turnObjectBytes returns b without surrounding whitespace if it is exactly
// one valid JSON object.
func turnObjectBytes(b []byte) ([]byte, bool) {
	i := turnSkipWS(b, 0)
	if i >= len(b) || b[i] != '{' {
		return nil, false
	}
	end, err := turnScanObject(b, i, 1, nil)
	if err != nil || turnSkipWS(b, end) != len(b) {
		return nil, false
	}
	return b[i:end], true
}

// --- a minimal validating JSON scanner --------------------------------------

// errTurnJSON marks invalid JSON inside the scanner; it never leaves this file.
var errTurnJSON = errors.New("invalid json")

// errTurnDeep marks nesting beyond turnMaxDepth inside the scanner.
var errTurnDeep = errors.New("json nests too deeply")

// turnMaxDepth is encoding/json's nesting limit, so the scanner accepts exactly
// what json.Valid accepts.
const turnMaxDepth = 10000

// turnMember locates one object member: b[keyStart:keyEnd] is the key's JSON
// string including quotes, b[valStart:valEnd] its value.
type turnMember struct {
	keyStart, keyEnd int
	keyEsc           bool
	valStart, valEnd int
}

// keyIs reports whether the member's key, unescaped, equals name.
func (m turnMember) keyIs(b []byte, name string) bool {
	raw := b[m.keyStart+1 : m.keyEnd-1]
	if !m.keyEsc {
		return string(raw) == name
	}
	var s string
	if json.Unmarshal(b[m.keyStart:m.keyEnd], &s) != nil {
		return false
	}
	return s == name
}

// turnStringValue decodes b[start:end] if it is a JSON string.
func turnStringValue(b []byte, start, end int) (string, bool) {
	if end-start < 2 || b[start] != '"' {
		return "", false
	}
	raw := b[start+1 : end-1]
	if bytes.IndexByte(raw, '\\') < 0 {
		return string(raw), true
	}
	var s string
	if json.Unmarshal(b[start:end], &s) != nil {
		return "", false
	}
	return s, true
}

func turnSkipWS(b []byte, i int) int {
	for i < len(b) {
		switch b[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}

// turnScanObject scans the object starting at b[i] == '{' at nesting depth
// depth, calls fn (if not nil) for every member in order, and returns the
// index just after the closing '}'. When a member's value is invalid, fn is
// still called for it, with valEnd == -1, before the error is returned.
func turnScanObject(b []byte, i, depth int, fn func(turnMember)) (int, error) {
	return turnScanMembers(b, i, depth, fn, nil, nil)
}

// turnScanMembers is turnScanObject that can also look one level down in the
// same pass: when into is not nil it is called (with the key fields of m set)
// for every member whose value is an object, and when it answers true, sub
// gets that object's members the way fn gets this object's.
func turnScanMembers(b []byte, i, depth int, fn func(turnMember), into func(turnMember) bool, sub func(turnMember)) (int, error) {
	if depth > turnMaxDepth {
		return 0, errTurnDeep
	}
	i = turnSkipWS(b, i+1)
	if i < len(b) && b[i] == '}' {
		return i + 1, nil
	}
	for {
		if i >= len(b) || b[i] != '"' {
			return 0, errTurnJSON
		}
		var m turnMember
		m.keyStart = i
		end, esc, err := turnScanString(b, i)
		if err != nil {
			return 0, err
		}
		m.keyEnd, m.keyEsc = end, esc
		i = turnSkipWS(b, end)
		if i >= len(b) || b[i] != ':' {
			return 0, errTurnJSON
		}
		i = turnSkipWS(b, i+1)
		m.valStart = i
		if into != nil && i < len(b) && b[i] == '{' && into(m) {
			i, err = turnScanObject(b, i, depth+1, sub)
		} else {
			i, err = turnSkipValue(b, i, depth)
		}
		if err != nil {
			if fn != nil {
				// Report the key even though its value is broken, so a caller
				// can tell that the member was there.
				m.valEnd = -1
				fn(m)
			}
			return 0, err
		}
		m.valEnd = i
		if fn != nil {
			fn(m)
		}
		i = turnSkipWS(b, i)
		if i >= len(b) {
			return 0, errTurnJSON
		}
		switch b[i] {
		case ',':
			i = turnSkipWS(b, i+1)
		case '}':
			return i + 1, nil
		default:
			return 0, errTurnJSON
		}
	}
}

// turnSkipValue returns the index just after the value starting at b[i];
// depth is the nesting depth of the container holding it.
func turnSkipValue(b []byte, i, depth int) (int, error) {
	if i >= len(b) {
		return 0, errTurnJSON
	}
	switch c := b[i]; {
	case c == '{':
		return turnScanObject(b, i, depth+1, nil)
	case c == '[':
		return turnScanArray(b, i, depth+1)
	case c == '"':
		end, _, err := turnScanString(b, i)
		return end, err
	case c == '-' || (c >= '0' && c <= '9'):
		return turnScanNumber(b, i)
	case c == 't':
		return turnLiteral(b, i, "true")
	case c == 'f':
		return turnLiteral(b, i, "false")
	case c == 'n':
		return turnLiteral(b, i, "null")
	default:
		return 0, errTurnJSON
	}
}

func turnScanArray(b []byte, i, depth int) (int, error) {
	if depth > turnMaxDepth {
		return 0, errTurnDeep
	}
	i = turnSkipWS(b, i+1)
	if i < len(b) && b[i] == ']' {
		return i + 1, nil
	}
	for {
		var err error
		if i, err = turnSkipValue(b, i, depth); err != nil {
			return 0, err
		}
		i = turnSkipWS(b, i)
		if i >= len(b) {
			return 0, errTurnJSON
		}
		switch b[i] {
		case ',':
			i = turnSkipWS(b, i+1)
		case ']':
			return i + 1, nil
		default:
			return 0, errTurnJSON
		}
	}
}

// turnScanString scans the string starting at b[i] == '"' and returns the
// index after its closing quote and whether it contains escapes. Like
// encoding/json it rejects raw control characters and bad escapes and does
// not check UTF-8.
//
// Plain bytes (anything but '"', '\\' and controls) are skipped eight at a
// time (turnPlain8), then one at a time up to the next byte that needs a
// decision; the byte-by-byte switch below only sees those.
func turnScanString(b []byte, i int) (int, bool, error) {
	i++
	esc := false
	for i < len(b) {
		for i+8 <= len(b) && turnPlain8(binary.LittleEndian.Uint64(b[i:])) {
			i += 8
		}
		for i < len(b) && turnPlainByte[b[i]] {
			i++
		}
		if i >= len(b) {
			break
		}
		c := b[i]
		switch {
		case c == '"':
			return i + 1, esc, nil
		case c == '\\':
			esc = true
			if i+1 >= len(b) {
				return 0, false, errTurnJSON
			}
			switch b[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if i+6 > len(b) {
					return 0, false, errTurnJSON
				}
				for _, h := range b[i+2 : i+6] {
					if !turnIsHex(h) {
						return 0, false, errTurnJSON
					}
				}
				i += 6
			default:
				return 0, false, errTurnJSON
			}
		case c < 0x20:
			return 0, false, errTurnJSON
		default:
			i++
		}
	}
	return 0, false, errTurnJSON
}

const (
	turnSWARLo = 0x0101010101010101
	turnSWARHi = 0x8080808080808080
)

// turnPlain8 reports whether none of the eight bytes packed in x is '"',
// '\\' or a control character (< 0x20). It uses the exact "has a zero byte"
// and "has a byte less than n" word tests (n ≤ 128), so it has no false
// answers in either direction.
func turnPlain8(x uint64) bool {
	q := x ^ (turnSWARLo * '"')
	s := x ^ (turnSWARLo * '\\')
	special := (x - turnSWARLo*0x20) &^ x
	special |= (q - turnSWARLo) &^ q
	special |= (s - turnSWARLo) &^ s
	return special&turnSWARHi == 0
}

// turnPlainByte[c] is true for the bytes a JSON string may hold as they are
// and that do not end or escape it.
var turnPlainByte = func() (t [256]bool) {
	for c := 0x20; c < 256; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

func turnIsHex(c byte) bool {
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F')
}

// turnScanNumber scans -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?.
func turnScanNumber(b []byte, i int) (int, error) {
	if b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && b[i] >= '1' && b[i] <= '9':
		i = turnDigits(b, i)
	default:
		return 0, errTurnJSON
	}
	if i < len(b) && b[i] == '.' {
		j := turnDigits(b, i+1)
		if j == i+1 {
			return 0, errTurnJSON
		}
		i = j
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		j := turnDigits(b, i)
		if j == i {
			return 0, errTurnJSON
		}
		i = j
	}
	return i, nil
}

func turnDigits(b []byte, i int) int {
	for i < len(b) && b[i] >= '0' && b[i] <= '9' {
		i++
	}
	return i
}

func turnLiteral(b []byte, i int, lit string) (int, error) {
	if len(b)-i < len(lit) || string(b[i:i+len(lit)]) != lit {
		return 0, errTurnJSON
	}
	return i + len(lit), nil
}
