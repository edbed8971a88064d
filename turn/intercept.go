package turn

// The turn feature's decisions (SPEC §7) behind one type: the edge hands
// over plain values (the bearer, the route segment, the body bytes, Core's
// status and answer) and gets back what to do (a Plan) and Core's answer
// rewritten. The HTTP side — reading the body under its budget, forwarding
// through the ReverseProxy, the headers — stays with the edge.

import (
	"context"
	"crypto/sha256"
	"errors"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/bailinghub/knowledge-sidecar/corefacts"
	"github.com/bailinghub/knowledge-sidecar/knowledge"
	"github.com/bailinghub/knowledge-sidecar/ledger"
	"github.com/bailinghub/knowledge-sidecar/protocol"
)

// Knowledge is what turns need of the knowledge service
// (*knowledge.Service).
type Knowledge interface {
	Authenticate(ctx context.Context, authorization string) (corefacts.Session, error)
	AllowTurn(sessionID string) error
	Delivery(ctx context.Context, route corefacts.RouteKey) (knowledge.Delivery, error)
	TurnHintsFor(ctx context.Context, sess corefacts.Session, d knowledge.Delivery, runID string, items []knowledge.TurnItem) ([]byte, string)
}

// Recorder is told what the turn side did that an operator counts or
// reads: the edge's metrics, span events and log. Calls are synchronous
// and must not block.
type Recorder interface {
	FailOpen(ctx context.Context, reason string) // a field-less turn forwarded unbound (FailOpen*)
	LedgerError()                                // a ledger call failed
	Released(reason string)                      // an attempt's share released (Release*)
	ReleaseFailed(ctx context.Context, err error)
	Hints(outcome string) // the same-run hints of an on_demand answer (HintOutcomes)
}

// Interceptor decides intercepted turns (one per sidecar): the ledger
// bindings, the in-flight set of on_demand attempts, the same-run hints
// switch.
type Interceptor struct {
	k        Knowledge
	ledger   ledger.Ledger
	rec      Recorder
	hints    atomic.Bool
	inflight inFlight
}

// Options configure an Interceptor. Knowledge, Ledger and Recorder are
// required.
type Options struct {
	Knowledge Knowledge
	Ledger    ledger.Ledger
	Recorder  Recorder
	// NoHints turns same-run hints off (turn_hints: false).
	NoHints bool
}

// NewInterceptor returns an Interceptor for o.
func NewInterceptor(o Options) (*Interceptor, error) {
	if o.Knowledge == nil || o.Ledger == nil || o.Recorder == nil {
		return nil, errors.New("turn: an interceptor needs knowledge, a ledger and a recorder")
	}
	i := &Interceptor{k: o.Knowledge, ledger: o.Ledger, rec: o.Recorder}
	i.hints.Store(!o.NoHints)
	return i, nil
}

// SetHints turns same-run hints on or off (turn_hints, reload). Turns whose
// answer is being rewritten keep the setting they read.
func (i *Interceptor) SetHints(on bool) { i.hints.Store(on) }

// Input is what the edge knows of a turn request before its body is read.
type Input struct {
	Authorization string             // the Authorization header as sent
	Route         string             // the URL's route segment as written
	RouteKey      corefacts.RouteKey // Route parsed (zero: no route key)
	// EncodedRoute: the route segment spells a route in percent-encoding
	// (refused whatever the body, after identity).
	EncodedRoute bool
}

// Action is what the edge does with a turn request.
type Action int

const (
	// ReadBody: read the body (under the turn body budget) and call
	// Turn.Plan with it.
	ReadBody Action = iota
	// Pass: the request goes to Core as the client sent it (Plan.Body: the
	// bytes read of it, when it was read) and Core's answer comes back
	// untouched.
	Pass
	// Refuse: the sidecar answers Plan.Err itself; nothing reaches Core.
	Refuse
	// Forward: Plan.Body goes to Core through the turn hooks (Untouched,
	// Begin/End, Sent, Answered, Rewrite, Failed).
	Forward
)

// Plan is a decision on a turn request.
type Plan struct {
	Action Action
	Err    error  // Refuse
	Body   []byte // Pass (after ReadBody), Forward
}

