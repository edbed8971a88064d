package catalog

import (
	"errors"
	"fmt"
	"math"
	"reflect"
	"testing"

	"github.com/bailinghub/knowledge-sidecar/corefacts"
)

func TestNormalizeKnowledge(t *testing.T) {
	def := func(ids ...string) *corefacts.KnowledgeConfig {
		return &corefacts.KnowledgeConfig{KBIDs: ids, TopK: 5, MinScore: 0.35, Inject: "chunk", MaxDocs: 4}
	}
	with := func(f func(*corefacts.KnowledgeConfig)) *corefacts.KnowledgeConfig {
		k := def("faq")
		f(k)
		return k
	}
	cases := []struct {
		name string
		raw  string
		want *corefacts.KnowledgeConfig
	}{
		// no knowledge
		{"sql null", "", nil},
		{"json null", "null", nil},
		{"empty object", "{}", nil},
		{"array", `["faq"]`, nil},
		{"string", `"faq"`, nil},
		{"number", `5`, nil},
		{"no kb at all", `{"top_k":3}`, nil},
		{"empty kb_ids does not fall back to kb_id", `{"kb_ids":[],"kb_id":"faq"}`, nil},
		{"kb_ids of blanks does not fall back", `{"kb_ids":[""," "],"kb_id":"faq"}`, nil},
		{"blank kb_id", `{"kb_id":"   "}`, nil},
		{"non-string kb_id", `{"kb_id":5}`, nil},

		// KB list
		{"kb_id only", `{"kb_id":" faq "}`, def("faq")},
		{"kb_ids wins over kb_id", `{"kb_ids":["a","b"],"kb_id":"c"}`, def("a", "b")},
		{"kb_ids trimmed, empties dropped, order and duplicates kept", `{"kb_ids":[" b ","","a","b","\u3000c\ufeff"]}`, def("b", "a", "b", "c")},
		{"kb_ids not an array falls back to kb_id", `{"kb_ids":"x","kb_id":"faq"}`, def("faq")},
		{"kb_ids entries as String()", `{"kb_ids":[7,1.5,true,null,[1,[2,null]],{"a":1},1e21,1e-7,-0]}`,
			def("7", "1.5", "true", "null", "1,2,", "[object Object]", "1e+21", "1e-7", "0")},
		{"NEL is not JavaScript whitespace", `{"kb_id":"\u0085faq"}`, def("\u0085faq")},

		// top_k: Number(), round, clamp 1..20, default 5
		{"top_k default", `{"kb_id":"faq"}`, def("faq")},
		{"top_k in range", `{"kb_id":"faq","top_k":12}`, with(func(k *corefacts.KnowledgeConfig) { k.TopK = 12 })},
		{"top_k rounded half up", `{"kb_id":"faq","top_k":2.5}`, with(func(k *corefacts.KnowledgeConfig) { k.TopK = 3 })},
		{"top_k rounded down", `{"kb_id":"faq","top_k":2.49}`, with(func(k *corefacts.KnowledgeConfig) { k.TopK = 2 })},
		{"top_k clamped high", `{"kb_id":"faq","top_k":99}`, with(func(k *corefacts.KnowledgeConfig) { k.TopK = 20 })},
		{"top_k clamped low", `{"kb_id":"faq","top_k":-3}`, with(func(k *corefacts.KnowledgeConfig) { k.TopK = 1 })},
		{"top_k zero clamps to 1 (no || default)", `{"kb_id":"faq","top_k":0}`, with(func(k *corefacts.KnowledgeConfig) { k.TopK = 1 })},
		{"top_k null is Number(null)=0", `{"kb_id":"faq","top_k":null}`, with(func(k *corefacts.KnowledgeConfig) { k.TopK = 1 })},
		{"top_k false is 0", `{"kb_id":"faq","top_k":false}`, with(func(k *corefacts.KnowledgeConfig) { k.TopK = 1 })},
		{"top_k true is 1", `{"kb_id":"faq","top_k":true}`, with(func(k *corefacts.KnowledgeConfig) { k.TopK = 1 })},
		{"top_k numeric string", `{"kb_id":"faq","top_k":" 7 "}`, with(func(k *corefacts.KnowledgeConfig) { k.TopK = 7 })},
		{"top_k empty string is 0", `{"kb_id":"faq","top_k":""}`, with(func(k *corefacts.KnowledgeConfig) { k.TopK = 1 })},
		{"top_k hex string", `{"kb_id":"faq","top_k":"0x10"}`, with(func(k *corefacts.KnowledgeConfig) { k.TopK = 16 })},
		{"top_k exponent string", `{"kb_id":"faq","top_k":"1e1"}`, with(func(k *corefacts.KnowledgeConfig) { k.TopK = 10 })},
		{"top_k bad string is NaN, default", `{"kb_id":"faq","top_k":"seven"}`, def("faq")},
		{"top_k signed hex is NaN", `{"kb_id":"faq","top_k":"-0x10"}`, def("faq")},
		{"top_k Infinity string is default", `{"kb_id":"faq","top_k":"Infinity"}`, def("faq")},
		{"top_k overflowing literal is default", `{"kb_id":"faq","top_k":1e400}`, def("faq")},
		{"top_k Go-only syntax is NaN", `{"kb_id":"faq","top_k":"1_0"}`, def("faq")},
		{"top_k object is default", `{"kb_id":"faq","top_k":{}}`, def("faq")},
		{"top_k empty array is 0", `{"kb_id":"faq","top_k":[]}`, with(func(k *corefacts.KnowledgeConfig) { k.TopK = 1 })},
		{"top_k one-element array", `{"kb_id":"faq","top_k":[9]}`, with(func(k *corefacts.KnowledgeConfig) { k.TopK = 9 })},
		{"top_k two-element array is NaN", `{"kb_id":"faq","top_k":[9,9]}`, def("faq")},

		// min_score: Number(), clamp 0..1, no rounding, default 0.35
		{"min_score kept", `{"kb_id":"faq","min_score":0.72}`, with(func(k *corefacts.KnowledgeConfig) { k.MinScore = 0.72 })},
		{"min_score zero stays zero", `{"kb_id":"faq","min_score":0}`, with(func(k *corefacts.KnowledgeConfig) { k.MinScore = 0 })},
		{"min_score negative zero is zero", `{"kb_id":"faq","min_score":-0}`, with(func(k *corefacts.KnowledgeConfig) { k.MinScore = 0 })},
		{"min_score clamped high", `{"kb_id":"faq","min_score":1.5}`, with(func(k *corefacts.KnowledgeConfig) { k.MinScore = 1 })},
		{"min_score clamped low", `{"kb_id":"faq","min_score":-1}`, with(func(k *corefacts.KnowledgeConfig) { k.MinScore = 0 })},
		{"min_score null is 0", `{"kb_id":"faq","min_score":null}`, with(func(k *corefacts.KnowledgeConfig) { k.MinScore = 0 })},
		{"min_score string", `{"kb_id":"faq","min_score":".5"}`, with(func(k *corefacts.KnowledgeConfig) { k.MinScore = 0.5 })},
		{"min_score bad string is default", `{"kb_id":"faq","min_score":"high"}`, def("faq")},

		// max_docs: like top_k, default 4
		{"max_docs kept", `{"kb_id":"faq","max_docs":7}`, with(func(k *corefacts.KnowledgeConfig) { k.MaxDocs = 7 })},
		{"max_docs clamped", `{"kb_id":"faq","max_docs":21}`, with(func(k *corefacts.KnowledgeConfig) { k.MaxDocs = 20 })},
		{"max_docs rounded", `{"kb_id":"faq","max_docs":"3.5"}`, with(func(k *corefacts.KnowledgeConfig) { k.MaxDocs = 4 })},
		{"max_docs bad is default", `{"kb_id":"faq","max_docs":"many"}`, def("faq")},

		// inject
		{"inject doc", `{"kb_id":"faq","inject":"doc"}`, with(func(k *corefacts.KnowledgeConfig) { k.Inject = "doc" })},
		{"inject DOC is chunk", `{"kb_id":"faq","inject":"DOC"}`, def("faq")},
		{"inject doc with spaces is chunk", `{"kb_id":"faq","inject":" doc"}`, def("faq")},
		{"inject unknown is chunk", `{"kb_id":"faq","inject":"full"}`, def("faq")},

		// page_boost
		{"page_boost true", `{"kb_id":"faq","page_boost":true}`, with(func(k *corefacts.KnowledgeConfig) { k.PageBoost = true })},
		{"page_boost string is false", `{"kb_id":"faq","page_boost":"true"}`, def("faq")},
		{"page_boost 1 is false", `{"kb_id":"faq","page_boost":1}`, def("faq")},

		// everything at once, extra keys ignored
		{"full", `{"kb_ids":["faq","manuals"],"top_k":8,"min_score":0.5,"inject":"doc","max_docs":2,"page_boost":true,"extra":{"x":1}}`,
			&corefacts.KnowledgeConfig{KBIDs: []string{"faq", "manuals"}, TopK: 8, MinScore: 0.5, Inject: "doc", MaxDocs: 2, PageBoost: true}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var raw []byte
			if tc.raw != "" {
				raw = []byte(tc.raw)
			}
			got, err := NormalizeKnowledge(raw)
			if err != nil {
				t.Fatalf("got error %v; want none", err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %+v; want %+v", got, tc.want)
			}
			if got != nil && math.Signbit(got.MinScore) {
				t.Errorf("got min_score -0; want +0")
			}
		})
	}
}

