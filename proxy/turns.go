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
	"net/http/httptrace"
	"net/http/httputil"
	"strconv"

	"github.com/labstack/echo/v4"

	"github.com/bailinghub/knowledge-sidecar/corefacts"
	"github.com/bailinghub/knowledge-sidecar/knowledge"
	"github.com/bailinghub/knowledge-sidecar/turn"
)

// The edge's side of turn interception (SPEC §7): read the body under the
// turn body budget (the only place it is charged), ask package turn what to
// do with it, forward through the turn ReverseProxy and hand Core's answer
// to the turn. Every decision is turn's, its refusals included (edge-ready
// errors).

// coreTurnBodyMax is Core's own limit on a turn body (corefacts, CORE_FACTS
// §3.2). A larger body is passed through untouched for Core to refuse with
// its 413.
const coreTurnBodyMax = corefacts.TurnBodyMax

// turnResponseMax bounds the turn answer the sidecar buffers to rewrite.
const turnResponseMax = 16 << 20

var errDeliveryFailed = errors.New("turn answer cannot carry knowledge delivery")

type turnCtxKey struct{}

// turns intercepts POST …/turns on rolled-out workspaces of a legacy Core
// (SPEC §7), in four calls to package turn: Admit (identity first: a
// caller whose bearer is missing or refused holds nothing here, its turn
// goes to Core unread), Plan (any other turn body, read raw and charged to
// the turn body budget as it arrives by readTurn, the one place that
// budget is charged), Answer (the turn proxy's hooks) and Done (counted
// once, when its handling ends: a forwarded turn once Core's answer was
// relayed). A turn decide passes because Core is native still goes to
// package turn (Input.Native) when the workspace is rolled out, so that a
// turn recorded before the flip keeps its handling (nativeTurn).
func (s *Server) turns(c echo.Context) (err error) {
	route := c.Param("route")
	key, _ := corefacts.ParseRouteKey(route)
	native := false
	if !s.decide(c, key) {
		if native = s.nativeTurn(c, key); !native {
			return s.passH(c)
		}
	}
	r := c.Request()
	t, plan := s.feat.turns.Admit(r.Context(), turn.Input{Authorization: r.Header.Get("Authorization"), Route: route,
		RouteKey: key, EncodedRoute: key.IsZero() && encodedRoute(route), Native: native}) // canonical.go
	defer func() { t.Done(err) }() // also when the relay aborts (panic)
	if plan.Read {
		raw, rerr := s.readTurn(r, coreTurnBodyMax)
		switch {
		case rerr != nil:
			return rerr
		case len(raw) > coreTurnBodyMax:
			// Too large for Core anyway: let Core answer, byte for byte
			// (counted as mode "unknown", passed).
			r.Body = readCloser{io.MultiReader(bytes.NewReader(raw), r.Body), r.Body}
			return s.passH(c)
		}
		plan = t.Plan(r.Context(), raw)
	}
	if plan.Audit {
		auditRefusals(r.Context(), knowledge.EndpointTurn, key, plan.Session)
	}
	switch {
	case plan.Err != nil:
		return plan.Err
	case plan.Forward:
		return s.forwardTurn(c, r, t, plan.Body)
	}
	if plan.Body != nil { // read: what Core gets is what was read
		r.Body = io.NopCloser(bytes.NewReader(plan.Body))
	}
	return s.passH(c)
}

// nativeTurn reports whether decide passed the turn because Core is native
// (the verdict decide just took, read without a probe) on a rolled-out
// workspace: such a turn still goes to package turn, which hands a turn the
// ledger holds from before the flip to its old handling (docs/rollout.md,
// "Turns across a flip") and any other to Core untouched.
func (s *Server) nativeTurn(c echo.Context, key corefacts.RouteKey) bool {
	return !key.IsZero() && s.feat.rollout.Load().Enabled(c.Param("route")) && s.feat.native.IsNative()
}

// forwardTurn sends the (possibly stripped) turn through the turn proxy,
// whose hooks find t in the request's context. The transport's
// WroteRequest trace tells t when Core has the whole request.
func (s *Server) forwardTurn(c echo.Context, r *http.Request, t *turn.Turn, body []byte) error {
	trace := &httptrace.ClientTrace{WroteRequest: func(i httptrace.WroteRequestInfo) {
		if i.Err == nil {
			t.Sent()
		}
	}}
	ctx := httptrace.WithClientTrace(context.WithValue(r.Context(), turnCtxKey{}, t), trace)
	out := r.WithContext(ctx)
	out.Body = io.NopCloser(bytes.NewReader(body))
	if !t.Untouched() { // an untouched body keeps the client's framing
		out.ContentLength = int64(len(body))
	}
	// The outbound headers (framing, Accept-Encoding) are set on the
	// ReverseProxy's own copy, in the turn proxy's Rewrite.
	c.SetRequest(out)
	s.feat.turnProxy.ServeHTTP(c.Response(), out)
	return nil
}

type readCloser struct {
	io.Reader
	io.Closer
}

// newTurnProxy is a ReverseProxy like the pass-through one (same transport,
// same header rules) whose ModifyResponse rewrites the turn answer. Every
// request it serves carries its turn.Turn (forwardTurn), whose hooks decide
// on Core's answer.
func (s *Server) newTurnProxy() *httputil.ReverseProxy {
	rp := s.newPassthrough()
	passRewrite := rp.Rewrite
	rp.Rewrite = func(pr *httputil.ProxyRequest) {
		passRewrite(pr)
		if turnOf(pr.In.Context()).Untouched() {
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
		if errors.Is(err, errDeliveryFailed) { // the turn counts it (Answer)
			s.log.LogAttrs(r.Context(), slog.LevelWarn, "turn answer could not be rewritten",
				slog.String("request_id", requestID(r.Context())), slog.Any("error", err))
			s.writeErr(w, r, errDeliveryFailedAnswer)
			return
		}
		_, _ = turnOf(r.Context()).Answer(r.Context(), 0, nil) // no answer: nothing to relay
		passErr(w, r, err)
	}
	return rp
}

func turnOf(ctx context.Context) *turn.Turn { return ctx.Value(turnCtxKey{}).(*turn.Turn) }

// modifyTurn hands Core's answer to the turn: relayed unchanged when it
// says so (non-2xx, a field-less turn), else read once (decoded) and
// replaced by the turn's rewrite.
func (s *Server) modifyTurn(resp *http.Response) error {
	ctx := resp.Request.Context()
	out, err := turnOf(ctx).Answer(ctx, resp.StatusCode, func() ([]byte, error) { return readTurnBody(resp) })
	switch {
	case err != nil:
		// The answer is consumed and unusable in either mode.
		return fmt.Errorf("%w: %v", errDeliveryFailed, err)
	case out == nil:
		return nil // relayed unchanged
	}
	resp.Header.Del("Content-Encoding") // the body was decoded to be rewritten
	resp.Body = io.NopCloser(bytes.NewReader(out))
	resp.ContentLength = int64(len(out))
	resp.Header.Set("Content-Length", strconv.Itoa(len(out)))
	resp.Header.Del("Transfer-Encoding")
	return nil
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
