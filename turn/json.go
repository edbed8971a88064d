package turn

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
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/bailinghub/knowledge-sidecar/corefacts/jsstring"
	"github.com/bailinghub/knowledge-sidecar/knowledge"
)

// contextSchema is the schema_version of Core's turn answer.
const contextSchema = "bailing.agent-turn-context.v1"

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
	// ErrUnexpectedAnswer: Core's 2xx turn answer is not a JSON object with
	// schema_version "bailing.agent-turn-context.v1" and an object "context"
	// (or has duplicate members the rewrite would have to choose between).
	ErrUnexpectedAnswer = errors.New("turn answer is not a bailing.agent-turn-context.v1 json object")
	// ErrInvalidDeliveryBlock: the pre-serialized knowledge_delivery block
	// given to Parsed.Rewrite is not a JSON object (a caller bug).
	ErrInvalidDeliveryBlock = errors.New("knowledge delivery block is not a json object")
)

// Request is what the proxy needs from a turn request body.
type Request struct {
	// Mode is "" when the field is absent (or the body cannot be parsed),
	// else the validated value ("inline" | "on_demand").
	Mode knowledge.DeliveryMode
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
//
// body is never modified.
func ParseRequest(body []byte) (Request, error) {
	passthrough := Request{Body: body}
	i := skipWS(body, 0)
	if i >= len(body) || body[i] != '{' {
		return passthrough, nil
	}
	var (
		tr       Request
		kd       member
		kdCount  int
		prevEnd  = -1 // value end of the member before the current one
		kdPrev   = -1 // value end of the member before knowledge_delivery
		convRaw  member
		raw      member
		msgRaw   member
		haveConv bool
		haveTurn bool
		haveMsg  bool
	)
	end, err := scanObject(body, i, 1, func(m member) {
		switch {
		case m.keyIs(body, "knowledge_delivery"):
			kdCount++
			if kdCount == 1 {
				kd, kdPrev = m, prevEnd
			}
		case m.keyIs(body, "client_conversation_id"):
			convRaw, haveConv = m, true
		case m.keyIs(body, "client_turn_id"):
			raw, haveTurn = m, true
		case m.keyIs(body, "user_message_id"):
			msgRaw, haveMsg = m, true
		}
		prevEnd = m.valEnd
	})
	if err == nil && skipWS(body, end) != len(body) {
		err = errJSON
	}
	if err != nil {
		if errors.Is(err, errDeep) {
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
	v, ok := stringValue(body, kd.valStart, kd.valEnd)
	mode := knowledge.DeliveryMode(v)
	if !ok || !mode.Valid() {
		return Request{}, ErrInvalidDelivery
	}
	tr.Mode = mode
	tr.Body = removeMember(body, kd, kdPrev)
	return tr, nil
}

// idValue decodes an id member's value: "" unless it is a JSON string.
func idValue(b []byte, m member) string {
	s, ok := stringValue(b, m.valStart, m.valEnd)
	if !ok {
		return ""
	}
	return jsstring.Trim(s)
}

// removeMember returns a copy of b without member m. prevEnd is the value
// end of the member before m, or -1 when m is the object's first member.
// Requires b to be valid JSON (it was scanned).
func removeMember(b []byte, m member, prevEnd int) []byte {
	var from, to int
	switch {
	case prevEnd >= 0:
		// Not first: drop the comma before it, from the previous value's end.
		from, to = prevEnd, m.valEnd
	default:
		from, to = m.keyStart, m.valEnd
		if j := skipWS(b, m.valEnd); j < len(b) && b[j] == ',' {
			// First of several: drop through the comma and the blanks after it.
			to = skipWS(b, j+1)
		}
	}
	out := make([]byte, 0, len(b)-(to-from))
	out = append(out, b[:from]...)
	return append(out, b[to:]...)
}

// Parsed is a scanned turn answer: where its members are, so that the
// knowledge Core retrieved can be read (Items) and the answer rewritten
// (Rewrite) without scanning it again.
type Parsed struct {
	body       []byte
	start      int // the top-level '{'
	lastEnd    int // insertion point for a new top-level member
	ctxM, kdM  member
	kdN, runN  int
	runM       member
	kN, rN     int    // context's knowledge / knowledge_refs members
	kM, rM     member // the last of each
	ctxLastEnd int    // value end of context's last member; -1: none
}

// ParseAnswer scans a 2xx turn answer once: every top-level member and the
// members of the top-level context object. It fails with
// ErrUnexpectedAnswer when the body is not a bailing.agent-turn-context.v1
// JSON object with one object "context" (and at most one schema_version
// and knowledge_delivery). body is never modified.
func ParseAnswer(body []byte) (*Parsed, error) {
	i := skipWS(body, 0)
	if i >= len(body) || body[i] != '{' {
		return nil, ErrUnexpectedAnswer
	}
	p := &Parsed{body: body, start: i, lastEnd: i + 1, ctxLastEnd: -1}
	var (
		schemaN, ctxN int
		schemaOK      bool
	)
	isContext := func(m member) bool { return m.keyIs(body, "context") }
	inContext := func(m member) {
		switch {
		case m.keyIs(body, "knowledge"):
			p.kN++
			p.kM = m
		case m.keyIs(body, "knowledge_refs"):
			p.rN++
			p.rM = m
		}
		p.ctxLastEnd = m.valEnd
	}
	end, err := scanMembers(body, i, 1, func(m member) {
		switch {
		case m.keyIs(body, "schema_version"):
			schemaN++
			s, ok := stringValue(body, m.valStart, m.valEnd)
			schemaOK = ok && s == contextSchema
		case m.keyIs(body, "context"):
			ctxN++
			p.ctxM = m
		case m.keyIs(body, "knowledge_delivery"):
			p.kdN++
			p.kdM = m
		case m.keyIs(body, "run_id"):
			p.runN++
			p.runM = m
		}
		p.lastEnd = m.valEnd
	}, isContext, inContext)
	if err != nil || skipWS(body, end) != len(body) ||
		schemaN != 1 || !schemaOK || ctxN != 1 || p.kdN > 1 || body[p.ctxM.valStart] != '{' {
		return nil, ErrUnexpectedAnswer
	}
	return p, nil
}

// RunID is the answer's top-level run_id string ("" when absent, repeated
// or not a string).
func (p *Parsed) RunID() string {
	if p.runN != 1 {
		return ""
	}
	s, _ := stringValue(p.body, p.runM.valStart, p.runM.valEnd)
	return s
}

// Items is what Core retrieved for the turn (SPEC §7 "Same-run hints"):
// each context.knowledge_refs entry (doc_id, title, score) joined by ref
// with the context.knowledge item holding the hit text, in Core's order.
// Only the two arrays are read, with the scanner (they were validated by
// ParseAnswer) and strings unescaped as encoding/json does. Entries that
// cannot be used are skipped: not an object, a ref without a matching item
// (or naming several items), a doc_id that is not a positive integer, a
// score that is not a number, a ref or content that is not a string. An
// array missing, repeated or not an array gives no items.
func (p *Parsed) Items() []knowledge.TurnItem {
	if p.kN != 1 || p.rN != 1 {
		return nil
	}
	b := p.body
	type hit struct {
		content string
		n       int
	}
	content := map[string]hit{}
	eachObject(b, p.kM, itemKeys[:], func(v []member) {
		ref, ok1 := jsonString(b, v[0])
		c, ok2 := jsonString(b, v[1])
		if ok1 && ok2 && ref != "" {
			h := content[ref]
			content[ref] = hit{c, h.n + 1}
		}
	})
	if len(content) == 0 {
		return nil
	}
	var out []knowledge.TurnItem
	eachObject(b, p.rM, refKeys[:], func(v []member) {
		ref, ok := jsonString(b, v[0])
		h, found := content[ref]
		if !ok || !found || h.n != 1 {
			return
		}
		id, err := strconv.ParseInt(string(valueBytes(b, v[1])), 10, 64)
		if err != nil || id <= 0 {
			return
		}
		score, err := strconv.ParseFloat(string(valueBytes(b, v[3])), 64)
		if err != nil || !isNumber(valueBytes(b, v[3])) {
			return
		}
		title, _ := jsonString(b, v[2])
		out = append(out, knowledge.TurnItem{DocID: id, Title: title, Content: h.content, Score: score})
	})
	return out
}

// The members Items reads, by position in the slice eachObject passes.
var (
	itemKeys = [...]string{"ref", "content"}
	refKeys  = [...]string{"ref", "doc_id", "title", "score"}
)

// eachObject calls fn for every element of the array value of member arr
// that is an object, with the members named by keys (vals[i] is the member
// of keys[i], by unescaped key, the last one winning; a zero member when
// absent). b must have been scanned.
func eachObject(b []byte, arr member, keys []string, fn func(vals []member)) {
	i := arr.valStart
	if b[i] != '[' {
		return
	}
	vals := make([]member, len(keys))
	i = skipWS(b, i+1)
	for i < arr.valEnd && b[i] != ']' {
		var end int
		var err error
		if b[i] == '{' {
			clear(vals)
			end, err = scanObject(b, i, 2, func(m member) {
				for k, name := range keys {
					if m.keyIs(b, name) {
						vals[k] = m
						return
					}
				}
			})
			if err == nil {
				fn(vals)
			}
		} else {
			end, err = skipValue(b, i, 2)
		}
		if err != nil {
			return
		}
		i = skipWS(b, end)
		if i < len(b) && b[i] == ',' {
			i = skipWS(b, i+1)
		}
	}
}

// valueBytes is member m's value (nil for a zero member).
func valueBytes(b []byte, m member) []byte {
	if m.valEnd <= m.valStart {
		return nil
	}
	return b[m.valStart:m.valEnd]
}

// isNumber reports whether v is a JSON number (not a string or literal).
func isNumber(v []byte) bool { return len(v) > 0 && (v[0] == '-' || v[0] >= '0' && v[0] <= '9') }

// jsonString decodes member m's value if it is a JSON string, unescaping
// like encoding/json (a lone surrogate becomes U+FFFD) without its
// reflection. The value must have been scanned (valid JSON).
func jsonString(b []byte, m member) (string, bool) {
	v := valueBytes(b, m)
	if len(v) < 2 || v[0] != '"' {
		return "", false
	}
	raw := v[1 : len(v)-1]
	k := bytes.IndexByte(raw, '\\')
	if k < 0 {
		return string(raw), true
	}
	out := make([]byte, 0, len(raw))
	for k >= 0 {
		out = append(out, raw[:k]...)
		raw = raw[k:]
		n := 2
		switch raw[1] {
		case '"', '\\', '/':
			out = append(out, raw[1])
		case 'b':
			out = append(out, '\b')
		case 'f':
			out = append(out, '\f')
		case 'n':
			out = append(out, '\n')
		case 'r':
			out = append(out, '\r')
		case 't':
			out = append(out, '\t')
		case 'u':
			r := hex4(raw[2:6])
			n = 6
			if utf16.IsSurrogate(r) {
				r2 := rune(-1)
				if len(raw) >= 12 && raw[6] == '\\' && raw[7] == 'u' {
					r2 = hex4(raw[8:12])
				}
				if d := utf16.DecodeRune(r, r2); d != utf8.RuneError {
					r, n = d, 12
				} else {
					r = utf8.RuneError
				}
			}
			out = utf8.AppendRune(out, r)
		default:
			return "", false // not scanned
		}
		raw = raw[n:]
		k = bytes.IndexByte(raw, '\\')
	}
	return string(append(out, raw...)), true
}

// hex4 decodes four hex digits (validated by the scanner).
func hex4(h []byte) rune {
	var r rune
	for _, c := range h {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c -= 'a' - 10
		default:
			c -= 'A' - 10
		}
		r = r<<4 | rune(c)
	}
	return r
}

// Rewrite rewrites the scanned 2xx bailing.agent-turn-context.v1 answer
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
// duplicated schema_version/context/knowledge_delivery member → ParseAnswer's
// ErrUnexpectedAnswer; in on_demand mode a duplicated knowledge/
// knowledge_refs member → ErrUnexpectedAnswer. A mode other than the two →
// ErrInvalidDelivery; a block that is not a JSON object →
// ErrInvalidDeliveryBlock. The answer's bytes are never modified.
func (p *Parsed) Rewrite(mode knowledge.DeliveryMode, deliveryBlock []byte) ([]byte, error) {
	if !mode.Valid() {
		return nil, ErrInvalidDelivery
	}
	block, ok := objectBytes(deliveryBlock)
	if !ok {
		return nil, ErrInvalidDeliveryBlock
	}
	body := p.body
	edits := make([]edit, 0, 4)
	if mode == knowledge.DeliveryOnDemand {
		// context is the only one, so the counts are its own.
		if p.kN > 1 || p.rN > 1 {
			return nil, ErrUnexpectedAnswer
		}
		ctxLastEnd := p.ctxLastEnd
		if ctxLastEnd < 0 {
			ctxLastEnd = p.ctxM.valStart + 1 // empty context
		}
		if p.kN == 1 {
			edits = append(edits, edit{p.kM.valStart, p.kM.valEnd, "[]", nil})
		}
		if p.rN == 1 {
			edits = append(edits, edit{p.rM.valStart, p.rM.valEnd, "[]", nil})
		}
		if p.kN == 0 || p.rN == 0 {
			var add strings.Builder
			sep := ctxLastEnd != p.ctxM.valStart+1 // context has members
			for _, name := range [...]string{"knowledge", "knowledge_refs"} {
				if (name == "knowledge" && p.kN == 1) || (name == "knowledge_refs" && p.rN == 1) {
					continue
				}
				if sep {
					add.WriteByte(',')
				}
				add.WriteString(`"` + name + `":[]`)
				sep = true
			}
			edits = append(edits, edit{ctxLastEnd, ctxLastEnd, add.String(), nil})
		}
	}
	if p.kdN == 1 {
		edits = append(edits, edit{p.kdM.valStart, p.kdM.valEnd, "", block})
	} else {
		prefix := `"knowledge_delivery":`
		if p.lastEnd != p.start+1 {
			prefix = "," + prefix
		}
		edits = append(edits, edit{p.lastEnd, p.lastEnd, prefix, block})
	}
	return applyEdits(body, edits), nil
}

// edit replaces body[from:to] with text followed by raw.
type edit struct {
	from, to int
	text     string
	raw      []byte
}

// applyEdits builds the output in one allocation. Edits must not overlap.
func applyEdits(b []byte, edits []edit) []byte {
	slices.SortFunc(edits, func(x, y edit) int { return x.from - y.from })
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

// objectBytes returns b without surrounding whitespace if it is exactly
// one valid JSON object.
func objectBytes(b []byte) ([]byte, bool) {
	i := skipWS(b, 0)
	if i >= len(b) || b[i] != '{' {
		return nil, false
	}
	end, err := scanObject(b, i, 1, nil)
	if err != nil || skipWS(b, end) != len(b) {
		return nil, false
	}
	return b[i:end], true
}

// --- a minimal validating JSON scanner --------------------------------------

// errJSON marks invalid JSON inside the scanner; it never leaves this file.
var errJSON = errors.New("invalid json")

// errDeep marks nesting beyond maxDepth inside the scanner.
var errDeep = errors.New("json nests too deeply")

// maxDepth is encoding/json's nesting limit, so the scanner accepts exactly
// what json.Valid accepts.
const maxDepth = 10000

// member locates one object member: b[keyStart:keyEnd] is the key's JSON
// string including quotes, b[valStart:valEnd] its value.
type member struct {
	keyStart, keyEnd int
	keyEsc           bool
	valStart, valEnd int
}

// keyIs reports whether the member's key, unescaped, equals name.
func (m member) keyIs(b []byte, name string) bool {
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

// stringValue decodes b[start:end] if it is a JSON string, exactly as
// encoding/json does: the raw bytes are the value only when there is no
// escape and they are valid UTF-8 (otherwise every invalid byte becomes
// U+FFFD, so "\xe6" and "\xe6\n" agree on what the byte is).
func stringValue(b []byte, start, end int) (string, bool) {
	if end-start < 2 || b[start] != '"' {
		return "", false
	}
	raw := b[start+1 : end-1]
	if bytes.IndexByte(raw, '\\') < 0 && utf8.Valid(raw) {
		return string(raw), true
	}
	var s string
	if json.Unmarshal(b[start:end], &s) != nil {
		return "", false
	}
	return s, true
}

func skipWS(b []byte, i int) int {
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

// scanObject scans the object starting at b[i] == '{' at nesting depth
// depth, calls fn (if not nil) for every member in order, and returns the
// index just after the closing '}'. When a member's value is invalid, fn is
// still called for it, with valEnd == -1, before the error is returned.
func scanObject(b []byte, i, depth int, fn func(member)) (int, error) {
	return scanMembers(b, i, depth, fn, nil, nil)
}

// scanMembers is scanObject that can also look one level down in the
// same pass: when into is not nil it is called (with the key fields of m set)
// for every member whose value is an object, and when it answers true, sub
// gets that object's members the way fn gets this object's.
func scanMembers(b []byte, i, depth int, fn func(member), into func(member) bool, sub func(member)) (int, error) {
	if depth > maxDepth {
		return 0, errDeep
	}
	i = skipWS(b, i+1)
	if i < len(b) && b[i] == '}' {
		return i + 1, nil
	}
	for {
		if i >= len(b) || b[i] != '"' {
			return 0, errJSON
		}
		var m member
		m.keyStart = i
		end, esc, err := scanString(b, i)
		if err != nil {
			return 0, err
		}
		m.keyEnd, m.keyEsc = end, esc
		i = skipWS(b, end)
		if i >= len(b) || b[i] != ':' {
			return 0, errJSON
		}
		i = skipWS(b, i+1)
		m.valStart = i
		if into != nil && i < len(b) && b[i] == '{' && into(m) {
			i, err = scanObject(b, i, depth+1, sub)
		} else {
			i, err = skipValue(b, i, depth)
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
		i = skipWS(b, i)
		if i >= len(b) {
			return 0, errJSON
		}
		switch b[i] {
		case ',':
			i = skipWS(b, i+1)
		case '}':
			return i + 1, nil
		default:
			return 0, errJSON
		}
	}
}

// skipValue returns the index just after the value starting at b[i];
// depth is the nesting depth of the container holding it.
func skipValue(b []byte, i, depth int) (int, error) {
	if i >= len(b) {
		return 0, errJSON
	}
	switch c := b[i]; {
	case c == '{':
		return scanObject(b, i, depth+1, nil)
	case c == '[':
		return scanArray(b, i, depth+1)
	case c == '"':
		end, _, err := scanString(b, i)
		return end, err
	case c == '-' || (c >= '0' && c <= '9'):
		return scanNumber(b, i)
	case c == 't':
		return literal(b, i, "true")
	case c == 'f':
		return literal(b, i, "false")
	case c == 'n':
		return literal(b, i, "null")
	default:
		return 0, errJSON
	}
}

func scanArray(b []byte, i, depth int) (int, error) {
	if depth > maxDepth {
		return 0, errDeep
	}
	i = skipWS(b, i+1)
	if i < len(b) && b[i] == ']' {
		return i + 1, nil
	}
	for {
		var err error
		if i, err = skipValue(b, i, depth); err != nil {
			return 0, err
		}
		i = skipWS(b, i)
		if i >= len(b) {
			return 0, errJSON
		}
		switch b[i] {
		case ',':
			i = skipWS(b, i+1)
		case ']':
			return i + 1, nil
		default:
			return 0, errJSON
		}
	}
}

// scanString scans the string starting at b[i] == '"' and returns the
// index after its closing quote and whether it contains escapes. Like
// encoding/json it rejects raw control characters and bad escapes and does
// not check UTF-8.
//
// Plain bytes (anything but '"', '\\' and controls) are skipped eight at a
// time (plain8), then one at a time up to the next byte that needs a
// decision; the byte-by-byte switch below only sees those.
func scanString(b []byte, i int) (int, bool, error) {
	i++
	esc := false
	for i < len(b) {
		for i+8 <= len(b) && plain8(binary.LittleEndian.Uint64(b[i:])) {
			i += 8
		}
		for i < len(b) && plainByte[b[i]] {
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
				return 0, false, errJSON
			}
			switch b[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if i+6 > len(b) {
					return 0, false, errJSON
				}
				for _, h := range b[i+2 : i+6] {
					if !isHex(h) {
						return 0, false, errJSON
					}
				}
				i += 6
			default:
				return 0, false, errJSON
			}
		case c < 0x20:
			return 0, false, errJSON
		default:
			i++
		}
	}
	return 0, false, errJSON
}

const (
	sWARLo = 0x0101010101010101
	sWARHi = 0x8080808080808080
)

// plain8 reports whether none of the eight bytes packed in x is '"',
// '\\' or a control character (< 0x20). It uses the exact "has a zero byte"
// and "has a byte less than n" word tests (n ≤ 128), so it has no false
// answers in either direction.
func plain8(x uint64) bool {
	q := x ^ (sWARLo * '"')
	s := x ^ (sWARLo * '\\')
	special := (x - sWARLo*0x20) &^ x
	special |= (q - sWARLo) &^ q
	special |= (s - sWARLo) &^ s
	return special&sWARHi == 0
}

// plainByte[c] is true for the bytes a JSON string may hold as they are
// and that do not end or escape it.
var plainByte = func() (t [256]bool) {
	for c := 0x20; c < 256; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

func isHex(c byte) bool {
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F')
}

// scanNumber scans -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?.
func scanNumber(b []byte, i int) (int, error) {
	if b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && b[i] >= '1' && b[i] <= '9':
		i = digits(b, i)
	default:
		return 0, errJSON
	}
	if i < len(b) && b[i] == '.' {
		j := digits(b, i+1)
		if j == i+1 {
			return 0, errJSON
		}
		i = j
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		j := digits(b, i)
		if j == i {
			return 0, errJSON
		}
		i = j
	}
	return i, nil
}

func digits(b []byte, i int) int {
	for i < len(b) && b[i] >= '0' && b[i] <= '9' {
		i++
	}
	return i
}

func literal(b []byte, i int, lit string) (int, error) {
	if len(b)-i < len(lit) || string(b[i:i+len(lit)]) != lit {
		return 0, errJSON
	}
	return i + len(lit), nil
}
