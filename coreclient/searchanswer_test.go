package coreclient

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/bailinghub/knowledge-sidecar/internal/fakecore"
)

// sameAsEncodingJSON fails unless decodeSearch accepts in exactly when
// json.Unmarshal into searchResponse does, with an equal value.
func sameAsEncodingJSON(t *testing.T, in []byte) (searchResponse, bool) {
	t.Helper()
	var want searchResponse
	werr := json.Unmarshal(in, &want)
	got, gerr := decodeSearch(in)
	if (gerr == nil) != (werr == nil) {
		t.Fatalf("%.200q: decodeSearch error %v; encoding/json error %v", in, gerr, werr)
	}
	if werr == nil && !reflect.DeepEqual(got, want) {
		t.Fatalf("%.200q:\ndecodeSearch  %#v\nencoding/json %#v", in, got, want)
	}
	return got, werr == nil
}

// fakeCoreSearchAnswer is the fake Core's 200 answer to a search of kb_ids
// ["FAQ"] (Core echoes the ids it has).
func fakeCoreSearchAnswer(t testing.TB) []byte {
	core := fakecore.New(fakecore.Options{ServiceToken: "svc"})
	defer core.Close()
	core.AddDoc("faq", 1, "退款规则", "退款窗口为七天。超过窗口不能退款。\n\"七天\"从签收起算 <b>&</b>")
	core.AddDoc("faq", 2, "Shipping", "Parcels ship within two days.")
	req := httptest.NewRequest(http.MethodPost, "/kb/search", strings.NewReader(`{"kb_ids":["FAQ"],"query":"退款窗口","top_k":5,"min_score":-1}`))
	req.Header.Set("Authorization", "Bearer svc")
	req.Header.Set("Content-Type", "application/json")
	rec := httptest.NewRecorder()
	core.ServeHTTP(rec, req)
	if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), `"hits":[{`) {
		t.Fatalf("fake core answered %d %s", rec.Code, rec.Body)
	}
	return rec.Body.Bytes()
}

