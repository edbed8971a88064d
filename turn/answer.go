package turn

// Core's 2xx turn answers (SPEC §7): scanned once, what Core retrieved read,
// the answer rewritten.

import (
	"errors"
	"slices"
	"strconv"
	"strings"

	"github.com/bailinghub/knowledge-sidecar/internal/jsonscan"
	"github.com/bailinghub/knowledge-sidecar/knowledge"
	"github.com/bailinghub/knowledge-sidecar/protocol"
)

// contextSchema is the schema_version of Core's turn answer.
const contextSchema = "bailing.agent-turn-context.v1"

var (
	// ErrUnexpectedAnswer: Core's 2xx turn answer is not a JSON object with
	// schema_version "bailing.agent-turn-context.v1" and an object "context"
	// (or has duplicate members the rewrite would have to choose between).
	ErrUnexpectedAnswer = errors.New("turn answer is not a bailing.agent-turn-context.v1 json object")
	// ErrInvalidDeliveryBlock: the pre-serialized knowledge_delivery block
	// given to Reply.splice is not a JSON object (a caller bug).
	ErrInvalidDeliveryBlock = errors.New("knowledge delivery block is not a json object")
)

// Reply is Core's 2xx answer to an intercepted turn, scanned once for the
// turn's mode (SPEC §7): where its members are, so that what Core retrieved
// for the turn (RunID, Items: the input of same-run hints) is read from it
// and it is rewritten (Rewrite) without a second scan.
type Reply struct {
	body []byte
	mode protocol.DeliveryMode
	// scanned: the answer is a turn context and the fields below locate its
	// members; false: it is relayed as Core sent it (inline mode only).
	scanned bool
	start   int // the top-level '{'
	lastEnd int // insertion point for a new top-level member
	// the top-level context, knowledge_delivery and run_id members
	ctx, delivery, run occurrences
	know, refs         occurrences // context's knowledge / knowledge_refs members
	ctxLastEnd         int         // value end of context's last member; -1: none
}

// occurrences is how often a key occurred in a JSON object, and its last
// member.
type occurrences struct {
	n    int
	last jsonscan.Member
}

func (o *occurrences) add(m jsonscan.Member) {
	o.n++
	o.last = m
}

// ReadReply scans Core's 2xx answer to a turn of mode. An answer that is not
// a turn context is ErrUnexpectedAnswer in on_demand mode (inline knowledge
// must never pass as on-demand); in inline mode it is a Reply that Rewrite
// leaves as Core sent it (what the host asked for).
func ReadReply(body []byte, mode protocol.DeliveryMode) (*Reply, error) {
	if !mode.Valid() {
		return nil, ErrInvalidDelivery
	}
	r, err := parseAnswer(body)
	if mode == protocol.DeliveryOnDemand {
		// An answer Rewrite would refuse is refused here, before its hints
		// are built (and audited as shown).
		if err == nil && (r.know.n > 1 || r.refs.n > 1) {
			err = ErrUnexpectedAnswer
		}
		if err != nil {
			return nil, err
		}
	}
	if err != nil {
		r = &Reply{body: body}
	}
	r.mode = mode
	return r, nil
}

// parseAnswer scans a 2xx turn answer once: every top-level member and the
// members of the top-level context object. It fails with
// ErrUnexpectedAnswer when the body is not a bailing.agent-turn-context.v1
// JSON object with one object "context" (and at most one schema_version
// and knowledge_delivery). body is never modified.
func parseAnswer(body []byte) (*Reply, error) {
	i := jsonscan.SkipWS(body, 0)
	if i >= len(body) || body[i] != '{' {
		return nil, ErrUnexpectedAnswer
	}
	p := &Reply{body: body, scanned: true, start: i, lastEnd: i + 1, ctxLastEnd: -1}
	var (
		schemaN  int
		schemaOK bool
	)
	isContext := func(m jsonscan.Member) bool { return m.KeyIs(body, "context") }
	inContext := func(m jsonscan.Member) {
		switch {
		case m.KeyIs(body, "knowledge"):
			p.know.add(m)
		case m.KeyIs(body, "knowledge_refs"):
			p.refs.add(m)
		}
		p.ctxLastEnd = m.ValEnd
	}
	end, err := scanMembers(body, i, 1, func(m jsonscan.Member) {
		switch {
		case m.KeyIs(body, "schema_version"):
			schemaN++
			s, ok := stringOf(body, m)
			schemaOK = ok && s == contextSchema
		case m.KeyIs(body, "context"):
			p.ctx.add(m)
		case m.KeyIs(body, "knowledge_delivery"):
			p.delivery.add(m)
		case m.KeyIs(body, "run_id"):
			p.run.add(m)
		}
		p.lastEnd = m.ValEnd
	}, isContext, inContext)
	if err != nil || jsonscan.SkipWS(body, end) != len(body) ||
		schemaN != 1 || !schemaOK || p.ctx.n != 1 || p.delivery.n > 1 || body[p.ctx.last.ValStart] != '{' {
		return nil, ErrUnexpectedAnswer
	}
	return p, nil
}

// RunID is the answer's top-level run_id string ("" when absent, repeated,
// not a string, or the answer is no turn context).
func (p *Reply) RunID() string {
	if !p.scanned || p.run.n != 1 {
		return ""
	}
	s, _ := stringOf(p.body, p.run.last)
	return s
}

