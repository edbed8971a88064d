package conformance

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"mime"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/bailinghub/knowledge-sidecar/hostclient"
)

var (
	capsRequired = []string{"schema_version", "protocol", "supported", "route", "enabled", "knowledge_scope_revision", "delivery_modes", "limits"}
)

// capabilities checks the negotiation answer. ok is false when the route does
// not speak the protocol at all: the other checks would be meaningless.
func (r *runner) capabilities(ctx context.Context) (ok bool, err error) {
	const name, rule = "capabilities.supported", "capabilities answers 200 with " + capabilitiesSchema
	res, err := r.send(ctx, hostclient.Request{Method: http.MethodGet, URL: r.c.URL(r.c.Route(), hostclient.Capabilities), Token: r.c.Token()}, "capabilities", true)
	if err != nil {
		return false, err
	}
	r.private = append(r.private, r.c.Token())
	if res.Status == http.StatusUnauthorized {
		return false, fmt.Errorf("%w: capabilities answered %s", ErrRejected, codeOf(res))
	}
	var obj map[string]json.RawMessage
	var caps struct {
		SchemaVersion string           `json:"schema_version"`
		Protocol      string           `json:"protocol"`
		Supported     *bool            `json:"supported"`
		Route         string           `json:"route"`
		Enabled       *bool            `json:"enabled"`
		Revision      string           `json:"knowledge_scope_revision"`
		Modes         []string         `json:"delivery_modes"`
		Limits        map[string]int64 `json:"limits"`
	}
	if res.Status != http.StatusOK || json.Unmarshal(res.Body, &obj) != nil || json.Unmarshal(res.Body, &caps) != nil ||
		caps.SchemaVersion != capabilitiesSchema {
		r.result(name, rule, Fail, fmt.Sprintf("got %s; the route does not speak %s, nothing else was checked", codeOf(res), Protocol))
		return false, nil
	}
	r.result(name, rule, Pass, "")

	var v []string
	if d := keys(obj, capsRequired); d != "" {
		v = append(v, d)
	}
	if caps.Protocol != Protocol {
		v = append(v, fmt.Sprintf("protocol %q", caps.Protocol))
	}
	if caps.Supported == nil || !*caps.Supported {
		v = append(v, "supported is not true")
	}
	if caps.Enabled == nil {
		v = append(v, "enabled is not a boolean")
	}
	if caps.Route != r.c.Route() {
		v = append(v, fmt.Sprintf("route %q; want %q", caps.Route, r.c.Route()))
	}
	if len(caps.Modes) != 2 || caps.Modes[0] != modeInline || caps.Modes[1] != modeOnDemand {
		v = append(v, fmt.Sprintf("delivery_modes %q; want [%s %s]", caps.Modes, modeInline, modeOnDemand))
	}
	r.note("capabilities.schema", "capabilities has exactly the v1 fields (supported, route, enabled, delivery_modes…)", strings.Join(v, "; "))

	v = nil
	for k, want := range capsLimits {
		if got, ok := caps.Limits[k]; !ok || got != want {
			v = append(v, fmt.Sprintf("%s %d; want %d", k, got, want))
		}
	}
	if len(caps.Limits) != len(capsLimits) {
		v = append(v, fmt.Sprintf("%d limits; want %d", len(caps.Limits), len(capsLimits)))
	}
	r.note("capabilities.limits", fmt.Sprintf("limits are the protocol constants (%d results, %d, %d, %d, %d s, %d)",
		searchMaxResults, searchMaxBytes, pageDefault, pageMax, int(refTTL/time.Second), chainMax), strings.Join(v, "; "))

	viol := ""
	if !isHex64(caps.Revision) {
		viol = fmt.Sprintf("knowledge_scope_revision %q is not 64 lowercase hex", caps.Revision)
	}
	r.note("capabilities.revision", "knowledge_scope_revision is 64 lowercase hex", viol)
	r.revision = caps.Revision
	if caps.Enabled != nil && !*caps.Enabled {
		r.skip("search.finds_document", "a search returns at least one hint", "capabilities reports enabled: false")
	}
	return true, nil
}

// randomToken looks like an Agent token but is not one.
func randomToken() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return "bha_" + base64.RawURLEncoding.EncodeToString(b)
}

// randomUUID is a version-4 UUID nobody owns.
func randomUUID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
}

// auth: a missing or unknown bearer is 401 unauthorized on every endpoint.
func (r *runner) auth(ctx context.Context) error {
	const name, rule = "auth.unauthorized", "a missing or unknown bearer → 401 unauthorized"
	cases := []struct {
		method, endpoint, token string
		body                    []byte
	}{
		{http.MethodGet, hostclient.Capabilities, "", nil},
		{http.MethodPost, hostclient.Search, randomToken(), marshal(map[string]any{"query": "conformance"})},
		{http.MethodPost, hostclient.Read, "", marshal(map[string]any{"ref": "conformance"})},
	}
	for _, c := range cases {
		res, err := r.send(ctx, hostclient.Request{Method: c.method, URL: r.c.URL(r.c.Route(), c.endpoint), Token: c.token, Body: c.body}, c.endpoint, true)
		if err != nil {
			if err := r.lost(err, name, rule); err != nil {
				return err
			}
			continue
		}
		if d := wantError(res, http.StatusUnauthorized, codeUnauthorized); d != "" {
			r.note(name, rule, c.endpoint+": "+d)
		} else {
			r.note(name, rule, "")
		}
	}
	return nil
}

