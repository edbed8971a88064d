package conformance

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bailinghub/knowledge-sidecar/hostclient"
	"github.com/bailinghub/knowledge-sidecar/hostclient/hostclienttest"
)

// fakeImpl is a deliberately wrong implementation of the protocol: it never
// authenticates, ignores validation and max_bytes, accepts any ref, pads
// search answers past 4096 bytes, misstates a limit, sends no Cache-Control
// and answers its first search with a 429 that has no Retry-After.
// With empty set it is a corpus without any document instead.
type fakeImpl struct {
	empty bool

	mu       sync.Mutex
	searches int
}

const fakeRevision = "0000000000000000000000000000000000000000000000000000000000000000"

func (f *fakeImpl) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	if f.empty {
		w.Header().Set("Cache-Control", "no-store")
	}
	path := r.URL.Path
	switch {
	case strings.HasSuffix(path, "/knowledge/capabilities"):
		limit := 8192
		if f.empty {
			limit = 4096
		}
		fmt.Fprintf(w, `{"schema_version":"bailing.agent-knowledge-capabilities.v1","protocol":"bailing.agent-knowledge.v1","supported":true,"route":"demo","enabled":true,"knowledge_scope_revision":%q,"delivery_modes":["inline","on_demand"],"limits":{"search_max_results":3,"search_max_bytes":%d,"read_default_bytes":16384,"read_max_bytes":32768,"reference_ttl_seconds":300,"read_chain_max_bytes":131072}}`, fakeRevision, limit)
	case strings.HasSuffix(path, "/knowledge/search"):
		f.mu.Lock()
		f.searches++
		first := f.searches == 1
		f.mu.Unlock()
		if first && !f.empty {
			w.WriteHeader(http.StatusTooManyRequests)
			fmt.Fprint(w, `{"error":"rate_limited","message":"Too many requests."}`)
			return
		}
		var hints []map[string]any
		if !f.empty {
			exp := time.Now().UTC().Add(300 * time.Second).Format(time.RFC3339)
			for i := 1; i <= 3; i++ {
				hints = append(hints, map[string]any{"ref": fmt.Sprintf("kr9.fake-document-%d-reference", i), "title": fmt.Sprintf("Doc %d", i),
					"summary": strings.Repeat("padding ", 200), "revision": fakeRevision, "score": 0.5, "expires_at": exp})
			}
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"schema_version": "bailing.agent-knowledge-search.v1", "route": "demo",
			"knowledge_scope_revision": fakeRevision, "trust": "reference_only", "status": "ok", "hints": append([]map[string]any{}, hints...), "truncated": false})
	case strings.HasSuffix(path, "/knowledge/read"):
		var req struct {
			Ref string `json:"ref"`
		}
		_ = json.NewDecoder(r.Body).Decode(&req)
		title := "Doc 1"
		if n := strings.TrimPrefix(req.Ref, "kr9.fake-document-"); len(n) > 0 && n[0] >= '1' && n[0] <= '3' {
			title = "Doc " + n[:1]
		}
		content := strings.Repeat("x", 20000)
		_ = json.NewEncoder(w).Encode(map[string]any{"schema_version": "bailing.agent-knowledge-read.v1", "route": "demo",
			"knowledge_scope_revision": fakeRevision, "ref": req.Ref, "revision": fakeRevision, "title": title, "content": content,
			"trust": "reference_only", "next_cursor": nil, "truncated": false, "budget_exhausted": false,
			"total_content_bytes": len(content), "read_chain_max_bytes": 131072})
	default:
		w.WriteHeader(http.StatusNotFound)
		fmt.Fprint(w, `{"error":"not_found","message":"Not found."}`)
	}
}

