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
	FailOpen(ctx context.Context, reason string) // a field-less turn forwarded unbound (MetricLabels.FailOpen)
	LedgerError()                                // a ledger call failed
	Released(reason string)                      // an attempt's share released (MetricLabels.Releases)
	ReleaseFailed(ctx context.Context, err error)
	Hints(outcome string)      // the same-run hints of an on_demand answer (MetricLabels.Hints)
	Conflict()                 // a turn answered 409 turn_conflict
	Turn(mode, outcome string) // a turn's handling ended (MetricLabels.Modes, .Outcomes)
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
	// Native: the workspace is rolled out and Core is native, so the turn
	// goes to Core untouched unless the ledger holds it from before the
	// flip (Turn.Plan, "Turns across a flip").
	Native bool
}

// Plan is a decision on a turn request (Interceptor.Admit, Turn.Plan).
// Exactly one of: Read; Err (refuse); Forward; none of them (pass).
type Plan struct {
	// Read: read the body (under the edge's turn body budget) and hand it
	// to Turn.Plan (Admit only).
	Read bool
	// Err: the sidecar answers Err itself (an edge-ready error: a
	// *knowledge.Error or one the edge maps to 503); nothing reaches Core.
	Err error
	// Forward: Body goes to Core through the turn hooks (Sent, Answer).
	// Otherwise the request goes to Core as the client sent it, Body being
	// the bytes read of it (nil when unread), and Core's answer comes back
	// untouched.
	Forward bool
	Body    []byte
	// Audit: the sidecar's own answer to this turn — a refusal, or Core's
	// answer it could not deliver — is audited (SPEC §11), under Session
	// (zero when identity was refused or not known): a turn whose body asks
	// for on_demand, or one refused before its body was read (a
	// percent-encoded route). Its answer with same-run hints is audited by
	// knowledge.Service.TurnHintsFor.
	Audit   bool
	Session corefacts.Session
}

// The edge-ready refusals of turn requests (SPEC §7): Core's own 409 body
// (CORE_FACTS §3.4) and the 400s of a field the sidecar cannot strip.
var (
	errConflict = &knowledge.Error{Status: http.StatusConflict, Code: "turn_conflict",
		Message: "turn id or user message id is already bound to different input", Err: ledger.ErrConflict}
	errInvalidDelivery = &knowledge.Error{Status: http.StatusBadRequest, Code: protocol.CodeInvalidRequest,
		Message: `knowledge_delivery must be "inline" or "on_demand".`, Err: ErrInvalidDelivery}
	errNotJSONObject = &knowledge.Error{Status: http.StatusBadRequest, Code: protocol.CodeInvalidRequest,
		Message: "The request body must be a valid JSON object.", Err: ErrNotJSONObject}
	errTooDeep = &knowledge.Error{Status: http.StatusBadRequest, Code: protocol.CodeInvalidRequest,
		Message: "The request body nests JSON too deeply to be checked.", Err: ErrTooDeep}
)

// requestRefusal is the edge's answer to a request ParseRequest refused.
func requestRefusal(err error) error {
	switch {
	case errors.Is(err, ErrNotJSONObject):
		return errNotJSONObject
	case errors.Is(err, ErrTooDeep):
		return errTooDeep
	case errors.Is(err, ErrInvalidDelivery):
		return errInvalidDelivery
	}
	return err
}

// Turn is one intercepted turn, from the rollout decision to Core's answer:
// Interceptor.Admit, Plan (with the body, when Admit says Read), Answer
// (from the turn proxy's hooks, when Plan says Forward) and Done, one at a
// time in that order; Sent may come from the transport's goroutine.
type Turn struct {
	i  *Interceptor
	in Input

	// label is the mode label, LabelUnknown until the field could be told.
	// outcome is set by the step that decided the turn's fate when the
	// edge's error does not tell it (Done).
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
	// flying: the keys under which this on_demand attempt is in flight,
	// from its forwarding until Done.
	flying [][sha256.Size]byte
	// audited: the sidecar's own answer to this turn is audited (Plan.Audit).
	audited bool
	// quiet: the turn went to Core as a native Core's turn (across a flip,
	// Plan) and is not counted in turns_total, as before it was admitted.
	quiet bool
}

// Admit starts an intercepted turn and decides on it before its body is
// read: identity is asked first. A caller whose bearer is missing or
// refused holds nothing (SPEC §8.3): its turn goes to Core as sent, unread
// (a pass), and Core's own answer (Core authenticates first) reaches it
// byte for byte. An encoded route is refused whatever the body. Any other
// turn is read (Plan.Read). The turn's Done must follow, whatever happens.
func (i *Interceptor) Admit(ctx context.Context, in Input) (*Turn, Plan) {
	t := &Turn{i: i, in: in, label: LabelUnknown}
	t.sess, t.authErr = i.k.Authenticate(ctx, in.Authorization)
	ke, _ := errors.AsType[*knowledge.Error](t.authErr)
	unauth := ke != nil && ke.Status == http.StatusUnauthorized
	switch {
	case in.Native:
		t.quiet = true // counted only when handled as recorded
		if t.authErr != nil || in.RouteKey.IsZero() {
			return t, Plan{} // no session, no record to look up: the native Core's
		}
	case in.RouteKey.IsZero() && in.EncodedRoute:
		t.audited = true // refused before the body could tell its mode
		if unauth {
			return t, t.decided(refuse(t.authErr))
		}
		return t, t.decided(refuse(knowledge.RouteUnavailable()))
	case unauth:
		return t, Plan{}
	}
	return t, Plan{Read: true}
}

