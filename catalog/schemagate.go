package catalog

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bailinghub/knowledge-sidecar/corefacts"
	"github.com/bailinghub/knowledge-sidecar/internal/prom"
)

// schemaCatalog is what SchemaGate guards: the catalog methods plus the
// startup schema probe (Q0). *SQLCatalog satisfies it.
type schemaCatalog interface {
	CheckSchema(ctx context.Context) error
	Usable() bool
	Route(ctx context.Context, key corefacts.RouteKey) (corefacts.Route, error)
	RouteBundle(ctx context.Context, key corefacts.RouteKey, kbIDs []string, docID int64) (corefacts.RouteBundle, error)
	RouteGate(ctx context.Context, route corefacts.RouteKey, s corefacts.Session) error
	KBEnabled(ctx context.Context, kbIDs []string) (map[string]bool, error)
	KBs(ctx context.Context, kbIDs []string) (map[string]corefacts.KB, error)
	ReadyKBs(ctx context.Context, kbIDs []string) (map[string]bool, error)
	Documents(ctx context.Context, docIDs []int64, kbIDs []string) (map[int64]corefacts.Document, error)
	Document(ctx context.Context, docID int64, kbIDs []string) (corefacts.Document, error)
	Run(ctx context.Context, runID string) (corefacts.Run, error)
	TaskPresence(ctx context.Context) (corefacts.TaskControlState, error)
	TaskSnapshot(ctx context.Context, sessionID, runID string) (corefacts.TaskSnapshot, error)
}

// SchemaGate keeps the knowledge features unavailable until the catalog's
// schema check has passed: pointed at the wrong database, or at a Core older
// than 0.5, the sidecar answers 503 knowledge_unavailable instead of running
// queries against tables that do not exist. While it fails the check is
// retried with backoff — by the first knowledge request at least 1s after the
// first failure, then 2s, 4s, … up to once per interval — so a replica that
// starts before its catalog serves within seconds of the catalog becoming
// reachable; once it passes it is not repeated. Readiness
// is not tied to it (pass-through keeps working); the state is the gauge
// knowledge_sidecar_catalog_schema_ok and the error log of the caller.
//
// The gate also owns the presence of Core 0.8's task control (tasks.go): it is
// probed with the schema check and re-probed every interval after it passed
// (never per request), so a Core migrated while the sidecar runs is enforced
// without a restart. The gauge knowledge_sidecar_task_control_state{state}
// says which state holds.
type SchemaGate struct {
	inner     schemaCatalog
	interval  time.Duration
	now       func() time.Time
	gauge     prometheus.Gauge
	taskGauge *prometheus.GaugeVec

	mu        sync.Mutex
	ok        bool
	lastErr   error
	next      time.Time               // the next schema check is due
	backoff   time.Duration           // wait after the next failed check (0: none failed yet)
	first     time.Duration           // the first wait (SchemaFirstBackoff)
	after     []func(context.Context) // AfterCheck hooks
	tasks     corefacts.TaskControlState
	tasksNext time.Time
}

// AfterCheck registers f to run after every schema check that passes (the
// start-up check and each re-check), under the gate's lock: f must not call
// the gate. A hook registered after a check runs from the next one on.
func (g *SchemaGate) AfterCheck(f func(context.Context)) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.after = append(g.after, f)
}

// SchemaFirstBackoff is the wait after the first failed schema check; each
// further failure doubles it, up to the gate's interval.
const SchemaFirstBackoff = time.Second

// NewSchemaGate wraps c; interval ≤ 0 means 30s, now nil means time.Now, reg
// nil means no gauge.
func NewSchemaGate(c schemaCatalog, interval time.Duration, now func() time.Time, reg prometheus.Registerer) *SchemaGate {
	if interval <= 0 {
		interval = 30 * time.Second
	}
	if now == nil {
		now = time.Now
	}
	g := &SchemaGate{inner: c, interval: interval, now: now, first: min(SchemaFirstBackoff, interval),
		gauge: prom.Gauge("catalog_schema_ok",
			"1 once the catalog schema check passed (Core's knowledge and agent tables are present).")}
	g.taskGauge = prom.GaugeVec("task_control_state",
		"1 for the presence state of Core's task-control tables (absent: no task rules; partial: TASK_UNAVAILABLE; enforced); all 0 until probed.", "state")
	if reg != nil {
		g.gauge = prom.Register(reg, g.gauge)
		g.taskGauge = prom.Register(reg, g.taskGauge)
	}
	for _, st := range corefacts.TaskControlStates {
		g.taskGauge.WithLabelValues(string(st)).Set(0)
	}
	return g
}

// Check runs the schema check now unless it already passed, and returns its
// result (a *SchemaError, or an error wrapping ErrUnavailable).
func (g *SchemaGate) Check(ctx context.Context) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.checkLocked(ctx)
}

func (g *SchemaGate) checkLocked(ctx context.Context) error {
	if g.ok {
		return nil
	}
	g.lastErr = g.inner.CheckSchema(ctx)
	g.ok = g.lastErr == nil
	if !g.ok {
		// Retry with backoff: 1s, 2s, 4s, … capped at the interval.
		if g.backoff == 0 {
			g.backoff = g.first
		}
		g.next = g.now().Add(g.backoff)
		g.backoff = min(2*g.backoff, g.interval)
	}
	if g.ok {
		g.gauge.Set(1)
		for _, f := range g.after {
			f(ctx)
		}
		g.probeTasksLocked(ctx)
	}
	return g.lastErr
}

