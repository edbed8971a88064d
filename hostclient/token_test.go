package hostclient

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bailinghub/knowledge-sidecar/hostclient/hostclienttest"
)

// replaceFile writes content to a new file beside path and renames it over
// path, as a Kubernetes secret update (or an atomic save) does.
func replaceFile(t *testing.T, path, content string) {
	t.Helper()
	tmp := path + ".new"
	if err := os.WriteFile(tmp, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// rewriteInPlace overwrites path with content of the same length and puts
// the modification time back: os.Stat cannot tell the file changed.
func rewriteInPlace(t *testing.T, path, content string) {
	t.Helper()
	before, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte(content), 0); err != nil {
		t.Fatal(err)
	}
	_ = f.Close()
	if err := os.Chtimes(path, before.ModTime(), before.ModTime()); err != nil {
		t.Fatal(err)
	}
	after, _ := os.Stat(path)
	if !sameFile(before, after) {
		t.Fatal("the in-place rewrite is visible to os.Stat; the test cannot show the 401 re-read")
	}
}

func TestFileToken(t *testing.T) {
	var logs bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&logs, nil))
	path := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(path, []byte("bha_first-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	src, err := NewFileToken(path, log)
	if err != nil {
		t.Fatal(err)
	}
	if got := src.Token(); got != "bha_first-token" {
		t.Fatalf("Token %q; want the file's token", got)
	}

	// A replaced file is read on the next call, without a 401.
	replaceFile(t, path, "bha_second-token\n")
	if got := src.Token(); got != "bha_second-token" {
		t.Errorf("after the file was replaced: Token %q; want bha_second-token", got)
	}

	// A rewrite Stat cannot see is read after a 401, once.
	rewriteInPlace(t, path, "bha_third--token\n")
	if got := src.Token(); got != "bha_second-token" {
		t.Fatalf("Token %q after an invisible rewrite; want the old token (the test relies on it)", got)
	}
	if got, ok := src.Refresh(context.Background(), "bha_second-token"); !ok || got != "bha_third--token" {
		t.Errorf("Refresh after 401: %q, %v; want bha_third--token, true", got, ok)
	}
	if got, ok := src.Refresh(context.Background(), "bha_third--token"); ok {
		t.Errorf("Refresh with an unchanged file: %q, true; want no other token", got)
	}
	// A stale rejection (another call already moved on) gets the current token.
	if got, ok := src.Refresh(context.Background(), "bha_first-token"); !ok || got != "bha_third--token" {
		t.Errorf("Refresh of an old token: %q, %v; want the current one", got, ok)
	}

	// A file that disappears keeps the last token, and says so once.
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if got := src.Token(); got != "bha_third--token" {
			t.Errorf("Token %q with the file gone; want the last token", got)
		}
	}
	if _, ok := src.Refresh(context.Background(), "bha_third--token"); ok {
		t.Error("Refresh with the file gone found a token")
	}
	if n := strings.Count(logs.String(), "token file cannot be read"); n != 1 {
		t.Errorf("%d warnings for the missing file; want 1\n%s", n, logs.String())
	}
	replaceFile(t, path, "bha_fourth-token")
	if got := src.Token(); got != "bha_fourth-token" {
		t.Errorf("Token %q after the file came back; want bha_fourth-token", got)
	}
	if strings.Contains(logs.String(), "bha_") {
		t.Errorf("the log shows a token: %s", logs.String())
	}

	if _, err := NewFileToken(filepath.Join(t.TempDir(), "missing"), nil); err == nil {
		t.Error("NewFileToken of a missing file: no error")
	}
}

// tokenScript is a token command that prints the content of a file and
// counts its runs in another.
type tokenScript struct {
	dir, command string
}

func newTokenScript(t *testing.T, token string) *tokenScript {
	t.Helper()
	s := &tokenScript{dir: t.TempDir()}
	s.set(t, token)
	s.command = `echo run >> '` + filepath.Join(s.dir, "runs") + `'; cat '` + filepath.Join(s.dir, "current") + `'`
	return s
}

func (s *tokenScript) set(t *testing.T, token string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(s.dir, "current"), []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
}

func (s *tokenScript) runs(t *testing.T) int {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(s.dir, "runs"))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	return strings.Count(string(raw), "run\n")
}

func TestCommandToken(t *testing.T) {
	var logs, stderr bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&logs, nil))
	s := newTokenScript(t, "  bha_first-token \n")
	src, err := NewCommandToken(context.Background(), s.command, &stderr, log)
	if err != nil {
		t.Fatal(err)
	}
	if got := src.Token(); got != "bha_first-token" || s.runs(t) != 1 {
		t.Fatalf("Token %q after %d runs; want the trimmed output after 1", got, s.runs(t))
	}
	if src.Token(); s.runs(t) != 1 {
		t.Error("Token ran the command again; want it run only at start and after a 401")
	}

	s.set(t, "bha_second-token")
	if got, ok := src.Refresh(context.Background(), "bha_first-token"); !ok || got != "bha_second-token" || s.runs(t) != 2 {
		t.Errorf("Refresh: %q, %v after %d runs; want bha_second-token, true after 2", got, ok, s.runs(t))
	}
	// The same token again: nothing else to try.
	if got, ok := src.Refresh(context.Background(), "bha_second-token"); ok || s.runs(t) != 3 {
		t.Errorf("Refresh printing the rejected token: %q, %v; want no other token", got, ok)
	}

	// Concurrent 401s of one token run the command once.
	s.set(t, "bha_third--token")
	var wg sync.WaitGroup
	got := make([]string, 8)
	for i := range got {
		wg.Go(func() {
			got[i], _ = src.Refresh(context.Background(), "bha_second-token")
		})
	}
	wg.Wait()
	for _, g := range got {
		if g != "bha_third--token" {
			t.Errorf("a concurrent refresh got %q; want bha_third--token", g)
		}
	}
	if n := s.runs(t); n != 4 {
		t.Errorf("%d runs after 8 concurrent refreshes; want 4 (one more)", n)
	}

	// A failing command keeps the last token; the log names neither it nor the output.
	src.command = "echo bha_printed-before-failing; echo helper-diagnostic >&2; exit 3"
	if _, ok := src.Refresh(context.Background(), "bha_third--token"); ok {
		t.Error("Refresh with a failing command found a token")
	}
	if src.Token() != "bha_third--token" {
		t.Errorf("Token %q after a failed refresh; want the last one", src.Token())
	}
	if !strings.Contains(logs.String(), "exit status 3") || strings.Contains(logs.String(), "bha_") {
		t.Errorf("log %s; want the exit status and no token", logs.String())
	}
	if !strings.Contains(stderr.String(), "helper-diagnostic") {
		t.Errorf("the command's stderr %q; want it passed through", stderr.String())
	}
}

