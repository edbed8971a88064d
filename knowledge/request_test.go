package knowledge

import (
	"encoding/json"
	"errors"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/bailinghub/knowledge-sidecar/protocol"
)

// TestRequestJSONStrict: the search and read bodies are JSON exactly
// (SPEC §2: malformed input is 400 invalid_request, never silently fixed).
// Only JSON's whitespace may surround the object, a UTF-16 surrogate escape
// must be one half of a pair, and the body must be UTF-8; every case the
// campaign of issue 25 tried is a row.
func TestRequestJSONStrict(t *testing.T) {
	const ref = `"kr2.k1.x"`
	type row struct {
		name string
		body string
		ok   bool
	}
	var rows []row
	// Whitespace around the object: JSON's own four pass, nothing else does.
	for _, ws := range []string{" ", "\t", "\n", "\r", " \t\r\n "} {
		q := strconv.Quote(ws)
		rows = append(rows,
			row{"search wrapped in " + q, ws + `{"query":"x"}` + ws, true},
			row{"read wrapped in " + q, ws + `{"ref":` + ref + `}` + ws, true},
			row{"search with " + q + " between tokens", `{` + ws + `"query"` + ws + `:` + ws + `"x"` + ws + `}`, true})
	}
	for _, ws := range []string{"\v", "\f", "\u00a0", "\u0085", "\u2000", "\u3000", "\u2028", "\ufeff", "\x00", "\x1c"} {
		q := strconv.QuoteToASCII(ws)
		rows = append(rows,
			row{"search led by " + q, ws + `{"query":"x"}`, false},
			row{"search followed by " + q, `{"query":"x"}` + ws, false},
			row{"read wrapped in " + q, ws + `{"ref":` + ref + `}` + ws, false},
			row{"search with " + q + " between tokens", `{"query":` + ws + `"x"}`, false})
	}
	// Surrogate escapes, in every string of the body.
	for _, esc := range []struct {
		name, s string
		ok      bool
	}{
		{"a pair", `\ud83d\ude00`, true},
		{"a pair, upper-case hex", `\uD83D\uDE00`, true},
		{"two pairs", `\ud83d\ude00\udbff\udfff`, true},
		{"a raw astral character", "😀", true},
		{"the escaped replacement character", `\ufffd`, true},
		{"a neighbour of the range", `\ud7ff\ue000`, true},
		{"high alone", `\ud800`, false},
		{"high at the end", `ab\udbff`, false},
		{"low alone", `\udc00`, false},
		{"low alone, upper case", `\uDFFF`, false},
		{"low before high", `\ude00\ud83d`, false},
		{"high then a plain character", `\ud83dx\ude00`, false},
		{"high then another high", `\ud83d\ud83d`, false},
		{"high then a non-surrogate escape", `\ud83d\u0041`, false},
		{"high then a short escape", `\ud83d\n`, false},
		{"pair then low", `\ud83d\ude00\ude00`, false},
		{"escaped backslash before u", `\\ud800`, true}, // the text \ud800, not an escape
	} {
		rows = append(rows,
			row{"query with " + esc.name, `{"query":"q` + esc.s + `"}`, esc.ok},
			row{"run_id with " + esc.name, `{"query":"q","run_id":"` + esc.s + `"}`, false}, // never a UUID; 400 either way
			row{"ref with " + esc.name, `{"ref":"kr2.` + esc.s + `"}`, esc.ok},
			row{"cursor with " + esc.name, `{"ref":` + ref + `,"cursor":"c` + esc.s + `"}`, esc.ok},
		)
		if !esc.ok {
			rows = append(rows,
				row{"key with " + esc.name, `{"query":"q","` + esc.s + `":1}`, false},
				row{"key query spelled with " + esc.name, `{"query` + esc.s + `":"q"}`, false})
		}
	}
	// Raw bytes that are not UTF-8, inside and outside strings.
	for _, bad := range []string{"\xff", "\xc3", "\xed\xa0\x80" /* a UTF-8-encoded surrogate */, "\xc0\xaf" /* overlong */, "\xf4\x90\x80\x80" /* above U+10FFFF */} {
		q := strconv.Quote(bad)
		rows = append(rows,
			row{"query with raw " + q, `{"query":"q` + bad + `"}`, false},
			row{"key with raw " + q, `{"query":"q","` + bad + `":1}`, false},
			row{"ref with raw " + q, `{"ref":"kr2.` + bad + `"}`, false},
			row{"raw " + q + " after the object", `{"query":"q"}` + bad, false})
	}
	for _, tc := range rows {
		t.Run(tc.name, func(t *testing.T) {
			var err error
			if strings.Contains(tc.body, `"ref"`) {
				_, err = readBody.parse([]byte(tc.body))
			} else {
				_, err = searchBody.parse([]byte(tc.body))
			}
			if tc.ok {
				if err != nil {
					t.Fatalf("%q: got %v; want accepted", tc.body, err)
				}
				return
			}
			var e *Error
			if !errors.As(err, &e) || e.Status != 400 || e.Code != protocol.CodeInvalidRequest {
				t.Fatalf("%q: got %v; want 400 %s", tc.body, err, protocol.CodeInvalidRequest)
			}
		})
	}
}

