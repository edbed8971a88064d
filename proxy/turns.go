package proxy

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptrace"
	"net/http/httputil"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/labstack/echo/v4"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/bailinghub/knowledge-sidecar/corefacts"
	"github.com/bailinghub/knowledge-sidecar/knowledge"
	"github.com/bailinghub/knowledge-sidecar/ledger"
	"github.com/bailinghub/knowledge-sidecar/protocol"
	"github.com/bailinghub/knowledge-sidecar/turn"
)

// turnResponseMax bounds the turn answer the sidecar buffers to rewrite.
const turnResponseMax = 16 << 20

var errDeliveryFailed = errors.New("turn answer cannot carry knowledge delivery")

// turnState is one intercepted turn, from the rollout decision to Core's
// answer: what the turn proxy's hooks need, and the turns_total series the
// turn is counted in.
type turnState struct {
	// label is the mode label, "unknown" until the field could be told.
	// outcome is set by the step that decided the turn's fate when the
	// handler's error does not tell it (see counted).
	label   string
	outcome turnOutcome

	route    string             // the URL's route segment as written
	routeKey corefacts.RouteKey // route parsed (zero: no route key)
	mode     protocol.DeliveryMode
	key      ledger.Key
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
	// and what the catalog said of the route and its knowledge bases,
	// which the same-run hints reuse.
	delivery knowledge.Delivery
	sess     corefacts.Session // binds the same-run hints
}

type turnCtxKey struct{}

// counted is the outcome the turn is counted under, given the handler's
// error: the one a step set; else Core's answer relayed untouched (passed)
// when there is no error; else an answer the sidecar made itself.
func (st *turnState) counted(err error) turnOutcome {
	switch {
	case st.outcome != "":
		return st.outcome
	case err == nil:
		return outPassed
	case errors.Is(err, ledger.ErrConflict):
		return outConflict
	}
	return outRejected
}

// turns intercepts POST …/turns on rolled-out workspaces of a legacy Core
// (SPEC §7). Each intercepted turn is counted once in turns_total, when its
// handling ends (a forwarded turn: once Core's answer was relayed).
func (s *Server) turns(c echo.Context) (err error) {
	route := c.Param("route")
	key, _ := corefacts.ParseRouteKey(route)
	if !s.decide(c, key) {
		return s.passH(c)
	}
	st := &turnState{label: labelUnknown, route: route, routeKey: key}
	defer func() {
		// Also when the relay aborts (panic): the hooks set the outcome.
		o := st.counted(err)
		if o == outConflict {
			s.m.ledgerConflict.Inc()
		}
		s.m.turn(st.label, o)
	}()
	return s.interceptTurn(c, st)
}

// interceptTurn takes a turn from its bearer and body to Core. Without
// knowledge_delivery the request passes byte for byte.
//
// Identity is asked before the body is read. A caller whose bearer is
// missing or refused holds nothing here (SPEC §8.3): its turn goes to Core
// as sent, unread, and Core's own answer (Core authenticates first)
// reaches it byte for byte. Any other turn is read as Core reads it — the
// raw bytes parsed as JSON, Content-Encoding ignored (CORE_FACTS Addendum
// 3) — into a buffer charged to the turn body budget as it fills, and the
// decision is made on those bytes: a body that is not a JSON object (a
// compressed one, say) has no field Core could act on and goes on as
// sent. A turn without the field is an old client's: whatever the sidecar
// cannot decide for it (a route segment that is no route key, a failed
// identity or ledger call) goes to Core untouched, and the sidecar answers
// it itself only with 409 turn_conflict.
func (s *Server) interceptTurn(c echo.Context, st *turnState) error {
	r := c.Request()
	ctx := r.Context()
	sess, authErr := s.feat.k.Authenticate(ctx, r.Header.Get("Authorization"))
	ke, _ := errors.AsType[*knowledge.Error](authErr)
	unauth := ke != nil && ke.Status == http.StatusUnauthorized
	badRoute := st.routeKey.IsZero()
	switch {
	case badRoute && encodedRoute(st.route):
		// Refused whatever the body, after identity (canonical.go).
		if unauth {
			return authErr
		}
		return knowledge.RouteUnavailable()
	case unauth:
		return s.passH(c)
	}

	raw, err := s.readTurn(r, corefacts.TurnBodyMax)
	switch {
	case err != nil:
		return err
	case len(raw) > corefacts.TurnBodyMax:
		// Too large for Core anyway: let Core answer, byte for byte
		// (counted as mode "unknown", passed).
		r.Body = readCloser{io.MultiReader(bytes.NewReader(raw), r.Body), r.Body}
		return s.passH(c)
	}
	tr, perr := turn.ParseRequest(raw)
	if perr == nil && tr.Mode == "" {
		st.label = labelAbsent
		return s.oldClientTurn(c, st, raw, tr, sess, authErr, badRoute)
	}

	// knowledge_delivery is there (or the body nests too deeply to tell).
	switch {
	case badRoute:
		return knowledge.RouteUnavailable()
	case perr != nil:
		st.label = labelInvalid
		switch {
		case errors.Is(perr, turn.ErrNotJSONObject):
			return errTurnNotObject
		case errors.Is(perr, turn.ErrTooDeep):
			return errTurnTooDeep
		}
		return errTurnDelivery
	}
	st.label, st.mode = string(tr.Mode), tr.Mode
	if authErr != nil {
		return authErr
	}
	// The stripped copy is held beside the body until Core has it.
	if err := s.chargeTurnBody(stateOf(ctx), int64(len(tr.Body))); err != nil {
		return err
	}
	st.keyed = tr.Keyed()
	if st.keyed {
		// Writing a ledger record costs the session a token of its
		// knowledge rate limit, so records cannot be had for free.
		if err := s.feat.k.AllowTurn(sess.SessionID); err != nil {
			st.outcome = outRateLimited
			return err
		}
	}
	if st.delivery, err = s.feat.k.Delivery(ctx, st.routeKey); err != nil {
		st.outcome = outKnowledgeUnavailable
		return err // 503: no revision, so the turn is not forwarded
	}
	st.sess, st.key = sess, turn.Key(sess.SessionID, st.route, tr)
	if st.keyed {
		if err := s.reserve(c, st); err != nil {
			if !errors.Is(err, ledger.ErrConflict) {
				st.outcome = outLedgerUnavailable
			}
			return err // 409 turn_conflict, or 503 knowledge_unavailable
		}
	}
	return s.forwardTurn(c, r, st, tr.Body)
}