// Turn is one intercepted turn, from the rollout decision to Core's answer.
// Its methods run one at a time, in request order (Admit, Plan, Begin, the
// hooks, End), except Sent.
type Turn struct {
	i  *Interceptor
	in Input

	// label is the mode label, LabelUnknown until the field could be told.
	// outcome is set by the step that decided the turn's fate when the
	// edge's error does not tell it (Counted).
	label   string
	outcome Outcome

	sess    corefacts.Session
	authErr error
	mode    protocol.DeliveryMode
	key     ledger.Key
	req     Request
	// res is the attempt's hold on the turn's ledger records (reserved).
	res      ledger.Reservation
	reserved bool
	keyed    bool // the turn has all ids, so it is in the ledger
	// absent: the request had no knowledge_delivery; it is bound as inline
	// but forwarded and relayed byte for byte.
	absent bool
	// wrote is set once the whole request was written to Core: from then
	// on Core may have created the run, even if no answer comes.
	wrote atomic.Bool
	// delivery is the route's knowledge state taken before forwarding
	// (knowledge.Service.Delivery): the block's status and scope revision,
	// and what the catalog said of the route and its knowledge bases, which
	// the same-run hints reuse.
	delivery knowledge.Delivery
	// flying: the keys under which this on_demand attempt is in flight.
	flying [][sha256.Size]byte
	// audited: the sidecar's own answer to this turn is audited (Audited).
	audited bool
}

// Turn starts an intercepted turn.
func (i *Interceptor) Turn(in Input) *Turn { return &Turn{i: i, in: in, label: LabelUnknown} }

// Label is the turn's mode label (turns_total{mode}).
func (t *Turn) Label() string { return t.label }

// Counted is the outcome the turn is counted under, given the error the
// edge answered (nil: none): the one a step set; else Core's answer relayed
// untouched (Passed) when there is no error; else an answer the sidecar
// made itself.
func (t *Turn) Counted(err error) Outcome {
	switch {
	case t.outcome != "":
		return t.outcome
	case err == nil:
		return Passed
	case errors.Is(err, ledger.ErrConflict):
		return Conflict
	}
	return Rejected
}

// Admit decides on the turn before its body is read: identity is asked
// first. A caller whose bearer is missing or refused holds nothing (SPEC
// §8.3): its turn goes to Core as sent, unread (Pass), and Core's own answer
// (Core authenticates first) reaches it byte for byte. An encoded route is
// refused whatever the body. Any other turn is read (ReadBody).
func (t *Turn) Admit(ctx context.Context) Plan {
	t.sess, t.authErr = t.i.k.Authenticate(ctx, t.in.Authorization)
	ke, _ := errors.AsType[*knowledge.Error](t.authErr)
	unauth := ke != nil && ke.Status == http.StatusUnauthorized
	switch {
	case t.in.RouteKey.IsZero() && t.in.EncodedRoute:
		t.audited = true // refused before the body could tell its mode
		if unauth {
			return refuse(t.authErr)
		}
		return refuse(knowledge.RouteUnavailable())
	case unauth:
		return Plan{Action: Pass}
	}
	return Plan{Action: ReadBody}
}

