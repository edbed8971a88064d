package catalog

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"math"
	"regexp"
	"strconv"
	"strings"

	"github.com/bailinghub/knowledge-sidecar/corefacts"
	"github.com/bailinghub/knowledge-sidecar/corefacts/jsstring"
)

// ErrMalformedJSON is returned when a JSON column of the catalog (a route's
// knowledge or audience, a client's allowed_routes) does not hold valid JSON.
// Core would throw on such a row; the catalogs wrap it with ErrUnavailable, so
// the caller answers 503 rather than guessing.
var ErrMalformedJSON = errors.New("catalog column holds malformed json")

// NormalizeKnowledge turns the raw bz_routes.knowledge column into the
// configuration Core itself would use (routeKnowledgeConfig, CORE_FACTS §5.1):
//
//   - NULL, JSON null, anything that is not an object, {} and an empty KB list
//     all mean "no knowledge" (nil, nil).
//   - KB list: when kb_ids is an array, its entries converted as JavaScript's
//     String() does, trimmed, empties dropped, order and duplicates kept (an
//     empty array does NOT fall back to kb_id); otherwise kb_id when it is a
//     string that is non-empty after trimming.
//   - top_k and max_docs: JavaScript Number() of the value; not finite → the
//     default (5, 4); else Math.round, clamped to 1..20. Number() makes null,
//     false, "" and [] 0 (hence 1 after clamping) and true 1; strings are parsed
//     as JavaScript does ("7", " 7 ", "0x10", "1e1"); other strings and objects
//     are NaN → default. An absent key is the default.
//   - min_score: the same Number() rules, default 0.35, clamped to 0..1 without
//     rounding (0 stays 0: the `|| 0.35` quirk is /kb/search's, not the route's).
//   - inject is "doc" only for exactly the string "doc", else "chunk".
//   - page_boost only for the literal true.
//
// Invalid JSON yields ErrMalformedJSON.
func NormalizeKnowledge(raw []byte) (*corefacts.KnowledgeConfig, error) {
	obj, err := decodeObject(raw)
	if err != nil || obj == nil {
		return nil, err
	}
	var kbIDs []string
	if arr, ok := obj["kb_ids"].([]any); ok {
		for _, v := range arr {
			if s := jsstring.Trim(jsString(v)); s != "" {
				kbIDs = append(kbIDs, s)
			}
		}
	} else if s, ok := obj["kb_id"].(string); ok {
		if s = jsstring.Trim(s); s != "" {
			kbIDs = []string{s}
		}
	}
	if len(kbIDs) == 0 {
		return nil, nil
	}
	inject := "chunk"
	if s, ok := obj["inject"].(string); ok && s == "doc" {
		inject = "doc"
	}
	boost, _ := obj["page_boost"].(bool)
	return &corefacts.KnowledgeConfig{
		KBIDs:     kbIDs,
		TopK:      int(intValue(obj, "top_k", corefacts.DefaultTopK, 1, 20)),
		MinScore:  numValue(obj, "min_score", corefacts.DefaultMinScore, 0, 1),
		Inject:    inject,
		MaxDocs:   int(intValue(obj, "max_docs", corefacts.DefaultMaxDocs, 1, 20)),
		PageBoost: boost,
	}, nil
}

// decodeObject parses a JSON column. It returns nil (no error) for SQL NULL,
// JSON null and any non-object value, as Core's record() helper does.
func decodeObject(raw []byte) (map[string]any, error) {
	v, err := decodeJSON(raw)
	if err != nil {
		return nil, err
	}
	obj, _ := v.(map[string]any)
	if len(obj) == 0 {
		return nil, nil
	}
	return obj, nil
}

// decodeJSON parses one JSON value, keeping numbers as json.Number so that
// out-of-range literals (1e400) behave like JavaScript's Infinity instead of
// failing. Empty input (SQL NULL) is nil.
func decodeJSON(raw []byte) (any, error) {
	if len(bytes.TrimSpace(raw)) == 0 {
		return nil, nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, ErrMalformedJSON
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, ErrMalformedJSON
	}
	return v, nil
}

// intValue is Core's intValue(): Number(), fallback when not finite, then
// Math.round and clamp.
func intValue(obj map[string]any, key string, fallback, lo, hi float64) float64 {
	if n, ok := finiteNumber(obj, key); ok {
		return clamp(jsRound(n), lo, hi)
	}
	return fallback
}

// numValue is Core's numValue(): like intValue without rounding.
func numValue(obj map[string]any, key string, fallback, lo, hi float64) float64 {
	if n, ok := finiteNumber(obj, key); ok {
		return clamp(n, lo, hi)
	}
	return fallback
}

