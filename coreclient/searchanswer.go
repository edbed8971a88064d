package coreclient

// Core's 200 answer to POST /kb/search (CORE_FACTS §5.2), decoded in one
// pass over the bytes with internal/jsonscan instead of encoding/json's
// reflection: the biggest single cost of a knowledge search (issue 22).
// Speed-only code (DESIGN 14) that earns its place: with encoding/json in
// its stead a whole search cost 8–30 % more CPU in the load tool's
// side-by-side runs, above 10 % in three of four (docs/performance.md,
// "Decisions: speed-only code"); BenchmarkKBSearchDecode compares the two
// on their own.
//
// decodeSearch accepts and refuses exactly what
// json.Unmarshal(body, &searchResponse{}) accepts and refuses and gives the
// same values, so the answers SearchKB makes of Core's bytes did not change
// with it; FuzzDecodeSearch keeps that true. The quirks of encoding/json it
// therefore follows on purpose:
//
//   - keys match case-insensitively by encoding/json's folding, where U+017F
//     'ſ' is an 's' and U+212A (Kelvin) a 'k'; unknown members are skipped;
//   - a repeated member decodes again into the value already there (last
//     one wins): a repeated "hits" array decodes each hit into the hit
//     already at its index, keeping the fields it does not set, and an index
//     the previous array reached but a shorter one in between cut off comes
//     back with its old value (the slice is only resliced);
//   - null leaves a string, number or hit as it was, and makes an array nil;
//     an empty array is an empty (non-nil) slice;
//   - doc_id is a json.Number: a number's literal text, or a string holding
//     a valid number literal; seq must be an integer that fits an int, score
//     a float64 (overflow refused);
//   - a top-level null is an empty answer; any other non-object is refused,
//     as is anything after the value.

import (
	"encoding/json"
	"errors"
	"strconv"
	"unicode"
	"unicode/utf8"

	"github.com/bailinghub/knowledge-sidecar/internal/jsonscan"
)

// searchResponse is Core's answer; Core sends kb_ids (its docs say kb_id).
// The tags are what encoding/json would decode by (the fuzz oracle).
type searchResponse struct {
	KBIDs []string    `json:"kb_ids"`
	Hits  []searchHit `json:"hits"`
}

// searchHit is one of Core's hits.
type searchHit struct {
	Score   float64     `json:"score"`
	Content string      `json:"content"`
	DocID   json.Number `json:"doc_id"`
	Title   string      `json:"title"`
	Seq     int         `json:"seq"`
	KBID    string      `json:"kb_id"`
}

// errSearchAnswer: the answer is not what json.Unmarshal would decode into
// searchResponse (invalid JSON, or a value of the wrong type).
var errSearchAnswer = errors.New("unusable search answer")

// decodeSearch decodes body as json.Unmarshal(body, &r) would (see the top
// of this file).
func decodeSearch(body []byte) (searchResponse, error) {
	var r searchResponse
	d := searchDecoder{b: body}
	i := jsonscan.SkipWS(body, 0)
	if i >= len(body) {
		return r, errSearchAnswer
	}
	var end int
	var err error
	switch body[i] {
	case '{':
		end, err = jsonscan.Object(body, i, 1, func(m jsonscan.Member) (int, error) {
			switch fieldOf(body, m) {
			case fieldKBIDs:
				return d.strs(m.ValStart, 1, &r.KBIDs)
			case fieldHits:
				return d.hits(m.ValStart, 1, &r.Hits)
			}
			return jsonscan.SkipValue(body, m.ValStart, 1)
		})
	case 'n':
		end, err = jsonscan.SkipValue(body, i, 0)
	default:
		return r, errSearchAnswer
	}
	if err != nil || jsonscan.SkipWS(body, end) != len(body) {
		return searchResponse{}, errSearchAnswer
	}
	return r, nil
}

// searchDecoder is decodeSearch's state: the answer and the short values
// its hits repeat. Its methods decode the value starting at b[i], held at
// nesting depth depth, into *dst and return the index just after it.
type searchDecoder struct {
	b                     []byte
	titles, kbIDs, docIDs repeats
}

// at is b[i], or 0 (no value starts with it) past the end.
func (d *searchDecoder) at(i int) byte {
	if i < len(d.b) {
		return d.b[i]
	}
	return 0
}

// nullOr checks how the value at b[i] begins: a null is skipped (null is
// true, end is after it), which leaves the field as it was; a value that
// begins with open is the caller's to decode (null false, err nil);
// anything else is errSearchAnswer.
func (d *searchDecoder) nullOr(i, depth int, open byte) (end int, null bool, err error) {
	switch d.at(i) {
	case 'n':
		end, err = jsonscan.SkipValue(d.b, i, depth)
		return end, true, err
	case open:
		return 0, false, nil
	}
	return 0, false, errSearchAnswer
}

