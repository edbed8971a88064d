package conformance

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/bailinghub/knowledge-sidecar/hostclient"
)

// defaultQueries are tried, in order, when no --query is given: common words
// of English and Chinese documents.
var defaultQueries = []string{"the", "policy", "how", "what", "is", "的", "是", "规则", "订单", "退款", "help", "and"}

// maxDocs bounds how many distinct documents discovery collects.
const maxDocs = 8

var (
	searchRequired = []string{"schema_version", "route", "knowledge_scope_revision", "trust", "status", "hints", "truncated"}
	hintRequired   = []string{"ref", "title", "summary", "revision", "score", "expires_at"}
)

// doc is a document found by discovery.
type doc struct {
	ref, title, revision string
	total                int64 // total_content_bytes, -1 until read
}

// searchResp and hint are the checker's own view of a search answer, not
// hostclient.SearchAnswer: pointers and raw hints tell a missing field from a
// zero one, which the shape checks need.
type searchResp struct {
	SchemaVersion string            `json:"schema_version"`
	Route         string            `json:"route"`
	RunID         *string           `json:"run_id"`
	Revision      string            `json:"knowledge_scope_revision"`
	Trust         string            `json:"trust"`
	Status        string            `json:"status"`
	Hints         []json.RawMessage `json:"hints"`
	Truncated     *bool             `json:"truncated"`
}

type hint struct {
	Ref       string   `json:"ref"`
	Title     string   `json:"title"`
	Summary   string   `json:"summary"`
	Revision  string   `json:"revision"`
	Score     *float64 `json:"score"`
	ExpiresAt string   `json:"expires_at"`
}

// searchBody is a search request with the run, when one is configured.
func (r *runner) searchBody(query string, limit int) map[string]any {
	b := map[string]any{"query": query, "limit": limit}
	if r.o.RunID != "" {
		b["run_id"] = r.o.RunID
	}
	return b
}

// discover searches until hints are found, and reads the first page of each
// new document to learn its size; it stops once it has two documents and
// one larger than the chain budget.
func (r *runner) discover(ctx context.Context) error {
	queries := defaultQueries
	if r.o.Query != "" {
		queries = append([]string{r.o.Query}, defaultQueries...)
	}
	const name, rule = "search.finds_document", "a search returns at least one hint"
	r.declare(name, rule)
	seen := map[string]bool{}
	for _, q := range queries {
		res, err := r.postJSON(ctx, hostclient.Search, r.searchBody(q, 3))
		if err != nil {
			if err := r.lost(err, "search.ok", "a valid search answers 200"); err != nil {
				return err
			}
			continue
		}
		r.private = append(r.private, q)
		hints := r.checkSearch(res, 3)
		var fresh []*doc
		for _, h := range hints {
			key := h.Title + "\x00" + h.Revision
			if seen[key] || len(r.docs) >= maxDocs {
				continue
			}
			seen[key] = true
			d := &doc{ref: h.Ref, title: h.Title, revision: h.Revision, total: -1}
			r.docs = append(r.docs, d)
			fresh = append(fresh, d)
			if s := h.Summary; len(s) >= 24 {
				r.private = append(r.private, strings.ToValidUTF8(s[:24], ""))
			}
		}
		if len(hints) > 0 && r.hitQuery == "" {
			r.hitQuery = q
		}
		for _, d := range fresh {
			if err := r.firstPage(ctx, d); err != nil {
				return err
			}
		}
		if len(r.docs) >= 2 && r.bigDoc() != nil {
			break
		}
	}
	if len(r.docs) == 0 {
		r.skip(name, rule, fmt.Sprintf("no search returned a hint (tried %d queries); checks that need a document are skipped", len(queries)))
		return nil
	}
	r.result(name, rule, Pass, fmt.Sprintf("%d documents found", len(r.docs)))
	return nil
}

func (r *runner) bigDoc() *doc {
	for _, d := range r.docs {
		if d.total > chainMax {
			return d
		}
	}
	return nil
}

