package turn

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"testing"

	"github.com/bailinghub/knowledge-sidecar/knowledge"
)

func TestPlanFor(t *testing.T) {
	ids := Request{ConversationID: "c", TurnID: "t", UserMessageID: "m"}
	cases := []struct {
		name string
		r    Request
		want Plan
	}{
		{"no field, no ids", Request{}, PassUnbound},
		{"no field, an id missing", Request{ConversationID: "c", TurnID: "t"}, PassUnbound},
		{"no field, all ids: bound inline", ids, BindInline},
		{"on_demand without ids is still delivered", Request{Mode: knowledge.DeliveryOnDemand}, Deliver},
		{"inline with ids", Request{Mode: knowledge.DeliveryInline, ConversationID: "c", TurnID: "t", UserMessageID: "m"}, Deliver},
	}
	for _, tc := range cases {
		if got := PlanFor(tc.r); got != tc.want {
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

func TestDelivery(t *testing.T) {
	const route = "order-assistant"
	emptyRev := knowledge.ScopeRevision(route, nil)
	notFound := &knowledge.Error{Status: 404, Code: knowledge.CodeRouteUnavailable}
	down := &knowledge.Error{Status: 503, Code: knowledge.CodeUnavailable}
	cases := []struct {
		name            string
		status, rev     string
		err             error
		wantSt, wantRev string
		wantOK          bool
	}{
		{"ok", knowledge.StatusOK, "r1", nil, knowledge.StatusOK, "r1", true},
		{"unknown route: disabled, forwarded", "", "", notFound, knowledge.StatusDisabled, emptyRev, true},
		{"catalog down, route seen: unavailable", knowledge.StatusUnavailable, "r1", nil, knowledge.StatusUnavailable, "r1", true},
		{"revision with an error: unavailable", knowledge.StatusOK, "r1", down, knowledge.StatusUnavailable, "r1", true},
		{"no revision: not forwarded", "", "", down, "", "", false},
	}
	for _, tc := range cases {
		st, rev, ok := Delivery(route, tc.status, tc.rev, tc.err)
		if st != tc.wantSt || rev != tc.wantRev || ok != tc.wantOK {
			t.Errorf("%s: got (%q, %q, %v); want (%q, %q, %v)", tc.name, st, rev, ok, tc.wantSt, tc.wantRev, tc.wantOK)
		}
	}
}

func TestAnswer(t *testing.T) {
	core := []byte(`{"schema_version":"bailing.agent-turn-context.v1","run_id":"6f1c2b9e-7a1d-4c3e-9b8a-2d4e6f8a0b1c","context":{"knowledge":[{"ref":"knowledge:1","title":"T","content":"x"}],"knowledge_refs":[{"ref":"knowledge:1","doc_id":9,"title":"T","score":0.82}]}}`)
	notTurn := []byte(`{"hello":"world"}`)
	const hintsJSON = `[{"ref":"kr2.x","title":"T","summary":"x","revision":"r","score":0.82,"expires_at":"2026-09-01T12:05:00Z"}]`
	type call struct {
		runID string
		items []knowledge.TurnItem
	}
	for _, tc := range []struct {
		name      string
		body      []byte
		mode      knowledge.DeliveryMode
		hinter    bool
		wantErr   error
		wantIn    []string // substrings of the answer
		wantBody  []byte   // exact answer (Core's bytes), when set
		wantCalls []call
	}{
		{name: "on_demand with hints", body: core, mode: knowledge.DeliveryOnDemand, hinter: true,
			wantIn:    []string{`"knowledge":[],"knowledge_refs":[]`, `"mode":"on_demand"`, `"hints":` + hintsJSON + `}`},
			wantCalls: []call{{"6f1c2b9e-7a1d-4c3e-9b8a-2d4e6f8a0b1c", []knowledge.TurnItem{{DocID: 9, Title: "T", Content: "x", Score: 0.82}}}}},
		{name: "on_demand without a hinter", body: core, mode: knowledge.DeliveryOnDemand,
			wantIn: []string{`"knowledge":[],"knowledge_refs":[]`, `"hints":[]}`}},
		{name: "inline never asks for hints", body: core, mode: knowledge.DeliveryInline, hinter: true,
			wantIn: []string{`"content":"x"`, `"mode":"inline"`, `"hints":[]}`}},
		{name: "on_demand, not a turn context", body: notTurn, mode: knowledge.DeliveryOnDemand, hinter: true, wantErr: ErrUnexpectedAnswer},
		{name: "inline, not a turn context", body: notTurn, mode: knowledge.DeliveryInline, hinter: true, wantBody: notTurn},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var calls []call
			var h Hinter
			if tc.hinter {
				h = func(runID string, items []knowledge.TurnItem) []byte {
					calls = append(calls, call{runID, items})
					return []byte(hintsJSON)
				}
			}
			out, err := Answer(tc.body, tc.mode, knowledge.StatusOK, "rev", h)
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("error: got %v; want %v", err, tc.wantErr)
			}
			for _, w := range tc.wantIn {
				if !bytes.Contains(out, []byte(w)) {
					t.Errorf("answer: got %s; want it to contain %s", out, w)
				}
			}
			if tc.wantBody != nil && !bytes.Equal(out, tc.wantBody) {
				t.Errorf("answer: got %s; want %s", out, tc.wantBody)
			}
			if err == nil && !json.Valid(out) {
				t.Errorf("answer is not valid JSON: %s", out)
			}
			if !reflect.DeepEqual(calls, tc.wantCalls) {
				t.Errorf("hinter calls: got %+v; want %+v", calls, tc.wantCalls)
			}
		})
	}
}

// TestAppendDeliveryBlock: the hand-written block is byte for byte what
// encoding/json writes for the same fields.
func TestAppendDeliveryBlock(t *testing.T) {
	type block struct {
		SchemaVersion string                 `json:"schema_version"`
		Mode          knowledge.DeliveryMode `json:"mode"`
		Protocol      string                 `json:"protocol"`
		ScopeRevision string                 `json:"knowledge_scope_revision"`
		Status        string                 `json:"status"`
		Hints         json.RawMessage        `json:"hints"`
	}
	rev := knowledge.ScopeRevision("order-assistant", nil)
	for _, mode := range []knowledge.DeliveryMode{knowledge.DeliveryInline, knowledge.DeliveryOnDemand} {
		for _, status := range []string{knowledge.StatusOK, knowledge.StatusPartial, knowledge.StatusUnavailable, knowledge.StatusDisabled, ""} {
			for _, rev := range []string{rev, ""} {
				for _, hints := range []string{"", `[{"ref":"kr2.a","title":"x"}]`} {
					wantHints := hints
					if wantHints == "" {
						wantHints = "[]"
					}
					want, err := json.Marshal(block{"bailing.agent-knowledge-delivery.v1", mode, knowledge.Protocol, rev, status, json.RawMessage(wantHints)})
					if err != nil {
						t.Fatal(err)
					}
					if got := AppendDeliveryBlock(nil, mode, rev, status, []byte(hints)); !bytes.Equal(got, want) {
						t.Errorf("got %s; want %s", got, want)
					}
				}
			}
		}
	}
}