func TestNormalizeKnowledgeMalformed(t *testing.T) {
	for _, raw := range []string{`{`, `{"kb_id":"faq"} {}`, `nul`, `{"kb_id":'faq'}`} {
		t.Run(raw, func(t *testing.T) {
			got, err := NormalizeKnowledge([]byte(raw))
			if !errors.Is(err, ErrMalformedJSON) || got != nil {
				t.Errorf("got %v, %v; want nil, ErrMalformedJSON", got, err)
			}
		})
	}
}

func TestJSNumberToString(t *testing.T) {
	cases := []struct {
		in   float64
		want string
	}{
		{0, "0"}, {7, "7"}, {-7, "-7"}, {1.5, "1.5"}, {0.1, "0.1"}, {123456789012, "123456789012"},
		{1e20, "100000000000000000000"}, {1e21, "1e+21"}, {1.5e22, "1.5e+22"}, {1e-6, "0.000001"},
		{1e-7, "1e-7"}, {2.5e-8, "2.5e-8"}, {math.Inf(1), "Infinity"}, {math.Inf(-1), "-Infinity"},
	}
	for _, tc := range cases {
		if got := jsNumberToString(tc.in); got != tc.want {
			t.Errorf("jsNumberToString(%v): got %q; want %q", tc.in, got, tc.want)
		}
	}
}

