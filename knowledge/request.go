package knowledge

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/bailinghub/knowledge-sidecar/corefacts"
	"github.com/bailinghub/knowledge-sidecar/corefacts/jsstring"
	"github.com/bailinghub/knowledge-sidecar/protocol"
)

// Request decoding: strict, never clamping or fixing input (SPEC §2).
// Optional fields may be null, which means the same as absent (so a host may
// pass a previous next_cursor of null back verbatim).

// CheckQuery applies SPEC §4's rules for a search query to q
// (jsstring.CheckQuery, the one definition the MCP tools share). It returns
// nil or the 400 invalid_request *Error the endpoint answers.
func CheckQuery(q string) *Error {
	if msg := jsstring.CheckQuery(q, protocol.MaxQueryUnits); msg != "" {
		return errInvalid(msg)
	}
	return nil
}

var uuidPattern = regexp.MustCompile(`^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$`)

// requestFields is a request body's members: vals[i] is the value (its
// JSON text) of the member named names[i], nil when the body has no such
// member. Four is the most members a body has.
type requestFields struct {
	names []string
	vals  [4]json.RawMessage
}

// get returns the value of the member name and whether the body has it.
func (f *requestFields) get(name string) ([]byte, bool) {
	for i, n := range f.names {
		if n == name {
			return f.vals[i], f.vals[i] != nil
		}
	}
	return nil, false
}

// bodySpec is one endpoint's request body: the members it allows, in the
// order their values are kept, and how they become its request.
type bodySpec[R any] struct {
	fields []string
	of     func(*requestFields) (R, error)
}

// The two bodies.
var (
	searchBody = bodySpec[searchRequest]{[]string{"query", "limit", "run_id"}, searchRequestOf}
	readBody   = bodySpec[readRequest]{[]string{"ref", "run_id", "max_bytes", "cursor"}, readRequestOf}
)

// A search's and a read's request, as their bodies' members give them.
type (
	searchRequest struct {
		query string
		limit int
		runID string
	}
	readRequest struct {
		ref       string
		runID     string
		maxBytes  int
		cursor    string
		hasCursor bool
	}
)

// parse decodes body (decodeObject) and makes the request of its members.
func (b bodySpec[R]) parse(body []byte) (R, error) {
	f, err := decodeObject(body, b.fields)
	if err != nil {
		var zero R
		return zero, err
	}
	return b.of(&f)
}

// decodeObject splits a JSON object into its members with encoding/json's
// Decoder (Token for '{' and each key, Decode of each value into a
// RawMessage), rejecting anything but exactly one object, duplicate members
// and members not in allowed. Each member's key and whole value are read
// before its name is judged; a name with escapes is judged unescaped.
// (A one-pass decoder over internal/jsonscan was about 10× faster on its
// own, 0.5 against 5.8 µs for a read body, but that is a few per cent of a
// whole search or read, below what DESIGN 14 asks of speed-only code:
// docs/performance.md, "Decisions: speed-only code".)
func decodeObject(body []byte, allowed []string) (requestFields, error) {
	f := requestFields{names: allowed}
	if !utf8.Valid(body) {
		return f, errInvalid("The request body must be valid UTF-8.")
	}
	// Only JSON's own whitespace (RFC 8259 §2: space, tab, LF, CR) may
	// surround the object; bytes.TrimSpace would also take \v, \f, U+0085,
	// U+00A0 and the other Unicode spaces, silently fixing the body.
	trimmed := bytes.Trim(body, jsonSpace)
	if len(trimmed) == 0 || trimmed[0] != '{' {
		if len(trimmed) > 0 && json.Valid(trimmed) {
			return f, errInvalid("The request body must be a JSON object.")
		}
		return f, errInvalid("The request body must be valid JSON.")
	}
	// encoding/json replaces an unpaired UTF-16 surrogate escape with
	// U+FFFD; that would be a silent fix of the client's text (SPEC §2).
	// This refusal comes before any other of the body's, wherever the
	// escape is; a body without a backslash has no escape to look at.
	if bytes.IndexByte(trimmed, '\\') >= 0 && loneSurrogateEscape(trimmed) {
		return f, errInvalid("The request body contains an unpaired UTF-16 surrogate escape (\\ud800-\\udfff).")
	}
	invalid := func() (requestFields, error) {
		return requestFields{names: allowed}, errInvalid("The request body must be valid JSON.")
	}
	dec := json.NewDecoder(bytes.NewReader(trimmed))
	if _, err := dec.Token(); err != nil { // '{'
		return invalid()
	}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return invalid()
		}
		key, ok := tok.(string)
		if !ok {
			return invalid()
		}
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return invalid()
		}
		i := slices.Index(allowed, key)
		if i < 0 {
			return requestFields{names: allowed}, errInvalid("Unknown field " + strconv.Quote(safeFieldName(key)) + ".")
		}
		if f.vals[i] != nil {
			return requestFields{names: allowed}, errInvalid("Field " + key + " appears more than once.")
		}
		f.vals[i] = raw
	}
	if _, err := dec.Token(); err != nil { // '}'
		return invalid()
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		// The body is trimmed, so whatever follows the object is more than
		// whitespace: another value, or bytes that are none.
		return requestFields{names: allowed}, errInvalid("The request body must contain exactly one JSON object.")
	}
	return f, nil
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

