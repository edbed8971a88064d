package audit

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.opentelemetry.io/otel/trace"

	"github.com/bailinghub/knowledge-sidecar/corefacts"
	"github.com/bailinghub/knowledge-sidecar/internal/testkit"
	"github.com/bailinghub/knowledge-sidecar/knowledge"
	"github.com/bailinghub/knowledge-sidecar/protocol"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func sample() *knowledge.Disclosure {
	return &knowledge.Disclosure{
		Endpoint: knowledge.EndpointRead, Route: "order-assistant",
		Session: corefacts.Session{SessionID: "s-1", ClientAppID: "app-a", OnBehalfOf: "tenant:u", Principal: corefacts.Principal{ID: "u"}},
		RunID:   "c0ffee00-0000-4000-8000-000000000001", Status: protocol.StatusOK,
		Documents: []knowledge.DisclosedDocument{{DocID: 7, KBID: "faq", Revision: strings.Repeat("a", 64), Page: true, Start: 16384, End: 32000, BudgetExhausted: true}},
	}
}

// TestEventLine: the JSON line of a read, with the request id and trace id
// from the context, every SPEC §11 field and the page's range.
func TestEventLine(t *testing.T) {
	var out bytes.Buffer
	l, err := Open(Options{File: Stdout, Stdout: &out, Now: func() time.Time { return t0 }})
	if err != nil {
		t.Fatal(err)
	}
	tid, _ := trace.TraceIDFromHex("0af7651916cd43dd8448eb211c80319c")
	sid, _ := trace.SpanIDFromHex("b7ad6b7169203331")
	ctx := trace.ContextWithSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid}))
	ctx = context.WithValue(ctx, knowledge.RequestIDKey{}, "req-1")
	ctx = context.WithValue(ctx, knowledge.ClientAddressKey{}, "203.0.113.7")
	if err := l.Disclose(ctx, sample()); err != nil {
		t.Fatal(err)
	}
	want := `{"time":"2026-03-01T12:00:00Z","request_id":"req-1","trace_id":"0af7651916cd43dd8448eb211c80319c","endpoint":"read","route":"order-assistant",` +
		`"session_id":"s-1","client_app_id":"app-a","principal_id":"u","on_behalf_of":"tenant:u","client_address":"203.0.113.7","run_id":"c0ffee00-0000-4000-8000-000000000001","status":"ok",` +
		`"documents":[{"doc_id":7,"kb_id":"faq","revision":"` + strings.Repeat("a", 64) + `","range":[16384,32000],"budget_exhausted":true}]}` + "\n"
	if out.String() != want {
		t.Errorf("got  %s\nwant %s", out.String(), want)
	}
}

// TestEventQuery: a search's query is its length in UTF-16 units and, with a
// key, its HMAC-SHA256 — never the text; a refusal has documents [] and
// its code.
func TestEventQuery(t *testing.T) {
	const q = "退款窗口 🚀 secret-words"
	key := []byte(strings.Repeat("k", 32))
	for _, withKey := range []bool{false, true} {
		var out bytes.Buffer
		o := Options{File: Stdout, Stdout: &out}
		if withKey {
			o.QueryKey = key
		}
		l, err := Open(o)
		if err != nil {
			t.Fatal(err)
		}
		d := &knowledge.Disclosure{Endpoint: knowledge.EndpointSearch, Route: "r", Status: knowledge.DisclosureRefused,
			Error: protocol.CodeRateLimited, Query: q, HasQuery: true}
		if err := l.Disclose(context.Background(), d); err != nil {
			t.Fatal(err)
		}
		if strings.Contains(out.String(), "secret") || strings.Contains(out.String(), "退款") {
			t.Fatalf("the query is in the event: %s", out.String())
		}
		var e Event
		if err := json.Unmarshal(out.Bytes(), &e); err != nil {
			t.Fatal(err)
		}
		m := hmac.New(sha256.New, key)
		m.Write([]byte(q))
		wantMAC := ""
		if withKey {
			wantMAC = hex.EncodeToString(m.Sum(nil))
		}
		if e.QueryLength == nil || *e.QueryLength != 20 || e.QueryHMAC != wantMAC {
			t.Errorf("key %v: query_length %v query_hmac %q; want 20 (🚀 is 2 units) and %q", withKey, e.QueryLength, e.QueryHMAC, wantMAC)
		}
		if e.Error != "rate_limited" || e.Status != "refused" || e.Documents == nil || len(e.Documents) != 0 ||
			!strings.Contains(out.String(), `"documents":[]`) {
			t.Errorf("refusal: %s; want status refused, error rate_limited, documents []", out.String())
		}
	}
}

type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }

