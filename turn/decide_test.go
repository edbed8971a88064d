package turn

import (
	"bytes"
	"encoding/json"
	"errors"
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
		status  int
		created bool
		want    bool
	}{
		{400, true, true}, {401, true, true}, {404, true, true}, {422, true, true},
		{409, true, false},  // Core's own conflict: a run exists under the other input
		{400, false, false}, // a retry that did not create the record cannot unbind it
		{500, true, false},  // Core may have created the run
		{502, true, false}, {200, true, false},
	} {
		if got := ReleaseAfter(tc.status, tc.created); got != tc.want {
			t.Errorf("ReleaseAfter(%d, %v) = %v; want %v", tc.status, tc.created, got, tc.want)
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
	core := []byte(`{"schema_version":"bailing.agent-turn-context.v1","context":{"knowledge":[{"ref":"knowledge:1","content":"x"}],"knowledge_refs":[{"ref":"knowledge:1"}]}}`)
	out, err := Answer(core, knowledge.DeliveryOnDemand, knowledge.StatusOK, "rev")
	if err != nil || !bytes.Contains(out, []byte(`"knowledge":[],"knowledge_refs":[]`)) || !bytes.Contains(out, []byte(`"mode":"on_demand"`)) {
		t.Errorf("on_demand: got %s, %v", out, err)
	}
	out, err = Answer(core, knowledge.DeliveryInline, knowledge.StatusOK, "rev")
	if err != nil || !bytes.Contains(out, []byte(`"content":"x"`)) || !bytes.Contains(out, []byte(`"mode":"inline"`)) {
		t.Errorf("inline: got %s, %v", out, err)
	}
	notTurn := []byte(`{"hello":"world"}`)
	if _, err := Answer(notTurn, knowledge.DeliveryOnDemand, knowledge.StatusOK, "rev"); !errors.Is(err, ErrUnexpectedAnswer) {
		t.Errorf("on_demand, not a turn context: got %v; want ErrUnexpectedAnswer", err)
	}
	if out, err := Answer(notTurn, knowledge.DeliveryInline, knowledge.StatusOK, "rev"); err != nil || !bytes.Equal(out, notTurn) {
		t.Errorf("inline, not a turn context: got %s, %v; want Core's bytes", out, err)
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
		Hints         []struct{}             `json:"hints"`
	}
	rev := knowledge.ScopeRevision("order-assistant", nil)
	for _, mode := range []knowledge.DeliveryMode{knowledge.DeliveryInline, knowledge.DeliveryOnDemand} {
		for _, status := range []string{knowledge.StatusOK, knowledge.StatusPartial, knowledge.StatusUnavailable, knowledge.StatusDisabled, ""} {
			for _, rev := range []string{rev, ""} {
				want, err := json.Marshal(block{"bailing.agent-knowledge-delivery.v1", mode, knowledge.Protocol, rev, status, []struct{}{}})
				if err != nil {
					t.Fatal(err)
				}
				if got := AppendDeliveryBlock(nil, mode, rev, status); !bytes.Equal(got, want) {
					t.Errorf("got %s; want %s", got, want)
				}
			}
		}
	}
}
