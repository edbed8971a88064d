package knowledge

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/bailinghub/knowledge-sidecar/corefacts/jsstring"
)

// Request decoding: strict, never clamping or fixing input (SPEC §2).
// Optional fields may be null, which means the same as absent (so a host may
// pass a previous next_cursor of null back verbatim).

// maxQueryUnits is the query limit in UTF-16 code units (JavaScript's
// String length, as Core counts it): a character above U+FFFF counts 2.
const maxQueryUnits = 2000

var (
	uuidPattern       = regexp.MustCompile(`^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$`)
	jsonIntegerSyntax = regexp.MustCompile(`^-?(0|[1-9][0-9]{0,15})$`)
)

// decodeObject splits a JSON object into its members, rejecting anything
// but exactly one object, duplicate members and members not in allowed.
func decodeObject(body []byte, allowed ...string) (map[string]json.RawMessage, error) {
	if !utf8.Valid(body) {
		return nil, errInvalid("The request body must be valid UTF-8.")
	}
	// Only JSON's own whitespace (RFC 8259 §2: space, tab, LF, CR) may
	// surround the object; bytes.TrimSpace would also take \v, \f, U+0085,
	// U+00A0 and the other Unicode spaces, silently fixing the body.
	trimmed := bytes.Trim(body, jsonSpace)
	if len(trimmed) == 0 || trimmed[0] != '{' {
		if len(trimmed) > 0 && json.Valid(trimmed) {
			return nil, errInvalid("The request body must be a JSON object.")
		}
		return nil, errInvalid("The request body must be valid JSON.")
	}
	// encoding/json replaces an unpaired UTF-16 surrogate escape with
	// U+FFFD; that would be a silent fix of the client's text (SPEC §2).
	if loneSurrogateEscape(trimmed) {
		return nil, errInvalid("The request body contains an unpaired UTF-16 surrogate escape (\\ud800-\\udfff).")
	}
	dec := json.NewDecoder(bytes.NewReader(trimmed))
	if _, err := dec.Token(); err != nil { // '{'
		return nil, errInvalid("The request body must be valid JSON.")
	}
	out := map[string]json.RawMessage{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, errInvalid("The request body must be valid JSON.")
		}
		key, ok := tok.(string)
		if !ok {
			return nil, errInvalid("The request body must be valid JSON.")
		}
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, errInvalid("The request body must be valid JSON.")
		}
		known := false
		for _, a := range allowed {
			if a == key {
				known = true
				break
			}
		}
		if !known {
			return nil, errInvalid("Unknown field " + strconv.Quote(safeFieldName(key)) + ".")
		}
		if _, dup := out[key]; dup {
			return nil, errInvalid("Field " + key + " appears more than once.")
		}
		out[key] = raw
	}
	if _, err := dec.Token(); err != nil { // '}'
		return nil, errInvalid("The request body must be valid JSON.")
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errInvalid("The request body must contain exactly one JSON object.")
	}
	return out, nil
}

// jsonSpace is the whitespace JSON allows between tokens (RFC 8259 §2).
const jsonSpace = " \t\n\r"

// loneSurrogateEscape reports whether a string (member name or value) of
// the JSON text b has a \uXXXX escape of a UTF-16 surrogate that is not a
// high surrogate immediately followed by an escaped low one. Raw bytes need
// no check: the body is valid UTF-8, which cannot encode a surrogate. On
// text that is not JSON the answer does not matter (the decoder refuses
// it); the scan only stays in bounds.
func loneSurrogateEscape(b []byte) bool {
	inString := false
	for i := 0; i < len(b); i++ {
		c := b[i]
		if !inString {
			inString = c == '"'
			continue
		}
		switch c {
		case '"':
			inString = false
		case '\\':
			i++
			if i >= len(b) || b[i] != 'u' {
				continue
			}
			r, ok := hex4(b, i+1)
			if !ok {
				continue
			}
			i += 4
			switch {
			case r >= 0xDC00 && r <= 0xDFFF:
				return true // a low surrogate with no high one before it
			case r >= 0xD800 && r <= 0xDBFF:
				if i+2 >= len(b) || b[i+1] != '\\' || b[i+2] != 'u' {
					return true
				}
				lo, ok := hex4(b, i+3)
				if !ok || lo < 0xDC00 || lo > 0xDFFF {
					return true
				}
				i += 6 // the pair is consumed whole
			}
		}
	}
	return false
}