// hits decodes the array of hits the way encoding/json decodes into a
// slice (see the top of this file).
func (d *searchDecoder) hits(i, depth int, dst *[]searchHit) (int, error) {
	return decodeArray(d, i, depth, dst, 20, d.hit) // Core sends at most 20 hits (CORE_FACTS §5.6)
}

// hit decodes one hit, keeping the fields the object does not set.
func (d *searchDecoder) hit(i, depth int, h *searchHit) (int, error) {
	if end, null, err := d.nullOr(i, depth, '{'); null || err != nil {
		return end, err
	}
	return jsonscan.Object(d.b, i, depth+1, func(m jsonscan.Member) (int, error) {
		j, depth := m.ValStart, depth+1
		switch fieldOf(d.b, m) {
		case fieldScore:
			return d.number(j, depth, func(lit []byte) bool {
				f, err := strconv.ParseFloat(string(lit), 64)
				h.Score = f
				return err == nil
			})
		case fieldContent:
			return d.str(j, depth, &h.Content, nil)
		case fieldDocID:
			return d.docID(j, depth, &h.DocID)
		case fieldTitle:
			return d.str(j, depth, &h.Title, &d.titles)
		case fieldSeq:
			return d.number(j, depth, func(lit []byte) bool {
				n, err := strconv.ParseInt(string(lit), 10, 0)
				h.Seq = int(n)
				return err == nil
			})
		case fieldKBID:
			return d.str(j, depth, &h.KBID, &d.kbIDs)
		}
		return jsonscan.SkipValue(d.b, j, depth)
	})
}

// strs decodes an array of strings like hits.
func (d *searchDecoder) strs(i, depth int, dst *[]string) (int, error) {
	return decodeArray(d, i, depth, dst, 1, func(j, depth int, v *string) (int, error) { // the one KB asked for
		return d.str(j, depth, v, nil)
	})
}

// decodeArray decodes the array at b[i] into *dst the way encoding/json
// decodes into a slice: null sets it to nil, each element is decoded by
// elem into the slot extend makes for it (room for hint elements at first),
// and the slice ends at the array's length.
func decodeArray[T any](d *searchDecoder, i, depth int, dst *[]T, hint int, elem func(j, depth int, v *T) (int, error)) (int, error) {
	if d.at(i) == 'n' {
		*dst = nil
		return jsonscan.SkipValue(d.b, i, depth)
	}
	if d.at(i) != '[' {
		return 0, errSearchAnswer
	}
	s, n := *dst, 0
	end, err := jsonscan.Array(d.b, i, depth+1, func(j int) (int, error) {
		s = extend(s, n, hint)
		n++
		return elem(j, depth+1, &s[n-1])
	})
	*dst = truncate(s, n)
	return end, err
}

// extend makes index n of s usable the way encoding/json does: within the
// capacity s is resliced, so an element that a longer earlier array left
// there keeps its value; beyond it s grows with a zero element. An empty s
// starts with room for hint elements: one allocation for a usual answer
// rather than encoding/json's doublings, and no value changes, since what
// lies past len was never written.
func extend[T any](s []T, n, hint int) []T {
	switch {
	case n < len(s):
		return s
	case n < cap(s):
		return s[:n+1]
	case cap(s) == 0:
		return make([]T, 1, max(hint, 1))
	}
	var zero T
	return append(s, zero)
}

// truncate ends s after n decoded elements; none is an empty, non-nil slice.
func truncate[T any](s []T, n int) []T {
	if n == 0 {
		return []T{}
	}
	return s[:n]
}

// str decodes a string; null leaves *dst. rep, when not nil, is looked
// up first and remembers the value.
func (d *searchDecoder) str(i, depth int, dst *string, rep *repeats) (int, error) {
	if end, null, err := d.nullOr(i, depth, '"'); null || err != nil {
		return end, err
	}
	end, esc, err := jsonscan.String(d.b, i)
	if err != nil {
		return 0, err
	}
	if rep != nil && !esc {
		if s, ok := rep.get(d.b[i+1 : end-1]); ok {
			*dst = s
			return end, nil
		}
	}
	*dst, _ = jsonscan.Unquote(d.b[i:end])
	if rep != nil {
		rep.put(*dst)
	}
	return end, nil
}

