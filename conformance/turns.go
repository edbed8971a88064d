package conformance

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/bailinghub/knowledge-sidecar/hostclient"
)

var deliveryRequired = []string{"schema_version", "mode", "protocol", "knowledge_scope_revision", "status", "hints"}

var (
	nTurnMode, rTurnMode         = "turns.invalid_mode", "a knowledge_delivery other than inline/on_demand → 400 invalid_request"
	nTurnDemand, rTurnDemand     = "turns.on_demand", "an on_demand turn empties context.knowledge/knowledge_refs and adds the v1 delivery block (≤ " + strconv.Itoa(searchMaxResults) + " hints, ≤ " + strconv.Itoa(searchMaxBytes) + " bytes)"
	nTurnConflict, rTurnConflict = "turns.conflict", "retrying a turn in another mode → 409 turn_conflict"
)

// turns checks turn interception. Off unless Options.Turns: each check
// creates a real turn on the workspace.
func (r *runner) turns(ctx context.Context) error {
	if !r.o.Turns {
		for _, c := range [][2]string{{nTurnMode, rTurnMode}, {nTurnDemand, rTurnDemand}, {nTurnConflict, rTurnConflict}} {
			r.skip(c[0], c[1], "--turns not given (these checks create turns)")
		}
		return nil
	}
	turn := func(mode any, id string) map[string]any {
		return map[string]any{"client_conversation_id": "conformance-" + id, "client_turn_id": "turn-" + id,
			"user_message_id": "message-" + id, "user_input": "What is the refund policy?", "knowledge_delivery": mode}
	}
	send := func(body map[string]any) (*hostclient.Response, error) {
		return r.send(ctx, hostclient.Request{Method: http.MethodPost, URL: r.c.TurnsURL(), Token: r.c.Token(), Body: marshal(body)}, "turns", false)
	}
	for _, bad := range []any{"full", "off", 1} {
		res, err := send(turn(bad, randomUUID()))
		if err != nil {
			if err := r.lost(err, nTurnMode, rTurnMode); err != nil {
				return err
			}
			continue
		}
		r.note(nTurnMode, rTurnMode, wantError(res, 400, codeInvalidRequest))
	}

	id := randomUUID()
	res, err := send(turn(modeOnDemand, id))
	if err != nil {
		r.skip(nTurnConflict, rTurnConflict, "the on_demand turn got no answer")
		return r.lost(err, nTurnDemand, rTurnDemand)
	}
	r.note(nTurnDemand, rTurnDemand, checkDelivery(res))
	if res.Status/100 != 2 {
		r.skip(nTurnConflict, rTurnConflict, "the on_demand turn was not accepted")
		return nil
	}
	res, err = send(turn(modeInline, id))
	if err != nil {
		return r.lost(err, nTurnConflict, rTurnConflict)
	}
	r.note(nTurnConflict, rTurnConflict, wantError(res, 409, "turn_conflict"))
	return nil
}

func checkDelivery(res *hostclient.Response) string {
	if res.Status/100 != 2 {
		return "got " + codeOf(res)
	}
	var t struct {
		Context struct {
			Knowledge     json.RawMessage `json:"knowledge"`
			KnowledgeRefs json.RawMessage `json:"knowledge_refs"`
		} `json:"context"`
		Delivery map[string]json.RawMessage `json:"knowledge_delivery"`
	}
	if json.Unmarshal(res.Body, &t) != nil {
		return "the answer is not a JSON turn context"
	}
	var v []string
	if strings.TrimSpace(string(t.Context.Knowledge)) != "[]" || strings.TrimSpace(string(t.Context.KnowledgeRefs)) != "[]" {
		v = append(v, "context.knowledge or context.knowledge_refs is not []")
	}
	if t.Delivery == nil {
		return strings.Join(append(v, "no knowledge_delivery block"), "; ")
	}
	if d := keys(t.Delivery, deliveryRequired); d != "" {
		v = append(v, d)
	}
	want := map[string]string{"schema_version": deliverySchema, "mode": modeOnDemand, "protocol": Protocol}
	for k, w := range want {
		var got string
		if json.Unmarshal(t.Delivery[k], &got) != nil || got != w {
			v = append(v, fmt.Sprintf("%s %s; want %q", k, t.Delivery[k], w))
		}
	}
	var status, rev string
	_ = json.Unmarshal(t.Delivery["status"], &status)
	_ = json.Unmarshal(t.Delivery["knowledge_scope_revision"], &rev)
	if !knownStatus(status) {
		v = append(v, fmt.Sprintf("status %q", status))
	}
	if !isHex64(rev) {
		v = append(v, "knowledge_scope_revision is not 64 lowercase hex")
	}
	var hints []map[string]json.RawMessage
	if json.Unmarshal(t.Delivery["hints"], &hints) != nil || len(hints) > searchMaxResults || len(t.Delivery["hints"]) > searchMaxBytes {
		v = append(v, fmt.Sprintf("hints is not an array of at most %d hints within %d bytes", searchMaxResults, searchMaxBytes))
	}
	for _, h := range hints {
		if d := keys(h, hintRequired); d != "" {
			v = append(v, "hint: "+d)
		}
	}
	return strings.Join(v, "; ")
}
