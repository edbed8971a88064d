package turn

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"runtime"
	"strings"
	"testing"

	"github.com/bailinghub/knowledge-sidecar/internal/jsonscan"
	"github.com/bailinghub/knowledge-sidecar/knowledge"
	"github.com/bailinghub/knowledge-sidecar/protocol"
	"github.com/bailinghub/knowledge-sidecar/turn/turntest"
)

func TestParseTurnRequest(t *testing.T) {
	const ids = `"client_conversation_id":"c-1","client_turn_id":"t-1","user_message_id":"m-1"`
	tests := []struct {
		name     string
		in       string
		wantMode protocol.DeliveryMode
		wantBody string // "" means: the input itself
		wantErr  error
	}{
		// Field absent: byte-for-byte.
		{"absent", `{` + ids + `,"user_input":"hi"}`, "", "", nil},
		{"absent with odd spacing", " \n{ \"user_input\" : \"hi\" }\t", "", "", nil},
		{"absent, nested field is data", `{"page_context":{"knowledge_delivery":"off"},"user_input":"x"}`, "", "", nil},
		{"empty object", `{}`, "", "", nil},

		// Present and valid: the member is cut, nothing else changes.
		{"only member", `{"knowledge_delivery":"on_demand"}`, "on_demand", `{}`, nil},
		{"only member with blanks", `{ "knowledge_delivery" : "inline" }`, "inline", `{  }`, nil},
		{"first member", `{"knowledge_delivery":"on_demand",` + ids + `}`, "on_demand", `{` + ids + `}`, nil},
		{"first member, blanks after comma", "{\"knowledge_delivery\":\"inline\" ,\n  \"a\":1}", "inline", "{\"a\":1}", nil},
		{"middle member", `{"a":1, "knowledge_delivery":"inline", "b":[2]}`, "inline", `{"a":1, "b":[2]}`, nil},
		{"last member", `{"a":1,"knowledge_delivery":"on_demand"}`, "on_demand", `{"a":1}`, nil},
		{"last member, pretty", "{\n  \"a\": 1,\n  \"knowledge_delivery\": \"on_demand\"\n}\n", "on_demand", "{\n  \"a\": 1\n}\n", nil},
		{"escaped key is the field", `{"a":1,"knowledge\u005fdelivery":"inline"}`, "inline", `{"a":1}`, nil},
		{"escaped value", `{"knowledge_delivery":"on\u005fdemand","a":1}`, "on_demand", `{"a":1}`, nil},
		{"nested field untouched", `{"page_context":{"knowledge_delivery":"x"},"knowledge_delivery":"inline","r":["knowledge_delivery"]}`,
			"inline", `{"page_context":{"knowledge_delivery":"x"},"r":["knowledge_delivery"]}`, nil},
		{"other values keep their encoding", `{"u":"\u00e9\/","n":1.50e+3,"knowledge_delivery":"inline","z":[ {} , [ ] ]}`,
			"inline", `{"u":"\u00e9\/","n":1.50e+3,"z":[ {} , [ ] ]}`, nil},

		// Present and invalid.
		{"off", `{"knowledge_delivery":"off"}`, "", "", ErrInvalidDelivery},
		{"hint", `{"knowledge_delivery":"hint"}`, "", "", ErrInvalidDelivery},
		{"full", `{"knowledge_delivery":"full"}`, "", "", ErrInvalidDelivery},
		{"empty string", `{"knowledge_delivery":""}`, "", "", ErrInvalidDelivery},
		{"padded", `{"knowledge_delivery":" inline"}`, "", "", ErrInvalidDelivery},
		{"upper case", `{"knowledge_delivery":"INLINE"}`, "", "", ErrInvalidDelivery},
		{"null", `{"knowledge_delivery":null}`, "", "", ErrInvalidDelivery},
		{"true", `{"knowledge_delivery":true}`, "", "", ErrInvalidDelivery},
		{"number", `{"knowledge_delivery":1}`, "", "", ErrInvalidDelivery},
		{"object", `{"knowledge_delivery":{"mode":"inline"}}`, "", "", ErrInvalidDelivery},
		{"array", `{"knowledge_delivery":["inline"]}`, "", "", ErrInvalidDelivery},
		{"duplicate", `{"knowledge_delivery":"inline","knowledge_delivery":"inline"}`, "", "", ErrInvalidDelivery},
		{"duplicate via escape", `{"knowledge_delivery":"inline","knowledge\u005Fdelivery":"on_demand"}`, "", "", ErrInvalidDelivery},

		// Not a valid JSON object.
		{"invalid json without field goes to core", `{"user_input":}`, "", "", nil},
		{"invalid json, field after the error", `{"a":tru,"knowledge_delivery":"inline"}`, "", "", nil},
		{"invalid json after the field", `{"knowledge_delivery":"inline","a":}`, "", "", ErrNotJSONObject},
		{"invalid value of the field", `{"knowledge_delivery":inline}`, "", "", ErrNotJSONObject},
		{"trailing data after the field", `{"knowledge_delivery":"inline"} {}`, "", "", ErrNotJSONObject},
		{"unterminated", `{"knowledge_delivery":"inline"`, "", "", ErrNotJSONObject},
		{"array goes to core", `[{"knowledge_delivery":"inline"}]`, "", "", nil},
		{"string goes to core", `"knowledge_delivery"`, "", "", nil},
		{"empty body goes to core", ``, "", "", nil},
		{"bom goes to core", "\ufeff{\"knowledge_delivery\":\"inline\"}", "", "", nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			in := []byte(tc.in)
			orig := bytes.Clone(in)
			got, err := ParseRequest(in)
			if !bytes.Equal(in, orig) {
				t.Fatalf("input was modified: got %q; want %q", in, orig)
			}
			if !errors.Is(err, tc.wantErr) || (tc.wantErr == nil && err != nil) {
				t.Fatalf("error: got %v; want %v", err, tc.wantErr)
			}
			if err != nil {
				return
			}
			if got.Mode != tc.wantMode {
				t.Errorf("Mode: got %q; want %q", got.Mode, tc.wantMode)
			}
			if tc.wantBody == "" {
				if len(in) > 0 && &got.Body[0] != &in[0] || len(got.Body) != len(in) {
					t.Errorf("Body: got %q; want the input slice itself", got.Body)
				}
				return
			}
			if string(got.Body) != tc.wantBody {
				t.Errorf("Body: got %q; want %q", got.Body, tc.wantBody)
			}
			if !json.Valid(got.Body) {
				t.Errorf("Body %q is not valid JSON", got.Body)
			}
		})
	}
}

