package audit

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	otellog "go.opentelemetry.io/otel/log"

	"github.com/bailinghub/knowledge-sidecar/internal/prom"
	"github.com/bailinghub/knowledge-sidecar/knowledge"
)

// Stdout is the audit.file value that writes events to standard output.
const Stdout = "-"

// ErrNotRecorded is returned by Disclose, under the refuse policy, when an
// event could not be written: the answer must not be sent.
var ErrNotRecorded = errors.New("audit event not recorded")

// Options configures a Log.
type Options struct {
	// File is the JSON Lines file events are appended to, or Stdout.
	File string
	// Refuse makes Disclose fail when its event cannot be written
	// (audit.on_failure: refuse); otherwise the failure is counted and
	// logged and the answer goes.
	Refuse bool
	// QueryKey keys the HMAC-SHA256 of a search's query (nil: length only).
	QueryKey []byte
	// OTLP, when set, also receives each event as a log record.
	OTLP otellog.Logger
	// Stdout replaces os.Stdout for File "-" (tests).
	Stdout io.Writer
	// Now is the clock (default time.Now).
	Now func() time.Time
	// Logger receives write failures (never an event's content).
	Logger *slog.Logger
	// Registerer receives audit_events_total and audit_failures_total.
	Registerer prometheus.Registerer
}

// Log writes audit events. It implements knowledge.Auditor and is safe for
// concurrent use: each event is one Write of one line, under a lock, so
// lines never interleave and every event written is whole.
type Log struct {
	path   string
	refuse bool
	key    []byte
	otlp   otellog.Logger
	now    func() time.Time
	log    *slog.Logger

	events   *prometheus.CounterVec
	failures prometheus.Counter

	mu      sync.Mutex
	w       io.Writer
	f       *os.File // nil for standard output
	closed  bool     // Close was called: every later event fails
	failing bool     // the last write failed (the next success is logged)
	// torn: the last write ended inside its line (a disk filled up); the
	// next event starts with a newline, so the fragment stays a line of
	// its own and the events after it stay parseable.
	torn bool
	// checked is when f was last compared with the file at the path
	// (current); lost, when not nil, is why no file at the path can be
	// written: every event fails until the path can be opened again.
	checked time.Time
	lost    error
	buf     bytes.Buffer
	enc     *json.Encoder
}

// checkEvery is how often, at most, the file written to is compared with
// the file at the configured path (one fstat and one stat).
const checkEvery = time.Second

// endpoints is the closed label set of audit_events_total: every MCP tool
// and a refused MCP request is "mcp"; an endpoint outside the set is
// counted as "other".
var endpoints = []string{knowledge.EndpointSearch, knowledge.EndpointRead, knowledge.EndpointTurn, knowledge.EndpointMCP, "other"}

// Open opens o.File for appending (created 0600 if absent) and returns the
// Log writing to it.
func Open(o Options) (*Log, error) {
	l := &Log{path: o.File, refuse: o.Refuse, key: o.QueryKey, otlp: o.OTLP, now: o.Now, log: o.Logger}
	if l.now == nil {
		l.now = time.Now
	}
	if l.log == nil {
		l.log = slog.New(slog.DiscardHandler)
	}
	l.enc = json.NewEncoder(&l.buf)
	l.enc.SetEscapeHTML(false)
	if o.File == Stdout {
		l.w = o.Stdout
		if l.w == nil {
			l.w = os.Stdout
		}
	} else {
		f, err := openFile(o.File)
		if err != nil {
			return nil, err
		}
		l.f, l.w, l.checked = f, f, l.now()
	}
	l.events = prom.ClosedCounter("audit_events_total",
		"Disclosure audit events written, by endpoint (search, read, turn, mcp for every mcp:<tool>, other).", "endpoint", endpoints)
	l.failures = prom.Counter("audit_failures_total",
		"Disclosure audit events that could not be written (the answer was refused under audit.on_failure: refuse).")
	if o.Registerer != nil {
		l.events = prom.Register(o.Registerer, l.events)
		l.failures = prom.Register(o.Registerer, l.failures)
	}
	return l, nil
}

func openFile(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("audit.file: %w", err)
	}
	return f, nil
}

// ErrFileLost: the file events were written to is no longer the file at
// audit.file (deleted, its directory removed, renamed away) and the path
// cannot be opened again.
var ErrFileLost = errors.New("audit file lost")