// routes: a malformed route is 404 route_unavailable.
func (r *runner) routes(ctx context.Context) error {
	// Where the implementation is a sidecar, a malformed route cannot be rolled
	// out and passes through: Core's own 404 not_found is the right answer.
	const name, rule = "route.malformed", "a malformed route → 404 route_unavailable (or Core's not_found)"
	for _, bad := range []string{"Not_A-Valid-Route", "x"} {
		res, err := r.send(ctx, hostclient.Request{Method: http.MethodGet, URL: r.c.URL(bad, hostclient.Capabilities), Token: r.c.Token()}, "capabilities", false)
		if err != nil {
			if err := r.lost(err, name, rule); err != nil {
				return err
			}
			continue
		}
		d := wantError(res, http.StatusNotFound, codeRouteUnavailable)
		if d != "" && wantError(res, http.StatusNotFound, "not_found") != "" {
			r.note(name, rule, fmt.Sprintf("route %q: %s", bad, d))
		} else {
			r.note(name, rule, "")
		}
	}
	return nil
}

// methods: a wrong method on a knowledge path is 405 method_not_allowed with
// Allow naming the right one. Skipped when the implementation answers
// something else (older implementations pass the request on to Core).
func (r *runner) methods(ctx context.Context) error {
	const name, rule = "method.not_allowed", "a wrong method → 405 method_not_allowed with Allow"
	cases := []struct{ method, endpoint, allow string }{
		{http.MethodPost, hostclient.Capabilities, "GET"},
		{http.MethodGet, hostclient.Search, "POST"},
		{http.MethodPut, hostclient.Read, "POST"},
	}
	for _, c := range cases {
		var body []byte
		if c.method != http.MethodGet {
			body = []byte("{}")
		}
		res, err := r.send(ctx, hostclient.Request{Method: c.method, URL: r.c.URL(r.c.Route(), c.endpoint), Token: r.c.Token(), Body: body}, c.endpoint, false)
		if err != nil {
			if err := r.lost(err, name, rule); err != nil {
				return err
			}
			continue
		}
		if res.Status/100 == 2 {
			r.note(name, rule, fmt.Sprintf("%s %s succeeded with %d", c.method, c.endpoint, res.Status))
			continue
		}
		if res.Status != http.StatusMethodNotAllowed {
			r.skip(name, rule, fmt.Sprintf("%s %s answered %s, not 405: not observable here", c.method, c.endpoint, codeOf(res)))
			continue
		}
		r.seen = append(r.seen, observed{c.endpoint, res})
		v := wantError(res, http.StatusMethodNotAllowed, codeMethodNotAllowed)
		if !strings.Contains(strings.ToUpper(res.Header.Get("Allow")), c.allow) {
			v = strings.TrimPrefix(v+fmt.Sprintf("; Allow %q does not name %s", res.Header.Get("Allow"), c.allow), "; ")
		}
		r.note(name, rule, v)
	}
	return nil
}

var (
	leakPatterns = regexp.MustCompile(`(?i)https?://|\b127\.0\.0\.1\b|\blocalhost\b|\bselect\b.+\bfrom\b|goroutine \d|panic:|dial tcp|\.go:\d+`)
)

// common checks every answer of the knowledge endpoints seen during the run.
func (r *runner) common() {
	for _, o := range r.seen {
		res := o.res
		cc := res.Header.Get("Cache-Control")
		v := ""
		if !strings.Contains(strings.ToLower(cc), "no-store") {
			v = fmt.Sprintf("%s %d: Cache-Control %q", o.what, res.Status, cc)
		}
		r.note("headers.no_store", "every answer carries Cache-Control: no-store", v)

		v = ""
		mt, params, err := mime.ParseMediaType(res.Header.Get("Content-Type"))
		if err != nil || mt != "application/json" || !strings.EqualFold(params["charset"], "utf-8") {
			v = fmt.Sprintf("%s %d: Content-Type %q", o.what, res.Status, res.Header.Get("Content-Type"))
		}
		r.note("headers.content_type", "every answer is Content-Type: application/json; charset=utf-8", v)

		if res.Status < 400 {
			continue
		}
		v = ""
		var obj map[string]json.RawMessage
		var e hostclient.ErrorBody
		if json.Unmarshal(res.Body, &obj) != nil || json.Unmarshal(res.Body, &e) != nil || e.Error == "" || e.Message == "" {
			v = fmt.Sprintf("%s %d: body is not {\"error\":…,\"message\":…}", o.what, res.Status)
		}
		r.note("errors.body", `every error body is {"error":"<code>","message":"<sentence>"}`, v)

		v = ""
		text := string(res.Body)
		if m := leakPatterns.FindString(text); m != "" {
			v = fmt.Sprintf("%s %d: error mentions %q", o.what, res.Status, m)
		}
		for _, p := range r.private {
			if len(p) >= 12 && strings.Contains(text, p) {
				v = fmt.Sprintf("%s %d: error repeats the token, a query or document text", o.what, res.Status)
			}
		}
		r.note("errors.no_leak", "errors contain no address, credential, SQL, stack or document text", v)
	}
	const name, rule = "rate.retry_after", "429 rate_limited carries Retry-After (whole seconds ≥ 1)"
	if len(r.saw429) == 0 {
		r.skip(name, rule, "no 429 observed (the checker does not probe the limit with bursts)")
	}
	for _, h := range r.saw429 {
		v := ""
		if n, err := parseSeconds(h.Get("Retry-After")); err != nil || n < 1 {
			v = fmt.Sprintf("Retry-After %q", h.Get("Retry-After"))
		}
		r.note(name, rule, v)
	}
}

func parseSeconds(s string) (int, error) {
	n, err := strconv.Atoi(s)
	if err != nil || strconv.Itoa(n) != s {
		return 0, fmt.Errorf("not whole seconds")
	}
	return n, nil
}