func isNull(raw []byte) bool { return string(raw) == "null" }

// stringField decodes a JSON string member. present is false when the
// member is absent or (for optional members) null.
func stringField(f *requestFields, name string, required bool) (v string, present bool, err error) {
	raw, ok := f.get(name)
	if !ok || (!required && isNull(raw)) {
		if required {
			return "", false, errInvalid(name + " is required.")
		}
		return "", false, nil
	}
	if raw[0] != '"' || json.Unmarshal(raw, &v) != nil {
		return "", false, errInvalid(name + " must be a string.")
	}
	return v, true, nil
}

// intField decodes an optional JSON integer member written without fraction
// or exponent, within [lo, hi].
func intField(f *requestFields, name string, lo, hi, def int) (int, error) {
	raw, ok := f.get(name)
	if !ok || isNull(raw) {
		return def, nil
	}
	n, ok := jsonInteger(raw)
	if !ok || n < int64(lo) || n > int64(hi) {
		return 0, errInvalid(name + " must be an integer from " + strconv.Itoa(lo) + " to " + strconv.Itoa(hi) + ".")
	}
	return int(n), nil
}

// jsonInteger decodes -?(0|[1-9][0-9]{0,15}): an integer without fraction
// or exponent, of at most 16 digits, which is always within int64 (and so
// never a case of its own, on any platform).
func jsonInteger(b []byte) (int64, bool) {
	neg := len(b) > 0 && b[0] == '-'
	if neg {
		b = b[1:]
	}
	if len(b) == 0 || len(b) > 16 || b[0] < '0' || b[0] > '9' || (b[0] == '0' && len(b) > 1) {
		return 0, false
	}
	var n int64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	if neg {
		n = -n
	}
	return n, true
}

// runIDField decodes the optional run_id and returns it lowercased.
func runIDField(f *requestFields) (string, error) {
	v, present, err := stringField(f, "run_id", false)
	if err != nil || !present {
		return "", err
	}
	if !isUUID(v) {
		return "", errInvalid("run_id must be a UUID.")
	}
	return strings.ToLower(v), nil
}

// isUUID is uuidPattern.MatchString without the regular expression: 36
// characters, hyphens at 8, 13, 18 and 23 and hexadecimal digits elsewhere.
func isUUID(s string) bool {
	if len(s) != 36 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch i {
		case 8, 13, 18, 23:
			if c != '-' {
				return false
			}
		default:
			if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F') {
				return false
			}
		}
	}
	return true
}

// searchRequestOf checks a search body's members (SPEC §4): the query by
// CheckQuery, limit 1 to protocol.SearchMaxResults, an optional run_id.
func searchRequestOf(f *requestFields) (r searchRequest, err error) {
	if r.query, _, err = stringField(f, "query", true); err != nil {
		return r, err
	}
	if e := CheckQuery(r.query); e != nil {
		return r, e
	}
	if r.limit, err = intField(f, "limit", 1, protocol.SearchMaxResults, protocol.SearchMaxResults); err != nil {
		return r, err
	}
	r.runID, err = runIDField(f)
	return r, err
}

// readRequestOf checks a read body's members (SPEC §6): a ref, an optional
// run_id, max_bytes within the page bounds, an optional cursor.
func readRequestOf(f *requestFields) (r readRequest, err error) {
	if r.ref, _, err = stringField(f, "ref", true); err != nil {
		return r, err
	}
	if r.ref == "" {
		return r, errInvalid("ref must not be empty.")
	}
	if r.runID, err = runIDField(f); err != nil {
		return r, err
	}
	if r.maxBytes, err = intField(f, "max_bytes", protocol.ReadMinBytes, protocol.ReadMaxBytes, protocol.ReadDefaultBytes); err != nil {
		return r, err
	}
	if r.cursor, r.hasCursor, err = stringField(f, "cursor", false); err != nil {
		return r, err
	}
	if r.hasCursor && r.cursor == "" {
		return r, errInvalid("cursor must not be empty.")
	}
	return r, nil
}

// call is one knowledge request past identity: who asks (the bearer and
// its session), for which workspace, the memory the answer may be written
// into, and its disclosure (nil when the audit is off).
type call struct {
	authorization string
	route         corefacts.RouteKey
	sess          corefacts.Session
	dst           []byte
	d             *Disclosure
}

// answer runs what search and read share: the endpoint's metrics, its
// disclosure when the audit is on, and the first steps of the SPEC §2 order
// (identity, the body read whole, then parsed by spec); step does the rest.
func answer[R any](ctx context.Context, s *Service, endpoint string, c call, body io.Reader, spec bodySpec[R],
	step func(*Service, context.Context, *call, R) ([]byte, error)) (out []byte, err error) {
	start := time.Now()
	defer func() { s.m.observe(endpoint, err, time.Since(start).Seconds()) }()
	c.d = s.auditing(endpoint, c.route) // nil: audit off
	if c.d != nil {
		defer func() { out, err = s.disclose(ctx, c.d, out, err) }()
	}
	if c.sess, err = s.identify(ctx, c.authorization); err != nil {
		return nil, err
	}
	c.d.identified(c.sess)
	raw, err := readAll(body)
	if err != nil {
		return nil, err
	}
	req, err := spec.parse(raw)
	if err != nil {
		return nil, err
	}
	return step(s, ctx, &c, req)
}