func runFake(t *testing.T, f *fakeImpl) (*Report, string) {
	t.Helper()
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	c, err := hostclient.New(srv.URL, "demo", "bha_conformance-test-token-0123456789abcdef", nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rep, err := Run(ctx, Options{Client: c, Rate: 10})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := rep.WriteText(&out); err != nil {
		t.Fatal(err)
	}
	return rep, out.String()
}

// TestBrokenImplementationFails: exit 1 and every violated rule named.
func TestBrokenImplementationFails(t *testing.T) {
	rep, text := runFake(t, &fakeImpl{})
	if rep.ExitCode() != 1 {
		t.Errorf("exit code %d; want 1\n%s", rep.ExitCode(), text)
	}
	status := map[string]Status{}
	for _, c := range rep.Checks {
		status[c.Name] = c.Status
	}
	for _, want := range []struct{ name, rule string }{
		{"search.body_budget", "search body ≤ 4096 bytes"},
		{"headers.no_store", "Cache-Control: no-store"},
		{"read.max_bytes", "max_bytes bounds the whole body"},
		{"read.tampered_ref", "tampered ref rejected"},
		{"auth.unauthorized", "401 unauthorized"},
		{"capabilities.limits", "limits are the protocol constants"},
		{"search.validation.limit", "limit outside 1–3"},
		{"search.limit", "at most `limit` hints"},
		{"read.run_binding", "a ref is bound to its run"},
		{"rate.retry_after", "429 rate_limited carries Retry-After"},
		{"method.not_allowed", "a wrong method → 405"},
	} {
		if status[want.name] != Fail {
			t.Errorf("%s is %q; want fail", want.name, status[want.name])
		}
		if !strings.Contains(text, "FAIL  "+want.name) || !containsLine(text, want.name, want.rule) {
			t.Errorf("the text report does not name the rule %q on the FAIL line of %s", want.rule, want.name)
		}
	}
	if status["search.shape"] != Pass || status["capabilities.schema"] != Pass {
		t.Errorf("search.shape %q, capabilities.schema %q; want pass (what the fake gets right is not reported as failed)", status["search.shape"], status["capabilities.schema"])
	}
}

func containsLine(text, name, rule string) bool {
	for _, line := range strings.Split(text, "\n") {
		if strings.Contains(line, name) && strings.Contains(line, rule) {
			return true
		}
	}
	return false
}

// TestEmptyCorpusSkips: without any document the checks that need one are
// skipped, never passed.
func TestEmptyCorpusSkips(t *testing.T) {
	rep, text := runFake(t, &fakeImpl{empty: true})
	status := map[string]Status{}
	for _, c := range rep.Checks {
		status[c.Name] = c.Status
	}
	for _, name := range []string{"search.finds_document", "read.ok", "read.max_bytes", "read.utf8", "read.paging",
		"read.complete", "read.chain_budget", "read.tampered_ref", "read.tampered_cursor", "read.cursor_bound", "read.expired_ref"} {
		if status[name] != Skip {
			t.Errorf("%s is %q; want skip\n%s", name, status[name], text)
		}
	}
	if status["capabilities.limits"] != Pass {
		t.Errorf("capabilities.limits is %q; want pass", status["capabilities.limits"])
	}
	var js bytes.Buffer
	if err := rep.WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	var back Report
	if err := json.Unmarshal(js.Bytes(), &back); err != nil || len(back.Checks) != len(rep.Checks) || back.Summary != rep.Summary {
		t.Errorf("JSON report round trip: %v, %d checks; want %d", err, len(back.Checks), len(rep.Checks))
	}
}

func TestTamper(t *testing.T) {
	for _, tok := range []string{"kr1.abcdefgh", "kr2.AAAAAAAA", "x"} {
		got := tamper(tok)
		diff := 0
		for i := range min(len(got), len(tok)) {
			if got[i] != tok[i] {
				diff++
			}
		}
		if len(got) != len(tok) || diff != 1 || strings.IndexFunc(got, notURLSafe) >= 0 {
			t.Errorf("tamper(%q) = %q; want one URL-safe character changed in the middle", tok, got)
		}
	}
}

// A held, reset or refused request fails its own check only; the run goes on.

// stallFirst serves h, except that the first request whose path ends with
// suffix and that carries the checker's token is handled by stall instead.
type stallFirst struct {
	h      http.Handler
	suffix string
	stall  func(w http.ResponseWriter, r *http.Request)

	mu     sync.Mutex
	done   bool
	hits   int // requests to suffix, the stalled one included
	others int // answered requests to other paths after the stalled one
}

func (s *stallFirst) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	mine := strings.HasSuffix(r.URL.Path, s.suffix) && r.Header.Get("Authorization") == "Bearer "+testToken
	first := mine && !s.done
	if mine {
		s.hits++
		s.done = true
	} else if s.done {
		s.others++
	}
	s.mu.Unlock()
	if first {
		s.stall(w, r)
		return
	}
	s.h.ServeHTTP(w, r)
}

// holdUntilCleanup blocks a request until the test ends, whatever the client
// does meanwhile — an implementation that holds a request far past any
// client timeout.
func holdUntilCleanup(t *testing.T) func(http.ResponseWriter, *http.Request) {
	release := make(chan struct{})
	t.Cleanup(func() { close(release) }) // runs before the server's Close (cleanups are LIFO)
	return func(http.ResponseWriter, *http.Request) { <-release }
}

// reset closes the connection with an RST instead of answering.
func reset(w http.ResponseWriter, _ *http.Request) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return
	}
	_ = conn.(*net.TCPConn).SetLinger(0)
	_ = conn.Close()
}