// Plan decides on the turn from its body as read: the raw bytes parsed as
// JSON, as Core parses them (Content-Encoding ignored, CORE_FACTS Addendum
// 3). raw is the turn's from here on: the field is cut out of it in place,
// so a stripped turn holds no second buffer and the body budget the edge
// charged while reading covers it. A body that is not a JSON object (a
// compressed one, say) has no field Core could act on and goes on as sent.
// A turn without the field is an old client's (oldClient). With the field,
// a keyed turn costs a token of the session's rate limit, the route's
// delivery state is taken (503 without a revision: the turn is not
// forwarded) and the mode is bound in the ledger under both of Core's keys
// (409 turn_conflict on another mode).
//
// A native turn (Input.Native) goes to Core untouched, except an on_demand
// turn with every id that the ledger holds from before the flip, under
// another mode than the native marker (a legacy attempt, completed or in
// flight): that one is planned exactly as before the flip (forwarded
// stripped for Core to replay, or 409 turn_conflict). Looking costs one
// ledger reservation under the marker mode, which also leaves the marker:
// after a flip back to legacy, a retry of that turn passes untouched too
// (Core recorded it with the field).
func (t *Turn) Plan(ctx context.Context, raw []byte) Plan {
	if t.in.Native {
		return t.decided(t.native(ctx, raw))
	}
	return t.decided(t.plan(ctx, raw))
}

// nativeMarker is the ledger mode of an on_demand turn passed to a native
// Core with its field.
const nativeMarker = "native"

// native plans a turn of a native Core (Plan).
func (t *Turn) native(ctx context.Context, raw []byte) Plan {
	pass := Plan{Body: raw}
	tr, err := parseRequest(raw, false)
	if err != nil || tr.Mode != protocol.DeliveryOnDemand || !tr.Keyed() {
		return pass
	}
	_, err = t.i.ledger.Reserve(ctx, Key(t.sess.SessionID, t.in.Route, tr), nativeMarker)
	switch {
	case errors.Is(err, ledger.ErrConflict): // recorded before the flip
		t.quiet = false
		return t.plan(ctx, raw)
	case err != nil:
		t.i.rec.LedgerError() // cannot tell: the native Core's
	}
	return pass
}

func (t *Turn) plan(ctx context.Context, raw []byte) Plan {
	tr, perr := parseRequest(raw, false)
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
		return refuse(requestRefusal(perr))
	}
	t.label, t.mode, t.req = string(tr.Mode), tr.Mode, tr
	if t.authErr != nil {
		return refuse(t.authErr)
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
			if errors.Is(err, ledger.ErrConflict) && t.mode == protocol.DeliveryOnDemand && t.passedNative(ctx) {
				// Passed to a native Core before a flip back: Core holds
				// it with the field, so it goes to Core as sent.
				t.label, t.audited = LabelUnknown, false
				t.quiet = true
				return Plan{Body: raw}
			}
			if !errors.Is(err, ledger.ErrConflict) {
				t.outcome = LedgerUnavailable
			}
			return refuse(err) // 409 turn_conflict, or 503 knowledge_unavailable
		}
	}
	if t.mode == protocol.DeliveryOnDemand && t.keyed {
		// In flight until Done: a field-less retry of the same turn that
		// cannot be bound meanwhile is refused (oldClient).
		t.flying = append(ledgerKeys(t.key), t.bearerKeys()...)
		t.i.inflight.add(t.flying)
	}
	tr.cutInPlace()
	return Plan{Forward: true, Body: tr.Body}
}

// passedNative reports whether the turn's records are the native marker
// (native): joining them under it succeeds only then.
func (t *Turn) passedNative(ctx context.Context) bool {
	_, err := t.i.ledger.Reserve(ctx, t.key, nativeMarker)
	return err == nil
}

// decided completes a plan with its audit.
func (t *Turn) decided(p Plan) Plan {
	p.Audit = t.audited
	if t.audited && t.authErr == nil {
		p.Session = t.sess
	}
	return p
}

