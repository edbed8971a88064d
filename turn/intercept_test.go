package turn

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/bailinghub/knowledge-sidecar/corefacts"
	"github.com/bailinghub/knowledge-sidecar/knowledge"
	"github.com/bailinghub/knowledge-sidecar/ledger"
	"github.com/bailinghub/knowledge-sidecar/protocol"
)

// fakeKnowledge authenticates "Bearer ok" (anything else is 401, or
// authErr when set) and knows every route.
type fakeKnowledge struct {
	authErr error
}

func (k *fakeKnowledge) Authenticate(_ context.Context, authorization string) (corefacts.Session, error) {
	switch {
	case k.authErr != nil:
		return corefacts.Session{}, k.authErr
	case authorization != "Bearer ok":
		return corefacts.Session{}, &knowledge.Error{Status: 401, Code: "unauthorized", Message: "no"}
	}
	return corefacts.Session{SessionID: "s1", ClientAppID: "app"}, nil
}

func (k *fakeKnowledge) AllowTurn(string) error { return nil }

func (k *fakeKnowledge) Delivery(context.Context, corefacts.RouteKey) (knowledge.Delivery, error) {
	return knowledge.Delivery{Status: protocol.StatusDisabled, ScopeRevision: strings.Repeat("0", 64)}, nil
}

func (k *fakeKnowledge) TurnHintsFor(context.Context, corefacts.Session, knowledge.Delivery, string, []knowledge.TurnItem) ([]byte, string) {
	return nil, knowledge.HintsNone
}

// events records what the turn side reports.
type events struct{ got []string }

func (e *events) FailOpen(_ context.Context, reason string) {
	e.got = append(e.got, "fail_open:"+reason)
}
func (e *events) LedgerError()                         { e.got = append(e.got, "ledger_error") }
func (e *events) Released(reason string)               { e.got = append(e.got, "released:"+reason) }
func (e *events) ReleaseFailed(context.Context, error) { e.got = append(e.got, "release_failed") }
func (e *events) Hints(outcome string)                 { e.got = append(e.got, "hints:"+outcome) }
func (e *events) String() string                       { return strings.Join(e.got, ",") }

// downLedger fails every call.
type downLedger struct{}

func (downLedger) Reserve(context.Context, ledger.Key, string) (ledger.Reservation, error) {
	return ledger.Reservation{}, ledger.ErrUnavailable
}
func (downLedger) Release(context.Context, ledger.Key, string, ledger.Reservation) error {
	return ledger.ErrUnavailable
}
func (downLedger) Ping(context.Context) error { return ledger.ErrUnavailable }
func (downLedger) Close() error               { return nil }

func newTestInterceptor(t *testing.T, k Knowledge, l ledger.Ledger) (*Interceptor, *events) {
	t.Helper()
	ev := &events{}
	i, err := NewInterceptor(Options{Knowledge: k, Ledger: l, Recorder: ev})
	if err != nil {
		t.Fatal(err)
	}
	return i, ev
}

func input(auth string) Input {
	key, _ := corefacts.ParseRouteKey("orders")
	return Input{Authorization: auth, Route: "orders", RouteKey: key}
}

func noCharge(int64) error { return nil }

const (
	onDemandBody = `{"knowledge_delivery":"on_demand","client_conversation_id":"c","client_turn_id":"t","user_message_id":"m","message":"hi"}`
	plainBody    = `{"client_conversation_id":"c","client_turn_id":"t","user_message_id":"m","message":"hi"}`
)