// Items is what Core retrieved for the turn (SPEC §7 "Same-run hints"):
// each context.knowledge_refs entry (doc_id, title, score) joined by ref
// with the context.knowledge item holding the hit text, in Core's order.
// Only the two arrays are read, with the scanner (they were validated by
// parseAnswer) and strings unescaped as encoding/json does. Entries that
// cannot be used are skipped: not an object, a ref without a matching item
// (or naming several items), a doc_id that is not a positive integer, a
// score that is not a number, a ref or content that is not a string. An
// array missing, repeated or not an array (or an answer that is no turn
// context) gives no items.
func (p *Reply) Items() []knowledge.TurnItem {
	if !p.scanned || p.know.n != 1 || p.refs.n != 1 {
		return nil
	}
	b := p.body
	type hit struct {
		content string
		n       int
	}
	content := map[string]hit{}
	eachObject(b, p.know.last, itemKeys[:], func(v []jsonscan.Member) {
		ref, ok1 := stringOf(b, v[0])
		c, ok2 := stringOf(b, v[1])
		if ok1 && ok2 && ref != "" {
			h := content[ref]
			content[ref] = hit{c, h.n + 1}
		}
	})
	if len(content) == 0 {
		return nil
	}
	var out []knowledge.TurnItem
	eachObject(b, p.refs.last, refKeys[:], func(v []jsonscan.Member) {
		ref, ok := stringOf(b, v[0])
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
		title, _ := stringOf(b, v[2])
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
func eachObject(b []byte, arr jsonscan.Member, keys []string, fn func(vals []jsonscan.Member)) {
	i := arr.ValStart
	if b[i] != '[' {
		return
	}
	vals := make([]jsonscan.Member, len(keys))
	i = jsonscan.SkipWS(b, i+1)
	for i < arr.ValEnd && b[i] != ']' {
		var end int
		var err error
		if b[i] == '{' {
			clear(vals)
			end, err = scanObject(b, i, 2, func(m jsonscan.Member) {
				for k, name := range keys {
					if m.KeyIs(b, name) {
						vals[k] = m
						return
					}
				}
			})
			if err == nil {
				fn(vals)
			}
		} else {
			end, err = jsonscan.SkipValue(b, i, 2)
		}
		if err != nil {
			return
		}
		i = jsonscan.SkipWS(b, end)
		if i < len(b) && b[i] == ',' {
			i = jsonscan.SkipWS(b, i+1)
		}
	}
}

// isNumber reports whether v is a JSON number (not a string or literal).
func isNumber(v []byte) bool { return len(v) > 0 && (v[0] == '-' || v[0] >= '0' && v[0] <= '9') }

// Rewrite is the answer the host gets: the delivery block added with d's
// status and scope revision (the route's state taken before forwarding,
// knowledge.Service.Delivery) and, in on_demand mode, hints (the serialized
// array; empty means []); in on_demand mode the inline knowledge emptied.
// An answer the splice refuses (a member it would have to choose between) is
// ErrUnexpectedAnswer in on_demand mode and Core's bytes unchanged in inline
// mode, like an answer that is no turn context.
func (p *Reply) Rewrite(d knowledge.Delivery, hints []byte) ([]byte, error) {
	if !p.scanned {
		return p.body, nil
	}
	if p.mode != protocol.DeliveryOnDemand {
		hints = nil // the host has the bodies: "hints" stays []
	}
	block := appendDeliveryBlock(make([]byte, 0, 256+len(hints)), p.mode, d.ScopeRevision, d.Status, hints)
	out, err := p.splice(block)
	if err != nil {
		if p.mode == protocol.DeliveryOnDemand {
			return nil, err
		}
		return p.body, nil
	}
	return out, nil
}

// splice rewrites the scanned 2xx bailing.agent-turn-context.v1 answer
// for the reply's mode (SPEC §7):
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
// duplicated schema_version/context/knowledge_delivery member → parseAnswer's
// ErrUnexpectedAnswer; in on_demand mode a duplicated knowledge/
// knowledge_refs member → ErrUnexpectedAnswer. A mode other than the two →
// ErrInvalidDelivery; a block that is not a JSON object →
// ErrInvalidDeliveryBlock. The answer's bytes are never modified.
func (p *Reply) splice(deliveryBlock []byte) ([]byte, error) {
	mode := p.mode
	if !mode.Valid() {
		return nil, ErrInvalidDelivery
	}
	block, ok := objectBytes(deliveryBlock)
	if !ok {
		return nil, ErrInvalidDeliveryBlock
	}
	body := p.body
	edits := make([]edit, 0, 4)
	if mode == protocol.DeliveryOnDemand {
		// context is the only one, so the counts are its own.
		if p.know.n > 1 || p.refs.n > 1 {
			return nil, ErrUnexpectedAnswer
		}
		ctxLastEnd := p.ctxLastEnd
		if ctxLastEnd < 0 {
			ctxLastEnd = p.ctx.last.ValStart + 1 // empty context
		}
		if p.know.n == 1 {
			edits = append(edits, edit{p.know.last.ValStart, p.know.last.ValEnd, "[]", nil})
		}
		if p.refs.n == 1 {
			edits = append(edits, edit{p.refs.last.ValStart, p.refs.last.ValEnd, "[]", nil})
		}
		if p.know.n == 0 || p.refs.n == 0 {
			var add strings.Builder
			sep := ctxLastEnd != p.ctx.last.ValStart+1 // context has members
			for _, name := range [...]string{"knowledge", "knowledge_refs"} {
				if (name == "knowledge" && p.know.n == 1) || (name == "knowledge_refs" && p.refs.n == 1) {
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
	if p.delivery.n == 1 {
		edits = append(edits, edit{p.delivery.last.ValStart, p.delivery.last.ValEnd, "", block})
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
	i := jsonscan.SkipWS(b, 0)
	if i >= len(b) || b[i] != '{' {
		return nil, false
	}
	end, err := scanObject(b, i, 1, nil)
	if err != nil || jsonscan.SkipWS(b, end) != len(b) {
		return nil, false
	}
	return b[i:end], true
}
