package proxy

import (
	"bytes"
	"compress/gzip"
	"compress/zlib"
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
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/labstack/echo/v4"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/bailinghub/knowledge-sidecar/corefacts"
	"github.com/bailinghub/knowledge-sidecar/knowledge"
	"github.com/bailinghub/knowledge-sidecar/ledger"
	"github.com/bailinghub/knowledge-sidecar/turn"
)

// coreTurnBodyMax is Core's own limit on a turn body (CORE_FACTS §3.2). A
// larger body is passed through untouched for Core to refuse with its 413.
const coreTurnBodyMax = 512 << 10

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

	route string
	mode  knowledge.DeliveryMode
	key   ledger.Key
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
	case errors.Is(err, errTurnEncoding):
		return outUnsupportedEncoding
	}
	return outRejected
}

// turns intercepts POST …/turns on rolled-out workspaces of a legacy Core
// (SPEC §7). Each intercepted turn is counted once in turns_total, when its
// handling ends (a forwarded turn: once Core's answer was relayed).
func (s *Server) turns(c echo.Context) (err error) {
	route := c.Param("route")
	if !s.decide(c, route) {
		return s.passH(c)
	}
	st := &turnState{label: labelUnknown, route: route}
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
// Identity is asked before the body is read, so a turn with the field gets
// the check order of SPEC §2 (401 before anything about its body). A turn
// without the field is an old client's: whatever the sidecar cannot decide
// for it (a bearer Core rejects, a route segment that is no route key, a
// failed identity or ledger call) goes to Core untouched, and the sidecar
// answers it itself only with 409 turn_conflict. Telling the two apart
// takes the body, so it is read (bounded by Core's own limit, under the
// edge's body deadlines) even when identity refused the bearer.
func (s *Server) interceptTurn(c echo.Context, st *turnState) error {
	r := c.Request()
	ctx := r.Context()
	sess, authErr := s.feat.k.Authenticate(ctx, r.Header.Get("Authorization"))
	ke, _ := errors.AsType[*knowledge.Error](authErr)
	unauth := ke != nil && ke.Status == http.StatusUnauthorized
	badRoute := !corefacts.ValidRouteKey(st.route)
	if badRoute && encodedRoute(st.route) {
		// Refused whatever the body, after identity (canonical.go).
		if unauth {
			return authErr
		}
		return knowledge.RouteUnavailable()
	}

	var watch func([]byte) bool
	if unauth && len(r.Header.Values("Content-Encoding")) == 0 {
		// Identity refused the bearer: a turn with the field gets its 401
		// as soon as the field's key has arrived, not after a body the
		// caller may trickle.
		watch = new(turn.FieldWatch).Write
	}
	raw, seen, err := readSizedWatch(r.Body, r.ContentLength, coreTurnBodyMax, turnRequestPrealloc, watch)
	switch {
	case seen:
		return authErr
	case err != nil:
		return errBodyUnreadable // or what the body's own failure was
	case len(raw) > coreTurnBodyMax:
		// Too large for Core anyway: let Core answer, byte for byte
		// (counted as mode "unknown", passed).
		r.Body = readCloser{io.MultiReader(bytes.NewReader(raw), r.Body), r.Body}
		return s.passH(c)
	}
	body, err := decodeTurnRequest(raw, r.Header.Values("Content-Encoding"))
	if err != nil {
		// Undecidable: whether the field is there cannot be told.
		if unauth {
			return authErr
		}
		return err
	}
	tr, perr := turn.ParseRequest(body)
	if perr == nil && tr.Mode == "" {
		st.label = labelAbsent
		return s.oldClientTurn(c, st, raw, tr, sess, authErr, unauth || badRoute)
	}

	// knowledge_delivery is there (or the body nests too deeply to tell).
	switch {
	case unauth:
		return authErr
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
	st.keyed = tr.Keyed()
	if st.keyed {
		// Writing a ledger record costs the session a token of its
		// knowledge rate limit, so records cannot be had for free.
		if err := s.feat.k.AllowTurn(sess.SessionID); err != nil {
			st.outcome = outRateLimited
			return err
		}
	}
	if st.delivery, err = s.feat.k.Delivery(ctx, st.route); err != nil {
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
	r.Header.Del("Content-Encoding") // the body goes on decoded
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
	st.mode, st.absent, st.keyed, st.key = knowledge.DeliveryInline, true, true, turn.Key(sess.SessionID, st.route, tr)
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
		s.log.LogAttrs(ctx, slog.LevelWarn, "turn ledger release failed",
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
	if st.mode == knowledge.DeliveryOnDemand && st.keyed {
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

// decodeTurnRequest undoes a turn body's Content-Encoding: none or
// identity (the body as is), gzip (x-gzip) or deflate (zlib, RFC 9110
// §8.4.1.2), one coding only, decoded to at most Core's turn limit
// (a small body that inflates past it is refused: no zip bomb is ever
// held). Anything else is errTurnEncoding (415): whether such a body
// carries knowledge_delivery cannot be told.
func decodeTurnRequest(raw []byte, encodings []string) ([]byte, error) {
	if len(encodings) > 1 {
		return nil, errTurnEncoding
	}
	enc := ""
	if len(encodings) == 1 {
		enc = strings.ToLower(strings.TrimSpace(encodings[0]))
	}
	var (
		zr  io.ReadCloser
		err error
	)
	switch enc {
	case "", "identity":
		return raw, nil
	case "gzip", "x-gzip":
		// Every member, as a decoder at Core would read them: a field in a
		// second member is still the field.
		zr, err = gzip.NewReader(bytes.NewReader(raw))
	case "deflate":
		zr, err = zlib.NewReader(bytes.NewReader(raw))
	default:
		return nil, errTurnEncoding
	}
	if err != nil {
		return nil, errTurnUndecodable
	}
	defer zr.Close()
	body, err := readSized(zr, -1, coreTurnBodyMax, turnRequestPrealloc)
	switch {
	case len(body) > coreTurnBodyMax:
		return nil, errTurnDecodedTooLarge
	case err != nil:
		return nil, errTurnUndecodable
	}
	return body, nil
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
		// The body was re-sliced: its length is pr.Out.ContentLength.
		pr.Out.Header.Del("Content-Length")
		pr.Out.Header.Del("Transfer-Encoding")
		pr.Out.Header.Del("Content-Encoding") // the body was decoded
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
	body, err := readSized(r, size, turnResponseMax, turnResponseMax)
	if err != nil {
		return nil, err
	}
	if len(body) > turnResponseMax {
		return nil, errors.New("turn answer too large to rewrite")
	}
	return body, nil
}

// turnRequestPrealloc bounds the buffer reserved for a client's turn body
// before its bytes arrive: a client may announce a large Content-Length and
// then send slowly, and must not make the sidecar hold coreTurnBodyMax per
// connection for that. Larger bodies grow as they arrive.
const turnRequestPrealloc = 64 << 10

// readSized reads r to EOF, but at most limit+1 bytes, like
// io.ReadAll(io.LimitReader(r, limit+1)). size is the expected length (a
// Content-Length, -1 when unknown): the buffer starts at that size (bounded
// by limit and by prealloc), so a body whose length is announced is read
// into one allocation instead of a doubling series of them.
func readSized(r io.Reader, size, limit, prealloc int64) ([]byte, error) {
	b, _, err := readSizedWatch(r, size, limit, prealloc, nil)
	return b, err
}

// readSizedWatch is readSized that shows every chunk read to watch (when
// not nil) and stops early, stopped = true, once watch returns true.
func readSizedWatch(r io.Reader, size, limit, prealloc int64, watch func([]byte) bool) (b []byte, stopped bool, err error) {
	n := int64(512)
	if size >= 0 {
		// One byte more than the body, so the read that sees EOF needs no
		// room of its own.
		n = min(size, limit, prealloc) + 1
	}
	lr := io.LimitedReader{R: r, N: limit + 1}
	b = make([]byte, 0, n)
	for {
		m, err := lr.Read(b[len(b):cap(b)])
		b = b[:len(b)+m]
		if watch != nil && m > 0 && watch(b[len(b)-m:]) {
			return b, true, nil
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				return b, false, nil
			}
			return b, false, err
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