// TestFailurePolicy: an event that cannot be written is an error under
// refuse (the answer must not go) and nil under continue; both count it.
func TestFailurePolicy(t *testing.T) {
	for _, refuse := range []bool{true, false} {
		reg := prometheus.NewRegistry()
		l, err := Open(Options{File: Stdout, Stdout: failingWriter{}, Refuse: refuse, Registerer: reg})
		if err != nil {
			t.Fatal(err)
		}
		err = l.Disclose(context.Background(), sample())
		if refuse != errors.Is(err, ErrNotRecorded) {
			t.Errorf("refuse %v: got %v", refuse, err)
		}
		if got := testutil.ToFloat64(l.failures); got != 1 {
			t.Errorf("refuse %v: audit_failures_total %v; want 1", refuse, got)
		}
		if got := testutil.ToFloat64(l.events.WithLabelValues("read")); got != 0 {
			t.Errorf("refuse %v: audit_events_total{read} %v; want 0", refuse, got)
		}
	}
}

// TestClosedFile: after Close the file refuses events (a closed writer).
func TestClosedFile(t *testing.T) {
	l, err := Open(Options{File: filepath.Join(t.TempDir(), "a.jsonl"), Refuse: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Disclose(context.Background(), sample()); err != nil {
		t.Fatal(err)
	}
	l.Close()
	if err := l.Disclose(context.Background(), sample()); !errors.Is(err, ErrNotRecorded) {
		t.Errorf("closed file: got %v; want ErrNotRecorded", err)
	}
}

// TestOpenRefusesDirectory: a directory is not an audit file.
func TestOpenRefusesDirectory(t *testing.T) {
	if _, err := Open(Options{File: t.TempDir()}); err == nil {
		t.Fatal("Open of a directory: want an error")
	}
}

// lines counts the lines of the file at p.
func lines(p string) int {
	raw, _ := os.ReadFile(p)
	return bytes.Count(raw, []byte("\n"))
}

// openRefusing opens a refusing audit log at path on a clock standing at t0
// (closed at cleanup) and writes one event with write.
func openRefusing(t *testing.T, path string) (*Log, *testkit.Clock, func() error) {
	t.Helper()
	clk := testkit.NewClock(t0)
	l, err := Open(Options{File: path, Refuse: true, Now: clk.Now, Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	write := func() error { return l.Disclose(context.Background(), sample()) }
	if err := write(); err != nil {
		t.Fatal(err)
	}
	return l, clk, write
}

// refusedThenWritten checks that the next event is refused (the path is
// looked at again at most once a second), and that a second later one is
// written, alone, in a file at path; what names the situation.
func refusedThenWritten(t *testing.T, clk *testkit.Clock, write func() error, path, what string) {
	t.Helper()
	if err := write(); err == nil {
		t.Errorf("%s, within the second of the last look: want the event refused", what)
	}
	clk.Advance(time.Second)
	if err := write(); err != nil {
		t.Fatalf("%s, a second later: %v", what, err)
	}
	if lines(path) != 1 {
		t.Errorf("%s, a second later: %d lines; want 1", what, lines(path))
	}
}

// TestReopen: after a rename (logrotate) Reopen sends events to a new file.
// When the path cannot be opened and the old file was renamed away, the
// file is lost: events fail (refused) until the path can be opened again.
func TestReopen(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "a.jsonl")
	l, clk, write := openRefusing(t, path)
	os.Rename(path, path+".1")
	if err := write(); err != nil { // within the second: not looked at yet
		t.Fatal(err)
	}
	if err := l.Reopen(); err != nil {
		t.Fatal(err)
	}
	if err := write(); err != nil {
		t.Fatal(err)
	}
	if lines(path+".1") != 2 || lines(path) != 1 {
		t.Errorf("rotated %d lines, new %d; want 2 and 1", lines(path+".1"), lines(path))
	}

	os.Rename(path, path+".2")
	if err := os.Mkdir(path, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := l.Reopen(); err == nil {
		t.Fatal("Reopen onto a directory: want an error")
	}
	if err := write(); !errors.Is(err, ErrNotRecorded) || !errors.Is(err, ErrFileLost) {
		t.Errorf("after a failed reopen, the old file renamed away: got %v; want ErrNotRecorded (ErrFileLost)", err)
	}
	if lines(path+".2") != 1 {
		t.Errorf("after a failed reopen: %d lines in the previous file; want 1 (nothing more)", lines(path+".2"))
	}
	os.Remove(path)
	refusedThenWritten(t, clk, write, path, "lost file after the failed reopen")
}

// TestLostFile is issue 39's finding 7f: the audit file's directory is
// removed (or the file deleted) under the sidecar. Within a second the
// event still goes to the open file; after that the loss is found by the
// next event: a deleted file is created again at its path, a removed
// directory refuses events (refuse) until it is back.
func TestLostFile(t *testing.T) {
	base := t.TempDir()
	dir := filepath.Join(base, "audit")
	path := filepath.Join(dir, "a.jsonl")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	l, clk, write := openRefusing(t, path)

	os.Remove(path)
	clk.Advance(time.Second)
	if err := write(); err != nil {
		t.Fatalf("file deleted: %v; want it created again", err)
	}
	if lines(path) != 1 {
		t.Errorf("file deleted: %d lines at the path; want the event in a new file", lines(path))
	}

	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Second)
	for i := range 2 {
		if err := write(); !errors.Is(err, ErrNotRecorded) || !errors.Is(err, ErrFileLost) {
			t.Fatalf("directory removed, event %d: got %v; want ErrNotRecorded (ErrFileLost)", i, err)
		}
	}
	if got := testutil.ToFloat64(l.failures); got != 2 {
		t.Errorf("audit_failures_total: %v; want 2", got)
	}
	if err := l.Reopen(); err == nil {
		t.Error("Reopen with the directory removed: want an error")
	}

	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	refusedThenWritten(t, clk, write, path, "directory back")
}

// tornWriter writes the first cut bytes of its first Write and fails (a
// disk that fills up mid-line), then writes whole.
type tornWriter struct {
	out bytes.Buffer
	cut int
	n   int
}

func (w *tornWriter) Write(b []byte) (int, error) {
	w.n++
	if w.n == 1 {
		w.out.Write(b[:w.cut])
		return w.cut, errors.New("no space left on device")
	}
	return w.out.Write(b)
}

// TestTornEvent is issue 39's finding 7a: an event cut off mid-line is
// followed by a newline, so every event after it is a line of its own that
// JSON readers accept; an event that wrote nothing adds no empty line.
func TestTornEvent(t *testing.T) {
	for _, cut := range []int{0, 1, 40} {
		w := &tornWriter{cut: cut}
		l, err := Open(Options{File: Stdout, Stdout: w, Now: func() time.Time { return t0 }})
		if err != nil {
			t.Fatal(err)
		}
		for range 3 {
			l.Disclose(context.Background(), sample())
		}
		got := bytes.Split(bytes.TrimSuffix(w.out.Bytes(), []byte("\n")), []byte("\n"))
		whole := got
		if cut > 0 {
			if len(got) != 3 || json.Valid(got[0]) {
				t.Fatalf("cut %d: got %q; want the fragment and two events, one a line", cut, w.out.Bytes())
			}
			whole = got[1:]
		}
		if len(whole) != 2 {
			t.Fatalf("cut %d: got %q; want two whole events", cut, w.out.Bytes())
		}
		for _, line := range whole {
			if !json.Valid(line) {
				t.Errorf("cut %d: line %q is not JSON", cut, line)
			}
		}
	}
}

// TestConcurrentLines: concurrent events are whole lines, none lost.
func TestConcurrentLines(t *testing.T) {
	path := filepath.Join(t.TempDir(), "a.jsonl")
	l, err := Open(Options{File: path})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 100 {
				l.Disclose(context.Background(), sample())
			}
		})
	}
	wg.Wait()
	l.Close()
	raw, _ := os.ReadFile(path)
	n := 0
	for _, line := range bytes.Split(bytes.TrimSuffix(raw, []byte("\n")), []byte("\n")) {
		var e Event
		if err := json.Unmarshal(line, &e); err != nil {
			t.Fatalf("line %q: %v", line, err)
		}
		n++
	}
	if n != 800 || testutil.ToFloat64(l.events.WithLabelValues("read")) != 800 {
		t.Errorf("lines %d, audit_events_total{read} %v; want 800", n, testutil.ToFloat64(l.events.WithLabelValues("read")))
	}
}