// oldClient decides on a turn without knowledge_delivery: raw is the
// client's body as received. toCore: the sidecar has nothing to decide (the
// route segment is no route key), so it goes to Core untouched. Otherwise a
// keyed turn is bound to inline delivery, best effort: when identity or the
// ledger cannot be had it passes unbound (Recorder.FailOpen), unless an
// on_demand attempt of the same turn is in flight in this process, which
// makes it the mode switch SPEC §7 refuses.
func (t *Turn) oldClient(ctx context.Context, raw []byte, tr Request, toCore bool) Plan {
	pass := Plan{Body: raw}
	if toCore || HandlingOf(tr) == PassUnbound {
		return pass
	}
	t.req = tr
	if t.authErr != nil {
		if t.i.inflight.onDemand(t.bearerKeys()) {
			return refuse(errConflict)
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
			return refuse(errConflict)
		}
		t.i.rec.FailOpen(ctx, FailOpenLedger)
		return pass
	}
	return Plan{Forward: true, Body: raw}
}

func refuse(err error) Plan { return Plan{Err: err} }

func (t *Turn) bearerKeys() [][sha256.Size]byte {
	return bearerKeys(t.in.Authorization, t.in.Route, t.req.ConversationID, t.req.TurnID, t.req.UserMessageID)
}

// reserve binds the turn's mode in the ledger under both of Core's keys:
// errConflict (Core's 409 turn_conflict, wrapping ledger.ErrConflict) when
// a different mode is already bound.
func (t *Turn) reserve(ctx context.Context) error {
	res, err := t.i.ledger.Reserve(ctx, t.key, string(t.mode))
	switch {
	case errors.Is(err, ledger.ErrConflict):
		return errConflict
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

// Untouched reports whether a forwarded turn goes to Core as the client
// sent it (no knowledge_delivery): its framing and headers are kept, and
// Core's answer comes back byte for byte.
func (t *Turn) Untouched() bool { return t.absent }

// Sent records that the whole request was written to Core. It may be
// called from the transport's goroutine.
func (t *Turn) Sent() { t.wrote.Store(true) }

// Answer decides on Core's answer to a forwarded turn, with status (0:
// Core gave none). out nil and err nil: the answer is relayed as it is.
//
//   - No answer: an attempt Core never received whole (the client left, or
//     Core could not be reached) created no run and gives its share of the
//     ledger records back; once written (Sent), Core may or may not have
//     created the run, so the records are kept and only a retry with the
//     same mode goes through.
//   - A non-2xx answer is relayed; a 4xx gives the attempt's share back
//     (ReleaseAfter). The answer to a field-less turn is relayed.
//   - Any other answer is read (read: Core's body, decoded) once, its
//     same-run hints built from what Core retrieved (on_demand), and out is
//     the answer with the delivery block (Reply.Rewrite). err: the answer
//     cannot carry the delivery (the edge answers 502).
func (t *Turn) Answer(ctx context.Context, status int, read func() ([]byte, error)) (out []byte, err error) {
	switch {
	case status == 0:
		if !t.wrote.Load() {
			t.release(ctx, ReleaseNotSent)
		}
		t.outcome = UpstreamError
		return nil, nil
	case status < 200 || status > 299:
		if ReleaseAfter(status) {
			t.release(ctx, ReleaseRefused)
		}
		t.outcome = CoreOutcome(status)
		return nil, nil
	case t.absent:
		t.outcome = Passed
		return nil, nil // the host asked for nothing else
	}
	t.outcome = DeliveryFailed // until the rewrite succeeds
	body, err := read()
	if err != nil {
		return nil, err
	}
	rep, err := ReadReply(body, t.mode)
	if err != nil {
		return nil, err
	}
	var hints []byte
	if t.mode == protocol.DeliveryOnDemand {
		hints = t.hints(ctx, rep)
	}
	if out, err = rep.Rewrite(t.delivery, hints); err != nil {
		return nil, err
	}
	t.outcome = Rewritten
	if out == nil {
		out = []byte{}
	}
	return out, nil
}

// hints are the same-run hints of an on_demand answer (SPEC §7), best
// effort, reported to the Recorder: HintsOff when turned off (Core's inline
// knowledge is then not even read), else what knowledge made of what Core
// retrieved.
func (t *Turn) hints(ctx context.Context, rep *Reply) []byte {
	if !t.i.hints.Load() {
		t.i.rec.Hints(HintsOff)
		return nil
	}
	hints, outcome := t.i.k.TurnHintsFor(ctx, t.sess, t.delivery, rep.RunID(), rep.Items())
	t.i.rec.Hints(outcome)
	return hints
}

// Done ends the turn, given the error the edge answered (nil: none), also
// when the relay aborted: an on_demand attempt is no longer in flight, and
// the turn is counted (Recorder.Turn) under its mode label and outcome —
// the one a step set; else Core's answer relayed untouched (Passed) when
// there is no error; else 409 turn_conflict (Conflict, also told to
// Recorder.Conflict) or another answer the sidecar made itself (Rejected).
func (t *Turn) Done(err error) {
	if t.flying != nil {
		t.i.inflight.done(t.flying)
		t.flying = nil
	}
	if t.quiet {
		return
	}
	o := t.counted(err)
	if o == Conflict {
		t.i.rec.Conflict()
	}
	t.i.rec.Turn(t.label, string(o))
}

func (t *Turn) counted(err error) Outcome {
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