// searchAnswerCases are the answers whose decoding encoding/json has an
// opinion on that a hand-written decoder could miss; each is also a seed of
// FuzzDecodeSearch. ok is what encoding/json (and so decodeSearch) says.
var searchAnswerCases = []struct {
	name, in string
	ok       bool
}{
	{"core's shape", `{"kb_ids":["cs-faq"],"hits":[{"score":0.757,"content":"退款窗口","doc_id":1,"title":"政策","seq":0,"kb_id":"cs-faq"}]}`, true},
	{"no hits", `{"kb_ids":["cs-faq"],"hits":[]}`, true},
	{"blanks everywhere", " \n{ \"kb_ids\" : [ \"a\" , \"b\" ] ,\r\n\t\"hits\" : [ { \"seq\" : 3 } ] } \n", true},
	{"empty object", `{}`, true},
	{"top-level null", `null`, true},
	{"top-level null with blanks", " null\n", true},
	{"top-level array", `[]`, false},
	{"top-level string", `"kb_ids"`, false},
	{"top-level number", `1`, false},
	{"top-level true", `true`, false},
	{"empty", ``, false},
	{"blanks only", " \n", false},
	{"trailing garbage", `{"kb_ids":["a"]} x`, false},
	{"second value", `{"kb_ids":["a"]}{}`, false},
	{"trailing brace", `{"kb_ids":["a"]}}`, false},
	{"trailing comma", `{"kb_ids":["a"],}`, false},
	{"truncated", `{"kb_ids":["a"],"hits":[{"score":0.5`, false},
	{"ends before a value", `{"hits":`, false},
	{"ends in an array", `{"hits":[`, false},
	{"ends in a kb id array", `{"kb_ids":[`, false},
	{"ends before a hit's value", `{"hits":[{"seq":`, false},
	{"ends before a doc_id", `{"hits":[{"doc_id":`, false},
	{"invalid after a type error", `{"kb_ids":1,"x":}`, false},
	{"unknown members", `{"took":12,"kb_ids":["a"],"debug":{"q":[1,{"x":null}],"s":"\u00e9"},"hits":[{"x":[true],"seq":1,"y":{}}]}`, true},
	{"nulls keep zero values", `{"kb_ids":null,"hits":null}`, true},
	{"null fields", `{"hits":[{"score":null,"content":null,"doc_id":null,"title":null,"seq":null,"kb_id":null}]}`, true},
	{"null hit", `{"hits":[null,{"seq":1}]}`, true},
	{"null kb id", `{"kb_ids":[null,"a"]}`, true},
	{"keys fold", `{"KB_IDS":["a"],"Hits":[{"SCORE":0.5,"Content":"c","doc_ID":7,"TiTlE":"t","sEQ":2,"Kb_Id":"a"}]}`, true},
	{"escaped keys", `{"\u006bb_ids":["a"],"hit\u0073":[{"\u0073eq":4,"kb\u005fid":"a"}]}`, true},
	{"long s folds to s", `{"hits":[{"ſeq":3,"ſcore":0.5,"doc_id":1,"titlſ":"no"}]}`, true},
	{"kelvin sign folds to k", "{\"\u212ab_ids\":[\"a\"],\"hits\":[{\"\u212aB_ID\":\"a\"}]}", true},
	{"dotted and dotless i do not fold to i", `{"hİts":[1],"hıts":[2],"kb_İds":3}`, true},
	{"key with a NUL", `{"kb_ids\u0000":[1],"seq":"x"}`, true},
	{"key with invalid utf-8", "{\"kb_ids\xff\":[1],\"h\xffits\":2}", true},
	{"duplicate keys, last wins", `{"kb_ids":["a"],"kb_ids":["b"],"hits":[{"seq":1,"seq":2}]}`, true},
	{"duplicate hits merge by index", `{"hits":[{"score":1,"title":"a"},{"seq":2}],"hits":[{"score":2}]}`, true},
	{"a cut-off hit comes back", `{"hits":[{"title":"a"},{"title":"b"},{"title":"c"}],"hits":[{"title":"x"}],"hits":[{},null,{"seq":9}]}`, true},
	{"a cut-off kb id comes back", `{"kb_ids":["a","b","c"],"kb_ids":["x"],"kb_ids":[null,null,null,null]}`, true},
	{"an empty array forgets", `{"kb_ids":["a","b"],"kb_ids":[],"kb_ids":[null,null]}`, true},
	{"null forgets", `{"hits":[{"title":"a"}],"hits":null,"hits":[null]}`, true},
	{"fold duplicates merge", `{"hits":[{"title":"a"}],"HITS":[{"seq":1}]}`, true},
	{"doc_id literal kept", `{"hits":[{"doc_id":-0.5e+3},{"doc_id":1E2},{"doc_id":12345678901234567890}]}`, true},
	{"doc_id string number", `{"hits":[{"doc_id":"12"},{"doc_id":"1.5e3"},{"doc_id":"\u0031\u0032"},{"doc_id":"-0"}]}`, true},
	{"doc_id string not a number", `{"hits":[{"doc_id":"x"}]}`, false},
	{"doc_id empty string", `{"hits":[{"doc_id":""}]}`, false},
	{"doc_id string with a blank", `{"hits":[{"doc_id":" 1"}]}`, false},
	{"doc_id string 01", `{"hits":[{"doc_id":"01"}]}`, false},
	{"doc_id string +1", `{"hits":[{"doc_id":"+1"}]}`, false},
	{"doc_id string 1.", `{"hits":[{"doc_id":"1."}]}`, false},
	{"doc_id bool", `{"hits":[{"doc_id":true}]}`, false},
	{"doc_id object", `{"hits":[{"doc_id":{}}]}`, false},
	{"seq 1.5", `{"hits":[{"seq":1.5}]}`, false},
	{"seq 1e2", `{"hits":[{"seq":1e2}]}`, false},
	{"seq -0", `{"hits":[{"seq":-0}]}`, true},
	{"seq max int", `{"hits":[{"seq":9223372036854775807},{"seq":-9223372036854775808}]}`, true},
	{"seq overflows", `{"hits":[{"seq":9223372036854775808}]}`, false},
	{"seq string", `{"hits":[{"seq":"1"}]}`, false},
	{"seq 01", `{"hits":[{"seq":01}]}`, false},
	{"score forms", `{"hits":[{"score":-0},{"score":1e-400},{"score":0.1e1},{"score":1.7976931348623157e308}]}`, true},
	{"score overflows", `{"hits":[{"score":1e400}]}`, false},
	{"score string", `{"hits":[{"score":"0.5"}]}`, false},
	{"score bool", `{"hits":[{"score":false}]}`, false},
	{"score .5", `{"hits":[{"score":.5}]}`, false},
	{"content number", `{"hits":[{"content":1}]}`, false},
	{"content array", `{"hits":[{"content":["a"]}]}`, false},
	{"title object", `{"hits":[{"title":{}}]}`, false},
	{"kb_ids string", `{"kb_ids":"a"}`, false},
	{"kb_ids object", `{"kb_ids":{}}`, false},
	{"kb_ids number element", `{"kb_ids":["a",1]}`, false},
	{"hits object", `{"hits":{}}`, false},
	{"hits number element", `{"hits":[1]}`, false},
	{"hits array element", `{"hits":[[]]}`, false},
	{"hits string element", `{"hits":["x"]}`, false},
	{"escapes", `{"hits":[{"content":"a\"b\\c\/d\b\f\n\r\t\u00e9\u9000 \ud83d\ude80","title":"\u2028"}]}`, true},
	{"lone surrogates", `{"hits":[{"content":"\ud800 \udc00x \ud83d\u0041 \ud83d\ud83d\ude80"}]}`, true},
	{"invalid utf-8", "{\"hits\":[{\"content\":\"ok \xff\xfe \xed\xa0\x80 \xe9\x80\",\"title\":\"\xe6\\n\"}],\"kb_ids\":[\"\xc3\"]}", true},
	{"raw control character", "{\"hits\":[{\"content\":\"a\x01\"}]}", false},
	{"bad escape", `{"hits":[{"content":"\x"}]}`, false},
	{"short \\u", `{"hits":[{"content":"\u12"}]}`, false},
	{"unknown member broken", `{"x":[1,],"kb_ids":["a"]}`, false},
	{"unknown member deep at the limit", `{"x":` + strings.Repeat("[", 9999) + strings.Repeat("]", 9999) + `}`, true},
	{"unknown member past the limit", `{"x":` + strings.Repeat("[", 10000) + strings.Repeat("]", 10000) + `}`, false},
	{"hit member deep at the limit", `{"hits":[{"x":` + strings.Repeat("[", 9997) + strings.Repeat("]", 9997) + `}]}`, true},
	{"hit member past the limit", `{"hits":[{"x":` + strings.Repeat("[", 9998) + strings.Repeat("]", 9998) + `}]}`, false},
}