// TestTurnPlans: what the turn side decides for each kind of request, from
// plain values only.
func TestTurnPlans(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name      string
		auth      string
		in        func(Input) Input
		body      string // "" with wantAdmit ≠ ReadBody: not read
		wantAdmit Action
		want      Action
		wantErr   error // errors.Is
		wantBody  string
		wantLabel string
	}{
		{name: "refused bearer: unread", auth: "Bearer no", wantAdmit: Pass, wantLabel: LabelUnknown},
		{name: "encoded route: 404 after identity", auth: "Bearer ok", wantAdmit: Refuse, wantLabel: LabelUnknown,
			in: func(in Input) Input {
				return Input{Authorization: in.Authorization, Route: "%6Frders", EncodedRoute: true}
			}},
		{name: "on_demand: stripped and forwarded", auth: "Bearer ok", wantAdmit: ReadBody, body: onDemandBody,
			want: Forward, wantBody: `{"client_conversation_id":"c","client_turn_id":"t","user_message_id":"m","message":"hi"}`, wantLabel: "on_demand"},
		{name: "old client: bound inline, bytes untouched", auth: "Bearer ok", wantAdmit: ReadBody, body: plainBody,
			want: Forward, wantBody: plainBody, wantLabel: LabelAbsent},
		{name: "old client without ids: passes", auth: "Bearer ok", wantAdmit: ReadBody, body: `{"message":"hi"}`,
			want: Pass, wantBody: `{"message":"hi"}`, wantLabel: LabelAbsent},
		{name: "a mode that is none", auth: "Bearer ok", wantAdmit: ReadBody, body: `{"knowledge_delivery":"full"}`,
			want: Refuse, wantErr: ErrInvalidDelivery, wantLabel: LabelInvalid},
		{name: "a compressed body: no field to act on", auth: "Bearer ok", wantAdmit: ReadBody, body: "\x1f\x8b\x08\x00",
			want: Pass, wantBody: "\x1f\x8b\x08\x00", wantLabel: LabelAbsent},
	} {
		t.Run(tc.name, func(t *testing.T) {
			i, _ := newTestInterceptor(t, &fakeKnowledge{}, ledger.NewMemory(100, time.Minute, nil))
			in := input(tc.auth)
			if tc.in != nil {
				in = tc.in(in)
			}
			tu := i.Turn(in)
			p := tu.Admit(ctx)
			if p.Action != tc.wantAdmit {
				t.Fatalf("admit: got action %d; want %d", p.Action, tc.wantAdmit)
			}
			if p.Action == ReadBody {
				p = tu.Plan(ctx, []byte(tc.body), noCharge)
				if p.Action != tc.want {
					t.Fatalf("plan: got action %d (%v); want %d", p.Action, p.Err, tc.want)
				}
			}
			if tc.wantErr != nil && !errors.Is(p.Err, tc.wantErr) {
				t.Errorf("got error %v; want %v", p.Err, tc.wantErr)
			}
			if string(p.Body) != tc.wantBody {
				t.Errorf("body: got %q; want %q", p.Body, tc.wantBody)
			}
			if tu.Label() != tc.wantLabel {
				t.Errorf("label: got %q; want %q", tu.Label(), tc.wantLabel)
			}
		})
	}
}

// TestTurnModeSwitch: a turn bound on_demand refuses a retry without the
// field (409), and a 4xx answer gives the attempt's share back so that a
// corrected retry goes through.
func TestTurnModeSwitch(t *testing.T) {
	ctx := context.Background()
	i, ev := newTestInterceptor(t, &fakeKnowledge{}, ledger.NewMemory(100, time.Minute, nil))
	first := i.Turn(input("Bearer ok"))
	first.Admit(ctx)
	if p := first.Plan(ctx, []byte(onDemandBody), noCharge); p.Action != Forward {
		t.Fatalf("on_demand: got action %d (%v); want forward", p.Action, p.Err)
	}
	retry := i.Turn(input("Bearer ok"))
	retry.Admit(ctx)
	p := retry.Plan(ctx, []byte(plainBody), noCharge)
	if p.Action != Refuse || !errors.Is(p.Err, ledger.ErrConflict) || retry.Counted(p.Err) != Conflict {
		t.Fatalf("mode switch: got action %d (%v); want 409", p.Action, p.Err)
	}
	first.Sent()
	if first.Answered(ctx, 400) || first.Counted(nil) != CoreOutcome(400) {
		t.Fatalf("a 400 is relayed as Core's, counted core_4xx")
	}
	again := i.Turn(input("Bearer ok"))
	again.Admit(ctx)
	if p := again.Plan(ctx, []byte(plainBody), noCharge); p.Action != Forward {
		t.Errorf("after the release: got action %d (%v); want forward", p.Action, p.Err)
	}
	if ev.String() != "released:refused" {
		t.Errorf("events: got %q; want released:refused", ev)
	}
}