// oldClientTurn handles a turn without knowledge_delivery: raw is the
// client's body as received. toCore: the sidecar has nothing to decide
// (Core rejects the bearer, or the route segment is no route key), so it
// goes to Core untouched. Otherwise a keyed turn is bound to inline
// delivery, best effort: when identity or the ledger cannot be had it
// passes unbound (counted in ledger_fail_open_total), unless an on_demand
// attempt of the same turn is in flight in this process, which makes it
// the mode switch SPEC §7 refuses.
func (s *Server) oldClientTurn(c echo.Context, st *turnState, raw []byte, tr turn.Request,
	sess corefacts.Session, authErr error, toCore bool) error {
	r := c.Request()
	r.Body = io.NopCloser(bytes.NewReader(raw))
	if toCore || turn.PlanFor(tr) == turn.PassUnbound {
		return s.passH(c)
	}
	if authErr != nil {
		if s.feat.inflight.onDemand(s.feat.inflight.bearerKeys(r.Header.Get("Authorization"), st.route, tr)) {
			return ledger.ErrConflict
		}
		s.failOpen(r.Context(), failOpenIdentity)
		return s.passH(c)
	}
	st.mode, st.absent, st.keyed, st.key = protocol.DeliveryInline, true, true, turn.Key(sess.SessionID, st.route, tr)
	switch err := s.reserve(c, st); {
	case errors.Is(err, ledger.ErrConflict):
		return err
	case err != nil:
		if s.feat.inflight.onDemand(s.feat.inflight.ledgerKeys(st.key)) {
			return ledger.ErrConflict
		}
		s.failOpen(r.Context(), failOpenLedger)
		return s.passH(c)
	}
	return s.forwardTurn(c, r, st, raw)
}

// failOpen records a field-less turn that goes to Core unbound because
// identity or the ledger could not be had: ledger_fail_open_total, and an
// event on the request's span when it is traced.
func (s *Server) failOpen(ctx context.Context, reason string) {
	s.m.ledgerFailOpen.WithLabelValues(reason).Inc()
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		span.AddEvent("ledger_fail_open", trace.WithAttributes(attribute.String("knowledge_sidecar.reason", reason)))
	}
}

// reserve binds the turn's mode in the ledger under both of Core's keys:
// ledger.ErrConflict when a different mode is already bound.
func (s *Server) reserve(c echo.Context, st *turnState) error {
	res, err := s.feat.ledger.Reserve(c.Request().Context(), st.key, string(st.mode))
	switch {
	case errors.Is(err, ledger.ErrConflict):
		return err
	case err != nil:
		s.m.ledgerErrors.Inc()
		return err
	}
	st.res, st.reserved = res, true
	return nil
}