func runWith(t *testing.T, h http.Handler, hold bool, s *stallFirst) (*Report, error) {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	if hold {
		s.stall = holdUntilCleanup(t)
	}
	c, err := hostclient.New(srv.URL, "demo", testToken, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return Run(ctx, Options{Client: c, Rate: 10, Timeout: time.Second}) // short for a test; ample for the fake on a loaded machine
}

const testToken = "bha_conformance-test-token-0123456789abcdef"

func checks(rep *Report) map[string]Result {
	out := map[string]Result{}
	for _, c := range rep.Checks {
		out[c.Name] = c
	}
	return out
}

// TestHeldRequestFailsItsCheckOnly: an implementation that holds the first
// read far past the deadline fails read.ok with "no answer within 1 s";
// every other check still runs and the report is complete.
func TestHeldRequestFailsItsCheckOnly(t *testing.T) {
	t.Parallel() // the run is paced (sleeps), not busy
	reference, _ := runFake(t, &fakeImpl{})
	s := &stallFirst{h: &fakeImpl{}, suffix: "/knowledge/read"}
	rep, err := runWith(t, s, true, s)
	if err != nil {
		t.Fatalf("Run: %v; want a report (the other requests were answered)", err)
	}
	got := checks(rep)
	if c := got["read.ok"]; c.Status != Fail || !strings.Contains(c.Detail, "POST read: no answer within 1 s") {
		t.Errorf("read.ok %s %q; want fail with \"POST read: no answer within 1 s\"", c.Status, c.Detail)
	}
	if len(rep.Checks) != len(reference.Checks) {
		t.Errorf("%d checks; want all %d of a run without the held request", len(rep.Checks), len(reference.Checks))
	}
	// What the held read does not touch is reported as in the reference run.
	for _, c := range reference.Checks {
		if c.Name != "read.ok" && !strings.HasPrefix(c.Name, "read.") && got[c.Name].Status != c.Status {
			t.Errorf("%s is %s; want %s as without the held request", c.Name, got[c.Name].Status, c.Status)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.hits < 2 || s.others < 10 {
		t.Errorf("%d reads and %d other requests after the held one; want the run to go on", s.hits, s.others)
	}
}

// TestResetFailsItsCheckOnly: a connection reset fails the check with that
// reason and the run goes on.
func TestResetFailsItsCheckOnly(t *testing.T) {
	t.Parallel() // the run is paced (sleeps), not busy
	s := &stallFirst{h: &fakeImpl{}, suffix: "/knowledge/read", stall: reset}
	rep, err := runWith(t, s, false, s)
	if err != nil {
		t.Fatalf("Run: %v; want a report", err)
	}
	if c := checks(rep)["read.ok"]; c.Status != Fail || !strings.Contains(c.Detail, "POST read: connection reset") {
		t.Errorf("read.ok %s %q; want fail with \"POST read: connection reset\"", c.Status, c.Detail)
	}
	if c := checks(rep)["method.not_allowed"]; c.Status != Fail {
		t.Errorf("method.not_allowed %s; want it checked after the reset (fail, as the fake answers 200)", c.Status)
	}
}

// TestNothingAnswered: only when no request at all is answered does the run
// end with ErrConnection, naming the reason.
func TestNothingAnswered(t *testing.T) {
	t.Parallel() // the run is paced (sleeps), not busy
	t.Run("held", func(t *testing.T) {
		s := &stallFirst{h: &fakeImpl{}, suffix: "/knowledge/capabilities"}
		_, err := runWith(t, s, true, s)
		if !errors.Is(err, ErrConnection) || !strings.Contains(err.Error(), "GET capabilities: no answer within 1 s") {
			t.Errorf("got %v; want ErrConnection: GET capabilities: no answer within 1 s", err)
		}
	})
	t.Run("refused", func(t *testing.T) {
		c, _ := hostclient.New(hostclienttest.RefusedURL(t), "demo", "bha_x", nil)
		_, err := Run(context.Background(), Options{Client: c, Timeout: time.Second})
		if !errors.Is(err, ErrConnection) || !strings.Contains(err.Error(), "connection refused") {
			t.Errorf("got %v; want ErrConnection naming \"connection refused\"", err)
		}
	})
}

func TestSeconds(t *testing.T) {
	for d, want := range map[time.Duration]string{10 * time.Second: "10 s", 200 * time.Millisecond: "200 ms", 1500 * time.Millisecond: "1.5 s"} {
		if got := seconds(d); got != want {
			t.Errorf("seconds(%s) = %q; want %q", d, got, want)
		}
	}
}