// probeTasksLocked re-probes the task tables. A failed probe keeps the last
// known state (the request's own task query then meets the same outage).
func (g *SchemaGate) probeTasksLocked(ctx context.Context) {
	g.tasksNext = g.now().Add(g.interval)
	st, err := g.inner.TaskPresence(ctx)
	if err != nil {
		return
	}
	g.tasks = st
	for _, s := range corefacts.TaskControlStates {
		v := 0.0
		if s == st {
			v = 1
		}
		g.taskGauge.WithLabelValues(string(s)).Set(v)
	}
}

// TaskControlState is the last probed presence of Core's task-control tables
// (TaskControlUnknown before the first successful probe). It does no I/O: a
// probe command that wants a fresh answer calls (*SQLCatalog).TaskPresence.
func (g *SchemaGate) TaskControlState() corefacts.TaskControlState {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.tasks
}

// ErrTaskControlPartial wraps ErrTaskUnavailable: some but not all task
// tables are visible.
var ErrTaskControlPartial = fmt.Errorf("%w: task-control tables partially present", corefacts.ErrTaskUnavailable)

// TaskSnapshot applies the presence state: absent → a snapshot with Enforced
// false and no I/O; partial → ErrTaskControlPartial; enforced → the
// catalog's snapshot. Before the schema check passed, or while the state is
// unknown, it is unavailable (never "absent").
func (g *SchemaGate) TaskSnapshot(ctx context.Context, sessionID, runID string) (corefacts.TaskSnapshot, error) {
	if err := g.ready(ctx); err != nil {
		return corefacts.TaskSnapshot{}, err
	}
	g.mu.Lock()
	if !g.now().Before(g.tasksNext) {
		g.probeTasksLocked(ctx)
	}
	st := g.tasks
	g.mu.Unlock()
	switch st {
	case corefacts.TaskControlAbsent:
		return corefacts.TaskSnapshot{}, nil
	case corefacts.TaskControlPartial:
		return corefacts.TaskSnapshot{}, ErrTaskControlPartial
	case corefacts.TaskControlEnforced:
		return g.inner.TaskSnapshot(ctx, sessionID, runID)
	default:
		return corefacts.TaskSnapshot{}, fmt.Errorf("%w: task control not probed", corefacts.ErrUnavailable)
	}
}

// ErrSchemaUnverified wraps ErrUnavailable: the catalog schema check has not passed.
var ErrSchemaUnverified = fmt.Errorf("%w: catalog schema not verified", corefacts.ErrUnavailable)

// ready returns nil once the schema check passed, re-checking when due.
func (g *SchemaGate) ready(ctx context.Context) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.ok {
		return nil
	}
	if !g.now().Before(g.next) {
		if err := g.checkLocked(ctx); err == nil {
			return nil
		}
	}
	var se *SchemaError
	if errors.As(g.lastErr, &se) {
		return fmt.Errorf("%w: %v", ErrSchemaUnverified, se)
	}
	return ErrSchemaUnverified
}

// Usable is false until the schema check passed or while the inner catalog is unusable.
func (g *SchemaGate) Usable() bool {
	g.mu.Lock()
	ok := g.ok
	g.mu.Unlock()
	return ok && g.inner.Usable()
}

func (g *SchemaGate) Route(ctx context.Context, key corefacts.RouteKey) (corefacts.Route, error) {
	if err := g.ready(ctx); err != nil {
		return corefacts.Route{}, err
	}
	return g.inner.Route(ctx, key)
}

// RouteBundle passes the inner catalog's one-statement read on: the
// knowledge service only bundles through a catalog that has it, so a gate
// without it would cost every search one statement and every read two.
func (g *SchemaGate) RouteBundle(ctx context.Context, key corefacts.RouteKey, kbIDs []string, docID int64) (corefacts.RouteBundle, error) {
	if err := g.ready(ctx); err != nil {
		return corefacts.RouteBundle{}, err
	}
	return g.inner.RouteBundle(ctx, key, kbIDs, docID)
}

func (g *SchemaGate) RouteGate(ctx context.Context, route corefacts.RouteKey, s corefacts.Session) error {
	if err := g.ready(ctx); err != nil {
		return err
	}
	return g.inner.RouteGate(ctx, route, s)
}

func (g *SchemaGate) KBEnabled(ctx context.Context, kbIDs []string) (map[string]bool, error) {
	if err := g.ready(ctx); err != nil {
		return nil, err
	}
	return g.inner.KBEnabled(ctx, kbIDs)
}

func (g *SchemaGate) KBs(ctx context.Context, kbIDs []string) (map[string]corefacts.KB, error) {
	if err := g.ready(ctx); err != nil {
		return nil, err
	}
	return g.inner.KBs(ctx, kbIDs)
}

func (g *SchemaGate) ReadyKBs(ctx context.Context, kbIDs []string) (map[string]bool, error) {
	if err := g.ready(ctx); err != nil {
		return nil, err
	}
	return g.inner.ReadyKBs(ctx, kbIDs)
}

func (g *SchemaGate) Documents(ctx context.Context, docIDs []int64, kbIDs []string) (map[int64]corefacts.Document, error) {
	if err := g.ready(ctx); err != nil {
		return nil, err
	}
	return g.inner.Documents(ctx, docIDs, kbIDs)
}

func (g *SchemaGate) Document(ctx context.Context, docID int64, kbIDs []string) (corefacts.Document, error) {
	if err := g.ready(ctx); err != nil {
		return corefacts.Document{}, err
	}
	return g.inner.Document(ctx, docID, kbIDs)
}

func (g *SchemaGate) Run(ctx context.Context, runID string) (corefacts.Run, error) {
	if err := g.ready(ctx); err != nil {
		return corefacts.Run{}, err
	}
	return g.inner.Run(ctx, runID)
}
