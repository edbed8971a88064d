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
func (e *events) Conflict()                            { e.got = append(e.got, "conflict") }
func (e *events) Turn(mode, outcome string)            { e.got = append(e.got, "turn:"+mode+":"+outcome) }
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

// action names what a plan says the edge does.
func action(p Plan) string {
	switch {
	case p.Read:
		return "read"
	case p.Err != nil:
		return "refuse"
	case p.Forward:
		return "forward"
	}
	return "pass"
}

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
		body      string // "" with wantAdmit ≠ read: not read
		wantAdmit string
		want      string
		wantErr   error // errors.Is
		wantBody  string
		wantLabel string
	}{
		{name: "refused bearer: unread", auth: "Bearer no", wantAdmit: "pass", wantLabel: LabelUnknown},
		{name: "encoded route: 404 after identity", auth: "Bearer ok", wantAdmit: "refuse", wantLabel: LabelUnknown,
			in: func(in Input) Input {
				return Input{Authorization: in.Authorization, Route: "%6Frders", EncodedRoute: true}
			}},
		{name: "on_demand: stripped and forwarded", auth: "Bearer ok", wantAdmit: "read", body: onDemandBody,
			want: "forward", wantBody: `{"client_conversation_id":"c","client_turn_id":"t","user_message_id":"m","message":"hi"}`, wantLabel: "on_demand"},
		{name: "old client: bound inline, bytes untouched", auth: "Bearer ok", wantAdmit: "read", body: plainBody,
			want: "forward", wantBody: plainBody, wantLabel: LabelAbsent},
		{name: "old client without ids: passes", auth: "Bearer ok", wantAdmit: "read", body: `{"message":"hi"}`,
			want: "pass", wantBody: `{"message":"hi"}`, wantLabel: LabelAbsent},
		{name: "a mode that is none", auth: "Bearer ok", wantAdmit: "read", body: `{"knowledge_delivery":"full"}`,
			want: "refuse", wantErr: ErrInvalidDelivery, wantLabel: LabelInvalid},
		{name: "a compressed body: no field to act on", auth: "Bearer ok", wantAdmit: "read", body: "\x1f\x8b\x08\x00",
			want: "pass", wantBody: "\x1f\x8b\x08\x00", wantLabel: LabelAbsent},
	} {
		t.Run(tc.name, func(t *testing.T) {
			i, _ := newTestInterceptor(t, &fakeKnowledge{}, ledger.NewMemory(100, time.Minute, nil))
			in := input(tc.auth)
			if tc.in != nil {
				in = tc.in(in)
			}
			tu, p := i.Admit(ctx, in)
			if action(p) != tc.wantAdmit {
				t.Fatalf("admit: got %s; want %s", action(p), tc.wantAdmit)
			}
			if p.Read {
				p = tu.Plan(ctx, []byte(tc.body))
				if action(p) != tc.want {
					t.Fatalf("plan: got %s (%v); want %s", action(p), p.Err, tc.want)
				}
			}
			if tc.wantErr != nil && !errors.Is(p.Err, tc.wantErr) {
				t.Errorf("got error %v; want %v", p.Err, tc.wantErr)
			}
			if string(p.Body) != tc.wantBody {
				t.Errorf("body: got %q; want %q", p.Body, tc.wantBody)
			}
			if tu.label != tc.wantLabel {
				t.Errorf("label: got %q; want %q", tu.label, tc.wantLabel)
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
	first, _ := i.Admit(ctx, input("Bearer ok"))
	if p := first.Plan(ctx, []byte(onDemandBody)); !p.Forward {
		t.Fatalf("on_demand: got %s (%v); want forward", action(p), p.Err)
	}
	retry, _ := i.Admit(ctx, input("Bearer ok"))
	p := retry.Plan(ctx, []byte(plainBody))
	var ke *knowledge.Error
	if !errors.Is(p.Err, ledger.ErrConflict) || !errors.As(p.Err, &ke) || ke.Status != 409 || ke.Code != "turn_conflict" {
		t.Fatalf("mode switch: got %s (%v); want 409 turn_conflict", action(p), p.Err)
	}
	retry.Done(p.Err)
	first.Sent()
	if out, err := first.Answer(ctx, 400, nil); out != nil || err != nil {
		t.Fatalf("a 400 is relayed as Core's: got %q, %v", out, err)
	}
	first.Done(nil)
	again, _ := i.Admit(ctx, input("Bearer ok"))
	if p := again.Plan(ctx, []byte(plainBody)); !p.Forward {
		t.Errorf("after the release: got %s (%v); want forward", action(p), p.Err)
	}
	if want := "conflict,turn:absent:conflict,released:refused,turn:on_demand:core_4xx"; ev.String() != want {
		t.Errorf("events: got %q; want %q", ev, want)
	}
}

// TestTurnFailOpen: a field-less turn passes unbound when the ledger is
// down — unless an on_demand attempt of it is in flight here.
func TestTurnFailOpen(t *testing.T) {
	ctx := context.Background()
	k := &fakeKnowledge{}
	mem := ledger.NewMemory(100, time.Minute, nil)
	i, ev := newTestInterceptor(t, k, mem)
	pass := func() Plan {
		old, _ := i.Admit(ctx, input("Bearer ok"))
		return old.Plan(ctx, []byte(plainBody))
	}
	i.ledger = downLedger{}
	if p := pass(); action(p) != "pass" {
		t.Fatalf("ledger down, nothing in flight: got %s (%v); want pass", action(p), p.Err)
	}
	i.ledger = mem
	od, _ := i.Admit(ctx, input("Bearer ok"))
	od.Plan(ctx, []byte(onDemandBody)) // forwarded: in flight until Done
	i.ledger = downLedger{}
	if p := pass(); action(p) != "refuse" || !errors.Is(p.Err, ledger.ErrConflict) {
		t.Errorf("ledger down, on_demand in flight: got %s (%v); want 409", action(p), p.Err)
	}
	// Identity down too: the bearer's own keys still find it.
	k.authErr = knowledge.Unavailable(errors.New("core down"))
	if p := pass(); action(p) != "refuse" || !errors.Is(p.Err, ledger.ErrConflict) {
		t.Errorf("identity down, on_demand in flight: got %s (%v); want 409", action(p), p.Err)
	}
	od.Done(nil)
	if p := pass(); action(p) != "pass" {
		t.Errorf("identity down, nothing in flight: got %s (%v); want pass", action(p), p.Err)
	}
	want := "ledger_error,fail_open:ledger,ledger_error,turn:on_demand:passed,fail_open:identity"
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
		tu, _ := i.Admit(ctx, input("Bearer ok"))
		tu.Plan(ctx, []byte(onDemandBody))
		if sent {
			tu.Sent()
		}
		if out, err := tu.Answer(ctx, 0, nil); out != nil || err != nil {
			t.Fatalf("no answer: got %q, %v; want nothing to relay", out, err)
		}
		tu.Done(errors.New("upstream unavailable"))
		want := "released:not_sent,turn:on_demand:upstream_error"
		if sent {
			want = "turn:on_demand:upstream_error"
		}
		if ev.String() != want {
			t.Errorf("sent %v: events %q; want %q", sent, ev, want)
		}
	}
}

// TestTurnRewrite: a 2xx answer to an on_demand turn is rewritten with the
// delivery block, the inline knowledge emptied.
func TestTurnRewrite(t *testing.T) {
	ctx := context.Background()
	i, ev := newTestInterceptor(t, &fakeKnowledge{}, ledger.NewMemory(100, time.Minute, nil))
	tu, _ := i.Admit(ctx, input("Bearer ok"))
	tu.Plan(ctx, []byte(onDemandBody))
	answer := `{"schema_version":"bailing.agent-turn-context.v1","run_id":"r1","context":{"knowledge":[{"ref":"knowledge:1","content":"x"}],"knowledge_refs":[]}}`
	out, err := tu.Answer(ctx, 200, func() ([]byte, error) { return []byte(answer), nil })
	if err != nil {
		t.Fatal(err)
	}
	tu.Done(nil)
	if !bytes.Contains(out, []byte(`"knowledge":[]`)) || !bytes.Contains(out, []byte(`"mode":"on_demand"`)) {
		t.Errorf("got %s; want the inline knowledge emptied and the block added", out)
	}
	if want := "hints:none,turn:on_demand:rewritten"; ev.String() != want {
		t.Errorf("events: got %q; want %q", ev, want)
	}
	bad, _ := i.Admit(ctx, input("Bearer ok"))
	bad.Plan(ctx, []byte(strings.Replace(onDemandBody, `"t"`, `"t2"`, 1)))
	if _, err := bad.Answer(ctx, 200, func() ([]byte, error) { return []byte(`not json`), nil }); err == nil {
		t.Error("an answer that is no turn context: want an error in on_demand mode")
	}
	bad.Done(errors.New("502"))
	if want := "hints:none,turn:on_demand:rewritten,turn:on_demand:delivery_failed"; ev.String() != want {
		t.Errorf("events: got %q; want %q", ev, want)
	}
}

// TestTurnAcrossFlip: while native, an on_demand turn the ledger holds from
// before the flip is planned as recorded, any other passes untouched and
// leaves the marker, which a legacy retry then passes untouched too.
func TestTurnAcrossFlip(t *testing.T) {
	ctx := context.Background()
	i, ev := newTestInterceptor(t, &fakeKnowledge{}, ledger.NewMemory(100, time.Minute, nil))
	native := input("Bearer ok")
	native.Native = true
	served, _ := i.Admit(ctx, input("Bearer ok"))
	served.Plan(ctx, []byte(onDemandBody))
	served.Done(nil)

	retry, p := i.Admit(ctx, native)
	if p = retry.Plan(ctx, []byte(onDemandBody)); !p.Forward || bytes.Contains(p.Body, []byte("knowledge_delivery")) {
		t.Fatalf("native, recorded before the flip: got %s %s; want forwarded stripped", action(p), p.Body)
	}
	retry.Done(nil)
	other := strings.ReplaceAll(onDemandBody, `"t"`, `"t2"`)
	other = strings.ReplaceAll(other, `"m"`, `"m2"`)
	fresh, _ := i.Admit(ctx, native)
	if p := fresh.Plan(ctx, []byte(other)); action(p) != "pass" || string(p.Body) != other {
		t.Fatalf("native, new turn: got %s %s; want passed untouched", action(p), p.Body)
	}
	fresh.Done(nil)
	back, _ := i.Admit(ctx, input("Bearer ok"))
	if p := back.Plan(ctx, []byte(other)); action(p) != "pass" || string(p.Body) != other {
		t.Fatalf("legacy retry of a turn passed while native: got %s %s %v; want passed untouched", action(p), p.Body, p.Err)
	}
	back.Done(nil)
	// Counted: the two turns handled by the sidecar, not the native passes.
	if want := "turn:on_demand:passed,turn:on_demand:passed"; ev.String() != want {
		t.Errorf("events: got %q; want %q", ev, want)
	}
}
