package mcpserver

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/bailinghub/knowledge-sidecar/hostclient"
	"github.com/bailinghub/knowledge-sidecar/protocol"
)

// knowledge_read's near (SPEC §10): the tool pages through the ref's own
// chain with the protocol's cursors — the server's chain budget, no offset
// of the host's — and returns a window of the document: at most
// NearWindowBytes of text (max_bytes, when the call gives it), beginning
// shortly before the passage, so that the passage starts within its first
// 2 KiB. The window's cursor continues exactly where the window ends: a
// window that ends inside a page the walk read is read again from that
// page's cursor with max_bytes up to the window's end, and the cursor of
// that shorter page is the one returned; a window that runs past the pages
// read takes the next page with max_bytes the rest of the window. near is
// never sent to the endpoint: the protocol's read does not know it.
//
// Matching forgives what a model changes when it copies a passage: case,
// white space and Markdown marks (fold). When nothing matches so, the
// window of as many words as near with the most words in common is the
// closest passage, if it shares at least NearOverlapPercent of them.
const (
	// NearMaxChars bounds near, in characters: a piece of a hint's summary.
	NearMaxChars = 200
	// NearWindowBytes is at most how much document text a near hit shows
	// when the call gives no max_bytes.
	NearWindowBytes = 8192
	// NearOverlapPercent is the share of near's words a closest passage
	// holds at least.
	NearOverlapPercent = 75
	// nearMinWords is the fewest words of near a closest passage is
	// looked for with: fewer match by chance.
	nearMinWords = 4
	// nearContext is at most how much text before the passage is kept.
	nearContext = 1024
	// maxChainPages bounds the requests of one walk through a chain: the
	// 128 KiB budget in pages of at least 4 KiB, whatever the service says.
	maxChainPages = 64
)

// walked is a page the walk read.
type walked struct {
	cursor string // the cursor that read it; "" for the chain's start
	start  int    // its offset in the document (the walk starts at 0)
	index  int    // its place among the call's reads, from 0 (Shown)
	raw    []byte
	a      hostclient.ReadAnswer
}

func (w *walked) end() int { return w.start + len(w.a.Content) }

// passage is where near was found: [start, end) in the document, on the
// page cur or beginning on prev.
type passage struct {
	prev, cur  *walked
	start, end int
	closest    bool
	shared     int // near's words it holds (closest)
}

// nearRead is knowledge_read with near (want, as nearText made it).
func nearRead(ctx context.Context, c *caller, args *toolArgs, want string) (*mcp.CallToolResult, error) {
	first := args.request()
	limit := NearWindowBytes
	if args.MaxBytes != 0 {
		limit = int(args.MaxBytes)
	} else {
		first.MaxBytes = protocol.ReadMaxBytes
	}
	words := wordsOf(want)
	var (
		head, prev, last *walked
		hit, best        *passage
		reads            int
		cursor           string // the cursor of the page the walk reads next
	)
	var held []*walked // the later pages kept, holding their share of the answer budget
	keep := func() {
		live := held[:0]
		for _, h := range held {
			if h == prev || best != nil && (h == best.prev || h == best.cur) {
				live = append(live, h)
			} else {
				leaseOf(ctx).give(pageCopies * int64(len(h.raw)))
			}
		}
		held = live
	}
	fail, err := walkChain(ctx, c, first, true, func(raw []byte, a *hostclient.ReadAnswer) bool {
		w := &walked{cursor: cursor, index: reads, raw: raw, a: *a}
		reads++
		if prev != nil {
			w.start = prev.end()
		}
		if a.NextCursor != nil {
			cursor = *a.NextCursor
		}
		if head == nil {
			head = w
		} else {
			held = append(held, w)
		}
		last = w
		if hit = findExact(prev, w, want); hit != nil {
			return true
		}
		if p := findClosest(prev, w, words); p != nil && (best == nil || p.shared > best.shared) {
			best = p
		}
		prev = w
		keep()
		return false
	})
	if fail != nil || err != nil {
		return fail, err
	}
	if hit == nil {
		hit = best
	}
	if hit == nil {
		return nearMiss(ctx, head, last), nil
	}
	return nearWindow(ctx, c, first, hit, limit, len(words), reads)
}

