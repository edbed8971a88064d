package turn

import (
	"encoding/json"
	"testing"
)

func TestFieldWatch(t *testing.T) {
	for _, tc := range []struct {
		body string
		want bool
	}{
		{`{"knowledge_delivery":"on_demand"}`, true},
		{`{"a":1, "knowledge_delivery": 1`, true}, // seen before the body ends
		{` {"user_input":"x","knowledge\u005fdelivery"`, true},
		{`{"page_context":{"knowledge_delivery":"x"},"a":1}`, false},     // nested: data
		{`{"a":["knowledge_delivery"],"b":"knowledge_delivery"}`, false}, // values, not keys
		{`{"a":"\"knowledge_delivery\"","c":2}`, false},
		{`["knowledge_delivery"]`, false},
		{`"knowledge_delivery"`, false},
		{`{"a":1}{"knowledge_delivery":1}`, false}, // after the object: Core refuses the body
		{`{"client_turn_id":"t","user_input":"hi"}`, false},
	} {
		// Byte by byte and in one piece: the same answer.
		var one, bytewise FieldWatch
		got1 := one.Write([]byte(tc.body))
		got2 := false
		for i := range len(tc.body) {
			got2 = bytewise.Write([]byte{tc.body[i]})
		}
		if got1 != tc.want || got2 != tc.want {
			t.Errorf("%s: got %v (whole) %v (bytewise); want %v", tc.body, got1, got2, tc.want)
		}
		// Whenever the watch reports the field in a whole body,
		// ParseRequest agrees that it is not a field-less turn.
		if tc.want && json.Valid([]byte(tc.body)) {
			if r, err := ParseRequest([]byte(tc.body)); err == nil && r.Mode == "" {
				t.Errorf("%s: watch saw the field, ParseRequest did not", tc.body)
			}
		}
	}
}

// FuzzFieldWatch: the watch never reports the field for a valid JSON body
// that ParseRequest takes as field-less. (For a broken body the two may
// differ; the edge then answers its own 401 where Core would have answered
// its 401: the bearer is refused either way.)
func FuzzFieldWatch(f *testing.F) {
	for _, s := range []string{`{"knowledge_delivery":"inline"}`, `{"a":{"knowledge_delivery":1}}`, `{"k\u006eowledge_delivery":1}`, `[]`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var w FieldWatch
		if !w.Write(body) || !json.Valid(body) {
			return
		}
		if r, err := ParseRequest(body); err == nil && r.Mode == "" {
			t.Fatalf("watch reports the field in %q; ParseRequest finds none", body)
		}
	})
}