// finiteNumber is Number(obj[key]) when the key is present and the number
// finite.
func finiteNumber(obj map[string]any, key string) (float64, bool) {
	v, present := obj[key]
	if !present {
		return 0, false
	}
	n := jsNumber(v)
	return n, !math.IsNaN(n) && !math.IsInf(n, 0)
}

func clamp(n, lo, hi float64) float64 {
	n = math.Min(math.Max(n, lo), hi)
	if n == 0 {
		return 0 // never -0: it would print as "-0" in canonical JSON
	}
	return n
}

// jsRound is JavaScript's Math.round: halves round towards +Infinity.
func jsRound(n float64) float64 {
	f := math.Floor(n)
	if n-f >= 0.5 {
		f++
	}
	return f
}

// jsNumber is JavaScript's Number() applied to a value decoded by decodeJSON.
func jsNumber(v any) float64 {
	switch x := v.(type) {
	case nil:
		return 0
	case bool:
		if x {
			return 1
		}
		return 0
	case json.Number:
		return parseJSONNumber(string(x))
	case string:
		return jsStringToNumber(x)
	case []any:
		return jsStringToNumber(jsString(x))
	default: // objects
		return math.NaN()
	}
}

func parseJSONNumber(s string) float64 {
	f, err := strconv.ParseFloat(s, 64)
	if err != nil && !errors.Is(err, strconv.ErrRange) {
		return math.NaN()
	}
	return f // ±Inf on overflow, like JavaScript
}

var (
	jsDecimal = regexp.MustCompile(`^[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?$`)
	jsRadix   = regexp.MustCompile(`^0(?:[xX][0-9a-fA-F]+|[oO][0-7]+|[bB][01]+)$`)
)

// jsStringToNumber is JavaScript's StringToNumber: whitespace-trimmed, empty
// is 0, decimal literals, Infinity, and unsigned 0x/0o/0b integers.
func jsStringToNumber(s string) float64 {
	s = jsstring.Trim(s)
	switch s {
	case "":
		return 0
	case "Infinity", "+Infinity":
		return math.Inf(1)
	case "-Infinity":
		return math.Inf(-1)
	}
	if jsDecimal.MatchString(s) {
		return parseJSONNumber(s)
	}
	if jsRadix.MatchString(s) {
		base := map[byte]float64{'x': 16, 'X': 16, 'o': 8, 'O': 8, 'b': 2, 'B': 2}[s[1]]
		var n float64
		for _, c := range s[2:] {
			d, _ := strconv.ParseUint(string(c), 16, 8)
			n = n*base + float64(d)
		}
		return n
	}
	return math.NaN()
}

// jsString is JavaScript's String() applied to a value decoded by decodeJSON.
func jsString(v any) string {
	switch x := v.(type) {
	case nil:
		return "null"
	case bool:
		return strconv.FormatBool(x)
	case json.Number:
		return jsNumberToString(parseJSONNumber(string(x)))
	case string:
		return x
	case []any:
		parts := make([]string, len(x))
		for i, e := range x {
			if e != nil { // Array.prototype.join renders null as ""
				parts[i] = jsString(e)
			}
		}
		return strings.Join(parts, ",")
	default:
		return "[object Object]"
	}
}

// jsNumberToString is JavaScript's Number::toString for finite and infinite
// values (JSON has no NaN).
func jsNumberToString(f float64) string {
	switch {
	case math.IsInf(f, 1):
		return "Infinity"
	case math.IsInf(f, -1):
		return "-Infinity"
	case f == 0:
		return "0"
	}
	sign := ""
	if f < 0 {
		sign, f = "-", -f
	}
	// Shortest round-trip digits and decimal exponent: d.ddde±x.
	e := strconv.FormatFloat(f, 'e', -1, 64)
	mant, expStr, _ := strings.Cut(e, "e")
	digits := strings.Replace(mant, ".", "", 1)
	exp, _ := strconv.Atoi(expStr)
	k, n := len(digits), exp+1
	switch {
	case k <= n && n <= 21:
		return sign + digits + strings.Repeat("0", n-k)
	case 0 < n && n <= 21:
		return sign + digits[:n] + "." + digits[n:]
	case -6 < n && n <= 0:
		return sign + "0." + strings.Repeat("0", -n) + digits
	}
	es := "+"
	if n-1 < 0 {
		es = "-"
	}
	m := digits[:1]
	if k > 1 {
		m += "." + digits[1:]
	}
	return sign + m + "e" + es + strconv.Itoa(abs(n-1))
}

func abs(i int) int {
	if i < 0 {
		return -i
	}
	return i
}
