package conformance

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/bailinghub/knowledge-sidecar/hostclient"
)

// Errors that stop a run before any check is meaningful.
var (
	// ErrConnection means no request of the run was answered (nothing, or
	// nothing HTTP, listens at the URL, or it holds every request past the
	// check deadline).
	ErrConnection = errors.New("connection error")
	// ErrRejected means the implementation refused the token (401 on
	// capabilities): every check would only see 401.
	ErrRejected = errors.New("the Agent access token was rejected")
)

// Options configure a run.
type Options struct {
	Client *hostclient.Client
	// RunID, when set, is sent with every search and read (a session in a
	// managed task needs it).
	RunID string
	// Query is a search known to return a hint; empty tries common words.
	Query string
	// Turns enables the turn interception checks. They create real turns
	// (and runs) on the workspace, so they are off by default.
	Turns bool
	// Rate is the pace in requests per second: default 8, at most 10.
	Rate float64
	// Advance moves the implementation's clock forward. Only an in-process
	// test can do that; when nil the expiry checks are skipped (a black box
	// would have to wait five minutes).
	Advance func(time.Duration)
	// MaxWait caps one wait after a 429 (default 30 s).
	MaxWait time.Duration
	// Timeout is the deadline of each request (default 10 s). A request
	// without an answer by then — or one that fails in transport — fails
	// its check with the reason, and the run goes on.
	Timeout time.Duration
}

// DefaultTimeout is the deadline of each request when Options.Timeout is 0.
const DefaultTimeout = 10 * time.Second

// Run performs every check in order and returns the report. The error is
// non-nil only when no request at all was answered (ErrConnection), the
// implementation refuses the token (ErrRejected) or ctx ends; checks that
// fail — including those whose request got no answer in time — are in the
// report.
func Run(ctx context.Context, o Options) (*Report, error) {
	r, err := newRunner(o, Protocol)
	if err != nil {
		return nil, err
	}
	return r.finish(r.all(ctx))
}