// TestSearchQueryKeptExactly: an accepted query reaches retrieval with
// exactly the characters the client escaped, pairs joined, nothing replaced.
func TestSearchQueryKeptExactly(t *testing.T) {
	for body, want := range map[string]string{
		`{"query":"\ud83d\ude00 \u9000\u6b3e"}`: "😀 退款",
		`{"query":"\ufffd"}`:                    "\ufffd",
		"\r\n\t {\"query\":\"a\\\\ud800\"} \n":  `a\ud800`,
	} {
		r, err := searchBody.parse([]byte(body))
		if err != nil || r.query != want {
			t.Errorf("searchBody.parse(%q) = %q, %v; want %q", body, r.query, err, want)
		}
	}
}

// stringLiteral matches one JSON string in valid JSON text: outside
// strings JSON has no quotes, so a left-to-right match finds every string.
var stringLiteral = regexp.MustCompile(`"(?:[^"\\]|\\.)*"`)

// loneSurrogateRef is a slow reference for loneSurrogateEscape on valid
// JSON: it decodes every string to UTF-16 code units, the way JavaScript
// holds it, and asks unicode/utf16 whether each surrogate is paired.
func loneSurrogateRef(b []byte) bool {
	for _, lit := range stringLiteral.FindAll(b, -1) {
		var units []uint16
		s := string(lit[1 : len(lit)-1])
		for s != "" {
			switch {
			case strings.HasPrefix(s, `\u`):
				n, _ := strconv.ParseUint(s[2:6], 16, 16)
				units = append(units, uint16(n))
				s = s[6:]
			case s[0] == '\\':
				units = append(units, uint16(s[1])) // one character; its value does not matter here
				s = s[2:]
			default:
				r, size := utf8.DecodeRuneInString(s)
				units = utf16.AppendRune(units, r)
				s = s[size:]
			}
		}
		for i := 0; i < len(units); i++ {
			switch u := rune(units[i]); {
			case utf16.IsSurrogate(u) && u < 0xdc00 && i+1 < len(units) && utf16.DecodeRune(u, rune(units[i+1])) != utf8.RuneError:
				i++
			case utf16.IsSurrogate(u):
				return true
			}
		}
	}
	return false
}

// FuzzRequestStrict: an accepted search or read body is exactly one JSON
// object with only JSON whitespace around it and no unpaired surrogate
// escape anywhere (the slow reference decides), so nothing was fixed;
// every refusal is 400 invalid_request; and the surrogate scan agrees with
// the reference on any valid JSON.
func FuzzRequestStrict(f *testing.F) {
	for _, s := range []string{
		`{"query":"x"}`, ` {"query":"x","limit":3} `, "\v{\"query\":\"x\"}", "{\"query\":\"x\"}\u00a0",
		`{"query":"\ud800"}`, `{"query":"\ud83d\ude00"}`, `{"query":"\udc00\ud800"}`, `{"\ud800":1}`,
		`{"ref":"kr2.k1.x","cursor":"\udfff"}`, `{"ref":"kr2.k1.x","max_bytes":512}`, `{"query":"a\\ud800"}`,
		"{\"query\":\"\xff\"}", `{"query":"x"}{}`, `["query"]`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		trimmed := strings.Trim(string(in), " \t\r\n")
		valid := json.Valid([]byte(trimmed))
		if valid {
			if got, want := loneSurrogateEscape([]byte(trimmed)), loneSurrogateRef([]byte(trimmed)); got != want {
				t.Fatalf("loneSurrogateEscape(%q) = %v; the reference says %v", trimmed, got, want)
			}
		}
		_ = loneSurrogateEscape(in) // any bytes: stays in bounds
		_, errS := searchBody.parse(in)
		_, errR := readBody.parse(in)
		for _, err := range []error{errS, errR} {
			if err == nil {
				if !valid || trimmed == "" || trimmed[0] != '{' || !utf8.Valid(in) || loneSurrogateRef([]byte(trimmed)) {
					t.Fatalf("accepted %q: want only a UTF-8 JSON object, JSON whitespace around it, surrogates paired", in)
				}
				continue
			}
			var e *Error
			if !errors.As(err, &e) || e.Status != 400 || e.Code != protocol.CodeInvalidRequest {
				t.Fatalf("%q: got %v; want nil or 400 %s", in, err, protocol.CodeInvalidRequest)
			}
		}
	})
}

// BenchmarkParseRequest decodes the bodies a host sends: a read with every
// member (a reference and a cursor of their sealed lengths) and a search.
func BenchmarkParseRequest(b *testing.B) {
	ref := "kr2.k1." + strings.Repeat("Qx7_b-Z9", 17)
	cursor := "kc2.k1." + strings.Repeat("m4Tq_8wE", 19)
	read := []byte(`{"ref":"` + ref + `","run_id":"3F2504E0-4F89-11D3-9A0C-0305E82C3301","max_bytes":32768,"cursor":"` + cursor + `"}`)
	search := []byte(`{"query":"How do I get a refund for a cancelled order?","limit":3,"run_id":"3f2504e0-4f89-11d3-9a0c-0305e82c3301"}`)
	b.Run("read", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := readBody.parse(read); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("search", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := searchBody.parse(search); err != nil {
				b.Fatal(err)
			}
		}
	})
}