// TestTurnFailOpen: a field-less turn passes unbound when the ledger is
// down — unless an on_demand attempt of it is in flight here.
func TestTurnFailOpen(t *testing.T) {
	ctx := context.Background()
	k := &fakeKnowledge{}
	mem := ledger.NewMemory(100, time.Minute, nil)
	i, ev := newTestInterceptor(t, k, mem)
	od := i.Turn(input("Bearer ok"))
	od.Admit(ctx)
	od.Plan(ctx, []byte(onDemandBody), noCharge)

	i.ledger = downLedger{}
	pass := func() Plan {
		old := i.Turn(input("Bearer ok"))
		old.Admit(ctx)
		return old.Plan(ctx, []byte(plainBody), noCharge)
	}
	if p := pass(); p.Action != Pass {
		t.Fatalf("ledger down, nothing in flight: got action %d (%v); want pass", p.Action, p.Err)
	}
	od.Begin()
	if p := pass(); p.Action != Refuse || !errors.Is(p.Err, ledger.ErrConflict) {
		t.Errorf("ledger down, on_demand in flight: got action %d (%v); want 409", p.Action, p.Err)
	}
	// Identity down too: the bearer's own keys still find it.
	k.authErr = knowledge.Unavailable(errors.New("core down"))
	if p := pass(); p.Action != Refuse || !errors.Is(p.Err, ledger.ErrConflict) {
		t.Errorf("identity down, on_demand in flight: got action %d (%v); want 409", p.Action, p.Err)
	}
	od.End()
	if p := pass(); p.Action != Pass {
		t.Errorf("identity down, nothing in flight: got action %d (%v); want pass", p.Action, p.Err)
	}
	want := "ledger_error,fail_open:ledger,ledger_error,fail_open:identity"
	if ev.String() != want {
		t.Errorf("events: got %q; want %q", ev, want)
	}
}

// TestTurnNotSent: an attempt Core never received gives its share back;
// one that was written keeps it.
func TestTurnNotSent(t *testing.T) {
	ctx := context.Background()
	for _, sent := range []bool{false, true} {
		i, ev := newTestInterceptor(t, &fakeKnowledge{}, ledger.NewMemory(100, time.Minute, nil))
		tu := i.Turn(input("Bearer ok"))
		tu.Admit(ctx)
		tu.Plan(ctx, []byte(onDemandBody), noCharge)
		if sent {
			tu.Sent()
		}
		tu.Failed(ctx)
		want := "released:not_sent"
		if sent {
			want = ""
		}
		if ev.String() != want || tu.Counted(nil) != UpstreamError {
			t.Errorf("sent %v: events %q, outcome %q; want %q, upstream_error", sent, ev, tu.Counted(nil), want)
		}
	}
}

// TestTurnRewrite: a 2xx answer to an on_demand turn is rewritten with the
// delivery block, the inline knowledge emptied.
func TestTurnRewrite(t *testing.T) {
	ctx := context.Background()
	i, ev := newTestInterceptor(t, &fakeKnowledge{}, ledger.NewMemory(100, time.Minute, nil))
	tu := i.Turn(input("Bearer ok"))
	tu.Admit(ctx)
	tu.Plan(ctx, []byte(onDemandBody), noCharge)
	if !tu.Answered(ctx, 200) {
		t.Fatal("a 2xx on_demand answer: want it rewritten")
	}
	answer := `{"schema_version":"bailing.agent-turn-context.v1","run_id":"r1","context":{"knowledge":[{"ref":"knowledge:1","content":"x"}],"knowledge_refs":[]}}`
	out, err := tu.Rewrite(ctx, []byte(answer))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(out, []byte(`"knowledge":[]`)) || !bytes.Contains(out, []byte(`"mode":"on_demand"`)) || tu.Counted(nil) != Rewritten {
		t.Errorf("got %s (%s); want the inline knowledge emptied and the block added, rewritten", out, tu.Counted(nil))
	}
	if ev.String() != "hints:none" {
		t.Errorf("events: got %q; want hints:none", ev)
	}
	if _, err := tu.Rewrite(ctx, []byte(`not json`)); err == nil {
		t.Error("an answer that is no turn context: want an error in on_demand mode")
	}
}