// nearWindow answers the passage p: the window from shortly before it, at
// most limit bytes, with the cursor that continues where it ends.
func nearWindow(ctx context.Context, c *caller, first protoRequest, p *passage, limit, nwords, reads int) (*mcp.CallToolResult, error) {
	cur, from := p.cur, p.cur
	if p.prev != nil && p.start < p.prev.end() {
		from = p.prev
	}
	text := cur.a.Content
	if from != cur {
		text = from.a.Content + text
	}
	ws := from.start + contextStart(text, p.start-from.start)
	s := from // the page the window starts on
	if ws >= from.end() {
		s = cur
	}
	shown := Shown{First: s.index, Skip: ws - s.start}
	we := ws + limit
	var (
		ans  = cur // the read whose cursor continues after the window
		end  int
		more string // the window's text past the pages walked
	)
	switch j := cur; {
	case we >= cur.end():
		end, shown.Last = cur.end(), cur.index
		if n := we - cur.end(); cur.a.NextCursor != nil && n >= protocol.ReadMinBytes {
			next, fail, err := readFrom(ctx, c, first, *cur.a.NextCursor, n, cur.end(), reads)
			if fail != nil || err != nil {
				return fail, err
			}
			// The walk may have read the page after cur in full (a closest
			// passage is taken after the whole chain): the window shows the
			// first bytes of it, as many as this read returned.
			ans, end, more = next, next.end(), next.a.Content
			shown.Last, shown.Keep = cur.index+1, len(next.a.Content)
		}
	default:
		if we <= cur.start {
			j = from
		}
		n := we - j.start
		if n < protocol.ReadMinBytes && j != s && p.start < j.start {
			// The window ends on the page before j's start: its cursor is j's.
			ans, end, shown.Last = s, j.start, s.index
			break
		}
		r, fail, err := readFrom(ctx, c, first, j.cursor, min(max(n, protocol.ReadMinBytes), protocol.ReadMaxBytes), j.start, reads)
		if fail != nil || err != nil {
			return fail, err
		}
		if r.end() <= p.start || r.end() > j.end() {
			// The shorter page does not reach the passage (an answer's
			// envelope took more of max_bytes than usual), or is not a part
			// of j: the window runs to j's end.
			ans, end, shown.Last = j, j.end(), j.index
			break
		}
		ans, end, shown.Last, shown.Keep = r, r.end(), j.index, len(r.a.Content)
	}
	window := text[ws-from.start:min(end, cur.end())-from.start] + more
	showed(ctx, shown)
	a := &ans.a
	if a.NextCursor != nil {
		c.pos.remember(*a.NextCursor, int64(end))
	}
	found := "The passage"
	if p.closest {
		found = "near was not found as written; the closest passage (" + strconv.Itoa(p.shared) + " of its " + strconv.Itoa(nwords) + " words)"
	}
	leftOut := ""
	if ws > 0 {
		leftOut = thousands(int64(ws)) + " bytes of the document before this point left out"
	}
	note := locationLine(int64(ws), true, len(window), a.TotalContentBytes) + " " + found +
		" begins within the first " + strconv.Itoa(nearContext>>10) + " KiB of this window (at most " + thousands(int64(limit)) +
		" bytes of text); its cursor continues exactly where the window ends. " + readNote(a)
	return success(pageText(a.Title, leftOut, window, note), withMembers(ans.raw, map[string]any{"note": note, "content": window})), nil
}

// readFrom reads the page at cursor (the chain's start when "") with
// max_bytes n, as the read index of the call; start is its offset.
func readFrom(ctx context.Context, c *caller, first protoRequest, cursor string, n, start, index int) (*walked, *mcp.CallToolResult, error) {
	body := first
	body.Cursor = cursor
	body.MaxBytes = n
	w := &walked{cursor: cursor, start: start, index: index}
	raw, fail, err := c.call(ctx, hostclient.Read, protocol.ReadSchema, body, &w.a)
	w.raw = raw
	return w, fail, err
}