func TestParseTurnRequestIDs(t *testing.T) {
	tests := []struct {
		name               string
		in                 string
		wantConv, wantTurn string
		wantMsg            string
	}{
		{"plain", `{"client_conversation_id":"c-1","client_turn_id":"t-1","user_message_id":"m-1","knowledge_delivery":"inline"}`, "c-1", "t-1", "m-1"},
		{"trimmed", `{"client_conversation_id":"  c-1\t","client_turn_id":"\nt-1 ","user_message_id":"\u3000m-1\u2028","knowledge_delivery":"inline"}`, "c-1", "t-1", "m-1"},
		// Core (JavaScript) trims U+FEFF and keeps U+0085, unlike strings.TrimSpace.
		{"trimmed like javascript", `{"client_conversation_id":"\ufeffc-1","client_turn_id":"\u0085t-1","user_message_id":"m-1\u00a0","knowledge_delivery":"inline"}`, "c-1", "\u0085t-1", "m-1"},
		{"escaped keys and values", `{"client\u005fconversation_id":"c\u002d1","client_turn_id":"t-1","user_message_id":"m-1","knowledge_delivery":"inline"}`, "c-1", "t-1", "m-1"},
		{"not strings", `{"client_conversation_id":1,"client_turn_id":null,"user_message_id":{"a":"m"},"knowledge_delivery":"inline"}`, "", "", ""},
		{"absent", `{"knowledge_delivery":"on_demand"}`, "", "", ""},
		{"duplicates: last wins like JSON.parse", `{"client_turn_id":"t-1","client_turn_id":"t-2","knowledge_delivery":"inline"}`, "", "t-2", ""},
		{"nested ids are not ids", `{"page_context":{"client_turn_id":"t-9"},"knowledge_delivery":"inline"}`, "", "", ""},
		{"ids without the field", `{"client_conversation_id":"c-1","client_turn_id":"t-1","user_message_id":"m-1"}`, "c-1", "t-1", "m-1"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseRequest([]byte(tc.in))
			if err != nil {
				t.Fatalf("got error %v; want nil", err)
			}
			if got.ConversationID != tc.wantConv || got.TurnID != tc.wantTurn || got.UserMessageID != tc.wantMsg {
				t.Fatalf("ids: got (%q, %q, %q); want (%q, %q, %q)",
					got.ConversationID, got.TurnID, got.UserMessageID, tc.wantConv, tc.wantTurn, tc.wantMsg)
			}
		})
	}
}

const testBlock = `{"schema_version":"bailing.agent-knowledge-delivery.v1","mode":"on_demand","status":"ok","hints":[]}`