func TestJSRound(t *testing.T) {
	cases := []struct{ in, want float64 }{
		{2.5, 3}, {-2.5, -2}, {-2.6, -3}, {0.49999999999999994, 0}, {1.4999, 1}, {7, 7},
	}
	for _, tc := range cases {
		if got := jsRound(tc.in); got != tc.want {
			t.Errorf("jsRound(%v): got %v; want %v", tc.in, got, tc.want)
		}
	}
}

// The normalization memo returns exactly what NormalizeKnowledge returns, a
// copy of the caller's own, and stays bounded.
func TestNormalizationMemo(t *testing.T) {
	raw := []byte(`{"kb_ids":["faq","manuals"],"top_k":7}`)
	want, err := NormalizeKnowledge(raw)
	if err != nil {
		t.Fatal(err)
	}
	a, err := normalized.get(raw)
	if err != nil || !reflect.DeepEqual(a, want) {
		t.Fatalf("first get: got %+v, %v; want %+v", a, err, want)
	}
	a.KBIDs[0] = "tampered"
	a.TopK = 1
	b, _ := normalized.get(raw)
	if !reflect.DeepEqual(b, want) {
		t.Fatalf("second get after the caller modified its copy: got %+v; want %+v", b, want)
	}
	if _, err := normalized.get([]byte(`{"kb_ids":`)); err == nil {
		t.Fatal("malformed column: got no error; want the NormalizeKnowledge error, memoized or not")
	}
	for i := 0; i < 3*normMemoEntries; i++ {
		normalized.get([]byte(fmt.Sprintf(`{"kb_id":"kb-%d"}`, i)))
	}
	normalized.mu.RLock()
	n := len(normalized.m)
	normalized.mu.RUnlock()
	if n > normMemoEntries {
		t.Fatalf("memo holds %d entries; want at most %d", n, normMemoEntries)
	}
}