// release gives up the attempt's share of the turn's ledger records: Core
// refused it, or never received it (SPEC §7). It runs after the client may
// have left, so on a context of its own.
func (s *Server) release(ctx context.Context, st *turnState, reason string) {
	if !st.reserved {
		return
	}
	st.reserved = false
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	if err := s.feat.ledger.Release(rctx, st.key, string(st.mode), st.res); err != nil {
		s.m.ledgerErrors.Inc()
		s.log.LogAttrs(ctx, slog.LevelWarn, "turn ledger release failed; it is retried until it succeeds or the record expires",
			slog.String("request_id", requestID(ctx)), slog.Any("error", err))
		return
	}
	s.m.ledgerReleases.WithLabelValues(reason).Inc()
}

// forwardTurn sends the (possibly stripped) turn through the turn proxy,
// whose hooks find st in the request's context.
// An on_demand attempt is in the in-flight set until Core's answer is in.
func (s *Server) forwardTurn(c echo.Context, r *http.Request, st *turnState, body []byte) error {
	trace := &httptrace.ClientTrace{WroteRequest: func(i httptrace.WroteRequestInfo) {
		if i.Err == nil {
			st.wrote.Store(true)
		}
	}}
	ctx := httptrace.WithClientTrace(context.WithValue(r.Context(), turnCtxKey{}, st), trace)
	out := r.WithContext(ctx)
	out.Body = io.NopCloser(bytes.NewReader(body))
	if !st.absent { // an untouched body keeps the client's framing
		out.ContentLength = int64(len(body))
	}
	if st.mode == protocol.DeliveryOnDemand && st.keyed {
		keys := append(s.feat.inflight.ledgerKeys(st.key), s.feat.inflight.bearerKeys(r.Header.Get("Authorization"), st.route, turn.Request{
			ConversationID: st.key.ConversationID, TurnID: st.key.TurnID, UserMessageID: st.key.UserMessageID})...)
		s.feat.inflight.add(keys)
		defer s.feat.inflight.done(keys)
	}
	// The outbound headers (framing, Accept-Encoding) are set on the
	// ReverseProxy's own copy, in the turn proxy's Rewrite.
	c.SetRequest(out)
	s.feat.turns.ServeHTTP(c.Response(), out)
	return nil
}

type readCloser struct {
	io.Reader
	io.Closer
}

// newTurnProxy is a ReverseProxy like the pass-through one (same transport,
// same header rules) whose ModifyResponse rewrites the turn answer. Every
// request it serves carries its turnState (forwardTurn); its hooks set the
// turn's outcome.
func (s *Server) newTurnProxy() *httputil.ReverseProxy {
	rp := s.newPassthrough()
	passRewrite := rp.Rewrite
	rp.Rewrite = func(pr *httputil.ProxyRequest) {
		passRewrite(pr)
		if turnOf(pr.In.Context()).absent {
			return // a turn without the field goes to Core as the client sent it
		}
		// pr.Out.Header is the ReverseProxy's copy of the client's headers.
		// The body was re-sliced: its length is pr.Out.ContentLength. A
		// Content-Encoding label stays: Core ignores it, as the sidecar did.
		pr.Out.Header.Del("Content-Length")
		pr.Out.Header.Del("Transfer-Encoding")
		// Ask for an identity-encoded answer so it can be rewritten.
		pr.Out.Header.Set("Accept-Encoding", "identity")
	}
	rp.ModifyResponse = s.modifyTurn
	passErr := rp.ErrorHandler
	rp.ErrorHandler = func(w http.ResponseWriter, r *http.Request, err error) {
		st := turnOf(r.Context())
		if errors.Is(err, errDeliveryFailed) {
			st.outcome = outDeliveryFailed
			s.log.LogAttrs(r.Context(), slog.LevelWarn, "turn answer could not be rewritten",
				slog.String("request_id", requestID(r.Context())), slog.Any("error", err))
			s.writeErr(w, r, errDeliveryFailedAnswer)
			return
		}
		if !st.wrote.Load() {
			// Core never received the whole request (the client left, or
			// Core could not be reached): no run can exist. Once written,
			// Core may or may not have created the run: the record is kept,
			// so only a retry with the same mode goes through.
			s.release(r.Context(), st, releaseNotSent)
		}
		st.outcome = outUpstreamError
		passErr(w, r, err)
	}
	return rp
}

func turnOf(ctx context.Context) *turnState { return ctx.Value(turnCtxKey{}).(*turnState) }