func TestRewriteTurnResponse(t *testing.T) {
	const blk = testBlock
	tests := []struct {
		name, in, mode, want string
	}{
		{"on_demand empties knowledge and adds the block",
			`{"schema_version":"bailing.agent-turn-context.v1","run_id":"r","context":{"instructions":"i","memory":{"summary":null,"recent":[1]},"knowledge":[{"ref":"knowledge:1","content":"secret"}],"knowledge_refs":[{"ref":"knowledge:1","doc_id":9}],"governance":{"a":1}},"active_tools":[{"x":"y"}]}`,
			"on_demand",
			`{"schema_version":"bailing.agent-turn-context.v1","run_id":"r","context":{"instructions":"i","memory":{"summary":null,"recent":[1]},"knowledge":[],"knowledge_refs":[],"governance":{"a":1}},"active_tools":[{"x":"y"}],"knowledge_delivery":` + blk + `}`},
		{"inline keeps knowledge and adds the block",
			`{"schema_version":"bailing.agent-turn-context.v1","context":{"knowledge":[{"ref":"knowledge:1"}],"knowledge_refs":[1]},"active_tools":[]}`,
			"inline",
			`{"schema_version":"bailing.agent-turn-context.v1","context":{"knowledge":[{"ref":"knowledge:1"}],"knowledge_refs":[1]},"active_tools":[],"knowledge_delivery":` + blk + `}`},
		{"missing knowledge arrays are added in on_demand",
			`{"schema_version":"bailing.agent-turn-context.v1","context":{"instructions":"i"}}`,
			"on_demand",
			`{"schema_version":"bailing.agent-turn-context.v1","context":{"instructions":"i","knowledge":[],"knowledge_refs":[]},"knowledge_delivery":` + blk + `}`},
		{"one missing array is added",
			`{"schema_version":"bailing.agent-turn-context.v1","context":{"knowledge_refs":[{"r":1}],"x":0}}`,
			"on_demand",
			`{"schema_version":"bailing.agent-turn-context.v1","context":{"knowledge_refs":[],"x":0,"knowledge":[]},"knowledge_delivery":` + blk + `}`},
		{"empty context",
			`{"schema_version":"bailing.agent-turn-context.v1","context":{ }}`,
			"on_demand",
			`{"schema_version":"bailing.agent-turn-context.v1","context":{"knowledge":[],"knowledge_refs":[] },"knowledge_delivery":` + blk + `}`},
		{"inline leaves a context without knowledge alone",
			`{"schema_version":"bailing.agent-turn-context.v1","context":{}}`,
			"inline",
			`{"schema_version":"bailing.agent-turn-context.v1","context":{},"knowledge_delivery":` + blk + `}`},
		{"existing block is replaced in place",
			`{"knowledge_delivery":{"old":true},"schema_version":"bailing.agent-turn-context.v1","context":{"knowledge":[1]}}`,
			"on_demand",
			`{"knowledge_delivery":` + blk + `,"schema_version":"bailing.agent-turn-context.v1","context":{"knowledge":[],"knowledge_refs":[]}}`},
		{"pretty printed input keeps its layout",
			"{\n  \"schema_version\": \"bailing.agent-turn-context.v1\",\n  \"context\": {\n    \"knowledge\": [ 1, 2 ],\n    \"knowledge_refs\": [ 3 ]\n  }\n}\n",
			"on_demand",
			"{\n  \"schema_version\": \"bailing.agent-turn-context.v1\",\n  \"context\": {\n    \"knowledge\": [],\n    \"knowledge_refs\": []\n  },\"knowledge_delivery\":" + blk + "\n}\n"},
		{"escaped keys are the fields",
			`{"schema\u005fversion":"bailing.agent-turn-context.v1","cont\u0065xt":{"knowl\u0065dge":[1],"knowledge\u005frefs":[2]},"knowledge\u005fdelivery":null}`,
			"on_demand",
			`{"schema\u005fversion":"bailing.agent-turn-context.v1","cont\u0065xt":{"knowl\u0065dge":[],"knowledge\u005frefs":[]},"knowledge\u005fdelivery":` + blk + `}`},
		{"nested knowledge keys are data",
			`{"schema_version":"bailing.agent-turn-context.v1","context":{"memory":{"knowledge":[1],"knowledge_delivery":2},"knowledge":[3]},"active_tools":[{"knowledge_refs":[4]}]}`,
			"on_demand",
			`{"schema_version":"bailing.agent-turn-context.v1","context":{"memory":{"knowledge":[1],"knowledge_delivery":2},"knowledge":[],"knowledge_refs":[]},"active_tools":[{"knowledge_refs":[4]}],"knowledge_delivery":` + blk + `}`},
		{"memory and tools keep their exact bytes",
			`{"schema_version":"bailing.agent-turn-context.v1","context":{"memory":{"recent":["\u00e9\/<&>",1.0E+2,  -0]},"knowledge":[]},"active_tools":[{"schema":{"type":"object"} }]}`,
			"on_demand",
			`{"schema_version":"bailing.agent-turn-context.v1","context":{"memory":{"recent":["\u00e9\/<&>",1.0E+2,  -0]},"knowledge":[],"knowledge_refs":[]},"active_tools":[{"schema":{"type":"object"} }],"knowledge_delivery":` + blk + `}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			in := []byte(tc.in)
			orig := bytes.Clone(in)
			got, err := rewriteResponse(in, protocol.DeliveryMode(tc.mode), []byte(blk))
			if err != nil {
				t.Fatalf("got error %v; want nil", err)
			}
			if !bytes.Equal(in, orig) {
				t.Fatalf("input was modified")
			}
			if string(got) != tc.want {
				t.Fatalf("got\n%s\nwant\n%s", got, tc.want)
			}
			if !json.Valid(got) {
				t.Fatalf("output is not valid JSON: %s", got)
			}
		})
	}
}

func TestRewriteTurnResponseBlockWhitespace(t *testing.T) {
	got, err := rewriteResponse([]byte(`{"schema_version":"bailing.agent-turn-context.v1","context":{}}`), "inline", []byte("\n {\"a\":1} \n"))
	if err != nil {
		t.Fatal(err)
	}
	want := `{"schema_version":"bailing.agent-turn-context.v1","context":{},"knowledge_delivery":{"a":1}}`
	if string(got) != want {
		t.Fatalf("got %s; want %s", got, want)
	}
}

func TestRewriteTurnResponseErrors(t *testing.T) {
	const ok = `{"schema_version":"bailing.agent-turn-context.v1","context":{}}`
	tests := []struct {
		name, in, mode, block string
		want                  error
	}{
		{"not json", `<html>bad gateway</html>`, "on_demand", testBlock, ErrUnexpectedAnswer},
		{"empty", ``, "on_demand", testBlock, ErrUnexpectedAnswer},
		{"truncated", ok[:len(ok)-1], "on_demand", testBlock, ErrUnexpectedAnswer},
		{"trailing data", ok + `x`, "on_demand", testBlock, ErrUnexpectedAnswer},
		{"array", `[` + ok + `]`, "on_demand", testBlock, ErrUnexpectedAnswer},
		{"no schema_version", `{"context":{}}`, "on_demand", testBlock, ErrUnexpectedAnswer},
		{"legacy schema key only", `{"schema":"bailing.agent-turn-context.v1","context":{}}`, "on_demand", testBlock, ErrUnexpectedAnswer},
		{"other schema", `{"schema_version":"bailing.agent-turn-context.v2","context":{}}`, "inline", testBlock, ErrUnexpectedAnswer},
		{"schema not a string", `{"schema_version":1,"context":{}}`, "inline", testBlock, ErrUnexpectedAnswer},
		{"duplicate schema", `{"schema_version":"bailing.agent-turn-context.v1","schema_version":"x","context":{}}`, "inline", testBlock, ErrUnexpectedAnswer},
		{"no context", `{"schema_version":"bailing.agent-turn-context.v1"}`, "on_demand", testBlock, ErrUnexpectedAnswer},
		{"context null", `{"schema_version":"bailing.agent-turn-context.v1","context":null}`, "on_demand", testBlock, ErrUnexpectedAnswer},
		{"context array", `{"schema_version":"bailing.agent-turn-context.v1","context":[]}`, "inline", testBlock, ErrUnexpectedAnswer},
		{"duplicate context", `{"schema_version":"bailing.agent-turn-context.v1","context":{},"context":{}}`, "on_demand", testBlock, ErrUnexpectedAnswer},
		{"duplicate knowledge", `{"schema_version":"bailing.agent-turn-context.v1","context":{"knowledge":[],"knowledge":[1]}}`, "on_demand", testBlock, ErrUnexpectedAnswer},
		{"duplicate knowledge_refs", `{"schema_version":"bailing.agent-turn-context.v1","context":{"knowledge_refs":[],"knowledge_refs":[1]}}`, "on_demand", testBlock, ErrUnexpectedAnswer},
		{"duplicate block", `{"schema_version":"bailing.agent-turn-context.v1","context":{},"knowledge_delivery":1,"knowledge_delivery":2}`, "inline", testBlock, ErrUnexpectedAnswer},
		{"bad mode", ok, "off", testBlock, ErrInvalidDelivery},
		{"empty mode", ok, "", testBlock, ErrInvalidDelivery},
		{"block not json", ok, "inline", `{"a":`, ErrInvalidDeliveryBlock},
		{"block not an object", ok, "inline", `[]`, ErrInvalidDeliveryBlock},
		{"block with trailing data", ok, "inline", `{} {}`, ErrInvalidDeliveryBlock},
		{"block empty", ok, "inline", ``, ErrInvalidDeliveryBlock},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := rewriteResponse([]byte(tc.in), protocol.DeliveryMode(tc.mode), []byte(tc.block))
			if !errors.Is(err, tc.want) {
				t.Fatalf("got (%q, %v); want error %v", got, err, tc.want)
			}
			if got != nil {
				t.Fatalf("got output %q with an error; want nil", got)
			}
		})
	}
}

// TestTurnScannerAgreesWithEncodingJSON checks the scanner's notion of valid
// JSON against json.Valid on tricky inputs.
func TestTurnScannerAgreesWithEncodingJSON(t *testing.T) {
	deep := func(n int) string { return `{"a":` + strings.Repeat("[", n-1) + strings.Repeat("]", n-1) + `}` }
	inputs := []string{
		`{}`, `{"a":1}`, `{"a":-0}`, `{"a":01}`, `{"a":1.}`, `{"a":.5}`, `{"a":1e}`, `{"a":1e+}`, `{"a":1E-7}`,
		`{"a":-}`, `{"a":+1}`, `{"a":0x1}`, `{"a":tru}`, `{"a":nul}`, `{"a":true}`, `{"a":false,"b":null}`,
		`{"a":"\u12"}`, `{"a":"\u12g4"}`, `{"a":"\x"}`, `{"a":"\/\b\f\n\r\t\"\\"}`, "{\"a\":\"\x01\"}",
		"{\"a\":\"\xff\xfe\"}", `{"a":[1,]}`, `{"a":[,1]}`, `{"a":1,}`, `{,"a":1}`, `{"a" 1}`, `{"a":1 "b":2}`,
		`{"a":{"b":{"c":[{}]}}}`, `{1:2}`, `{"a":[1 2]}`, "{\"a\":1}\n", "{\"a\":\v1}", `{"a":"unterminated}`,
		deep(10000), deep(10001),
	}
	for i, in := range inputs {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			b := []byte(in)
			end, err := scanObject(b, 0, 1, nil)
			got := err == nil && jsonscan.SkipWS(b, end) == len(b)
			if want := json.Valid(b); got != want {
				t.Fatalf("scanner valid = %v; json.Valid = %v for %.80q", got, want, in)
			}
		})
	}
}

// --- properties: random objects ---------------------------------------------

// gen builds random JSON with random whitespace, escaped key spellings and
// nested decoys.
type gen struct{ r *rand.Rand }

func (g gen) ws() string {
	return []string{"", "", "", " ", "\n  ", "\t", " \r\n "}[g.r.IntN(7)]
}

// key spells name, sometimes with JSON escapes.
func (g gen) key(name string) string {
	var sb strings.Builder
	sb.WriteByte('"')
	for _, c := range name {
		switch g.r.IntN(6) {
		case 0:
			fmt.Fprintf(&sb, `\u%04x`, c)
		case 1:
			fmt.Fprintf(&sb, `\u%04X`, c)
		default:
			sb.WriteRune(c)
		}
	}
	sb.WriteByte('"')
	return sb.String()
}

func (g gen) value(depth int) string {
	n := 6
	if depth > 3 {
		n = 4
	}
	switch g.r.IntN(n) {
	case 0:
		return []string{`"x"`, `"\u00e9\n"`, `""`, `"knowledge_delivery"`, `"\ud83d\ude00"`}[g.r.IntN(5)]
	case 1:
		return []string{`0`, `-1.5e3`, `42`, `1E+2`}[g.r.IntN(4)]
	case 2:
		return []string{`true`, `false`, `null`}[g.r.IntN(3)]
	case 3:
		return `"` + strings.Repeat("y", g.r.IntN(40)) + `"`
	case 4:
		return g.object(depth+1, g.decoyKeys(), "", "")
	default:
		var sb strings.Builder
		sb.WriteString("[" + g.ws())
		for i := range g.r.IntN(4) {
			if i > 0 {
				sb.WriteString(g.ws() + "," + g.ws())
			}
			sb.WriteString(g.value(depth + 1))
		}
		sb.WriteString(g.ws() + "]")
		return sb.String()
	}
}

func (g gen) decoyKeys() []string {
	pool := []string{"a", "b", "user_input", "knowledge_delivery", "knowledge", "knowledge_refs", "context", "schema_version", "z"}
	n := g.r.IntN(4)
	out := make([]string, 0, n)
	seen := map[string]bool{}
	for range n {
		k := pool[g.r.IntN(len(pool))]
		if !seen[k] {
			seen[k] = true
			out = append(out, k)
		}
	}
	return out
}

// object renders an object with the given keys (random values) plus, when
// special is not "", the member special:specialVal at a random position.
func (g gen) object(depth int, keys []string, special, specialVal string) string {
	members := make([]string, 0, len(keys)+1)
	for _, k := range keys {
		members = append(members, g.key(k)+g.ws()+":"+g.ws()+g.value(depth))
	}
	if special != "" {
		at := g.r.IntN(len(members) + 1)
		members = append(members[:at], append([]string{g.key(special) + g.ws() + ":" + g.ws() + specialVal}, members[at:]...)...)
	}
	var sb strings.Builder
	sb.WriteString("{" + g.ws())
	for i, m := range members {
		if i > 0 {
			sb.WriteString(g.ws() + "," + g.ws())
		}
		sb.WriteString(m)
	}
	sb.WriteString(g.ws() + "}")
	return sb.String()
}

func decode(t *testing.T, b []byte) map[string]any {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil {
		t.Fatalf("decode %q: %v", b, err)
	}
	return m
}

func TestParseTurnRequestRandomObjects(t *testing.T) {
	g := gen{rand.New(rand.NewPCG(1, 2))}
	topKeys := []string{"client_conversation_id", "client_turn_id", "user_message_id", "user_input", "page_context", "renderers"}
	for i := range 3000 {
		keys := slicesShuffle(g, topKeys)[:g.r.IntN(len(topKeys)+1)]
		mode := []protocol.DeliveryMode{"", "inline", "on_demand"}[g.r.IntN(3)]
		special, val := "", ""
		if mode != "" {
			special, val = "knowledge_delivery", `"`+string(mode)+`"`
		}
		in := []byte(g.ws() + g.object(1, keys, special, val) + g.ws())
		got, err := ParseRequest(in)
		if err != nil {
			t.Fatalf("case %d: ParseRequest(%s): %v", i, in, err)
		}
		if got.Mode != mode {
			t.Fatalf("case %d: Mode = %q; want %q (%s)", i, got.Mode, mode, in)
		}
		if mode == "" {
			if !bytes.Equal(got.Body, in) {
				t.Fatalf("case %d: Body changed without the field", i)
			}
			continue
		}
		want := decode(t, in)
		delete(want, "knowledge_delivery")
		if gotMap := decode(t, got.Body); !reflect.DeepEqual(gotMap, want) {
			t.Fatalf("case %d: Body decodes to %v; want %v\nin:  %s\nout: %s", i, gotMap, want, in, got.Body)
		}
	}
}

func slicesShuffle(g gen, s []string) []string {
	out := append([]string(nil), s...)
	g.r.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out
}

func TestRewriteTurnResponseRandomObjects(t *testing.T) {
	g := gen{rand.New(rand.NewPCG(3, 4))}
	for i := range 3000 {
		ctxKeys := slicesShuffle(g, []string{"instructions", "memory", "knowledge", "knowledge_refs", "governance", "page_context"})[:g.r.IntN(7)]
		ctxObj := g.object(2, ctxKeys, "", "")
		topKeys := slicesShuffle(g, []string{"run_id", "profile_revision", "active_tools", "task_binding", "knowledge_delivery"})[:g.r.IntN(6)]
		// schema_version and context at random positions among the others.
		body := g.object(1, topKeys, "schema_version", `"`+contextSchema+`"`)
		body = strings.Replace(body, "{", "{"+g.key("context")+":"+ctxObj+",", 1)
		in := []byte(g.ws() + body + g.ws())
		mode := []protocol.DeliveryMode{"inline", "on_demand"}[g.r.IntN(2)]
		out, err := rewriteResponse(in, mode, []byte(testBlock))
		if err != nil {
			t.Fatalf("case %d: %v\n%s", i, err, in)
		}
		checkRewrite(t, in, out, mode)
	}
}

// checkRewrite asserts that out is in with exactly the SPEC §7 changes:
// the decoded document matches, and every untouched member keeps its bytes.
func checkRewrite(t *testing.T, in, out []byte, mode protocol.DeliveryMode) {
	t.Helper()
	want := decode(t, in)
	ctx := want["context"].(map[string]any)
	if mode == "on_demand" {
		ctx["knowledge"] = []any{}
		ctx["knowledge_refs"] = []any{}
	}
	want["knowledge_delivery"] = decode(t, []byte(testBlock))
	if got := decode(t, out); !reflect.DeepEqual(got, want) {
		t.Fatalf("output decodes to %v; want %v\nin:  %s\nout: %s", got, want, in, out)
	}
	var rawIn, rawOut map[string]json.RawMessage
	if json.Unmarshal(in, &rawIn) != nil || json.Unmarshal(out, &rawOut) != nil {
		t.Fatalf("raw decode failed")
	}
	for k, v := range rawIn {
		if k == "knowledge_delivery" || (k == "context" && mode == "on_demand") {
			continue
		}
		if !bytes.Equal(rawOut[k], v) {
			t.Fatalf("member %q: got bytes %s; want %s", k, rawOut[k], v)
		}
	}
	if mode == "on_demand" {
		var cIn, cOut map[string]json.RawMessage
		if json.Unmarshal(rawIn["context"], &cIn) != nil || json.Unmarshal(rawOut["context"], &cOut) != nil {
			t.Fatalf("raw context decode failed")
		}
		for k, v := range cIn {
			if k == "knowledge" || k == "knowledge_refs" {
				continue
			}
			if !bytes.Equal(cOut[k], v) {
				t.Fatalf("context member %q: got bytes %s; want %s", k, cOut[k], v)
			}
		}
	}
}

// --- fuzzing ------------------------------------------------------------------

// topLevel lists the top-level keys of a valid JSON object in order, or
// ok=false when b is not one.
func topLevel(b []byte) (keys []string, vals []json.RawMessage, ok bool) {
	if !json.Valid(b) {
		return nil, nil, false
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, nil, false
	}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, nil, false
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, nil, false
		}
		keys = append(keys, tok.(string))
		vals = append(vals, v)
	}
	return keys, vals, true
}