// number scans a number and hands its literal to set, which stores it and
// reports whether it fits; null leaves the field.
func (d *searchDecoder) number(i, depth int, set func(lit []byte) bool) (int, error) {
	switch c := d.at(i); {
	case c == 'n':
		return jsonscan.SkipValue(d.b, i, depth)
	case c == '-' || c >= '0' && c <= '9':
	default:
		return 0, errSearchAnswer
	}
	end, err := jsonscan.Number(d.b, i)
	if err != nil {
		return 0, err
	}
	if !set(d.b[i:end]) {
		return 0, errSearchAnswer
	}
	return end, nil
}

// docID decodes a json.Number: a number's literal, or a string that holds
// a valid number literal once unescaped; null leaves it.
func (d *searchDecoder) docID(i, depth int, dst *json.Number) (int, error) {
	if d.at(i) != '"' {
		return d.number(i, depth, func(lit []byte) bool {
			s, ok := d.docIDs.get(lit)
			if !ok {
				s = string(lit)
				d.docIDs.put(s)
			}
			*dst = json.Number(s)
			return true
		})
	}
	var s string
	end, err := d.str(i, depth, &s, &d.docIDs)
	if err != nil {
		return 0, err
	}
	if !isNumberLiteral(s) {
		return 0, errSearchAnswer
	}
	*dst = json.Number(s)
	return end, nil
}

// repeats remembers the last few distinct short values of one field, so
// that the kb_id every hit repeats, and the title and doc_id of a
// document's several chunks, are one string each rather than one
// allocation per hit. Only raw bytes without escapes are looked up: equal
// to a remembered (valid UTF-8) value, they decode to exactly it.
type repeats struct {
	v    [4]string
	next int
}

// maxRepeat is the longest value repeats remembers: ids and titles, not texts.
const maxRepeat = 256

func (r *repeats) get(raw []byte) (string, bool) {
	if len(raw) > maxRepeat {
		return "", false
	}
	for _, s := range r.v {
		if s == string(raw) {
			return s, true
		}
	}
	return "", false
}

func (r *repeats) put(s string) {
	if len(s) <= maxRepeat {
		r.v[r.next] = s
		r.next = (r.next + 1) % len(r.v)
	}
}

// isNumberLiteral reports whether s is exactly one JSON number, the test
// encoding/json applies to a string decoded into a json.Number.
func isNumberLiteral(s string) bool {
	if s == "" || s[0] != '-' && (s[0] < '0' || s[0] > '9') {
		return false
	}
	end, err := jsonscan.Number([]byte(s), 0)
	return err == nil && end == len(s)
}

// field is a member of searchResponse or searchHit, by its key.
type field uint8

const (
	fieldOther field = iota
	fieldKBIDs
	fieldHits
	fieldScore
	fieldContent
	fieldDocID
	fieldTitle
	fieldSeq
	fieldKBID
)

// fieldOf names the field member m's key selects, matched as encoding/json
// matches keys against these ASCII tags: the key is unescaped, then folded
// (ASCII letters to upper case, any other rune to the smallest rune of its
// Unicode case orbit, which is ASCII only for 'ſ' and the Kelvin sign) and
// compared with the tag folded alike. A key folding to anything but
// ASCII, or longer than the longest tag, is an unknown member.
func fieldOf(b []byte, m jsonscan.Member) field {
	key := b[m.KeyStart+1 : m.KeyEnd-1]
	if m.KeyEsc {
		s, _ := jsonscan.Unquote(b[m.KeyStart:m.KeyEnd])
		key = []byte(s)
	}
	var buf [len("content")]byte
	n := 0
	for k := 0; k < len(key); {
		c := key[k]
		if c < utf8.RuneSelf {
			if 'a' <= c && c <= 'z' {
				c -= 'a' - 'A'
			}
			k++
		} else {
			r, size := utf8.DecodeRune(key[k:])
			if r = foldRune(r); r >= utf8.RuneSelf {
				return fieldOther
			}
			c = byte(r)
			k += size
		}
		if n == len(buf) {
			return fieldOther
		}
		buf[n] = c
		n++
	}
	switch string(buf[:n]) {
	case "KB_IDS":
		return fieldKBIDs
	case "HITS":
		return fieldHits
	case "SCORE":
		return fieldScore
	case "CONTENT":
		return fieldContent
	case "DOC_ID":
		return fieldDocID
	case "TITLE":
		return fieldTitle
	case "SEQ":
		return fieldSeq
	case "KB_ID":
		return fieldKBID
	}
	return fieldOther
}

// foldRune is the smallest rune of r's orbit under unicode.SimpleFold, the
// rune encoding/json folds r to when it compares keys.
func foldRune(r rune) rune {
	low := r
	for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
		low = min(low, f)
	}
	return low
}