// checkSearch notes the search checks of one answer and returns its hints.
func (r *runner) checkSearch(res *hostclient.Response, limit int) []hint {
	if res.Status != http.StatusOK {
		r.note("search.ok", "a valid search answers 200", "got "+codeOf(res))
		return nil
	}
	r.note("search.ok", "a valid search answers 200", "")
	viol := ""
	if len(res.Body) > searchMaxBytes {
		viol = fmt.Sprintf("body of %d bytes", len(res.Body))
	}
	r.note("search.body_budget", "search body ≤ "+strconv.Itoa(searchMaxBytes)+" bytes", viol)

	var obj map[string]json.RawMessage
	var sr searchResp
	if json.Unmarshal(res.Body, &obj) != nil || json.Unmarshal(res.Body, &sr) != nil {
		r.note("search.shape", "search answers the v1 fields with trust reference_only", "body is not a JSON object of the v1 shape")
		return nil
	}
	v := r.envelope(obj, searchRequired, envelope{searchSchema, sr.SchemaVersion, sr.Trust, sr.Route, sr.RunID})
	if !knownStatus(sr.Status) {
		v = append(v, fmt.Sprintf("status %q", sr.Status))
	}
	if sr.Truncated == nil {
		v = append(v, "truncated is not a boolean")
	}
	if !isHex64(sr.Revision) {
		v = append(v, "knowledge_scope_revision is not 64 lowercase hex")
	}
	r.note("search.shape", "search answers the v1 fields with trust reference_only", strings.Join(v, "; "))

	viol = ""
	if len(sr.Hints) > limit || len(sr.Hints) > 3 {
		viol = fmt.Sprintf("%d hints for limit %d", len(sr.Hints), limit)
	}
	r.note("search.limit", "at most `limit` hints (≤ 3)", viol)

	date, dateErr := http.ParseTime(res.Header.Get("Date"))
	var hints []hint
	for _, raw := range sr.Hints {
		var hobj map[string]json.RawMessage
		var h hint
		if json.Unmarshal(raw, &hobj) != nil || json.Unmarshal(raw, &h) != nil {
			r.note("search.hint_shape", "each hint has exactly ref, title, summary, revision, score, expires_at", "a hint is not an object of that shape")
			continue
		}
		var hv []string
		if d := keys(hobj, hintRequired); d != "" {
			hv = append(hv, d)
		}
		if !isHex64(h.Revision) {
			hv = append(hv, "revision is not 64 lowercase hex")
		}
		if h.Score == nil {
			hv = append(hv, "score is not a number")
		}
		r.note("search.hint_shape", "each hint has exactly ref, title, summary, revision, score, expires_at", strings.Join(hv, "; "))

		viol = ""
		if h.Ref == "" || len(h.Ref) > 512 || strings.IndexFunc(h.Ref, notURLSafe) >= 0 {
			viol = fmt.Sprintf("ref of %d bytes", len(h.Ref))
			if strings.IndexFunc(h.Ref, notURLSafe) >= 0 {
				viol += " with characters that are not URL-safe"
			}
		}
		r.note("search.ref_format", "refs are opaque, URL-safe and ≤ 512 bytes", viol)

		viol = ""
		exp, err := time.Parse(time.RFC3339, h.ExpiresAt)
		switch {
		case err != nil || !strings.HasSuffix(h.ExpiresAt, "Z"):
			viol = fmt.Sprintf("expires_at %q is not RFC 3339 UTC", h.ExpiresAt)
		case dateErr == nil:
			if d := exp.Sub(date); d < 290*time.Second || d > 310*time.Second {
				viol = fmt.Sprintf("expires_at is %s after the answer's Date; want %s", d, ttlText)
			}
		}
		r.note("search.expires_at", "expires_at is RFC 3339 UTC, issue + "+ttlText, viol)
		if utf8.ValidString(h.Summary) && h.Ref != "" {
			hints = append(hints, h)
		}
	}
	return hints
}