// Reopen opens the file again by its path (after logrotate renamed it) and
// closes the old one; later events go to the new file. If the path cannot
// be opened, the old file is kept while it is still the file at the path
// (nothing is lost); when it is not (deleted, renamed away, its directory
// removed), the file is lost and every event fails until the path can be
// opened again. Either way the error is returned. A no-op for standard
// output.
func (l *Log) Reopen() error {
	if l == nil || l.f == nil {
		return nil
	}
	f, err := openFile(l.path)
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		if f != nil {
			f.Close()
		}
		return os.ErrClosed
	}
	l.checked = l.now()
	if err != nil {
		if !sameFile(l.f, l.path) {
			l.lost = fmt.Errorf("%w: %w", ErrFileLost, err)
		}
		return err
	}
	l.swap(f)
	return nil
}

// swap makes f the file events go to (under mu).
func (l *Log) swap(f *os.File) {
	old := l.f
	l.f, l.w, l.lost, l.torn = f, f, nil, false
	_ = old.Close()
}

// sameFile reports whether f is the file at path (same device and inode).
func sameFile(f *os.File, path string) bool {
	a, err := f.Stat()
	if err != nil {
		return false
	}
	b, err := os.Stat(path)
	return err == nil && os.SameFile(a, b)
}

// current makes sure, at most once per checkEvery, that events go to the
// file at the path: when the file written to is no longer there (deleted,
// its directory removed, renamed away without a reopen) the path is opened
// again; when it cannot be, the file is lost (ErrFileLost) and the event is
// not written. Under mu.
func (l *Log) current(now time.Time) error {
	switch {
	case l.f == nil:
		return nil
	case l.closed:
		return os.ErrClosed
	case now.Sub(l.checked) < checkEvery && !now.Before(l.checked):
		return l.lost
	}
	l.checked = now
	if sameFile(l.f, l.path) {
		l.lost = nil
		return nil
	}
	f, err := openFile(l.path)
	if err != nil {
		l.lost = fmt.Errorf("%w: %w", ErrFileLost, err)
		return l.lost
	}
	l.swap(f)
	l.log.Warn("audit: the file was no longer at its path; opened it again")
	return nil
}

// Close closes the file (not standard output). Later events fail.
func (l *Log) Close() error {
	if l == nil || l.f == nil {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closed = true
	return l.f.Close()
}

// Disclose writes d's event (knowledge.Auditor). It returns an error only
// under the refuse policy, when the event could not be written.
func (l *Log) Disclose(ctx context.Context, d *knowledge.Disclosure) error {
	now := l.now()
	e := eventOf(ctx, d, now, l.key)
	l.mu.Lock()
	err := l.current(now)
	var line []byte
	if err == nil {
		line, err = l.write(&e)
	}
	wasFailing := l.failing
	l.failing = err != nil
	l.mu.Unlock()
	if err != nil {
		l.failures.Inc()
		if !wasFailing {
			l.log.LogAttrs(ctx, slog.LevelError, "audit: event not written",
				slog.String("endpoint", e.Endpoint), slog.Bool("refused", l.refuse), slog.Any("error", err))
		}
		if l.refuse {
			return fmt.Errorf("%w: %w", ErrNotRecorded, err)
		}
		return nil
	}
	if wasFailing {
		l.log.Info("audit: events are written again")
	}
	l.events.WithLabelValues(endpointLabel(e.Endpoint)).Inc()
	if line != nil {
		l.emit(ctx, e, line)
	}
	return nil
}

// write encodes e and writes it as one line, with one Write (under mu):
// after a torn line the event starts with a newline. It returns the line
// for the OTLP copy (nil without one).
func (l *Log) write(e *Event) ([]byte, error) {
	l.buf.Reset()
	if l.torn {
		l.buf.WriteByte('\n')
	}
	if err := l.enc.Encode(e); err != nil { // one line, newline included
		return nil, err
	}
	b := l.buf.Bytes()
	n, err := l.w.Write(b)
	if n > 0 {
		l.torn = b[n-1] != '\n'
	}
	if err != nil {
		return nil, err
	}
	if l.otlp == nil {
		return nil, nil
	}
	return bytes.Clone(bytes.Trim(b, "\n")), nil
}

func endpointLabel(e string) string {
	switch {
	case e == knowledge.EndpointSearch, e == knowledge.EndpointRead, e == knowledge.EndpointTurn:
		return e
	case e == knowledge.EndpointMCP, strings.HasPrefix(e, knowledge.MCPEndpoint("")):
		return "mcp"
	}
	return "other"
}
