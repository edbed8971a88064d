package knowledge

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/bailinghub/knowledge-sidecar/corefacts/jsstring"
	"github.com/bailinghub/knowledge-sidecar/protocol"
)

// The request decoding as it was before the one-pass scan of request.go,
// over encoding/json's Decoder, kept as the oracle FuzzParseRequestRef
// compares the scan with: every body must give the same error (status,
// code, message) and the same parsed values.

var refJSONIntegerSyntax = regexp.MustCompile(`^-?(0|[1-9][0-9]{0,15})$`)

// refDecodeObject splits a JSON object into its members, rejecting anything
// but exactly one object, duplicate members and members not in allowed.
func refDecodeObject(body []byte, allowed ...string) (map[string]json.RawMessage, error) {
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

func refIsNull(raw json.RawMessage) bool { return string(raw) == "null" }

// refStringField decodes a JSON string member. present is false when the
// member is absent or (for optional members) null.
func refStringField(m map[string]json.RawMessage, name string, required bool) (v string, present bool, err error) {
	raw, ok := m[name]
	if !ok || (!required && refIsNull(raw)) {
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

// refIntField decodes an optional JSON integer member written without fraction
// or exponent, within [lo, hi].
func refIntField(m map[string]json.RawMessage, name string, lo, hi, def int) (int, error) {
	raw, ok := m[name]
	if !ok || refIsNull(raw) {
		return def, nil
	}
	rangeMsg := name + " must be an integer from " + strconv.Itoa(lo) + " to " + strconv.Itoa(hi) + "."
	if !refJSONIntegerSyntax.Match(raw) {
		return 0, errInvalid(rangeMsg)
	}
	n, err := strconv.Atoi(string(raw))
	if err != nil || n < lo || n > hi {
		return 0, errInvalid(rangeMsg)
	}
	return n, nil
}

// refRunIDField decodes the optional run_id and returns it lowercased.
func refRunIDField(m map[string]json.RawMessage) (string, error) {
	v, present, err := refStringField(m, "run_id", false)
	if err != nil || !present {
		return "", err
	}
	if !uuidPattern.MatchString(v) {
		return "", errInvalid("run_id must be a UUID.")
	}
	return strings.ToLower(v), nil
}

func refParseSearch(body []byte) (searchRequest, error) {
	m, err := refDecodeObject(body, "query", "limit", "run_id")
	if err != nil {
		return searchRequest{}, err
	}
	var r searchRequest
	q, _, err := refStringField(m, "query", true)
	if err != nil {
		return r, err
	}
	// Core counts and trims like JavaScript: emptiness after trim() (which
	// also removes U+FEFF) and the length in UTF-16 code units, so a query a
	// native Core accepts is accepted here and vice versa.
	if jsstring.Trim(q) == "" {
		return r, errInvalid("query must not be empty.")
	}
	if jsstring.UTF16Len(q) > 2000 {
		return r, errInvalid("query must not exceed 2000 characters counted in UTF-16 code units (an emoji counts 2).")
	}
	for _, c := range q {
		if c < 0x20 && c != '\t' && c != '\n' && c != '\r' {
			return r, errInvalid("query contains disallowed control characters.")
		}
	}
	r.query = q
	if r.limit, err = refIntField(m, "limit", 1, protocol.SearchMaxResults, protocol.SearchMaxResults); err != nil {
		return r, err
	}
	if r.runID, err = refRunIDField(m); err != nil {
		return r, err
	}
	return r, nil
}

func refParseRead(body []byte) (readRequest, error) {
	m, err := refDecodeObject(body, "ref", "run_id", "max_bytes", "cursor")
	if err != nil {
		return readRequest{}, err
	}
	var r readRequest
	if r.ref, _, err = refStringField(m, "ref", true); err != nil {
		return r, err
	}
	if r.ref == "" {
		return r, errInvalid("ref must not be empty.")
	}
	if r.runID, err = refRunIDField(m); err != nil {
		return r, err
	}
	if r.maxBytes, err = refIntField(m, "max_bytes", protocol.ReadMinBytes, protocol.ReadMaxBytes, protocol.ReadDefaultBytes); err != nil {
		return r, err
	}
	if r.cursor, r.hasCursor, err = refStringField(m, "cursor", false); err != nil {
		return r, err
	}
	if r.hasCursor && r.cursor == "" {
		return r, errInvalid("cursor must not be empty.")
	}
	return r, nil
}

// requestRefSeeds are bodies where the scan and the Decoder could part:
// every kind of refusal, in every order two of them can come in.
func requestRefSeeds() []string {
	deep := func(n int, inner string) string {
		return strings.Repeat("[", n) + inner + strings.Repeat("]", n)
	}
	deepObj := func(n int) string {
		return strings.Repeat(`{"a":`, n) + "1" + strings.Repeat("}", n)
	}
	const ref = `"kr2.k1.x"`
	const uuid = `"3F2504E0-4F89-11D3-9A0C-0305E82C3301"`
	seeds := []string{
		`{"query":"x"}`, `{"query":"x","limit":3,"run_id":` + uuid + `}`,
		`{"ref":` + ref + `,"run_id":` + uuid + `,"max_bytes":32768,"cursor":"c"}`,
		// Escaped names: unescaped before the name and duplicate checks.
		`{"q\u0075ery":"x"}`, `{"query":"x","q\u0075ery":"y"}`, `{"\u0071uery":"x","limit":1,"lim\u0069t":2}`,
		`{"r\u0065f":` + ref + `}`, `{"ref":` + ref + `,"\u0072ef":` + ref + `}`, `{"qu\"ery":"x"}`, `{"query\u0000":"x"}`,
		`{"\ud83d\ude00":1}`, `{"` + strings.Repeat("é", 50) + `":1}`, `{"a\nb":1}`,
		// Duplicates and unknown members, before and after syntax errors.
		`{"query":"x","query":"y"}`, `{"query":null,"query":null}`, `{"ref":` + ref + `,"ref":1`, `{"zz":1,`, `{"zz":1 x}`,
		`{"query":"x","zz":[1,}`, `{"zz":[1,],"query":"x"}`, `{"query":"x"`, `{"query"}`, `{"query" "x"}`, `{"query":}`,
		`{"query":"x",}`, `{,"query":"x"}`, `{"query":"x"]`, `{"query":"x"}]`, `{"query":"x"}}`, `{`, `{}`, `{"zz"`,
		// Nulls, types and ranges.
		`{"query":null}`, `{"query":1}`, `{"query":""}`, `{"query":" \ufeff "}`, `{"query":"a\u0001b"}`, `{"query":"a\tb"}`,
		`{"query":"x","limit":null}`, `{"query":"x","limit":0}`, `{"query":"x","limit":-0}`, `{"query":"x","limit":1e0}`,
		`{"query":"x","limit":1.0}`, `{"query":"x","limit":"2"}`, `{"query":"x","limit":3}`, `{"query":"x","limit":4}`,
		`{"query":"x","limit":-1}`, `{"query":"x","limit":true}`, `{"query":"x","limit":[]}`,
		`{"ref":` + ref + `,"max_bytes":4096}`, `{"ref":` + ref + `,"max_bytes":4095}`, `{"ref":` + ref + `,"max_bytes":1e2}`,
		`{"ref":` + ref + `,"max_bytes":9999999999999999}`, `{"ref":` + ref + `,"max_bytes":99999999999999999}`,
		`{"ref":` + ref + `,"max_bytes":-9223372036854775808}`, `{"ref":` + ref + `,"max_bytes":18446744073709551616}`,
		`{"ref":` + ref + `,"max_bytes":-}`, `{"ref":` + ref + `,"max_bytes":01}`, `{"ref":` + ref + `,"max_bytes":+1}`,
		`{"ref":null}`, `{"ref":""}`, `{"ref":1}`, `{"ref":` + ref + `,"cursor":null}`, `{"ref":` + ref + `,"cursor":""}`,
		`{"ref":` + ref + `,"cursor":{}}`, `{"ref":` + ref + `,"run_id":null}`, `{"ref":` + ref + `,"run_id":"x"}`,
		`{"ref":` + ref + `,"run_id":"3f2504e0-4f89-11d3-9a0c-0305e82c330"}`, `{"ref":` + ref + `,"run_id":"3f2504e0-4f89-11d3-9a0c-0305e82c3301\n"}`,
		`{"ref":` + ref + `,"run_id":"3f2504e0x4f89-11d3-9a0c-0305e82c3301"}`, `{"ref":` + ref + `,"run_id":"\u0033f2504e0-4f89-11d3-9a0c-0305e82c3301"}`,
		`{"ref":1,"run_id":1,"max_bytes":"x","cursor":1}`, `{"query":1,"limit":"x","run_id":1}`,
		// Escapes and surrogates.
		`{"query":"\ud83d\ude00"}`, `{"query":"\ud800"}`, `{"query":"x","zz":"\udc00"}`, `{"zz":1,"query":"\ud800"}`,
		`{"query":"x"} "\ud800"`, `{"query":"\ud800`, `{"query":"\\ud800"}`, `{"query":"\u00e9\/\b\f\n\r\t\"\\"}`,
		`{"query":"\x"}`, `{"query":"\u12"}`, `{"ref":"kr2.\ud83d\ude00","cursor":"\uDBFF\uDFFF"}`,
		// Whitespace, trailing bytes, a BOM, top-level values.
		" \t\r\n{ \"query\" :\t\"x\" ,\n\"limit\"\r:\n3 }\r\n", "\ufeff{\"query\":\"x\"}", "{\"query\":\"x\"}\ufeff",
		"\v{\"query\":\"x\"}", "{\"query\":\u00a0\"x\"}", `{"query":"x"}{}`, `{"query":"x"} 1`, `{"query":"x"}x`, `{"query":"x"}"`,
		`[]`, `[1,2]`, `"query"`, `null`, `1`, `-0`, `tru`, ``, ` `, `}`, `[`, `"\ud800"`, "{\"query\":\"\xff\"}", "\xff",
		`{"query":"x","zz":tru}`, `{"query":"x","zz":nul}`, `{"query":"x","zz":-}`, `{"query":"x","zz":1.}`, `{"query":"x","zz":1e}`,
	}
	// Nesting at encoding/json's limit and one beyond, in unknown and in
	// known members and before and after another refusal.
	for _, n := range []int{9999, 10000, 10001} {
		seeds = append(seeds,
			`{"zz":`+deep(n, "")+`}`, `{"query":`+deep(n, `"x"`)+`}`, `{"query":"x","limit":`+deep(n, "1")+`}`,
			`{"ref":`+ref+`,"cursor":`+deepObj(n)+`}`, `{"zz":`+deep(n, "")+`,"zz":1}`, `{"query":"x","query":`+deep(n, "")+`}`,
			deep(n, ""), `{"query":"x"}`+deep(n, ""))
	}
	return seeds
}

// checkRequestRef fails unless parseSearch and parseRead answer body as
// the Decoder-based oracle does: the same parsed values and the same
// error (status, code and message), or no error for both.
func checkRequestRef(t *testing.T, body []byte) {
	t.Helper()
	same := func(what string, err, refErr error) {
		t.Helper()
		var e, re *Error
		if (err == nil) != (refErr == nil) || err != nil && (!errors.As(err, &e) || !errors.As(refErr, &re) ||
			e.Status != re.Status || e.Code != re.Code || e.Message != re.Message) {
			t.Fatalf("%s(%.300q): error %s; the oracle says %s", what, body, errText(err), errText(refErr))
		}
	}
	s, err := parseSearch(body)
	rs, refErr := refParseSearch(body)
	same("parseSearch", err, refErr)
	if s != rs {
		t.Fatalf("parseSearch(%.300q) = %+v; the oracle says %+v", body, s, rs)
	}
	r, err := parseRead(body)
	rr, refErr := refParseRead(body)
	same("parseRead", err, refErr)
	if r != rr {
		t.Fatalf("parseRead(%.300q) = %+v; the oracle says %+v", body, r, rr)
	}
}

// errText is an error with its message, for a failure's report.
func errText(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return fmt.Sprintf("%d %s %q", e.Status, e.Code, e.Message)
	}
	return fmt.Sprint(err)
}

// TestParseRequestRef: the one-pass decoding answers every seed, and every
// seed wrapped in JSON whitespace, exactly as the Decoder-based oracle.
func TestParseRequestRef(t *testing.T) {
	for _, s := range requestRefSeeds() {
		checkRequestRef(t, []byte(s))
		checkRequestRef(t, []byte(" \r\n\t"+s+"\n"))
	}
}

// FuzzParseRequestRef: on any bytes, parseSearch and parseRead give the
// oracle's parsed values and errors.
func FuzzParseRequestRef(f *testing.F) {
	for _, s := range requestRefSeeds() {
		if len(s) < 1000 { // the deep seeds are tested above; the fuzzer mutates small ones
			f.Add([]byte(s))
		}
	}
	f.Fuzz(func(t *testing.T, body []byte) { checkRequestRef(t, body) })
}
