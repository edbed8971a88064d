package testkit

import (
	"fmt"
	"strings"
)

// Vocabulary is the words Document writes: English and CJK words, quotes, a
// backslash — something for a lexical scorer to match and for JSON and
// UTF-8 handling to get wrong.
var Vocabulary = strings.Fields(`refund window shipping carrier order return policy customer
	退款 窗口 operations handbook procedure escalation invoice warehouse parcel tracking
	damaged replacement "quoted" back\slash tab stop`)

// Document is the deterministic Markdown document number i of about size
// bytes (at least size, at most one word more): a title heading, then
// Vocabulary's words in an order that depends on i, a sentence end every 12
// words and a section heading every 40.
func Document(i, size int) (title, content string) {
	title = fmt.Sprintf("Bench document %02d", i)
	var b strings.Builder
	b.WriteString("# " + title + "\n\n")
	for n := 0; b.Len() < size; n++ {
		if n%40 == 0 {
			fmt.Fprintf(&b, "\n\n## Section %d\n\n", n/40)
		}
		b.WriteString(Vocabulary[(n*7+i*13)%len(Vocabulary)])
		if n%12 == 11 {
			b.WriteString(". ")
		} else {
			b.WriteByte(' ')
		}
	}
	return title, b.String()
}