// modifyTurn applies SPEC §7 to Core's answer: non-2xx and field-less
// answers are relayed unchanged; a 2xx answer is read once, its same-run
// hints built from what Core retrieved (on_demand), and rewritten with the
// delivery block.
func (s *Server) modifyTurn(resp *http.Response) error {
	ctx := resp.Request.Context()
	st := turnOf(ctx)
	code := resp.StatusCode
	if code < 200 || code > 299 {
		if turn.ReleaseAfter(code) {
			s.release(ctx, st, releaseRefused)
		}
		st.outcome = coreOutcome(code)
		return nil // relayed unchanged
	}
	if st.absent {
		st.outcome = outPassed
		return nil // relayed unchanged: the host asked for nothing else
	}

	body, err := readTurnBody(resp)
	if err != nil {
		// The answer is consumed and unusable in either mode.
		return fmt.Errorf("%w: %v", errDeliveryFailed, err)
	}
	resp.Header.Del("Content-Encoding") // body is decoded from here on
	rep, err := turn.ReadReply(body, st.mode)
	if err != nil {
		return fmt.Errorf("%w: %v", errDeliveryFailed, err)
	}
	var hints []byte
	if rep.TakesHints() {
		hints = s.turnHints(ctx, st, rep)
	}
	out, err := rep.Rewrite(st.delivery, hints)
	if err != nil {
		return fmt.Errorf("%w: %v", errDeliveryFailed, err)
	}
	resp.Body = io.NopCloser(bytes.NewReader(out))
	resp.ContentLength = int64(len(out))
	resp.Header.Set("Content-Length", strconv.Itoa(len(out)))
	resp.Header.Del("Transfer-Encoding")
	st.outcome = outRewritten
	return nil
}

// turnHints are the same-run hints of an on_demand answer (SPEC §7), best
// effort, counted in turn_hints_total{outcome}: "off" when turn_hints is
// false (Core's inline knowledge is then not even read), else what
// knowledge made of what Core retrieved.
func (s *Server) turnHints(ctx context.Context, st *turnState, rep turn.Reply) []byte {
	if !s.feat.hints.Load() {
		s.m.turnHints.WithLabelValues(hintsOff).Inc()
		return nil
	}
	hints, outcome := s.feat.k.TurnHintsFor(ctx, st.sess, st.delivery, rep.RunID(), rep.Items())
	s.m.turnHints.WithLabelValues(outcome).Inc()
	return hints
}

// readTurnBody reads Core's answer, undoing gzip if Core compressed it
// despite Accept-Encoding: identity. Other encodings are not rewritable.
func readTurnBody(resp *http.Response) ([]byte, error) {
	defer resp.Body.Close()
	var r io.Reader = resp.Body
	switch enc := resp.Header.Get("Content-Encoding"); enc {
	case "", "identity":
	case "gzip":
		zr, err := gzip.NewReader(resp.Body)
		if err != nil {
			return nil, err
		}
		defer zr.Close()
		r = zr
	default:
		return nil, fmt.Errorf("content encoding %q", enc)
	}
	size := resp.ContentLength
	if r != resp.Body {
		size = -1 // the decoded length is unknown
	}
	body, err := readSized(r, size, turnResponseMax)
	if err != nil {
		return nil, err
	}
	if len(body) > turnResponseMax {
		return nil, errors.New("turn answer too large to rewrite")
	}
	return body, nil
}

// turnReadFirst is the buffer a turn body is first read into; it grows
// as bytes arrive (doubling, to the announced length at most), each
// growth charged to the turn body budget before it is made. A client that
// announces a large Content-Length and sends nothing holds this much.
const turnReadFirst = 4 << 10

// readTurn reads a turn body to its end, but at most limit+1 bytes (the
// caller passes a longer body through), into a buffer charged to the turn
// body budget as it grows: the bytes held, never a Content-Length in
// advance. errOverloaded when the budget (everyone's, or this client's
// share) has no room for the next growth; errBodyUnreadable when the body
// itself failed (the edge's own answer for that, bodyFailure, wins).
func (s *Server) readTurn(r *http.Request, limit int64) ([]byte, error) {
	st := stateOf(r.Context())
	size := r.ContentLength
	grow := func(b []byte) ([]byte, error) {
		n := int64(max(2*cap(b), turnReadFirst))
		if size >= int64(cap(b)) {
			n = min(n, size+1) // one byte more than the body sees its EOF
		}
		n = min(n, limit+1) // > len(b): the caller stops past limit
		if err := s.chargeTurnBody(st, n-int64(cap(b))); err != nil {
			return nil, err
		}
		nb := make([]byte, len(b), n)
		copy(nb, b)
		return nb, nil
	}
	b, err := grow(nil)
	if err != nil {
		return nil, err
	}
	for {
		m, rerr := r.Body.Read(b[len(b):cap(b)])
		b = b[:len(b)+m]
		switch {
		case rerr == nil:
		case errors.Is(rerr, io.EOF):
			return b, nil
		default:
			return nil, errBodyUnreadable
		}
		if int64(len(b)) > limit {
			return b, nil
		}
		if len(b) == cap(b) {
			if b, err = grow(b); err != nil {
				return nil, err
			}
		}
	}
}

