package turn

// What both turn directions (request.go, answer.go) add to
// internal/jsonscan, which they call directly: member callbacks that skip
// (or descend into) each value, and a member's value read.
//
// Both directions splice byte ranges instead of re-marshaling: the scanner
// (same grammar and nesting limit as encoding/json.Valid) finds the exact
// bytes of the members needed, and everything else is copied as is, so
// memory, tool schemas and every other field keep their exact encoding,
// key order and whitespace. Only top-level members (and the members of the
// response's top-level "context" object) are ever looked at; a
// "knowledge_delivery" key nested anywhere else is ordinary data. Keys are
// compared after JSON unescaping, so "knowledge\u005fdelivery" is the field.

import "github.com/bailinghub/knowledge-sidecar/internal/jsonscan"

// scanObject scans the object starting at b[i] == '{' at nesting depth
// depth, calls fn (if not nil) for every member in order, and returns the
// index just after the closing '}'. When a member's value is invalid, fn is
// still called for it, with ValEnd == -1, before the error is returned.
func scanObject(b []byte, i, depth int, fn func(jsonscan.Member)) (int, error) {
	return scanMembers(b, i, depth, fn, nil, nil)
}

// scanMembers is scanObject that can also look one level down in the
// same pass: when into is not nil it is called (with the key fields of m set)
// for every member whose value is an object, and when it answers true, sub
// gets that object's members the way fn gets this object's.
func scanMembers(b []byte, i, depth int, fn func(jsonscan.Member), into func(jsonscan.Member) bool, sub func(jsonscan.Member)) (int, error) {
	if fn == nil && into == nil {
		return jsonscan.Object(b, i, depth, nil)
	}
	return jsonscan.Object(b, i, depth, func(m jsonscan.Member) (int, error) {
		var end int
		var err error
		if into != nil && m.ValStart < len(b) && b[m.ValStart] == '{' && into(m) {
			end, err = scanObject(b, m.ValStart, depth+1, sub)
		} else {
			end, err = jsonscan.SkipValue(b, m.ValStart, depth)
		}
		if fn != nil {
			// On an error the key is still reported, with a broken value, so
			// a caller can tell that the member was there.
			m.ValEnd = end
			if err != nil {
				m.ValEnd = -1
			}
			fn(m)
		}
		return end, err
	})
}

// valueBytes is member m's value (nil for a zero member).
func valueBytes(b []byte, m jsonscan.Member) []byte {
	if m.ValEnd <= m.ValStart {
		return nil
	}
	return b[m.ValStart:m.ValEnd]
}

// stringOf decodes member m's value if it is a JSON string, exactly as
// encoding/json does (jsonscan.Unquote).
func stringOf(b []byte, m jsonscan.Member) (string, bool) { return jsonscan.Unquote(valueBytes(b, m)) }