// Plan decides on the turn from its body as read: the raw bytes parsed as
// JSON, as Core parses them (Content-Encoding ignored, CORE_FACTS Addendum
// 3). A body that is not a JSON object (a compressed one, say) has no field
// Core could act on and goes on as sent. A turn without the field is an old
// client's (oldClient). With the field, the stripped copy is charged to the
// turn body budget (charge), a keyed turn costs a token of the session's
// rate limit, the route's delivery state is taken (503 without a revision:
// the turn is not forwarded) and the mode is bound in the ledger under both
// of Core's keys (409 turn_conflict on another mode).
func (t *Turn) Plan(ctx context.Context, raw []byte, charge func(n int64) error) Plan {
	tr, perr := ParseRequest(raw)
	t.audited = perr == nil && tr.Mode == protocol.DeliveryOnDemand
	badRoute := t.in.RouteKey.IsZero()
	if perr == nil && tr.Mode == "" {
		t.label = LabelAbsent
		return t.oldClient(ctx, raw, tr, badRoute)
	}
	// knowledge_delivery is there (or the body nests too deeply to tell).
	switch {
	case badRoute:
		return refuse(knowledge.RouteUnavailable())
	case perr != nil:
		t.label = LabelInvalid
		return refuse(perr) // ErrNotJSONObject, ErrTooDeep, ErrInvalidDelivery
	}
	t.label, t.mode, t.req = string(tr.Mode), tr.Mode, tr
	if t.authErr != nil {
		return refuse(t.authErr)
	}
	// The stripped copy is held beside the body until Core has it.
	if err := charge(int64(len(tr.Body))); err != nil {
		return refuse(err)
	}
	t.keyed = tr.Keyed()
	if t.keyed {
		// Writing a ledger record costs the session a token of its
		// knowledge rate limit, so records cannot be had for free.
		if err := t.i.k.AllowTurn(t.sess.SessionID); err != nil {
			t.outcome = RateLimited
			return refuse(err)
		}
	}
	var err error
	if t.delivery, err = t.i.k.Delivery(ctx, t.in.RouteKey); err != nil {
		t.outcome = KnowledgeUnavailable
		return refuse(err) // 503: no revision, so the turn is not forwarded
	}
	t.key = Key(t.sess.SessionID, t.in.Route, tr)
	if t.keyed {
		if err := t.reserve(ctx); err != nil {
			if !errors.Is(err, ledger.ErrConflict) {
				t.outcome = LedgerUnavailable
			}
			return refuse(err) // 409 turn_conflict, or 503 knowledge_unavailable
		}
	}
	return Plan{Action: Forward, Body: tr.Body}
}

// oldClient decides on a turn without knowledge_delivery: raw is the
// client's body as received. toCore: the sidecar has nothing to decide (the
// route segment is no route key), so it goes to Core untouched. Otherwise a
// keyed turn is bound to inline delivery, best effort: when identity or the
// ledger cannot be had it passes unbound (Recorder.FailOpen), unless an
// on_demand attempt of the same turn is in flight in this process, which
// makes it the mode switch SPEC §7 refuses.
func (t *Turn) oldClient(ctx context.Context, raw []byte, tr Request, toCore bool) Plan {
	pass := Plan{Action: Pass, Body: raw}
	if toCore || HandlingOf(tr) == PassUnbound {
		return pass
	}
	t.req = tr
	if t.authErr != nil {
		if t.i.inflight.onDemand(t.bearerKeys()) {
			return refuse(ledger.ErrConflict)
		}
		t.i.rec.FailOpen(ctx, FailOpenIdentity)
		return pass
	}
	t.mode, t.absent, t.keyed, t.key = protocol.DeliveryInline, true, true, Key(t.sess.SessionID, t.in.Route, tr)
	switch err := t.reserve(ctx); {
	case errors.Is(err, ledger.ErrConflict):
		return refuse(err)
	case err != nil:
		if t.i.inflight.onDemand(ledgerKeys(t.key)) {
			return refuse(ledger.ErrConflict)
		}
		t.i.rec.FailOpen(ctx, FailOpenLedger)
		return pass
	}
	return Plan{Action: Forward, Body: raw}
}

func refuse(err error) Plan { return Plan{Action: Refuse, Err: err} }

func (t *Turn) bearerKeys() [][sha256.Size]byte {
	return bearerKeys(t.in.Authorization, t.in.Route, t.req.ConversationID, t.req.TurnID, t.req.UserMessageID)
}

// reserve binds the turn's mode in the ledger under both of Core's keys:
// ledger.ErrConflict when a different mode is already bound.
func (t *Turn) reserve(ctx context.Context) error {
	res, err := t.i.ledger.Reserve(ctx, t.key, string(t.mode))
	switch {
	case errors.Is(err, ledger.ErrConflict):
		return err
	case err != nil:
		t.i.rec.LedgerError()
		return err
	}
	t.res, t.reserved = res, true
	return nil
}

// releaseTimeout bounds a release; a failed one is retried by the ledger
// (ledger.Retrying).
const releaseTimeout = 2 * time.Second

// release gives up the attempt's share of the turn's ledger records: Core
// refused it, or never received it (SPEC §7). It runs after the client may
// have left, so on a context of its own.
func (t *Turn) release(ctx context.Context, reason string) {
	if !t.reserved {
		return
	}
	t.reserved = false
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
	defer cancel()
	if err := t.i.ledger.Release(rctx, t.key, string(t.mode), t.res); err != nil {
		t.i.rec.LedgerError()
		t.i.rec.ReleaseFailed(ctx, err)
		return
	}
	t.i.rec.Released(reason)
}