// chargeTurnBody charges n more bytes held for the request to the turn
// body budget, under its client's share; the edge gives them back when the
// request ends.
func (s *Server) chargeTurnBody(st *reqState, n int64) error {
	if st == nil || n <= 0 {
		return nil
	}
	if ok, global := s.lim.turnBody.acquire(st.client, n); !ok {
		s.lim.m.rejected.WithLabelValues(limitTurnBody).Inc()
		if !global {
			s.lim.m.share.WithLabelValues(limitTurnBody).Inc()
		}
		return errOverloaded
	}
	st.turnBytes += n
	s.lim.m.turnBody.Add(float64(n))
	return nil
}

// readSized reads r to EOF, but at most limit+1 bytes, like
// io.ReadAll(io.LimitReader(r, limit+1)). size is the expected length (a
// Content-Length, -1 when unknown): the buffer starts at that size (bounded
// by limit), so a body whose length is announced is read into one
// allocation instead of a doubling series of them.
func readSized(r io.Reader, size, limit int64) ([]byte, error) {
	n := int64(512)
	if size >= 0 {
		// One byte more than the body, so the read that sees EOF needs no
		// room of its own.
		n = min(size, limit) + 1
	}
	lr := io.LimitedReader{R: r, N: limit + 1}
	b := make([]byte, 0, n)
	for {
		m, err := lr.Read(b[len(b):cap(b)])
		b = b[:len(b)+m]
		if err != nil {
			if errors.Is(err, io.EOF) {
				return b, nil
			}
			return b, err
		}
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)] // let append pick the next size
		}
	}
}

// turnsInFlight is the set of on_demand attempts this process has
// forwarded and not yet had Core's answer for, by the turn's ledger keys
// and by the bearer's own keys. When the ledger (or identity) cannot be
// reached, a field-less turn is forwarded unbound — but not while an
// on_demand attempt of the same turn is in flight here: Core might replay
// that attempt's run to it with inline knowledge (SPEC §7: one mode per
// turn, whatever the interleaving).
type turnsInFlight struct {
	mu sync.Mutex
	m  map[[sha256.Size]byte]int
}

func (f *turnsInFlight) add(keys [][sha256.Size]byte) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.m == nil {
		f.m = map[[sha256.Size]byte]int{}
	}
	for _, k := range keys {
		f.m[k]++
	}
}

func (f *turnsInFlight) done(keys [][sha256.Size]byte) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, k := range keys {
		if f.m[k]--; f.m[k] <= 0 {
			delete(f.m, k)
		}
	}
}

// onDemand reports whether any of keys has an on_demand attempt in flight.
func (f *turnsInFlight) onDemand(keys [][sha256.Size]byte) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, k := range keys {
		if f.m[k] > 0 {
			return true
		}
	}
	return false
}

// ledgerKeys are the turn's two idempotency keys in its session.
func (f *turnsInFlight) ledgerKeys(k ledger.Key) [][sha256.Size]byte {
	return [][sha256.Size]byte{
		inflightHash("session-turn", k.SessionID, k.Route, k.ConversationID, k.TurnID),
		inflightHash("session-message", k.SessionID, k.Route, k.UserMessageID),
	}
}

// bearerKeys are the same keys under the caller's Authorization header,
// for when identity cannot be had (the session is then unknown).
func (f *turnsInFlight) bearerKeys(authorization, route string, tr turn.Request) [][sha256.Size]byte {
	return [][sha256.Size]byte{
		inflightHash("bearer-turn", authorization, route, tr.ConversationID, tr.TurnID),
		inflightHash("bearer-message", authorization, route, tr.UserMessageID),
	}
}

// inflightHash is SHA-256 over length-prefixed parts: no two tuples share
// an encoding, and no bearer is kept in memory as such.
func inflightHash(parts ...string) [sha256.Size]byte {
	h := sha256.New()
	var n [8]byte
	for _, p := range parts {
		binary.BigEndian.PutUint64(n[:], uint64(len(p)))
		h.Write(n[:])
		h.Write([]byte(p))
	}
	var out [sha256.Size]byte
	h.Sum(out[:0])
	return out
}
