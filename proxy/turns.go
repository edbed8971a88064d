package proxy

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httputil"
	"strconv"
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
	mode    knowledge.DeliveryMode
	key     ledger.Key
	created bool // this request wrote the ledger record
	keyed   bool // the turn has all ids, so it is in the ledger
	// absent: the request had no knowledge_delivery; it is bound as inline
	// but forwarded and relayed byte for byte.
	absent bool
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
// Identity is asked before the body is read, so an unauthenticated caller
// gets its 401 at once (and no 100 Continue) and cannot make the sidecar
// wait on a body it trickles.
func (s *Server) turns(c echo.Context) error {
	route := c.Param("route")
	if !s.decide(c, route) {
		return s.passH(c)
	}
	r := c.Request()
	ctx := r.Context()
	sess, authErr := s.feat.k.Authenticate(ctx, r.Header.Get("Authorization"))
	if ke, ok := errors.AsType[*knowledge.Error](authErr); ok && ke.Status == http.StatusUnauthorized {
		s.m.turn(labelUnknown, outRejected)
		return authErr
	}
	if !coreclient.ValidRouteKey(route) {
		s.m.turn(labelUnknown, outRejected)
		return knowledge.RouteUnavailable()
	}
	body, err := readSized(r.Body, r.ContentLength, coreTurnBodyMax, turnRequestPrealloc)
	if err != nil {
		s.m.turn(labelUnknown, outRejected)
		return errBodyUnreadable // or what the body's own failure was
	}
	if len(body) > coreTurnBodyMax {
		// Too large for Core anyway: let Core answer, byte for byte.
		r.Body = readCloser{io.MultiReader(bytes.NewReader(body), r.Body), r.Body}
		return s.passH(c)
	}
	tr, err := turn.ParseRequest(body)
	if err != nil {
		s.m.turn(labelInvalid, outRejected)
		switch {
		case errors.Is(err, turn.ErrNotJSONObject):
			return errTurnNotObject
		case errors.Is(err, turn.ErrTooDeep):
			return errTurnTooDeep
		}
		return errTurnDelivery
	}
	switch turn.PlanFor(tr) {
	case turn.PassUnbound:
		r.Body = io.NopCloser(bytes.NewReader(body))
		s.m.turn(labelAbsent, outPassed)
		return s.passH(c)
	case turn.BindInline:
		// Best effort: when identity or the ledger cannot be had, the turn
		// passes unbound (Core decides), counted in ledger_fail_open_total.
		r.Body = io.NopCloser(bytes.NewReader(body))
		if authErr != nil {
			s.m.ledgerFailOpen.WithLabelValues(failOpenIdentity).Inc()
			s.m.turn(labelAbsent, outPassed)
			return s.passH(c)
		}
		st := &turnState{mode: knowledge.DeliveryInline, absent: true, keyed: true, key: turn.Key(sess.SessionID, route, tr)}
		switch err := s.reserve(c, st); {
		case errors.Is(err, ledger.ErrConflict):
			return err
		case err != nil:
			s.m.ledgerFailOpen.WithLabelValues(failOpenLedger).Inc()
			s.m.turn(labelAbsent, outPassed)
			return s.passH(c)
		}
		return s.forwardTurn(c, r, st, body)
	}

	mode := string(tr.Mode)
	if authErr != nil {
		s.m.turn(mode, outRejected)
		return authErr
	}
	d, serr := s.feat.k.Delivery(ctx, route)
	var ok bool
	d.Status, d.ScopeRevision, ok = turn.Delivery(route, d.Status, d.ScopeRevision, serr)
	if !ok {
		s.m.turn(mode, outKnowledgeUnavailable)
		return knowledge.Unavailable(serr)
	}
	st := &turnState{mode: tr.Mode, key: turn.Key(sess.SessionID, route, tr), keyed: tr.Keyed(),
		delivery: d, sess: sess, route: route}
	if st.keyed {
		if err := s.reserve(c, st); err != nil {
			if !errors.Is(err, ledger.ErrConflict) {
				s.m.turn(mode, outLedgerUnavailable)
			}
			return err // 409 turn_conflict, or 503 knowledge_unavailable
		}
	}
	return s.forwardTurn(c, r, st, tr.Body)
}

// reserve binds the turn's mode in the ledger under both of Core's keys:
// ledger.ErrConflict when a different mode is already bound.
func (s *Server) reserve(c echo.Context, st *turnState) error {
	created, err := s.feat.ledger.Reserve(c.Request().Context(), st.key, string(st.mode))
	switch {
	case errors.Is(err, ledger.ErrConflict):
		s.m.ledgerConflict.Inc()
		s.m.turn(st.label(), outConflict)
		return err
	case err != nil:
		s.m.ledgerErrors.Inc()
		return err
	}
	st.created = created
	return nil
}

// forwardTurn sends the (possibly stripped) turn through the turn proxy.
func (s *Server) forwardTurn(c echo.Context, r *http.Request, st *turnState, body []byte) error {
	out := r.WithContext(context.WithValue(r.Context(), turnCtxKey{}, st))
	out.Body = io.NopCloser(bytes.NewReader(body))
	if !st.absent { // an untouched body keeps the client's framing
		out.ContentLength = int64(len(body))
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
			// Core may or may not have created the run: keep the record,
			// so only a retry with the same mode goes through.
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
		if st.keyed && turn.ReleaseAfter(code, st.created) {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
			if err := s.feat.ledger.Release(rctx, st.key, string(st.mode)); err != nil {
				s.m.ledgerErrors.Inc()
				s.log.LogAttrs(ctx, slog.LevelWarn, "turn ledger release failed",
					slog.String("request_id", requestID(ctx)), slog.Any("error", err))
			}
			cancel()
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
	n := int64(512)
	if size >= 0 {
		// One byte more than the body, so the read that sees EOF needs no
		// room of its own.
		n = min(size, limit, prealloc) + 1
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