func notURLSafe(c rune) bool {
	return !(c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.' || c == '~')
}

// searchLimits: limit 1 gives at most one hint.
func (r *runner) searchLimits(ctx context.Context) error {
	if r.hitQuery == "" {
		r.skip("search.limit", "at most `limit` hints (≤ 3)", "no search returned a hint")
		return nil
	}
	res, err := r.postJSON(ctx, hostclient.Search, r.searchBody(r.hitQuery, 1))
	if err != nil {
		return r.lost(err, "search.limit", "at most `limit` hints (≤ 3)")
	}
	r.checkSearch(res, 1)
	return nil
}

// badRequest is a request the protocol refuses with a defined error.
type badRequest struct {
	name, rule, endpoint string
	bodies               []string
	status               int
	code                 string
}

// validation: bad input is refused with the defined status and code, never
// clamped or fixed. None of these needs a document: shape comes before the ref.
func (r *runner) searchValidation(ctx context.Context) error {
	long := strings.Repeat("知", maxQueryUnits+1)
	big := `{"query":"` + strings.Repeat("a", maxRequestBytes+1024) + `"}`
	cases := []badRequest{
		{"search.validation.limit", "limit outside 1–" + strconv.Itoa(searchMaxResults) + " or not an integer → 400 " + codeInvalidRequest, hostclient.Search,
			[]string{`{"query":"policy","limit":0}`, `{"query":"policy","limit":` + strconv.Itoa(searchMaxResults+1) + `}`, `{"query":"policy","limit":2.5}`, `{"query":"policy","limit":"3"}`}, 400, codeInvalidRequest},
		{"search.validation.query", "a blank, missing, over-" + strconv.Itoa(maxQueryUnits) + "-UTF-16-unit or control-character query → 400 " + codeInvalidRequest, hostclient.Search,
			[]string{`{"query":"   "}`, `{"limit":1}`, `{"query":"` + long + `"}`, `{"query":"` + strings.Repeat("😀", maxQueryUnits/2+1) + `"}`, `{"query":"a\u0001b"}`, `{"query":7}`}, 400, codeInvalidRequest},
		{"search.validation.unknown_field", "an unknown field → 400 invalid_request", hostclient.Search,
			[]string{`{"query":"policy","conformance_unknown":1}`}, 400, codeInvalidRequest},
		{"search.validation.json", "malformed JSON or a non-object body → 400 invalid_request", hostclient.Search,
			[]string{`{"query":`, `[]`, `"policy"`}, 400, codeInvalidRequest},
		{"search.validation.run_id", "a malformed run_id → 400 invalid_request", hostclient.Search,
			[]string{`{"query":"policy","run_id":"not-a-uuid"}`}, 400, codeInvalidRequest},
		{"read.validation.max_bytes", "max_bytes outside " + strconv.Itoa(pageMin) + "–" + strconv.Itoa(pageMax) + " or not an integer → 400 " + codeInvalidRequest, hostclient.Read,
			[]string{`{"ref":"conformance","max_bytes":` + strconv.Itoa(pageMin-1) + `}`, `{"ref":"conformance","max_bytes":` + strconv.Itoa(pageMax+1) + `}`, `{"ref":"conformance","max_bytes":"8192"}`, `{"ref":"conformance","max_bytes":8192.5}`}, 400, codeInvalidRequest},
		{"read.validation.ref", "a missing or non-string ref → 400 invalid_request", hostclient.Read,
			[]string{`{}`, `{"ref":5}`, `{"ref":"conformance","unknown":true}`}, 400, codeInvalidRequest},
		{"body.too_large", "a body over " + strconv.Itoa(maxRequestBytes>>10) + " KiB → 413 " + codePayloadTooLarge, hostclient.Search,
			[]string{big}, 413, codePayloadTooLarge},
	}
	for _, c := range cases {
		for _, b := range c.bodies {
			res, err := r.post(ctx, c.endpoint, []byte(b))
			if err != nil {
				if err := r.lost(err, c.name, c.rule); err != nil {
					return err
				}
				continue
			}
			v := wantError(res, c.status, c.code)
			if v != "" {
				shown := b
				if len(shown) > 60 {
					shown = strings.ToValidUTF8(shown[:60], "") + "…"
				}
				v = shown + ": " + v
			}
			r.note(c.name, c.rule, v)
		}
	}
	return nil
}

// runChecks: a run the session does not own is 404 run_not_found.
func (r *runner) runChecks(ctx context.Context) error {
	const name, rule = "search.run_not_found", "a run_id the session does not own → 404 run_not_found"
	res, err := r.postJSON(ctx, hostclient.Search, map[string]any{"query": "policy", "run_id": randomUUID()})
	if err != nil {
		return r.lost(err, name, rule)
	}
	if e, ok := res.ErrorCode(); ok && strings.HasPrefix(e.Error, "TASK_") {
		r.skip(name, rule, "the session is in a managed task ("+e.Error+")")
		return nil
	}
	r.note(name, rule, wantError(res, http.StatusNotFound, codeRunNotFound))
	return nil
}

// envelope is what search and read answers share.
type envelope struct {
	want, schemaVersion, trust, route string
	runID                             *string
}

// envelope checks the fields every search and read answer carries: exactly
// the v1 keys (run_id only when one was sent, echoed in lowercase), the
// schema version, trust and route.
func (r *runner) envelope(obj map[string]json.RawMessage, required []string, e envelope) []string {
	var v []string
	var opt []string
	if r.o.RunID != "" {
		opt = append(opt, "run_id")
		if e.runID == nil || *e.runID != strings.ToLower(r.o.RunID) {
			v = append(v, "run_id not echoed in lowercase")
		}
	}
	if d := keys(obj, required, opt...); d != "" {
		v = append(v, d)
	}
	if e.schemaVersion != e.want {
		v = append(v, fmt.Sprintf("schema_version %q", e.schemaVersion))
	}
	if e.trust != trustReferenceOnly {
		v = append(v, fmt.Sprintf("trust %q", e.trust))
	}
	if e.route != r.c.Route() {
		v = append(v, fmt.Sprintf("route %q", e.route))
	}
	return v
}
