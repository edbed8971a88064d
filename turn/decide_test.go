package turn

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"testing"

	"github.com/bailinghub/knowledge-sidecar/knowledge"
	"github.com/bailinghub/knowledge-sidecar/protocol"
)

func TestHandlingOf(t *testing.T) {
	ids := Request{ConversationID: "c", TurnID: "t", UserMessageID: "m"}
	cases := []struct {
		name string
		r    Request
		want Handling
	}{
		{"no field, no ids", Request{}, PassUnbound},
		{"no field, an id missing", Request{ConversationID: "c", TurnID: "t"}, PassUnbound},
		{"no field, all ids: bound inline", ids, BindInline},
		{"on_demand without ids is still delivered", Request{Mode: protocol.DeliveryOnDemand}, Deliver},
		{"inline with ids", Request{Mode: protocol.DeliveryInline, ConversationID: "c", TurnID: "t", UserMessageID: "m"}, Deliver},
	}
	for _, tc := range cases {
		if got := HandlingOf(tc.r); got != tc.want {
			t.Errorf("%s: got %d; want %d", tc.name, got, tc.want)
		}
	}
}

func TestReleaseAfter(t *testing.T) {
	for _, tc := range []struct {
		status int
		want   bool
	}{
		{400, true}, {401, true}, {404, true}, {413, true}, {422, true}, {429, true}, {499, true},
		{409, true},                              // Core's turn_conflict for a fresh turn id, or a TASK_* refusal: no run from this attempt
		{500, false}, {502, false}, {503, false}, // Core may have created the run
		{200, false}, {201, false}, {302, false}, {399, false}, {100, false},
	} {
		if got := ReleaseAfter(tc.status); got != tc.want {
			t.Errorf("ReleaseAfter(%d) = %v; want %v", tc.status, got, tc.want)
		}
	}
}

// rewriteResponse is parseAnswer followed by Reply.splice, the two steps
// every rewrite takes (Reply.Rewrite), for the byte-level tests of json.go.
func rewriteResponse(body []byte, mode protocol.DeliveryMode, deliveryBlock []byte) ([]byte, error) {
	p, err := parseAnswer(body)
	if err != nil {
		return nil, err
	}
	p.mode = mode
	return p.splice(deliveryBlock)
}

