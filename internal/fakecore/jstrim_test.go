package fakecore_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/bailinghub/knowledge-sidecar/corefacts/jsstring"
	"github.com/bailinghub/knowledge-sidecar/internal/fakecore"
)

// jsTrimCases are String.prototype.trim's results written from ECMAScript
// (§22.1.3.32 TrimString: WhiteSpace — TAB, VT, FF, ZWNBSP U+FEFF, any Zs
// (U+0020, U+00A0, U+1680, U+2000..U+200A, U+202F, U+205F, U+3000) — and
// LineTerminator — LF, CR, U+2028, U+2029). U+0085 (NEL, Cc) is neither,
// nor U+180E (Cf since Unicode 6.3) or U+200B (Cf): JavaScript keeps them,
// while Go's strings.TrimSpace strips U+0085 and keeps U+FEFF.
var jsTrimCases = []struct{ in, want string }{
	{"\u0085id\u0085", "\u0085id\u0085"},
	{"\ufeffid\ufeff", "id"},
	{"\u00a0id\u00a0", "id"},
	{"\u180eid\u180e", "\u180eid\u180e"},
	{"\u200bid", "\u200bid"},
	{" \t\v\f\r\nid\n", "id"},
	{"\u1680\u2000\u200aid\u202f\u205f\u3000", "id"},
	{"\u2028id\u2029", "id"},
	{"\ufeff\u0085id", "\u0085id"},
	{"\u00a0\ufeff", ""},
	{"\u0085", "\u0085"},
}

// TestJSTrimAgreement: the fake's JSTrim, corefacts/jsstring's Trim and the
// ECMAScript table agree, and the fake applies them to the ids of a turn,
// its user_input and /kb/search's kb_ids: an id whose JavaScript trim is a
// stable identifier is accepted (and bound as trimmed), any other is 400.
func TestJSTrimAgreement(t *testing.T) {
	for _, c := range jsTrimCases {
		if got := fakecore.JSTrim(c.in); got != c.want {
			t.Errorf("fakecore.JSTrim(%+q): got %+q; want %+q", c.in, got, c.want)
		}
		if got := jsstring.Trim(c.in); got != c.want {
			t.Errorf("jsstring.Trim(%+q): got %+q; want %+q", c.in, got, c.want)
		}
	}

	c, srv := newCore(t, fakecore.Options{})
	q := func(s string) string { b, _ := json.Marshal(s); return string(b) }
	post := func(conv, turn, msg, input string) answer {
		body := `{"client_conversation_id":` + q(conv) + `,"client_turn_id":` + q(turn) + `,"user_message_id":` + q(msg) + `,"user_input":` + q(input) + `}`
		return do(t, srv, http.MethodPost, "/agent-api/v1/workspaces/orders/turns", "Bearer "+alice, body, "Content-Type", "application/json")
	}
	for i, tc := range jsTrimCases {
		if !strings.Contains(tc.in, "id") {
			continue
		}
		for _, field := range []string{"client_conversation_id", "client_turn_id", "user_message_id"} {
			ids := map[string]string{"client_conversation_id": "c", "client_turn_id": "t", "user_message_id": "m"}
			for k := range ids {
				ids[k] += strings.Repeat("x", i) + "-" + field
			}
			plain := ids[field]
			ids[field] = strings.Replace(tc.in, "id", plain, 1)
			runs := c.RunsCreated()
			a := post(ids["client_conversation_id"], ids["client_turn_id"], ids["user_message_id"], "hello")
			if tc.want != "id" {
				if a.status != 400 || a.body["message"] != field+" must be a 1..128 character stable identifier." {
					t.Errorf("%s %+q: got %d %s; want 400 (JavaScript keeps %+q)", field, ids[field], a.status, a.raw, tc.want)
				}
				continue
			}
			if a.status != 200 {
				t.Errorf("%s %+q: got %d %s; want 200 (JavaScript trims it to %q)", field, ids[field], a.status, a.raw, plain)
				continue
			}
			ids[field] = plain // the same turn, as bound: a replay
			if b := post(ids["client_conversation_id"], ids["client_turn_id"], ids["user_message_id"], "hello"); b.status != 200 || string(b.raw) != string(a.raw) || c.RunsCreated() != runs+1 {
				t.Errorf("%s: the trimmed id %q did not replay the turn: got %d, %d runs", field, plain, b.status, c.RunsCreated()-runs)
			}
		}
	}

	for i, input := range []string{"\u0085", "\u180e", "\ufeff", "\u00a0\u3000\u2028"} {
		a := post("ci"+strings.Repeat("x", i), "ti"+strings.Repeat("x", i), "mi"+strings.Repeat("x", i), input)
		empty := jsstring.Trim(input) == ""
		if empty && (a.status != 400 || a.body["message"] != "user_input must not be empty.") || !empty && a.status != 200 {
			t.Errorf("user_input %+q: got %d %s; want %s", input, a.status, a.raw, map[bool]string{true: "400 empty", false: "200"}[empty])
		}
	}

	c.AddDoc("kb-a", 1, "Doc", "alpha beta")
	for _, tc := range jsTrimCases {
		if !strings.Contains(tc.in, "id") {
			continue
		}
		id := strings.Replace(tc.in, "id", "kb-a", 1)
		a := do(t, srv, http.MethodPost, "/kb/search", "Bearer "+serviceToken, `{"kb_ids":[`+q(id)+`],"query":"alpha","min_score":-1}`)
		if hit := strings.Contains(string(a.raw), `"content":"alpha beta"`); hit != (tc.want == "id") {
			t.Errorf("kb_ids %+q: hit %v (%d %s); want %v", id, hit, a.status, a.raw, tc.want == "id")
		}
	}
	// Around the body, JSON.parse allows JSON's four whitespace characters
	// only: Core's /kb/search answers a parse error with 500.
	for pad, want := range map[string]int{" \t\r\n": 200, "\f": 500, "\u00a0": 500, "\u0085": 500, "\ufeff": 500} {
		a := do(t, srv, http.MethodPost, "/kb/search", "Bearer "+serviceToken, pad+`{"kb_ids":["kb-a"],"query":"alpha","min_score":-1}`+pad)
		if a.status != want {
			t.Errorf("/kb/search body padded with %+q: got %d; want %d", pad, a.status, want)
		}
	}
}
