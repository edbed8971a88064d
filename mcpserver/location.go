package mcpserver

import (
	"strconv"
	"sync"

	"github.com/bailinghub/knowledge-sidecar/hostclient"
)

// Where a page is (SPEC §10): every knowledge_read result that shows text
// says which bytes of the document it holds, "[bytes 65,536–73,728 of
// 100,000]" (the total is total_content_bytes). A cursor is opaque, so a
// page's offset is known when the read had no cursor (0), when the page
// ends the document (total − its size), while near walks a chain from
// there, or when the cursor is one this server issued and still
// remembers; otherwise the text gives the page's size and the total,
// "[8,192 bytes of 100,000]".

// maxRemembered bounds the cursors a server remembers the offset of; the
// oldest is forgotten first.
const maxRemembered = 4096

// offsets maps the cursors this server returned to the offset their page
// starts at.
type offsets struct {
	mu    sync.Mutex
	at    map[string]int64
	order []string // insertion order, for eviction
}

func (o *offsets) remember(cursor string, at int64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.at == nil {
		o.at = make(map[string]int64)
	}
	if _, ok := o.at[cursor]; ok {
		return
	}
	if len(o.order) >= maxRemembered {
		delete(o.at, o.order[0])
		o.order = o.order[1:]
	}
	o.at[cursor] = at
	o.order = append(o.order, cursor)
}

func (o *offsets) lookup(cursor string) (int64, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	at, ok := o.at[cursor]
	return at, ok
}

// pageStart is the offset of page a read with cursor ("" none) answered,
// when known.
func (o *offsets) pageStart(cursor string, a *hostclient.ReadAnswer) (int64, bool) {
	switch {
	case cursor == "":
		return 0, true
	case a.NextCursor == nil && !a.BudgetExhausted && a.TotalContentBytes >= int64(len(a.Content)):
		return a.TotalContentBytes - int64(len(a.Content)), true
	}
	return o.lookup(cursor)
}

// issued records where the page after a starts, a starting at start.
func (o *offsets) issued(a *hostclient.ReadAnswer, start int64, known bool) {
	if known && a.NextCursor != nil {
		o.remember(*a.NextCursor, start+int64(len(a.Content)))
	}
}

// locationLine says where n bytes of text starting at start are in a
// document of total bytes; without a known start, their size and the total.
func locationLine(start int64, known bool, n int, total int64) string {
	if !known {
		return "[" + thousands(int64(n)) + " bytes of " + thousands(total) + "]"
	}
	return "[bytes " + thousands(start) + "–" + thousands(start+int64(n)) + " of " + thousands(total) + "]"
}

// thousands is n with a comma every three digits.
func thousands(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := n < 0
	if neg {
		s = s[1:]
	}
	var b []byte
	for i := range len(s) {
		if i > 0 && (len(s)-i)%3 == 0 {
			b = append(b, ',')
		}
		b = append(b, s[i])
	}
	if neg {
		return "-" + string(b)
	}
	return string(b)
}