func TestEndpointLabel(t *testing.T) {
	for in, want := range map[string]string{"search": "search", "read": "read", "turn": "turn",
		knowledge.MCPEndpoint(protocol.SearchTool): "mcp", knowledge.MCPEndpoint("fetch"): "mcp", "x": "other"} {
		if got := endpointLabel(in); got != want {
			t.Errorf("endpointLabel(%q) = %q; want %q", in, got, want)
		}
	}
}

// TestOTLP: with audit.otlp each event also goes to the OTLP collector as a
// log record (OTLP/HTTP, /v1/logs) carrying the event, flushed at Shutdown.
func TestOTLP(t *testing.T) {
	var (
		mu   sync.Mutex
		got  [][]byte
		path string
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		got, path = append(got, b), r.URL.Path
		mu.Unlock()
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))
	defer srv.Close()
	t.Setenv("OTEL_EXPORTER_OTLP_LOGS_ENDPOINT", srv.URL+"/v1/logs")
	t.Setenv("OTEL_EXPORTER_OTLP_LOGS_COMPRESSION", "none")
	p, err := NewOTLP(context.Background(), "knowledge-sidecar", "test")
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	l, err := Open(Options{File: Stdout, Stdout: &out, OTLP: p.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	d := sample()
	d.Query, d.HasQuery = "secret-question", true
	if err := l.Disclose(context.Background(), d); err != nil {
		t.Fatal(err)
	}
	if err := p.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	all := bytes.Join(got, nil)
	if path != "/v1/logs" || !bytes.Contains(all, []byte(EventName)) ||
		!bytes.Contains(all, bytes.TrimSuffix(out.Bytes(), []byte("\n"))) || bytes.Contains(all, []byte("secret-question")) {
		t.Errorf("OTLP export to %q (%d bytes): want the event's line and name, never the query", path, len(all))
	}
}