// hex4 decodes the four hexadecimal digits at b[at:at+4].
func hex4(b []byte, at int) (rune, bool) {
	if at+4 > len(b) {
		return 0, false
	}
	var r rune
	for _, c := range b[at : at+4] {
		r <<= 4
		switch {
		case c >= '0' && c <= '9':
			r |= rune(c - '0')
		case c >= 'a' && c <= 'f':
			r |= rune(c - 'a' + 10)
		case c >= 'A' && c <= 'F':
			r |= rune(c - 'A' + 10)
		default:
			return 0, false
		}
	}
	return r, true
}

// safeFieldName bounds an unknown field name echoed in a message.
func safeFieldName(k string) string {
	k = strings.ToValidUTF8(k, "?")
	if utf8.RuneCountInString(k) > 40 {
		r := []rune(k)
		k = string(r[:40]) + "…"
	}
	return k
}

func isNull(raw json.RawMessage) bool { return string(raw) == "null" }

// stringField decodes a JSON string member. present is false when the
// member is absent or (for optional members) null.
func stringField(m map[string]json.RawMessage, name string, required bool) (v string, present bool, err error) {
	raw, ok := m[name]
	if !ok || (!required && isNull(raw)) {
		if required {
			return "", false, errInvalid(name + " is required.")
		}
		return "", false, nil
	}
	if len(raw) == 0 || raw[0] != '"' {
		return "", false, errInvalid(name + " must be a string.")
	}
	if err := json.Unmarshal(raw, &v); err != nil {
		return "", false, errInvalid(name + " must be a string.")
	}
	return v, true, nil
}

// intField decodes an optional JSON integer member written without fraction
// or exponent, within [lo, hi].
func intField(m map[string]json.RawMessage, name string, lo, hi, def int) (int, error) {
	raw, ok := m[name]
	if !ok || isNull(raw) {
		return def, nil
	}
	rangeMsg := name + " must be an integer from " + strconv.Itoa(lo) + " to " + strconv.Itoa(hi) + "."
	if !jsonIntegerSyntax.Match(raw) {
		return 0, errInvalid(rangeMsg)
	}
	n, err := strconv.Atoi(string(raw))
	if err != nil || n < lo || n > hi {
		return 0, errInvalid(rangeMsg)
	}
	return n, nil
}

// runIDField decodes the optional run_id and returns it lowercased.
func runIDField(m map[string]json.RawMessage) (string, error) {
	v, present, err := stringField(m, "run_id", false)
	if err != nil || !present {
		return "", err
	}
	if !uuidPattern.MatchString(v) {
		return "", errInvalid("run_id must be a UUID.")
	}
	return strings.ToLower(v), nil
}

type searchRequest struct {
	query string
	limit int
	runID string
}

func parseSearch(body []byte) (searchRequest, error) {
	m, err := decodeObject(body, "query", "limit", "run_id")
	if err != nil {
		return searchRequest{}, err
	}
	var r searchRequest
	q, _, err := stringField(m, "query", true)
	if err != nil {
		return r, err
	}
	// Core counts and trims like JavaScript: emptiness after trim() (which
	// also removes U+FEFF) and the length in UTF-16 code units, so a query a
	// native Core accepts is accepted here and vice versa.
	if jsstring.Trim(q) == "" {
		return r, errInvalid("query must not be empty.")
	}
	if utf16Len(q) > maxQueryUnits {
		return r, errInvalid("query must not exceed 2000 characters.")
	}
	for _, c := range q {
		if c < 0x20 && c != '\t' && c != '\n' && c != '\r' {
			return r, errInvalid("query contains disallowed control characters.")
		}
	}
	r.query = q
	if r.limit, err = intField(m, "limit", 1, SearchMaxResults, SearchMaxResults); err != nil {
		return r, err
	}
	if r.runID, err = runIDField(m); err != nil {
		return r, err
	}
	return r, nil
}

type readRequest struct {
	ref       string
	runID     string
	maxBytes  int
	cursor    string
	hasCursor bool
}

func parseRead(body []byte) (readRequest, error) {
	m, err := decodeObject(body, "ref", "run_id", "max_bytes", "cursor")
	if err != nil {
		return readRequest{}, err
	}
	var r readRequest
	if r.ref, _, err = stringField(m, "ref", true); err != nil {
		return r, err
	}
	if r.ref == "" {
		return r, errInvalid("ref must not be empty.")
	}
	if r.runID, err = runIDField(m); err != nil {
		return r, err
	}
	if r.maxBytes, err = intField(m, "max_bytes", ReadMinBytes, ReadMaxBytes, ReadDefaultBytes); err != nil {
		return r, err
	}
	if r.cursor, r.hasCursor, err = stringField(m, "cursor", false); err != nil {
		return r, err
	}
	if r.hasCursor && r.cursor == "" {
		return r, errInvalid("cursor must not be empty.")
	}
	return r, nil
}
