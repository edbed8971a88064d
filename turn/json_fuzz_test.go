package turn

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"testing"

	"github.com/bailinghub/knowledge-sidecar/corefacts/jsstring"
)

// refMember is one top-level member located by encoding/json's decoder (an
// independent scanner): prevEnd is the decoder's offset before the key
// (just after '{' or the previous value), keyStart the key's opening
// quote, valEnd the offset just after the value.
type refMember struct {
	key                       string
	val                       json.RawMessage
	prevEnd, keyStart, valEnd int
}

func refMembers(b []byte) ([]refMember, bool) {
	if !json.Valid(b) {
		return nil, false
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, false
	}
	var out []refMember
	for dec.More() {
		// More skips blanks, so the offset before the key is not the
		// previous value's end; that one was taken right after Decode.
		m := refMember{prevEnd: int(dec.InputOffset())}
		if n := len(out); n > 0 {
			m.prevEnd = out[n-1].valEnd
		}
		tok, err := dec.Token()
		if err != nil {
			return nil, false
		}
		m.key = tok.(string)
		m.keyStart = m.prevEnd + bytes.IndexByte(b[m.prevEnd:], '"')
		if err := dec.Decode(&m.val); err != nil {
			return nil, false
		}
		m.valEnd = int(dec.InputOffset())
		out = append(out, m)
	}
	if _, err := dec.Token(); err != nil { // '}'
		return nil, false
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, false
	}
	return out, true
}

// FuzzTurnRequestSplice: the request splice removes exactly the
// knowledge_delivery member and one separating comma and keeps every other
// byte (positions from encoding/json's decoder, not the package's scanner);
// the ids are Core's (last duplicate wins, trimmed like JavaScript); a body
// without the field is the very input slice; and the spliced body parses
// again as a field-less turn with the same ids.
func FuzzTurnRequestSplice(f *testing.F) {
	for _, s := range []string{
		`{"knowledge_delivery":"inline"}`, ` { "knowledge_delivery" : "on_demand" } `,
		`{"knowledge_delivery":"inline","user_input":"hi"}`, "{\"knowledge_delivery\":\"inline\" ,\n \"a\":1}",
		`{"a":1,"knowledge_delivery":"on_demand"}`, `{"a":1 , "knowledge_delivery":"inline" ,"b":[1,{"knowledge_delivery":2}]}`,
		`{"knowledge\u005fdelivery":"on\u005fdemand","client_turn_id":" t "}`, `{"client_turn_id":"a","client_turn_id":"\ufeffb\u00a0"}`,
		`{"user_message_id":"m","knowledge_delivery":"inline","client_conversation_id":"\ud800c"}`, `{"a":"\"knowledge_delivery\":","knowledge_delivery":"inline"}`,
		`{"knowledge_delivery":"inline",,}`, `{"x":"` + "\xff" + `","knowledge_delivery":"inline"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		got, err := ParseRequest(in)
		if err != nil {
			return // refusals are FuzzParseTurnRequest's
		}
		// Cut in place (Turn.Plan's way), the body is the same.
		cut, err := parseRequest(bytes.Clone(in), false)
		if err == nil && cut.Mode != "" {
			cut.cutInPlace()
		}
		if err != nil || !bytes.Equal(cut.Body, got.Body) {
			t.Fatalf("%q: in place got %q, %v; want %q", in, cut.Body, err, got.Body)
		}
		if got.Mode == "" {
			if len(got.Body) != len(in) || len(in) > 0 && &got.Body[0] != &in[0] {
				t.Fatalf("%q: no mode, but the body is not the input slice", in)
			}
		}
		members, ok := refMembers(in)
		if !ok {
			return
		}
		var ids [3]string
		kd := -1
		for i, m := range members {
			var s string
			isString := len(m.val) > 0 && m.val[0] == '"' && json.Unmarshal(m.val, &s) == nil
			if !isString {
				s = ""
			}
			switch m.key {
			case "client_conversation_id":
				ids[0] = jsstring.Trim(s)
			case "client_turn_id":
				ids[1] = jsstring.Trim(s)
			case "user_message_id":
				ids[2] = jsstring.Trim(s)
			case "knowledge_delivery":
				kd = i
			}
		}
		if g := [3]string{got.ConversationID, got.TurnID, got.UserMessageID}; g != ids {
			t.Fatalf("%q: ids %q; want %q", in, g, ids)
		}
		if got.Mode == "" {
			if kd >= 0 {
				t.Fatalf("%q: the field is there but no mode was found", in)
			}
			return
		}
		// The expected splice: not first → from the previous value's end to
		// this value's end; first of several → from the key through the
		// comma and the blanks up to the next key; alone → the member.
		m := members[kd]
		from, to := m.prevEnd, m.valEnd
		switch {
		case kd == 0 && len(members) > 1:
			from, to = m.keyStart, members[1].keyStart
		case kd == 0:
			from = m.keyStart
		}
		want := append(append([]byte(nil), in[:from]...), in[to:]...)
		if !bytes.Equal(got.Body, want) {
			t.Fatalf("%q: spliced body %q; want %q", in, got.Body, want)
		}
		again, err := ParseRequest(got.Body)
		if err != nil || again.Mode != "" || [3]string{again.ConversationID, again.TurnID, again.UserMessageID} != ids {
			t.Fatalf("spliced body %q parses as (%q, %v); want a field-less turn with the same ids", got.Body, again.Mode, err)
		}
	})
}
