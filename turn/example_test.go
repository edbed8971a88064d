package turn_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/bailinghub/knowledge-sidecar/corefacts"
	"github.com/bailinghub/knowledge-sidecar/hostclient"
	"github.com/bailinghub/knowledge-sidecar/knowledge"
	"github.com/bailinghub/knowledge-sidecar/ledger"
	"github.com/bailinghub/knowledge-sidecar/protocol"
	"github.com/bailinghub/knowledge-sidecar/turn"
)

// orders stands in for the knowledge service: it knows one host's bearer,
// reports the route's knowledge as ok and mints one same-run hint (its ref
// bound to the turn's run) from the first item Core retrieved for the turn.
type orders struct{}

func (orders) Authenticate(_ context.Context, authorization string) (corefacts.Session, error) {
	if authorization != "Bearer bha_host-token" {
		return corefacts.Session{}, &knowledge.Error{Status: 401, Code: "unauthorized", Message: "The bearer is missing or not valid."}
	}
	return corefacts.Session{SessionID: "6f1c2f7e-5a53-4d52-9a0e-3f3b5f0c9d11", ClientAppID: "example-host"}, nil
}

func (orders) AllowTurn(string) error { return nil }

func (orders) Delivery(context.Context, corefacts.RouteKey) (knowledge.Delivery, error) {
	return knowledge.Delivery{Status: protocol.StatusOK, ScopeRevision: strings.Repeat("b", 64)}, nil
}

func (orders) TurnHintsFor(_ context.Context, _ corefacts.Session, _ knowledge.Delivery, runID string, items []knowledge.TurnItem) ([]byte, string) {
	if len(items) == 0 {
		return nil, knowledge.HintsNone
	}
	it := items[0]
	hints, _ := json.Marshal([]hostclient.Hint{{Ref: "kr1.run-" + runID, Title: it.Title, Summary: it.Content,
		Revision: strings.Repeat("a", 64), Score: it.Score, ExpiresAt: "2026-01-01T00:05:00Z"}})
	return hints, knowledge.HintsMinted
}

// counted prints how each turn was counted; the other events are dropped.
type counted struct{}

func (counted) FailOpen(context.Context, string)     {}
func (counted) LedgerError()                         {}
func (counted) Released(string)                      {}
func (counted) ReleaseFailed(context.Context, error) {}
func (counted) Hints(string)                         {}
func (counted) Conflict()                            {}
func (counted) Turn(mode, outcome string)            { fmt.Println("counted:", mode, outcome) }

// An on_demand turn through the interceptor, as the edge drives it: Admit
// before the body is read, Plan on the body (the field is stripped and the
// mode bound in the ledger), Answer on Core's 2xx answer (its inline
// knowledge emptied, the knowledge_delivery block added with same-run
// hints), Done once the answer is written.
func ExampleInterceptor() {
	ctx := context.Background()
	i, err := turn.NewInterceptor(turn.Options{Knowledge: orders{}, Ledger: ledger.NewMemory(0, time.Hour, nil), Recorder: counted{}})
	if err != nil {
		fmt.Println(err)
		return
	}
	route, _ := corefacts.ParseRouteKey("orders")
	t, plan := i.Admit(ctx, turn.Input{Authorization: "Bearer bha_host-token", Route: "orders", RouteKey: route})
	if !plan.Read {
		fmt.Println("not read:", plan.Err)
		return
	}
	plan = t.Plan(ctx, []byte(`{"knowledge_delivery":"on_demand","client_conversation_id":"c-41",`+
		`"client_turn_id":"t-7","user_message_id":"m-7","message":"When are refunds paid?"}`))
	if !plan.Forward {
		fmt.Println("not forwarded:", plan.Err)
		return
	}
	fmt.Println("to Core:", string(plan.Body))

	t.Sent() // the transport wrote the whole request
	core := []byte(`{"schema_version":"bailing.agent-turn-context.v1","run_id":"9b2e7c1a-4f3d-4e8a-b6c5-0d1e2f3a4b5c",` +
		`"context":{"instructions":"Answer using the workspace's rules.",` +
		`"knowledge":[{"ref":"knowledge:1","title":"Refund policy","content":"Refunds are paid within 14 days."}],` +
		`"knowledge_refs":[{"ref":"knowledge:1","doc_id":12,"title":"Refund policy","score":0.82}]}}`)
	out, err := t.Answer(ctx, 200, func() ([]byte, error) { return core, nil })
	if err != nil {
		t.Done(err) // the edge answers 502
		fmt.Println(err)
		return
	}
	var answer struct {
		Context struct {
			Knowledge []json.RawMessage `json:"knowledge"`
		} `json:"context"`
		KnowledgeDelivery json.RawMessage `json:"knowledge_delivery"`
	}
	_ = json.Unmarshal(out, &answer)
	var block bytes.Buffer
	_ = json.Indent(&block, answer.KnowledgeDelivery, "", "  ")
	fmt.Println("inline knowledge items:", len(answer.Context.Knowledge))
	fmt.Println(block.String())
	t.Done(nil) // the rewritten answer was written
	// Output:
	// to Core: {"client_conversation_id":"c-41","client_turn_id":"t-7","user_message_id":"m-7","message":"When are refunds paid?"}
	// inline knowledge items: 0
	// {
	//   "schema_version": "bailing.agent-knowledge-delivery.v1",
	//   "mode": "on_demand",
	//   "protocol": "bailing.agent-knowledge.v1",
	//   "knowledge_scope_revision": "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb",
	//   "status": "ok",
	//   "hints": [
	//     {
	//       "ref": "kr1.run-9b2e7c1a-4f3d-4e8a-b6c5-0d1e2f3a4b5c",
	//       "title": "Refund policy",
	//       "summary": "Refunds are paid within 14 days.",
	//       "revision": "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
	//       "score": 0.82,
	//       "expires_at": "2026-01-01T00:05:00Z"
	//     }
	//   ]
	// }
	// counted: on_demand rewritten
}