func FuzzParseTurnRequest(f *testing.F) {
	for _, s := range []string{
		`{}`, `{"knowledge_delivery":"inline"}`, `{"a":1,"knowledge_delivery":"on_demand","b":{"knowledge_delivery":1}}`,
		`{"knowledge\u005fdelivery":"on\u005fdemand"}`, `{"knowledge_delivery":"inline","knowledge_delivery":"inline"}`,
		`{"knowledge_delivery":null}`, `[{"knowledge_delivery":"inline"}]`, `{"knowledge_delivery":"inline",}`,
		`{"client_turn_id":" t ","user_message_id":"m","client_conversation_id":"c","knowledge_delivery":"inline"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		orig := bytes.Clone(in)
		got, err := ParseRequest(in)
		if !bytes.Equal(in, orig) {
			t.Fatal("input modified")
		}
		keys, vals, isObj := topLevel(in)
		var kdVals []json.RawMessage
		for i, k := range keys {
			if k == "knowledge_delivery" {
				kdVals = append(kdVals, vals[i])
			}
		}
		switch {
		case !isObj:
			// Not a valid object: never a mode, never a rewritten body.
			if err == nil && (got.Mode != "" || !bytes.Equal(got.Body, in)) {
				t.Fatalf("invalid object %q: got mode %q body %q", in, got.Mode, got.Body)
			}
			if err != nil && !errors.Is(err, ErrNotJSONObject) {
				t.Fatalf("invalid object %q: got error %v; want nil or ErrNotJSONObject", in, err)
			}
			return
		case len(kdVals) == 0:
			if err != nil || got.Mode != "" || !bytes.Equal(got.Body, in) {
				t.Fatalf("no field in %q: got (%q, %q, %v); want pass-through", in, got.Mode, got.Body, err)
			}
			return
		case len(kdVals) > 1:
			if !errors.Is(err, ErrInvalidDelivery) {
				t.Fatalf("duplicate field in %q: got %v; want ErrInvalidDelivery", in, err)
			}
			return
		}
		var mode protocol.DeliveryMode
		if json.Unmarshal(kdVals[0], &mode) != nil || (mode != "inline" && mode != "on_demand") {
			if !errors.Is(err, ErrInvalidDelivery) {
				t.Fatalf("bad value %s in %q: got %v; want ErrInvalidDelivery", kdVals[0], in, err)
			}
			return
		}
		if err != nil || got.Mode != mode {
			t.Fatalf("%q: got (%q, %v); want mode %q", in, got.Mode, err, mode)
		}
		// Body = input minus the member: same remaining members, same bytes, same order.
		gk, gv, ok := topLevel(got.Body)
		if !ok {
			t.Fatalf("body %q is not a valid object", got.Body)
		}
		var wk []string
		var wv []json.RawMessage
		for i, k := range keys {
			if k != "knowledge_delivery" {
				wk, wv = append(wk, k), append(wv, vals[i])
			}
		}
		if !reflect.DeepEqual(gk, wk) {
			t.Fatalf("body keys %q; want %q", gk, wk)
		}
		for i := range gv {
			if !bytes.Equal(gv[i], wv[i]) {
				t.Fatalf("member %q: got %s; want %s", gk[i], gv[i], wv[i])
			}
		}
	})
}

func FuzzRewriteTurnResponse(f *testing.F) {
	for _, s := range []string{
		`{"schema_version":"bailing.agent-turn-context.v1","context":{"knowledge":[1],"knowledge_refs":[2]},"active_tools":[]}`,
		`{"schema_version":"bailing.agent-turn-context.v1","context":{}}`,
		`{"knowledge_delivery":1,"schema_version":"bailing.agent-turn-context.v1","context":{"memory":{"knowledge":1}}}`,
		`{"schema_version":"bailing.agent-turn-context.v1","context":[]}`,
		`not json`,
	} {
		f.Add([]byte(s), true)
		f.Add([]byte(s), false)
	}
	f.Fuzz(func(t *testing.T, in []byte, onDemand bool) {
		mode := protocol.DeliveryInline
		if onDemand {
			mode = "on_demand"
		}
		out, err := rewriteResponse(in, mode, []byte(testBlock))
		keys, vals, isObj := topLevel(in)
		count := map[string]int{}
		var schema string
		var ctxRaw json.RawMessage
		for i, k := range keys {
			count[k]++
			switch k {
			case "schema_version":
				_ = json.Unmarshal(vals[i], &schema)
			case "context":
				ctxRaw = vals[i]
			}
		}
		expectOK := isObj && count["schema_version"] == 1 && schema == contextSchema &&
			count["context"] == 1 && count["knowledge_delivery"] <= 1 && len(ctxRaw) > 0 && ctxRaw[0] == '{'
		if expectOK && onDemand {
			ck, _, _ := topLevel(ctxRaw)
			cc := map[string]int{}
			for _, k := range ck {
				cc[k]++
			}
			expectOK = cc["knowledge"] <= 1 && cc["knowledge_refs"] <= 1
		}
		if !expectOK {
			if !errors.Is(err, ErrUnexpectedAnswer) {
				t.Fatalf("%q: got (%q, %v); want ErrUnexpectedAnswer", in, out, err)
			}
			return
		}
		if err != nil {
			t.Fatalf("%q: got error %v; want a rewrite", in, err)
		}
		checkRewrite(t, in, out, mode)
	})
}

// --- allocations ----------------------------------------------------------------

// TestTurnRewriteAllocationsBounded: the rewrite allocates about one copy of
// the body (the output), not a re-encoding of the document.
func TestTurnRewriteAllocationsBounded(t *testing.T) {
	body := turntest.Answer(256 << 10)
	req := benchRequest(256 << 10)
	cases := []struct {
		name string
		size int
		run  func()
	}{
		{"rewrite on_demand", len(body), func() { _, _ = rewriteResponse(body, "on_demand", []byte(testBlock)) }},
		{"rewrite inline", len(body), func() { _, _ = rewriteResponse(body, "inline", []byte(testBlock)) }},
		{"parse request", len(req), func() { _, _ = ParseRequest(req) }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
			tc.run() // warm up
			const runs = 20
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			for range runs {
				tc.run()
			}
			runtime.ReadMemStats(&after)
			perOp := (after.TotalAlloc - before.TotalAlloc) / runs
			if limit := uint64(tc.size) + 16<<10; perOp > limit {
				t.Fatalf("got %d bytes allocated per op for a %d-byte body; want ≤ %d", perOp, tc.size, limit)
			}
		})
	}
}

// TestItems: what Core retrieved for the turn, refs joined with items by
// ref, unusable entries skipped, the run id read from the top level.
func TestItems(t *testing.T) {
	const run = `"run_id":"6f1c2b9e-7a1d-4c3e-9b8a-2d4e6f8a0b1c",`
	answer := func(ctx string) []byte {
		return []byte(`{"schema_version":"bailing.agent-turn-context.v1",` + run + `"context":{` + ctx + `}}`)
	}
	for _, tc := range []struct {
		name string
		ctx  string
		want []knowledge.TurnItem
	}{
		{"several chunks of one document and another document",
			`"knowledge":[{"ref":"knowledge:1","title":"A","content":"a1"},{"ref":"knowledge:2","title":"B","content":"b1 \"q\" \u00e9"},{"ref":"knowledge:3","title":"A","content":"a2"}],` +
				`"knowledge_refs":[{"ref":"knowledge:1","doc_id":9,"title":"A","score":0.82},{"ref":"knowledge:2","doc_id":12,"title":"B","score":0.7},{"ref":"knowledge:3","doc_id":9,"title":"A","score":0.6}]`,
			[]knowledge.TurnItem{{DocID: 9, Title: "A", Content: "a1", Score: 0.82}, {DocID: 12, Title: "B", Content: "b1 \"q\" é", Score: 0.7}, {DocID: 9, Title: "A", Content: "a2", Score: 0.6}}},
		{"joined by ref, not by position",
			`"knowledge_refs":[{"ref":"knowledge:2","doc_id":12,"title":"B","score":0.7},{"ref":"knowledge:1","doc_id":9,"title":"A","score":0.82}],` +
				`"knowledge":[{"ref":"knowledge:1","title":"A","content":"a1"},{"ref":"knowledge:2","title":"B","content":"b1"}]`,
			[]knowledge.TurnItem{{DocID: 12, Title: "B", Content: "b1", Score: 0.7}, {DocID: 9, Title: "A", Content: "a1", Score: 0.82}}},
		{"unusable entries skipped",
			`"knowledge":[{"ref":"knowledge:1","content":"a1"},{"ref":"knowledge:2","content":"dup"},{"ref":"knowledge:2","content":"dup2"},{"ref":"knowledge:4","content":7},"x",{"ref":"knowledge:5","content":"e"},{"ref":"knowledge:6","content":"f"}],` +
				`"knowledge_refs":[{"ref":"knowledge:1","doc_id":9,"score":0.8},{"ref":"knowledge:2","doc_id":10,"score":0.8},{"ref":"knowledge:3","doc_id":11,"score":0.8},{"ref":"knowledge:4","doc_id":12,"score":0.8},{"ref":"knowledge:5","doc_id":"13","score":0.8},{"ref":"knowledge:6","doc_id":0,"score":0.8},{"ref":"knowledge:5","doc_id":14,"score":"high"},null]`,
			[]knowledge.TurnItem{{DocID: 9, Content: "a1", Score: 0.8}}},
		{"no refs", `"knowledge":[{"ref":"knowledge:1","content":"a1"}],"knowledge_refs":[]`, nil},
		{"refs missing", `"knowledge":[{"ref":"knowledge:1","content":"a1"}]`, nil},
		{"not arrays", `"knowledge":{},"knowledge_refs":"x"`, nil},
		{"empty context", ``, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := parseAnswer(answer(tc.ctx))
			if err != nil {
				t.Fatalf("parseAnswer: got %v; want a parsed answer", err)
			}
			if got := p.Items(); !reflect.DeepEqual(got, tc.want) && (len(got) != 0 || len(tc.want) != 0) {
				t.Errorf("Items: got %+v; want %+v", got, tc.want)
			}
			if got, want := p.RunID(), "6f1c2b9e-7a1d-4c3e-9b8a-2d4e6f8a0b1c"; got != want {
				t.Errorf("RunID: got %q; want %q", got, want)
			}
		})
	}
	for _, tc := range []struct{ name, body string }{
		{"absent", `{"schema_version":"bailing.agent-turn-context.v1","context":{}}`},
		{"not a string", `{"schema_version":"bailing.agent-turn-context.v1","run_id":7,"context":{}}`},
		{"twice", `{"schema_version":"bailing.agent-turn-context.v1","run_id":"a","run_id":"a","context":{}}`},
	} {
		p, err := parseAnswer([]byte(tc.body))
		if err != nil {
			t.Fatalf("%s: parseAnswer: %v", tc.name, err)
		}
		if got := p.RunID(); got != "" {
			t.Errorf("run_id %s: got %q; want \"\"", tc.name, got)
		}
	}
}

// TestJSONString: the package's one string decoder (unquote, used for keys,
// ids, schema_version, run_id and Items) agrees with encoding/json,
// surrogate pairs, lone surrogates and invalid UTF-8 included.
func TestJSONString(t *testing.T) {
	for _, lit := range []string{
		`""`, `"plain 退款"`, `"\n\r\t\b\f\/\\\""`, `"\u00e9\u9000"`, `"\ud83d\ude80"`, `"\ud83d"`, `"\ude80x"`,
		`"\ud83d\u0041"`, `"\ud83d\ud83d\ude80"`, `"a\u2028b"`, `"\uD83D\uDE80 upper"`, `"end\\"`,
		"\"\xe6\"", "\"\xe6\\n\"", "\"ok \xff\xfe \xed\xa0\x80 \xe9\x80\"", "\"\\u00e9\xc3\"", "\"\xf0\x9f\x9a\x80\\t\"",
	} {
		b := []byte(`{"v":` + lit + `}`)
		var m jsonscan.Member
		if _, err := scanObject(b, 0, 1, func(x jsonscan.Member) { m = x }); err != nil {
			t.Fatalf("%q: scan: %v", lit, err)
		}
		var want string
		if err := json.Unmarshal([]byte(lit), &want); err != nil {
			t.Fatal(err)
		}
		if got, ok := stringOf(b, m); !ok || got != want {
			t.Errorf("%q: got %q, %v; want %q", lit, got, ok, want)
		}
	}
	b := []byte(`{"v":7}`)
	var m jsonscan.Member
	_, _ = scanObject(b, 0, 1, func(x jsonscan.Member) { m = x })
	if got, ok := stringOf(b, m); ok {
		t.Errorf("number: got %q, true; want not a string", got)
	}
}