func TestNewCommandTokenFails(t *testing.T) {
	cases := map[string]string{
		"exit 1":          "echo bha_secret-output; exit 1",
		"no output":       "true",
		"only whitespace": "printf ' \\n\\t'",
		"empty command":   " ",
	}
	for name, cmd := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := NewCommandToken(context.Background(), cmd, nil, nil)
			if err == nil || strings.Contains(err.Error(), "bha_secret-output") {
				t.Errorf("got %v; want an error that does not repeat the output", err)
			}
		})
	}
	t.Run("too slow", func(t *testing.T) {
		c := newCommandToken("sleep 5", nil, nil, 50*time.Millisecond)
		if _, err := c.run(context.Background()); err == nil || !strings.Contains(err.Error(), "no token within") {
			t.Errorf("got %v; want a timeout", err)
		}
	})
}

// fakeSource hands out tokens in order on each Refresh.
type fakeSource struct {
	mu        sync.Mutex
	current   string
	next      []string
	refreshes int
}

func (f *fakeSource) Token() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.current
}

func (f *fakeSource) Refresh(_ context.Context, _ string) (string, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.refreshes++
	if len(f.next) == 0 {
		return "", false
	}
	f.current, f.next = f.next[0], f.next[1:]
	return f.current, true
}

// TestCallRetriesOnceAfter401: a 401 is retried once with the source's new
// token; a still-bad token is the answer, never a loop.
func TestCallRetriesOnceAfter401(t *testing.T) {
	var requests atomic.Int32
	var bodies sync.Map
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := requests.Add(1)
		var b bytes.Buffer
		_, _ = b.ReadFrom(r.Body)
		bodies.Store(n, b.String())
		if r.Header.Get("Authorization") != "Bearer bha_good" {
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = w.Write([]byte(`{"error":"unauthorized","message":"x"}`))
			return
		}
		_, _ = w.Write([]byte(`{"schema_version":"x"}`))
	}))
	defer srv.Close()
	cases := []struct {
		name       string
		src        *fakeSource
		status     int
		requests   int32
		refreshes  int
		secondBody bool
	}{
		{"good token", &fakeSource{current: "bha_good", next: []string{"bha_unused"}}, 200, 1, 0, false},
		{"renewed", &fakeSource{current: "bha_old", next: []string{"bha_good"}}, 200, 2, 1, true},
		{"still bad", &fakeSource{current: "bha_old", next: []string{"bha_bad", "bha_good"}}, 401, 2, 1, true},
		{"nothing new", &fakeSource{current: "bha_old"}, 401, 1, 1, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			requests.Store(0)
			c, err := NewWithTokenSource(srv.URL, "demo", tc.src, nil)
			if err != nil {
				t.Fatal(err)
			}
			res, err := c.Call(context.Background(), Search, []byte(`{"query":"q"}`))
			if err != nil {
				t.Fatal(err)
			}
			if res.Status != tc.status || requests.Load() != tc.requests || tc.src.refreshes != tc.refreshes {
				t.Errorf("status %d after %d requests and %d refreshes; want %d after %d and %d",
					res.Status, requests.Load(), tc.src.refreshes, tc.status, tc.requests, tc.refreshes)
			}
			if b, _ := bodies.Load(int32(2)); tc.secondBody && b != `{"query":"q"}` {
				t.Errorf("the retry sent body %q; want the same body", b)
			}
		})
	}
	if _, err := NewWithTokenSource(srv.URL, "demo", nil, nil); err == nil {
		t.Error("a nil token source was accepted")
	}
}

// TestTransportReasons: a request without an answer says why.
func TestTransportReasons(t *testing.T) {
	hijack := func(linger bool) string {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			conn, _, err := http.NewResponseController(w).Hijack()
			if err != nil {
				t.Error(err)
				return
			}
			if linger {
				_ = conn.(*net.TCPConn).SetLinger(0) // close sends RST
			}
			_ = conn.Close()
		}))
		t.Cleanup(srv.Close)
		return srv.URL
	}
	closed := hostclienttest.RefusedURL(t)
	cases := []struct{ name, url, reason string }{
		{"refused", closed, "connection refused"},
		{"reset", hijack(true), "connection reset"},
		{"closed", hijack(false), "connection closed without an answer"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, _ := New(tc.url, "demo", "bha_secret-token", nil)
			_, err := c.Call(context.Background(), Search, []byte(`{"query":"q"}`))
			var te *TransportError
			if !errors.As(err, &te) || te.Reason != tc.reason || !errors.Is(err, ErrUnreachable) || strings.Contains(err.Error(), "secret") {
				t.Errorf("got %v; want a TransportError %q wrapping ErrUnreachable", err, tc.reason)
			}
		})
	}
}