// TestReply: the turn answer read once, for its mode: what Core retrieved is
// read for the hints (on_demand only), and the rewrite carries the block of
// the route's delivery. An answer that is no turn context fails on_demand
// and passes inline as Core sent it.
func TestReply(t *testing.T) {
	core := []byte(`{"schema_version":"bailing.agent-turn-context.v1","run_id":"6f1c2b9e-7a1d-4c3e-9b8a-2d4e6f8a0b1c","context":{"knowledge":[{"ref":"knowledge:1","title":"T","content":"x"}],"knowledge_refs":[{"ref":"knowledge:1","doc_id":9,"title":"T","score":0.82}]}}`)
	notTurn := []byte(`{"hello":"world"}`)
	dupKnowledge := []byte(`{"schema_version":"bailing.agent-turn-context.v1","context":{"knowledge":[],"knowledge":[1]}}`)
	const hintsJSON = `[{"ref":"kr2.x","title":"T","summary":"x","revision":"r","score":0.82,"expires_at":"2026-09-01T12:05:00Z"}]`
	d := knowledge.Delivery{Status: protocol.StatusPartial, ScopeRevision: "rev"}
	for _, tc := range []struct {
		name       string
		body       []byte
		mode       protocol.DeliveryMode
		hints      string
		wantErr    error
		wantRunID  string
		wantItems  []knowledge.TurnItem
		wantIn     []string // substrings of the answer
		wantBody   []byte   // exact answer (Core's bytes), when set
		wantNotIn  []string
		readErrors bool // ReadReply fails (else Rewrite)
	}{
		{name: "on_demand with hints", body: core, mode: protocol.DeliveryOnDemand, hints: hintsJSON,
			wantRunID: "6f1c2b9e-7a1d-4c3e-9b8a-2d4e6f8a0b1c", wantItems: []knowledge.TurnItem{{DocID: 9, Title: "T", Content: "x", Score: 0.82}},
			wantIn: []string{`"knowledge":[],"knowledge_refs":[]`, `"mode":"on_demand"`, `"knowledge_scope_revision":"rev","status":"partial"`, `"hints":` + hintsJSON + `}`}},
		{name: "on_demand without hints", body: core, mode: protocol.DeliveryOnDemand,
			wantRunID: "6f1c2b9e-7a1d-4c3e-9b8a-2d4e6f8a0b1c", wantItems: []knowledge.TurnItem{{DocID: 9, Title: "T", Content: "x", Score: 0.82}},
			wantIn: []string{`"knowledge":[],"knowledge_refs":[]`, `"hints":[]}`}},
		{name: "inline takes no hints", body: core, mode: protocol.DeliveryInline, hints: hintsJSON,
			wantRunID: "6f1c2b9e-7a1d-4c3e-9b8a-2d4e6f8a0b1c", wantItems: []knowledge.TurnItem{{DocID: 9, Title: "T", Content: "x", Score: 0.82}},
			wantIn: []string{`"content":"x"`, `"mode":"inline"`, `"status":"partial"`, `"hints":[]}`}, wantNotIn: []string{"kr2.x"}},
		{name: "on_demand, not a turn context", body: notTurn, mode: protocol.DeliveryOnDemand, wantErr: ErrUnexpectedAnswer, readErrors: true},
		{name: "inline, not a turn context", body: notTurn, mode: protocol.DeliveryInline, wantBody: notTurn},
		// Refused when read, before any hints are built (and audited).
		{name: "on_demand, a member the splice cannot choose", body: dupKnowledge, mode: protocol.DeliveryOnDemand, wantErr: ErrUnexpectedAnswer, readErrors: true},
		{name: "inline, duplicate knowledge kept", body: dupKnowledge, mode: protocol.DeliveryInline, wantIn: []string{`"knowledge":[1]}`, `"mode":"inline"`}},
		{name: "no mode", body: core, mode: "", wantErr: ErrInvalidDelivery, readErrors: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rep, err := ReadReply(tc.body, tc.mode)
			if tc.readErrors {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("ReadReply error: got %v; want %v", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("ReadReply: %v", err)
			}
			if got := rep.RunID(); got != tc.wantRunID {
				t.Errorf("RunID: got %q; want %q", got, tc.wantRunID)
			}
			if got := rep.Items(); !reflect.DeepEqual(got, tc.wantItems) {
				t.Errorf("Items: got %+v; want %+v", got, tc.wantItems)
			}
			in := bytes.Clone(tc.body)
			out, err := rep.Rewrite(d, []byte(tc.hints))
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("Rewrite error: got %v; want %v", err, tc.wantErr)
			}
			if !bytes.Equal(tc.body, in) {
				t.Errorf("Rewrite modified Core's answer")
			}
			for _, w := range tc.wantIn {
				if !bytes.Contains(out, []byte(w)) {
					t.Errorf("answer: got %s; want it to contain %s", out, w)
				}
			}
			for _, w := range tc.wantNotIn {
				if bytes.Contains(out, []byte(w)) {
					t.Errorf("answer: got %s; want no %s", out, w)
				}
			}
			if tc.wantBody != nil && !bytes.Equal(out, tc.wantBody) {
				t.Errorf("answer: got %s; want %s", out, tc.wantBody)
			}
			if err == nil && !json.Valid(out) {
				t.Errorf("answer is not valid JSON: %s", out)
			}
		})
	}
}

// TestAppendDeliveryBlock: the hand-written block is byte for byte what
// encoding/json writes for the same fields.
func TestAppendDeliveryBlock(t *testing.T) {
	type block struct {
		SchemaVersion string                `json:"schema_version"`
		Mode          protocol.DeliveryMode `json:"mode"`
		Protocol      string                `json:"protocol"`
		ScopeRevision string                `json:"knowledge_scope_revision"`
		Status        string                `json:"status"`
		Hints         json.RawMessage       `json:"hints"`
	}
	rev := knowledge.ScopeRevision("order-assistant", nil)
	for _, mode := range []protocol.DeliveryMode{protocol.DeliveryInline, protocol.DeliveryOnDemand} {
		for _, status := range []string{protocol.StatusOK, protocol.StatusPartial, protocol.StatusUnavailable, protocol.StatusDisabled, ""} {
			for _, rev := range []string{rev, ""} {
				for _, hints := range []string{"", `[{"ref":"kr2.a","title":"x"}]`} {
					wantHints := hints
					if wantHints == "" {
						wantHints = "[]"
					}
					want, err := json.Marshal(block{"bailing.agent-knowledge-delivery.v1", mode, protocol.Name, rev, status, json.RawMessage(wantHints)})
					if err != nil {
						t.Fatal(err)
					}
					if got := appendDeliveryBlock(nil, mode, rev, status, []byte(hints)); !bytes.Equal(got, want) {
						t.Errorf("got %s; want %s", got, want)
					}
				}
			}
		}
	}
}