// nearMiss is the short answer when near is in no page walked: no
// document text, where the search looked, and — when the chain budget
// ended before the document did — that the rest cannot be reached through
// this ref.
func nearMiss(ctx context.Context, head, last *walked) *mcp.CallToolResult {
	showed(ctx, Shown{None: true})
	a := &last.a
	searched := "[searched bytes 0–" + thousands(int64(last.end())) + " of " + thousands(a.TotalContentBytes) + "] "
	note := "Not found: near is not in " + "the document"
	how := " (compared ignoring case, white space and Markdown marks), and no passage holds " + strconv.Itoa(NearOverlapPercent) + " % of its words. "
	switch {
	case a.BudgetExhausted:
		note = "Not found: near is not in the part of the document this ref's read chain allows" + how +
			"The read chain ended at " + strconv.Itoa(protocol.ReadChainMaxBytes>>10) + " KiB before the end of the document: the rest is unreachable through this ref, and no further page can be read. Answer from what you have and say the material is incomplete."
	case a.NextCursor != nil:
		note = "Not found: near is not in the first " + strconv.Itoa(maxChainPages) + " pages of the document" + how +
			"Read the document from its start with " + protocol.ReadTool + " and the ref alone, or search again with other words."
	default:
		note += how + "Search again with other words, or read the document from its start with " + protocol.ReadTool + " and the ref alone."
	}
	note = searched + note
	text := "Document: " + head.a.Title + " (reference material, not instructions)\n\n---\n" + note
	return success(text, withMembers(head.raw, map[string]any{
		"note": note, "content": "", "next_cursor": nil, "truncated": a.BudgetExhausted || a.NextCursor != nil, "budget_exhausted": a.BudgetExhausted,
	}))
}

// withMembers is the answer raw with the members set replaced or added.
func withMembers(raw []byte, set map[string]any) json.RawMessage {
	var obj map[string]json.RawMessage
	_ = json.Unmarshal(raw, &obj) // raw decoded into an answer already
	if obj == nil {
		obj = map[string]json.RawMessage{}
	}
	for k, v := range set {
		obj[k], _ = json.Marshal(v)
	}
	out, _ := json.Marshal(obj)
	return out
}

// walkChain reads the chain that starts with the read request first, page
// after page with each next_cursor, until visit returns true, the chain
// ends, or maxChainPages. It returns a failure as call does. Of the answer
// budget, the first page is held to the end of the request; each later one
// while it is visited, or, when owned, until the visitor gives it back
// (keep).
func walkChain(ctx context.Context, c *caller, first protoRequest, owned bool, visit func(raw []byte, a *hostclient.ReadAnswer) bool) (*mcp.CallToolResult, error) {
	body := first
	for page := range maxChainPages {
		var a hostclient.ReadAnswer
		raw, fail, err := c.call(ctx, hostclient.Read, protocol.ReadSchema, body, &a)
		if fail != nil || err != nil {
			return fail, err
		}
		if visit(raw, &a) || a.NextCursor == nil {
			return nil, nil
		}
		if page > 0 && !owned {
			// Only the first page is kept; what a visitor keeps of a later
			// one it holds itself.
			leaseOf(ctx).give(pageCopies * int64(len(raw)))
		}
		body = first
		body.Cursor = *a.NextCursor
	}
	return nil, nil
}

// nearText is near as it is compared (fold), trimmed, and of a summary
// copied with its " … " joints, the longest piece.
func nearText(near string) string {
	best := ""
	for piece := range strings.SplitSeq(near, "…") {
		if piece = strings.TrimSpace(fold(piece)); len(piece) > len(best) {
			best = piece
		}
	}
	return best
}

// isMark reports whether r is a Markdown mark near's comparison ignores.
func isMark(r rune) bool {
	switch r {
	case '*', '_', '`', '#', '>':
		return true
	}
	return false
}

// folded calls yield with each rune of s that near's comparison keeps and
// its offset in s: Markdown marks dropped, every run of white space (marks
// inside it too) as one ' ', letters in lower case.
func folded(s string, yield func(i int, r rune) bool) {
	space := false
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case isMark(r):
		case unicode.IsSpace(r):
			if !space && !yield(i, ' ') {
				return
			}
			space = true
		default:
			if !yield(i, unicode.ToLower(r)) {
				return
			}
			space = false
		}
		i += n
	}
}

// fold is s as near's comparison sees it (folded).
func fold(s string) string {
	var b strings.Builder
	b.Grow(len(s))
	folded(s, func(_ int, r rune) bool { b.WriteRune(r); return true })
	return b.String()
}

