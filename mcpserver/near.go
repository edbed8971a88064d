package mcpserver

import (
	"context"
	"fmt"
	"maps"
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
// of the host's — and returns the page holding the passage, trimmed so that
// the passage starts within its first 2 KiB. near is never sent to the
// endpoint: the protocol's read does not know it.
const (
	// NearMaxChars bounds near, in characters: a piece of a hint's summary.
	NearMaxChars = 200
	// nearContext is at most how much text before the passage is kept.
	nearContext = 1024
	// maxChainPages bounds the requests of one walk through a chain: the
	// 128 KiB budget in pages of at least 4 KiB, whatever the service says.
	maxChainPages = 64
)

// nearRead is knowledge_read with near (want, as nearText made it).
func nearRead(ctx context.Context, c *caller, args map[string]any, want string) (*mcp.CallToolResult, error) {
	first := maps.Clone(args)
	delete(first, "near")
	if _, ok := first["max_bytes"]; !ok {
		first["max_bytes"] = protocol.ReadMaxBytes
	}
	var (
		firstRaw []byte
		firstA   hostclient.ReadAnswer
		last     hostclient.ReadAnswer
		prev     string // the previous page's text, for a passage that straddles two pages
		res      *mcp.CallToolResult
		// Where this page and prev start (location.go), known from the first.
		start, prevStart, firstStart int64
		known, firstKnown            bool
		page                         = -1 // the page visited, from 0
	)
	fail, err := walkChain(ctx, c, first, func(raw []byte, a *hostclient.ReadAnswer) bool {
		page++
		if firstRaw == nil {
			firstRaw, firstA = raw, *a
			start, known = c.pos.pageStart(first, a)
			firstStart, firstKnown = start, known
		} else {
			prevStart, start = start, start+int64(len(prev))
		}
		last = *a
		text := prev + a.Content
		at := indexCollapsed(text, want)
		if at < 0 {
			prev = a.Content
			return false
		}
		// A match that starts in prev ends on this page: prev alone was searched before.
		base, pos, where, baseStart := a.Content, at-len(prev), "The passage is on this page", start
		if at < len(prev) {
			base, pos, where, baseStart = text, at, "The passage begins on the previous page, shown first with this one", prevStart
		}
		cut := contextStart(base, pos)
		trimmed := base[cut:]
		if at < len(prev) {
			showed(ctx, page-1, cut, page)
		} else {
			showed(ctx, page, cut, page)
		}
		note, leftOut := where+"; nothing before it was left out. ", ""
		if cut > 0 {
			note = fmt.Sprintf("%s; the %d bytes before it there were left out. ", where, cut)
			leftOut = strconv.Itoa(cut) + " bytes before this point left out"
		}
		note = locationLine(baseStart+int64(cut), known, len(trimmed), a.TotalContentBytes) + " " + note + readNote(a)
		c.pos.issued(a, start, known) // only the cursor the result shows
		res = success(pageText(a.Title, leftOut, trimmed, note), withNote(raw, note, &trimmed))
		return true
	})
	if fail != nil || err != nil {
		return fail, err
	}
	if res != nil {
		return res, nil
	}
	where := "the document"
	if last.BudgetExhausted || last.NextCursor != nil {
		where = "the part of the document this ref's read chain allows"
	}
	c.pos.issued(&firstA, firstStart, firstKnown)
	showed(ctx, 0, 0, 0)
	note := locationLine(firstStart, firstKnown, len(firstA.Content), firstA.TotalContentBytes) + " The near text was not found in " + where + " (compared with white space collapsed); this is the first page. " + readNote(&firstA)
	return success(pageText(firstA.Title, "", firstA.Content, note), withNote(firstRaw, note, nil)), nil
}

// walkChain reads the chain that starts with the read request first, page
// after page with each next_cursor, until visit returns true, the chain
// ends, or maxChainPages. It returns a failure as call does. Of the answer
// budget, each page is held while it is visited; the first is held to the
// end of the request.
func walkChain(ctx context.Context, c *caller, first map[string]any, visit func(raw []byte, a *hostclient.ReadAnswer) bool) (*mcp.CallToolResult, error) {
	body := maps.Clone(first)
	for page := range maxChainPages {
		var a hostclient.ReadAnswer
		raw, fail, err := c.call(ctx, hostclient.Read, protocol.ReadSchema, body, &a)
		if fail != nil || err != nil {
			return fail, err
		}
		if visit(raw, &a) || a.NextCursor == nil {
			return nil, nil
		}
		if page > 0 {
			// Only the first page is kept (a near miss answers it); what a
			// visitor keeps of a later one it holds itself.
			leaseOf(ctx).give(pageCopies * int64(len(raw)))
		}
		body = maps.Clone(first)
		body["cursor"] = *a.NextCursor
	}
	return nil, nil
}

// nearText is near as it is compared: white space collapsed and trimmed,
// and of a summary copied with its " … " joints, the longest piece.
func nearText(near string) string {
	best := ""
	for piece := range strings.SplitSeq(near, "…") {
		piece = collapse(piece)
		if piece = strings.TrimSpace(piece); len(piece) > len(best) {
			best = piece
		}
	}
	return best
}

// indexCollapsed is the byte offset in s where want (collapsed) starts when
// both are compared with white space collapsed; -1 when it does not occur.
func indexCollapsed(s, want string) int {
	i := strings.Index(collapse(s), want)
	if i < 0 {
		return -1
	}
	return uncollapsed(s, i)
}

// collapse is s with every run of Unicode white space replaced by one space.
func collapse(s string) string {
	var b strings.Builder
	b.Grow(len(s))
	space := false
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		if unicode.IsSpace(r) {
			if !space {
				b.WriteByte(' ')
			}
			space = true
		} else {
			b.WriteString(s[i : i+n])
			space = false
		}
		i += n
	}
	return b.String()
}

// uncollapsed is the offset in s of what byte at of collapse(s) came from
// (found by walking s again rather than by a table of offsets, which would
// take eight bytes per byte of the page).
func uncollapsed(s string, at int) int {
	k, space := 0, false
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		if unicode.IsSpace(r) {
			if !space {
				if k == at {
					return i
				}
				k++
			}
			space = true
		} else {
			if at < k+n {
				return i + at - k
			}
			k += n
			space = false
		}
		i += n
	}
	return len(s)
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