// TestDecodeSearchMatchesEncodingJSON: every case is decided as
// encoding/json decides it, with the same values.
func TestDecodeSearchMatchesEncodingJSON(t *testing.T) {
	for _, tc := range searchAnswerCases {
		t.Run(tc.name, func(t *testing.T) {
			if _, ok := sameAsEncodingJSON(t, []byte(tc.in)); ok != tc.ok {
				t.Fatalf("accepted: %v; the case says %v", ok, tc.ok)
			}
		})
	}
	for _, in := range [][]byte{coreSearchAnswer(20), coreSearchAnswer(25), fakeCoreSearchAnswer(t)} {
		if r, ok := sameAsEncodingJSON(t, in); !ok || len(r.Hits) == 0 || len(r.KBIDs) != 1 {
			t.Fatalf("%.100q: got %d hits, ok %v", in, len(r.Hits), ok)
		}
	}
}

// TestDecodeSearchQuirks spells out the values of the quirks above, so that
// a change of encoding/json's behaviour shows up here by name.
func TestDecodeSearchQuirks(t *testing.T) {
	decode := func(in string) searchResponse {
		t.Helper()
		r, err := decodeSearch([]byte(in))
		if err != nil {
			t.Fatalf("%s: %v", in, err)
		}
		return r
	}
	if r := decode(`{"hits":[{"title":"a"},{"title":"b"},{"title":"c"}],"hits":[{"title":"x"}],"hits":[{},null,{"seq":9}]}`); len(r.Hits) != 3 ||
		r.Hits[0].Title != "x" || r.Hits[1].Title != "b" || r.Hits[2].Title != "c" || r.Hits[2].Seq != 9 {
		t.Errorf("cut-off hits: got %+v; want x, b, c (seq 9)", r.Hits)
	}
	if r := decode(`{"kb_ids":["a","b"],"kb_ids":[],"kb_ids":[null,null]}`); !reflect.DeepEqual(r.KBIDs, []string{"", ""}) {
		t.Errorf("kb ids after []: got %q; want two empty", r.KBIDs)
	}
	if r := decode(`{"kb_ids":[]}`); r.KBIDs == nil || len(r.KBIDs) != 0 {
		t.Errorf("[]: got %#v; want an empty non-nil slice", r.KBIDs)
	}
	if r := decode(`{"hits":[{"ſeq":3,"ſcore":0.5}],"\u212Ab_ids":["a"]}`); len(r.Hits) != 1 || r.Hits[0].Seq != 3 || r.Hits[0].Score != 0.5 || len(r.KBIDs) != 1 {
		t.Errorf("folded keys: got %+v", r)
	}
	if r := decode(`{"hits":[{"doc_id":1E2},{"doc_id":"\u0031"}]}`); r.Hits[0].DocID != "1E2" || r.Hits[1].DocID != "1" {
		t.Errorf("doc ids: got %q, %q; want 1E2, 1", r.Hits[0].DocID, r.Hits[1].DocID)
	}
}

