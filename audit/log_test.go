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
	if err := l.Disclose(ctx, sample()); err != nil {
		t.Fatal(err)
	}
	want := `{"time":"2026-03-01T12:00:00Z","request_id":"req-1","trace_id":"0af7651916cd43dd8448eb211c80319c","endpoint":"read","route":"order-assistant",` +
		`"session_id":"s-1","client_app_id":"app-a","principal_id":"u","on_behalf_of":"tenant:u","run_id":"c0ffee00-0000-4000-8000-000000000001","status":"ok",` +
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

// TestReopen: after a rename (logrotate) Reopen sends events to a new file;
// a path that cannot be opened keeps the old file, so nothing is lost.
func TestReopen(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "a.jsonl")
	l, err := Open(Options{File: path, Refuse: true})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	write := func() {
		t.Helper()
		if err := l.Disclose(context.Background(), sample()); err != nil {
			t.Fatal(err)
		}
	}
	lines := func(p string) int {
		raw, _ := os.ReadFile(p)
		return bytes.Count(raw, []byte("\n"))
	}
	write()
	os.Rename(path, path+".1")
	write()
	if err := l.Reopen(); err != nil {
		t.Fatal(err)
	}
	write()
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
	write() // still written, to the previous file
	if lines(path+".2") != 2 {
		t.Errorf("after a failed reopen: %d lines in the previous file; want 2", lines(path+".2"))
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
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 100 {
				l.Disclose(context.Background(), sample())
			}
		}()
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