// newRunner fills o's defaults (a rate of 8/s, at most 10; 30 s of
// Retry-After; DefaultTimeout) and starts a report for protocol.
func newRunner(o Options, protocol string) (*runner, error) {
	if o.Client == nil {
		return nil, errors.New("conformance: no client")
	}
	if o.Rate <= 0 {
		o.Rate = 8
	}
	o.Rate = min(o.Rate, 10)
	if o.MaxWait <= 0 {
		o.MaxWait = 30 * time.Second
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	return &runner{
		o: o, c: o.Client, interval: time.Duration(float64(time.Second) / o.Rate),
		rep:  &Report{Protocol: protocol, Route: o.Client.Route()},
		accs: map[string]*acc{},
	}, nil
}

// finish is the run's result: ErrConnection when no request at all was
// answered, err as it is, or the report.
func (r *runner) finish(err error) (*Report, error) {
	var na *noAnswer
	switch {
	case r.answered == 0 && errors.As(err, &na):
		return nil, fmt.Errorf("%w: %s", ErrConnection, na)
	case err != nil:
		return nil, err
	}
	return r.rep, nil
}

type runner struct {
	o        Options
	c        *hostclient.Client
	rep      *Report
	interval time.Duration
	last     time.Time
	answered int // requests that got an HTTP answer

	accs     map[string]*acc
	order    []string
	seen     []observed // answers of the knowledge endpoints
	saw429   []http.Header
	private  []string // must never appear in an error body: the token, queries, summaries
	revision string   // capabilities' knowledge_scope_revision

	docs      []*doc // documents found by discovery
	hitQuery  string // the first query that returned a hint
	cursor    string // a next_cursor seen while reading
	cursorRef string // the ref that cursor continues
}

type observed struct {
	what string
	res  *hostclient.Response
}

// acc accumulates one check over many observations.
type acc struct {
	rule  string
	n     int
	viol  []string
	skip  string
	fixed *Result
}

func (r *runner) all(ctx context.Context) error {
	ok, err := r.capabilities(ctx)
	if err != nil || !ok {
		r.flush()
		return err // no answer to capabilities: nothing was answered
	}
	steps := []func(context.Context) error{
		r.auth, r.routes, r.discover, r.searchLimits, r.searchValidation, r.runChecks,
		r.reads, r.tamper, r.methods, r.turns, r.expiry,
	}
	for _, step := range steps {
		if err := step(ctx); err != nil {
			return err
		}
	}
	r.common()
	r.flush()
	return nil
}

// --- results ---------------------------------------------------------------

// declare fixes the order of a check and its rule.
func (r *runner) declare(name, rule string) *acc {
	a, ok := r.accs[name]
	if !ok {
		a = &acc{rule: rule}
		r.accs[name] = a
		r.order = append(r.order, name)
	}
	return a
}

// note records one observation of a check; an empty violation is a pass.
func (r *runner) note(name, rule, violation string) {
	a := r.declare(name, rule)
	a.n++
	if violation != "" {
		a.viol = append(a.viol, violation)
	}
}

// skip marks a check skipped unless it has been observed.
func (r *runner) skip(name, rule, why string) {
	a := r.declare(name, rule)
	if a.skip == "" {
		a.skip = why
	}
}

// result fixes a check's outcome outright.
func (r *runner) result(name, rule string, st Status, detail string) {
	a := r.declare(name, rule)
	a.fixed = &Result{Name: name, Rule: rule, Status: st, Detail: detail}
}

func (r *runner) flush() {
	for _, name := range r.order {
		a := r.accs[name]
		switch {
		case a.fixed != nil:
			r.rep.add(*a.fixed)
		case len(a.viol) > 0:
			d := a.viol
			more := ""
			if len(d) > 3 {
				more = fmt.Sprintf(" (and %d more)", len(d)-3)
				d = d[:3]
			}
			r.rep.add(Result{Name: name, Rule: a.rule, Status: Fail, Detail: strings.Join(d, "; ") + more})
		case a.n > 0:
			r.rep.add(Result{Name: name, Rule: a.rule, Status: Pass})
		default:
			why := a.skip
			if why == "" {
				why = "not observed"
			}
			r.rep.add(Result{Name: name, Rule: a.rule, Status: Skip, Detail: why})
		}
	}
	r.order = nil
}

// --- transport -------------------------------------------------------------

// pace keeps requests at least interval apart.
func (r *runner) pace(ctx context.Context) error {
	if wait := time.Until(r.last.Add(r.interval)); wait > 0 {
		if err := sleep(ctx, wait); err != nil {
			return err
		}
	}
	r.last = time.Now()
	return nil
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// noAnswer is a request that got no HTTP answer: too slow, or a transport
// failure. It fails the request's check (see lost), not the run.
type noAnswer struct {
	request, reason string // "POST read", "no answer within 10 s"
}

func (e *noAnswer) Error() string { return e.request + ": " + e.reason }

// lost handles a send error of a check: a request without an answer is a
// violation of that check (nil: go on); anything else (ctx ended) stops the run.
func (r *runner) lost(err error, name, rule string) error {
	var na *noAnswer
	if errors.As(err, &na) {
		r.note(name, rule, na.Error())
		return nil
	}
	return err
}

// seconds words a deadline: "10 s", "200 ms", "1.5 s".
func seconds(d time.Duration) string {
	switch {
	case d%time.Second == 0:
		return strconv.FormatInt(int64(d/time.Second), 10) + " s"
	case d < time.Second && d%time.Millisecond == 0:
		return strconv.FormatInt(int64(d/time.Millisecond), 10) + " ms"
	default:
		return strconv.FormatFloat(d.Seconds(), 'f', -1, 64) + " s"
	}
}

// send paces, sends, waits out a 429's Retry-After (up to three times) and
// records answers of the knowledge endpoints for the common checks. Each
// attempt has its own deadline (Options.Timeout); one without an answer is
// a *noAnswer error.
func (r *runner) send(ctx context.Context, req hostclient.Request, what string, record bool) (*hostclient.Response, error) {
	for attempt := 0; ; attempt++ {
		if err := r.pace(ctx); err != nil {
			return nil, err
		}
		rctx, cancel := context.WithTimeout(ctx, r.o.Timeout)
		res, err := r.c.Do(rctx, req)
		timedOut := errors.Is(rctx.Err(), context.DeadlineExceeded)
		cancel()
		if err != nil {
			var te *hostclient.TransportError
			switch {
			case ctx.Err() != nil:
				return nil, ctx.Err()
			case timedOut:
				return nil, &noAnswer{req.Method + " " + what, "no answer within " + seconds(r.o.Timeout)}
			case errors.As(err, &te):
				return nil, &noAnswer{req.Method + " " + what, te.Reason}
			default:
				return nil, &noAnswer{req.Method + " " + what, err.Error()}
			}
		}
		r.answered++
		if res.Status == http.StatusTooManyRequests && attempt < 3 {
			r.saw429 = append(r.saw429, res.Header)
			if record {
				r.seen = append(r.seen, observed{what, res})
			}
			wait := time.Second
			if n, err := strconv.Atoi(res.Header.Get("Retry-After")); err == nil && n >= 1 {
				wait = time.Duration(n) * time.Second
			}
			if err := sleep(ctx, min(wait, r.o.MaxWait)); err != nil {
				return nil, err
			}
			continue
		}
		if record {
			r.seen = append(r.seen, observed{what, res})
		}
		return res, nil
	}
}

// post sends a body to an endpoint of the route with the token.
func (r *runner) post(ctx context.Context, endpoint string, body []byte) (*hostclient.Response, error) {
	return r.send(ctx, hostclient.Request{Method: http.MethodPost, URL: r.c.URL(r.c.Route(), endpoint), Token: r.c.Token(), Body: body}, endpoint, true)
}

// postJSON marshals v without HTML escaping and posts it.
func (r *runner) postJSON(ctx context.Context, endpoint string, v any) (*hostclient.Response, error) {
	return r.post(ctx, endpoint, marshal(v))
}

func marshal(v any) []byte {
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
	return []byte(strings.TrimSuffix(b.String(), "\n"))
}

// --- helpers ---------------------------------------------------------------

// codeOf names an answer for a detail: "404 route_unavailable".
func codeOf(res *hostclient.Response) string {
	if e, ok := res.ErrorCode(); ok {
		return strconv.Itoa(res.Status) + " " + e.Error
	}
	return strconv.Itoa(res.Status)
}

// wantError is the violation of an answer that is not status + code ("" when it is).
func wantError(res *hostclient.Response, status int, code string) string {
	if e, ok := res.ErrorCode(); ok && res.Status == status && e.Error == code {
		return ""
	}
	return fmt.Sprintf("got %s; want %d %s", codeOf(res), status, code)
}

// keys reports missing required keys and unexpected ones.
func keys(obj map[string]json.RawMessage, required []string, optional ...string) string {
	var bad []string
	known := map[string]bool{}
	for _, k := range required {
		known[k] = true
		if _, ok := obj[k]; !ok {
			bad = append(bad, "missing "+k)
		}
	}
	for _, k := range optional {
		known[k] = true
	}
	for k := range obj {
		if !known[k] {
			bad = append(bad, "unexpected field "+strconv.Quote(k))
		}
	}
	return strings.Join(bad, ", ")
}

func isHex64(s string) bool {
	if len(s) != 64 {
		return false
	}
	for _, c := range s {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// tamper flips one character in the middle of an opaque token, keeping it
// URL-safe and the same length, whatever the token's format.
func tamper(tok string) string {
	if tok == "" {
		return "x"
	}
	b := []byte(tok)
	i := len(b) / 2
	if b[i] == 'A' {
		b[i] = 'B'
	} else {
		b[i] = 'A'
	}
	return string(b)
}