// TestFoldRuneToASCII: the only non-ASCII runes that fold to an ASCII one
// (and so can spell a tag) are 'ſ' and the Kelvin sign, which fieldOf's
// comment and the fold cases above rely on.
func TestFoldRuneToASCII(t *testing.T) {
	var got []rune
	for r := rune(utf8.RuneSelf); r <= unicode.MaxRune; r++ {
		if foldRune(r) < utf8.RuneSelf {
			got = append(got, r)
		}
	}
	if want := []rune{'ſ', '\u212a'}; !reflect.DeepEqual(got, want) {
		t.Errorf("runes folding to ASCII: %q; want %q", got, want)
	}
}

// FuzzDecodeSearch: on any input, decodeSearch accepts exactly what
// json.Unmarshal into searchResponse accepts, with equal values. Seeded
// with Core's shape (the fake Core's answer and a 20-hit one) and every
// case above.
func FuzzDecodeSearch(f *testing.F) {
	f.Add(fakeCoreSearchAnswer(f))
	f.Add(coreSearchAnswer(3))
	for _, tc := range searchAnswerCases {
		if len(tc.in) < 1000 {
			f.Add([]byte(tc.in))
		}
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		sameAsEncodingJSON(t, in)
	})
}

// TestDecodeSearchAllocations: a 20-hit answer of one KB with two documents
// costs one string per chunk text and per distinct short value (the kb id
// echoed, two titles, two doc ids) plus the two slices: the short values
// the hits repeat are not allocated again.
func TestDecodeSearchAllocations(t *testing.T) {
	body := coreSearchAnswer(20)
	got := testing.AllocsPerRun(20, func() {
		if _, err := decodeSearch(body); err != nil {
			t.Fatal(err)
		}
	})
	if want := float64(20 + 1 + 2 + 2 + 1 + 2); got > want {
		t.Errorf("decodeSearch allocates %v times; want at most %v", got, want)
	}
}
