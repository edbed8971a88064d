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

	"github.com/bailinghub/knowledge-sidecar/coreclient"
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

// turnState travels with an intercepted turn to ModifyResponse.
type turnState struct {
	mode knowledge.DeliveryMode
	key  ledger.Key
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
	// delivery is the route's knowledge state taken before forwarding: the
	// block's status and scope revision, and what the catalog said of the
	// route and its knowledge bases, which the hints reuse.
	delivery knowledge.Delivery
	// sess and route bind the same-run hints of an on_demand answer.
	sess  coreclient.Session
	route string
}

type turnCtxKey struct{}

// label is the mode label of the turn metrics.
func (st *turnState) label() string {
	if st.absent {
		return labelAbsent
	}
	return string(st.mode)
}

// turns intercepts POST …/turns on rolled-out workspaces of a legacy Core
// (SPEC §7). Without knowledge_delivery the request passes byte for byte.
//
// Identity is asked before the body is read, so a turn with the field gets
// the check order of SPEC §2 (401 before anything about its body). A turn
// without the field is an old client's: whatever the sidecar cannot decide
// for it (a bearer Core rejects, a route segment that is no route key, a
// failed identity or ledger call) goes to Core untouched, and the sidecar
// answers it itself only with 409 turn_conflict. Telling the two apart
// takes the body, so it is read (bounded by Core's own limit, under the
// edge's body deadlines) even when identity refused the bearer.
func (s *Server) turns(c echo.Context) error {
	route := c.Param("route")
	if !s.decide(c, route) {
		return s.passH(c)
	}
	r := c.Request()
	ctx := r.Context()
	sess, authErr := s.feat.k.Authenticate(ctx, r.Header.Get("Authorization"))
	ke, _ := errors.AsType[*knowledge.Error](authErr)
	unauth := ke != nil && ke.Status == http.StatusUnauthorized
	badRoute := !coreclient.ValidRouteKey(route)
	if badRoute && strings.Contains(route, "%") {
		// A route segment spelled with percent-encoding is not a literal
		// path: Core may decode it into a route key, so a field-less turn
		// through it could bypass the ledger. Refused as before, whatever
		// the body (SPEC §7: only a literal segment goes to Core).
		s.m.turn(labelUnknown, outRejected)
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
	if seen {
		s.m.turn(labelUnknown, outRejected)
		return authErr
	}
	if err != nil {
		s.m.turn(labelUnknown, outRejected)
		return errBodyUnreadable // or what the body's own failure was
	}
	if len(raw) > coreTurnBodyMax {
		// Too large for Core anyway: let Core answer, byte for byte.
		r.Body = readCloser{io.MultiReader(bytes.NewReader(raw), r.Body), r.Body}
		s.m.turn(labelUnknown, outPassed)
		return s.passH(c)
	}
	body, encErr := decodeTurnRequest(raw, r.Header.Values("Content-Encoding"))
	if encErr != nil {
		// Undecidable: whether the field is there cannot be told.
		switch {
		case unauth:
			s.m.turn(labelUnknown, outRejected)
			return authErr
		case errors.Is(encErr, errTurnEncoding):
			s.m.turn(labelUnknown, outUnsupportedEncoding)
		default:
			s.m.turn(labelUnknown, outRejected)
		}
		return encErr
	}
	tr, perr := turn.ParseRequest(body)
	if perr == nil && tr.Mode == "" {
		return s.oldClientTurn(c, r, route, raw, tr, sess, authErr, unauth || badRoute)
	}

	// knowledge_delivery is there (or the body nests too deeply to tell).
	switch {
	case unauth:
		s.m.turn(labelUnknown, outRejected)
		return authErr
	case badRoute:
		s.m.turn(labelUnknown, outRejected)
		return knowledge.RouteUnavailable()
	case perr != nil:
		s.m.turn(labelInvalid, outRejected)
		switch {
		case errors.Is(perr, turn.ErrNotJSONObject):
			return errTurnNotObject
		case errors.Is(perr, turn.ErrTooDeep):
			return errTurnTooDeep
		}
		return errTurnDelivery
	}
	mode := string(tr.Mode)
	if authErr != nil {
		s.m.turn(mode, outRejected)
		return authErr
	}
	keyed := tr.Keyed()
	if keyed {
		// Writing a ledger record costs the session a token of its
		// knowledge rate limit, so records cannot be had for free.
		if err := s.feat.k.AllowTurn(sess.SessionID); err != nil {
			s.m.turn(mode, outRateLimited)
			return err
		}
	}
	d, serr := s.feat.k.Delivery(ctx, route)
	var ok bool
	d.Status, d.ScopeRevision, ok = turn.Delivery(route, d.Status, d.ScopeRevision, serr)
	if !ok {
		s.m.turn(mode, outKnowledgeUnavailable)
		return knowledge.Unavailable(serr)
	}
	st := &turnState{mode: tr.Mode, key: turn.Key(sess.SessionID, route, tr), keyed: keyed,
		delivery: d, sess: sess, route: route}
	if st.keyed {
		if err := s.reserve(c, st); err != nil {
			if !errors.Is(err, ledger.ErrConflict) {
				s.m.turn(mode, outLedgerUnavailable)
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
func (s *Server) oldClientTurn(c echo.Context, r *http.Request, route string, raw []byte, tr turn.Request,
	sess coreclient.Session, authErr error, toCore bool) error {
	r.Body = io.NopCloser(bytes.NewReader(raw))
	if toCore || turn.PlanFor(tr) == turn.PassUnbound {
		s.m.turn(labelAbsent, outPassed)
		return s.passH(c)
	}
	if authErr != nil {
		if s.feat.inflight.onDemand(s.feat.inflight.bearerKeys(r.Header.Get("Authorization"), route, tr)) {
			s.m.ledgerConflict.Inc()
			s.m.turn(labelAbsent, outConflict)
			return ledger.ErrConflict
		}
		s.m.ledgerFailOpen.WithLabelValues(failOpenIdentity).Inc()
		s.m.turn(labelAbsent, outPassed)
		return s.passH(c)
	}
	st := &turnState{mode: knowledge.DeliveryInline, absent: true, keyed: true, key: turn.Key(sess.SessionID, route, tr)}
	switch err := s.reserve(c, st); {
	case errors.Is(err, ledger.ErrConflict):
		return err
	case err != nil:
		if s.feat.inflight.onDemand(s.feat.inflight.ledgerKeys(st.key)) {
			s.m.ledgerConflict.Inc()
			s.m.turn(labelAbsent, outConflict)
			return ledger.ErrConflict
		}
		s.m.ledgerFailOpen.WithLabelValues(failOpenLedger).Inc()
		s.m.turn(labelAbsent, outPassed)
		return s.passH(c)
	}
	return s.forwardTurn(c, r, st, raw)
}

// reserve binds the turn's mode in the ledger under both of Core's keys:
// ledger.ErrConflict when a different mode is already bound.
func (s *Server) reserve(c echo.Context, st *turnState) error {
	res, err := s.feat.ledger.Reserve(c.Request().Context(), st.key, string(st.mode))
	switch {
	case errors.Is(err, ledger.ErrConflict):
		s.m.ledgerConflict.Inc()
		s.m.turn(st.label(), outConflict)
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

// forwardTurn sends the (possibly stripped) turn through the turn proxy.
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
// same header rules) whose ModifyResponse rewrites the turn answer.
func (s *Server) newTurnProxy() *httputil.ReverseProxy {
	rp := s.newPassthrough()
	passRewrite := rp.Rewrite
	rp.Rewrite = func(pr *httputil.ProxyRequest) {
		passRewrite(pr)
		if st, _ := pr.In.Context().Value(turnCtxKey{}).(*turnState); st == nil || st.absent {
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
		st, _ := r.Context().Value(turnCtxKey{}).(*turnState)
		if errors.Is(err, errDeliveryFailed) {
			s.m.turn(string(st.mode), outDeliveryFailed)
			s.log.LogAttrs(r.Context(), slog.LevelWarn, "turn answer could not be rewritten",
				slog.String("request_id", requestID(r.Context())), slog.Any("error", err))
			s.writeErr(w, r, errDeliveryFailedAnswer)
			return
		}
		if st != nil {
			if st.wrote.Load() {
				// Core may or may not have created the run: keep the
				// record, so only a retry with the same mode goes through.
			} else {
				// Core never received the whole request (the client left,
				// or Core could not be reached): no run can exist.
				s.release(r.Context(), st, releaseNotSent)
			}
			s.m.turn(st.label(), outUpstreamError)
		}
		passErr(w, r, err)
	}
	return rp
}

// modifyTurn applies SPEC §7 to Core's answer.
func (s *Server) modifyTurn(resp *http.Response) error {
	ctx := resp.Request.Context()
	st, _ := ctx.Value(turnCtxKey{}).(*turnState)
	if st == nil {
		return nil
	}
	code := resp.StatusCode
	if code < 200 || code > 299 {
		if turn.ReleaseAfter(code) {
			s.release(ctx, st, releaseRefused)
		}
		s.m.turn(st.label(), coreOutcome(code))
		return nil // relayed unchanged
	}
	if st.absent {
		s.m.turn(labelAbsent, outPassed)
		return nil // relayed unchanged: the host asked for nothing else
	}

	body, err := readTurnBody(resp)
	if err != nil {
		// The answer is consumed and unusable in either mode.
		return fmt.Errorf("%w: %v", errDeliveryFailed, err)
	}
	resp.Header.Del("Content-Encoding") // body is decoded from here on
	var hints turn.Hinter
	if st.mode == knowledge.DeliveryOnDemand {
		hints = s.turnHints(ctx, st)
	}
	out, err := turn.Answer(body, st.mode, st.delivery.Status, st.delivery.ScopeRevision, hints)
	if err != nil {
		return fmt.Errorf("%w: %v", errDeliveryFailed, err)
	}
	resp.Body = io.NopCloser(bytes.NewReader(out))
	resp.ContentLength = int64(len(out))
	resp.Header.Set("Content-Length", strconv.Itoa(len(out)))
	resp.Header.Del("Transfer-Encoding")
	s.m.turn(string(st.mode), outRewritten)
	return nil
}

// turnHints is the Hinter of an on_demand answer (SPEC §7 "Same-run
// hints"): best effort, counted in turn_hints_total{outcome}. It is nil —
// and Core's inline knowledge is not even read — when hints are off, or when
// the route's knowledge was "disabled" or "unavailable" before forwarding
// (no hints without asking the catalog again).
func (s *Server) turnHints(ctx context.Context, st *turnState) turn.Hinter {
	var skip string
	switch {
	case !s.feat.hints.Load():
		skip = hintsOff
	case st.delivery.Status == knowledge.StatusDisabled: // no knowledge configured
		skip = knowledge.HintsNone
	case st.delivery.Status == knowledge.StatusUnavailable: // catalog or retrieval down
		skip = knowledge.HintsFailed
	}
	if skip != "" {
		s.m.turnHints.WithLabelValues(skip).Inc()
		return nil
	}
	return func(runID string, items []knowledge.TurnItem) []byte {
		hints, outcome := s.feat.k.TurnHintsFor(ctx, st.sess, st.route, st.delivery, runID, items)
		s.m.turnHints.WithLabelValues(outcome).Inc()
		return hints
	}
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
