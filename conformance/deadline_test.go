package conformance

import (
	"context"
	"errors"
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
