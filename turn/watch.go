package turn

import (
	"encoding/json"
)

// FieldWatch follows a turn request body as it arrives and reports as soon
// as a top-level "knowledge_delivery" key has gone by (escapes in the key
// undone, like ParseRequest). It lets the edge answer an unauthenticated
// turn that carries the field (401) without waiting for the rest of a body
// the caller may trickle; a body it cannot follow (not an object) is simply
// never reported, and ParseRequest on the whole body stays the decision.
// The zero value is ready; it holds at most one key's bytes.
type FieldWatch struct {
	started, dead, found bool
	depth                int
	inStr, esc           bool
	isKey, expectKey     bool
	key                  []byte
	keyLong              bool
}

// maxWatchedKey bounds the bytes kept of a key: "knowledge_delivery"
// spelled entirely in \u escapes is 108 bytes.
const maxWatchedKey = 128

// Write feeds the next bytes of the body and reports whether the field
// has been seen (in these or earlier bytes).
func (f *FieldWatch) Write(p []byte) bool {
	for _, c := range p {
		if f.found || f.dead {
			break
		}
		if f.inStr {
			switch {
			case f.esc:
				f.esc = false
			case c == '\\':
				f.esc = true
			case c == '"':
				f.inStr = false
				if f.isKey && !f.keyLong {
					var k string
					if json.Unmarshal(append(append([]byte{'"'}, f.key...), '"'), &k) == nil && k == "knowledge_delivery" {
						f.found = true
					}
				}
				continue
			}
			if f.isKey {
				if len(f.key) < maxWatchedKey {
					f.key = append(f.key, c)
				} else {
					f.keyLong = true
				}
			}
			continue
		}
		switch c {
		case ' ', '\t', '\n', '\r':
		case '{':
			if !f.started {
				f.started, f.expectKey = true, true
			}
			f.depth++
		case '[':
			if !f.started {
				f.dead = true
			}
			f.depth++
		case '}', ']':
			f.depth--
			if f.depth <= 0 {
				f.dead = true // the object ended: nothing more is top level
			}
		case '"':
			if !f.started {
				f.dead = true
				break
			}
			f.inStr = true
			f.isKey = f.depth == 1 && f.expectKey
			f.expectKey = false
			f.key, f.keyLong = f.key[:0], false
		case ',':
			if f.depth == 1 {
				f.expectKey = true
			}
		default:
			if !f.started {
				f.dead = true
			}
		}
	}
	return f.found
}