// Audited reports whether the sidecar's own answer to this turn — a
// refusal, or Core's answer it could not deliver — is audited (SPEC §11),
// with the caller's identity (zero when refused or not known): a turn whose
// body asks for on_demand, or one refused before its body was read (a
// percent-encoded route). Its answer with same-run hints is audited by
// knowledge.Service.TurnHintsFor.
func (t *Turn) Audited() (corefacts.Session, bool) {
	if !t.audited || t.authErr != nil {
		return corefacts.Session{}, t.audited
	}
	return t.sess, true
}

// Untouched reports whether a forwarded turn goes to Core as the client
// sent it (no knowledge_delivery): its framing and headers are kept, and
// Core's answer comes back byte for byte.
func (t *Turn) Untouched() bool { return t.absent }

// Begin marks a forwarded on_demand attempt in flight until End: a
// field-less retry of the same turn that cannot be bound meanwhile is
// refused (oldClient).
func (t *Turn) Begin() {
	if t.mode != protocol.DeliveryOnDemand || !t.keyed {
		return
	}
	t.flying = append(ledgerKeys(t.key), t.bearerKeys()...)
	t.i.inflight.add(t.flying)
}

// End: Core's answer to the attempt is in (or none will come).
func (t *Turn) End() {
	if t.flying != nil {
		t.i.inflight.done(t.flying)
		t.flying = nil
	}
}

// Sent records that the whole request was written to Core. It may be
// called from the transport's goroutine.
func (t *Turn) Sent() { t.wrote.Store(true) }

// Failed: Core gave no answer. An attempt Core never received whole (the
// client left, or Core could not be reached) created no run and gives its
// share back; once written, Core may or may not have created the run, so
// the records are kept and only a retry with the same mode goes through.
func (t *Turn) Failed(ctx context.Context) {
	if !t.wrote.Load() {
		t.release(ctx, ReleaseNotSent)
	}
	t.outcome = UpstreamError
}

// DeliveryFailed: Core's 2xx answer could not be rewritten (unreadable, or
// Rewrite refused it); the edge answers 502 knowledge_delivery_failed.
func (t *Turn) DeliveryFailed() { t.outcome = DeliveryFailed }

// Answered decides on Core's answer with status: false when it is relayed
// as it is — a non-2xx answer (a 4xx gives the attempt's share back,
// ReleaseAfter) or the answer to a field-less turn — true when its body is
// to be rewritten (Rewrite).
func (t *Turn) Answered(ctx context.Context, status int) (rewrite bool) {
	if status < 200 || status > 299 {
		if ReleaseAfter(status) {
			t.release(ctx, ReleaseRefused)
		}
		t.outcome = CoreOutcome(status)
		return false
	}
	if t.absent {
		t.outcome = Passed
		return false // relayed unchanged: the host asked for nothing else
	}
	return true
}

// Rewrite is Core's 2xx answer (body, decoded) as the host gets it: read
// once, its same-run hints built from what Core retrieved (on_demand), and
// the delivery block added (Reply). An error means the answer cannot carry
// the delivery (the edge answers 502).
func (t *Turn) Rewrite(ctx context.Context, body []byte) ([]byte, error) {
	rep, err := ReadReply(body, t.mode)
	if err != nil {
		return nil, err
	}
	var hints []byte
	if rep.TakesHints() {
		hints = t.hints(ctx, rep)
	}
	out, err := rep.Rewrite(t.delivery, hints)
	if err != nil {
		return nil, err
	}
	t.outcome = Rewritten
	return out, nil
}

// hints are the same-run hints of an on_demand answer (SPEC §7), best
// effort, reported to the Recorder: HintsOff when turned off (Core's inline
// knowledge is then not even read), else what knowledge made of what Core
// retrieved.
func (t *Turn) hints(ctx context.Context, rep Reply) []byte {
	if !t.i.hints.Load() {
		t.i.rec.Hints(HintsOff)
		return nil
	}
	hints, outcome := t.i.k.TurnHintsFor(ctx, t.sess, t.delivery, rep.RunID(), rep.Items())
	t.i.rec.Hints(outcome)
	return hints
}