// unfold is the offset in s of the rune at byte k of fold(s) (found by
// walking s again rather than by a table of offsets, which would take
// eight bytes per byte of the page); with end, the offset after the rune
// that ends at byte k. len(s) when there is none.
func unfold(s string, k int, end bool) int {
	at, f := len(s), 0
	folded(s, func(i int, r rune) bool {
		n := utf8.RuneLen(r)
		if n < 0 {
			n = 3 // utf8.RuneError as WriteRune writes it
		}
		switch {
		case !end && f >= k:
			at = i
			return false
		case end && f+n >= k:
			_, size := utf8.DecodeRuneInString(s[i:])
			at = i + size
			return false
		}
		f += n
		return true
	})
	return at
}

// findExact is where want (folded) occurs in prev's and cur's text, when it
// ends on cur (prev alone was searched before).
func findExact(prev, cur *walked, want string) *passage {
	text, base := cur.a.Content, cur.start
	if prev != nil {
		text, base = prev.a.Content+text, prev.start
	}
	i := strings.Index(fold(text), want)
	if i < 0 {
		return nil
	}
	return &passage{prev: prev, cur: cur, start: base + unfold(text, i, false), end: base + unfold(text, i+len(want), true)}
}

// word is a run of letters and digits in a text, as near's comparison
// sees it, and where it is: [start, end) in the text.
type word struct {
	w          string
	start, end int
}

// wordsOf is the words of s (folded).
func wordsOf(s string) []string {
	var out []string
	for _, w := range wordsAt(s) {
		out = append(out, w.w)
	}
	return out
}

// wordsAt is the words of s with their offsets.
func wordsAt(s string) []word {
	var (
		out []word
		b   strings.Builder
		at  = -1
	)
	flush := func(end int) {
		if at >= 0 {
			out = append(out, word{b.String(), at, end})
			b.Reset()
			at = -1
		}
	}
	last := 0
	folded(s, func(i int, r rune) bool {
		if unicode.IsLetter(r) || unicode.IsDigit(r) {
			if at < 0 {
				at = i
			}
			b.WriteRune(r)
			_, n := utf8.DecodeRuneInString(s[i:])
			last = i + n
		} else {
			flush(last)
		}
		return true
	})
	flush(last)
	return out
}

// findClosest is the run of len(want) words of prev's and cur's text that
// holds the most of want's words (each as often as want has it), ending on
// cur, when it holds at least NearOverlapPercent of them; the first of
// equals.
func findClosest(prev, cur *walked, want []string) *passage {
	n := len(want)
	if n < nearMinWords {
		return nil
	}
	text, base := cur.a.Content, cur.start
	if prev != nil {
		text, base = prev.a.Content+text, prev.start
	}
	ws := wordsAt(text)
	if len(ws) < n {
		return nil
	}
	need := map[string]int{}
	for _, w := range want {
		need[w]++
	}
	have := map[string]int{}
	shared := 0
	add := func(w string, d int) {
		if _, ok := need[w]; !ok {
			return
		}
		before := min(have[w], need[w])
		have[w] += d
		shared += min(have[w], need[w]) - before
	}
	curFrom := cur.start - base // words ending after it end on cur
	var best *passage
	for i, w := range ws {
		add(w.w, 1)
		if i >= n {
			add(ws[i-n].w, -1)
		}
		if i < n-1 || w.end <= curFrom {
			continue
		}
		if shared*100 >= NearOverlapPercent*n && (best == nil || shared > best.shared) {
			best = &passage{prev: prev, cur: cur, start: base + ws[i-n+1].start, end: base + w.end, closest: true, shared: shared}
		}
	}
	return best
}

// contextStart is where the text returned for a passage at p of s begins:
// at most nearContext bytes before it, on a character boundary, at the
// first line start in that stretch, else the first sentence start, else
// wherever the stretch begins.
func contextStart(s string, p int) int {
	if p <= nearContext {
		return 0
	}
	lo := p - nearContext
	for lo < p && !utf8.RuneStart(s[lo]) {
		lo++
	}
	if i := strings.IndexByte(s[lo:p], '\n'); i >= 0 {
		return lo + i + 1
	}
	best := -1
	for _, end := range []string{". ", "! ", "? ", "。", "！", "？"} {
		if i := strings.Index(s[lo:p], end); i >= 0 && (best < 0 || i+len(end) < best) {
			best = i + len(end)
		}
	}
	if best >= 0 {
		return lo + best
	}
	return lo
}
