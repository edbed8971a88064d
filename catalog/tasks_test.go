package catalog_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/bailinghub/knowledge-sidecar/catalog"
	"github.com/bailinghub/knowledge-sidecar/corefacts"
	"github.com/bailinghub/knowledge-sidecar/internal/testkit"
	"github.com/bailinghub/knowledge-sidecar/internal/testkit/testdb"
	"github.com/bailinghub/knowledge-sidecar/knowledge"
)

var _ knowledge.Tasks = (*catalog.SchemaGate)(nil)

// TaskPresence against MariaDB, as the read-only user: absent, partial
// (some tables; or migration 062 recorded while the user cannot see the
// tables), enforced.
func TestTaskPresence(t *testing.T) {
	ctx := context.Background()
	cases := []struct {
		name    string
		prepare func(t *testing.T, db *testdb.DB)
		want    corefacts.TaskControlState
	}{
		{"pre-0.8 Core", func(*testing.T, *testdb.DB) {}, corefacts.TaskControlAbsent},
		{"three of six tables", func(t *testing.T, db *testdb.DB) {
			db.InstallTaskControl(t, "bz_agent_tasks", "bz_agent_task_members", "bz_agent_task_runs")
		}, corefacts.TaskControlPartial},
		{"migration 062 recorded, task grants missing", func(t *testing.T, db *testdb.DB) {
			db.Exec(t, "INSERT INTO bz_schema_migrations (filename) VALUES (?)", testdb.TaskMigration)
		}, corefacts.TaskControlPartial},
		{"all six with the documented grants", func(t *testing.T, db *testdb.DB) { db.InstallTaskControl(t) }, corefacts.TaskControlEnforced},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			db := testdb.New(t)
			tc.prepare(t, db)
			got, err := openSQL(t, db, nil).TaskPresence(ctx)
			if err != nil || got != tc.want {
				t.Errorf("got %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

// TaskSnapshot reads the marker, binding, run, task, members and each
// member's rows with the exact grants, ids lower-cased.
func TestTaskSnapshot(t *testing.T) {
	ctx := context.Background()
	db := testdb.New(t)
	db.InstallTaskControl(t)
	seedTask(t, db, "paused", `"2030-01-01T00:00:00.000Z"`,
		"f0000000-0000-4000-8000-00000000000f", "app-gone", "conv-z") // a member without session or client rows
	const run = seedRun
	// kb-multi's fixture switches direct tools off; a task workspace has them on.
	db.Exec(t, `UPDATE bz_routes SET tools = '{"agent_direct":{"enabled":true}}', agent_client = NULL WHERE route_key = ?`, testdb.RouteMulti)
	c := openSQL(t, db, nil)

	snap, err := c.TaskSnapshot(ctx, testdb.SessionA, "E0000000-0000-4000-8000-000000000001")
	if err != nil {
		t.Fatalf("TaskSnapshot: %v", err)
	}
	if !snap.Enforced || !snap.Marked || !snap.Bound || snap.Run == nil || snap.Task == nil || len(snap.Members) != 2 {
		t.Fatalf("got %+v; want enforced, marked, bound, with run, task and 2 members", snap)
	}
	if snap.Run.Conversation != "conv-a" || !snap.Run.Active() || snap.Task.State != "paused" {
		t.Errorf("run %+v task state %q; want conv-a, active, paused", *snap.Run, snap.Task.State)
	}
	if exp := snap.Task.Expiry; !snap.Task.PolicyValid || exp == nil || !exp.Equal(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)) {
		t.Errorf("policy: got valid %v, expiry %v; want valid, 2030-01-01", snap.Task.PolicyValid, exp)
	}
	now := time.Date(2026, 1, 2, 0, 0, 0, 0, time.UTC) // before the fixtures' refresh expiry
	if !snap.Members[0].Valid(now) {
		t.Errorf("member A (session, client and route rows of the fixtures): got invalid at %v; want valid", now)
	}
	if snap.Members[1].Valid(now) {
		t.Error("member without session and client rows: got valid; want invalid")
	}
	if snap.Members[0].Valid(time.Date(2026, 2, 1, 0, 0, 0, 0, time.UTC)) {
		t.Error("member A after its session's refresh expiry: got valid; want invalid")
	}

	// Another session: no marker, the run is not bound to it.
	snap, err = c.TaskSnapshot(ctx, testdb.SessionB, run)
	if err != nil || snap.Marked || snap.Bound || snap.Task != nil || len(snap.Members) != 0 {
		t.Errorf("session B: got %+v, %v; want nothing", snap, err)
	}
	// No run: the marker only.
	snap, err = c.TaskSnapshot(ctx, testdb.SessionA, "")
	if err != nil || !snap.Marked || snap.Bound {
		t.Errorf("no run: got %+v, %v; want marked, unbound", snap, err)
	}
	// A refused column: ErrTaskUnavailable, not an outage.
	ro := roUser(t, db)
	db.Exec(t, "REVOKE SELECT (policy_json) ON `"+db.Name+"`.bz_agent_tasks FROM "+ro)
	_, err = c.TaskSnapshot(ctx, testdb.SessionA, run)
	if !errors.Is(err, corefacts.ErrTaskUnavailable) || errors.Is(err, corefacts.ErrUnavailable) {
		t.Errorf("refused column: got %v; want ErrTaskUnavailable and not ErrUnavailable", err)
	}
}

func roUser(t *testing.T, db *testdb.DB) string {
	t.Helper()
	cfg, err := mysql.ParseDSN(db.ReadOnlyDSN)
	if err != nil {
		t.Fatal(err)
	}
	return "'" + cfg.User + "'@'%'"
}

func TestTaskExpiry(t *testing.T) {
	cases := []struct {
		policy string
		want   string // "" none, "invalid", or an RFC 3339 instant
	}{
		{`{"maxWriteCalls":null,"maxConcurrent":1,"expiresAt":null}`, ""},
		{`{"maxWriteCalls":0,"maxConcurrent":10000,"expiresAt":"2026-03-01T10:00:00Z"}`, "2026-03-01T10:00:00Z"},
		{`{"maxWriteCalls":1000000000,"maxConcurrent":1,"expiresAt":"2026-03-01T10:00:00.5Z"}`, "2026-03-01T10:00:00.5Z"},
		{`{"maxWriteCalls":null,"maxConcurrent":0,"expiresAt":null}`, "invalid"},
		{`{"maxWriteCalls":-1,"maxConcurrent":1,"expiresAt":null}`, "invalid"},
		{`{"maxWriteCalls":1.5,"maxConcurrent":1,"expiresAt":null}`, "invalid"},
		{`{"maxConcurrent":1,"expiresAt":null}`, "invalid"},
		{`{"maxWriteCalls":null,"maxConcurrent":1}`, "invalid"},
		{`{"maxWriteCalls":null,"maxConcurrent":1,"expiresAt":"2026-03-01 10:00:00"}`, "invalid"},
		{`{"maxWriteCalls":null,"maxConcurrent":1,"expiresAt":"2026-02-30T10:00:00Z"}`, "invalid"},
		{`{"maxWriteCalls":null,"maxConcurrent":1,"expiresAt":"0999-01-01T00:00:00Z"}`, "invalid"},
		{`not json`, "invalid"},
		{`[]`, "invalid"},
	}
	for _, tc := range cases {
		got, err := catalog.TaskExpiry([]byte(tc.policy))
		var s string
		switch {
		case err != nil:
			s = "invalid"
		case got != nil:
			s = got.Format(time.RFC3339Nano)
		}
		if s != tc.want {
			t.Errorf("TaskExpiry(%s): got %q (%v); want %q", tc.policy, s, err, tc.want)
		}
	}
}

// The gate probes presence with the schema check and again every interval;
// absent means no I/O and no rules, partial fails closed, unknown is
// unavailable (never absent).
func TestSchemaGateTaskPresence(t *testing.T) {
	ctx := context.Background()
	mem := &taskMem{schemaMem: schemaMem{MemCatalog: catalog.NewMemCatalog()}, state: corefacts.TaskControlAbsent}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	reg := prometheus.NewRegistry()
	g := catalog.NewSchemaGate(mem, time.Minute, func() time.Time { return now }, reg)
	if st := g.TaskControlState(); st != corefacts.TaskControlUnknown {
		t.Errorf("before the check: got %q; want unknown", st)
	}
	if err := g.Check(ctx); err != nil {
		t.Fatal(err)
	}
	snap, err := g.TaskSnapshot(ctx, "s", "")
	if err != nil || snap.Enforced || mem.snapshots != 0 {
		t.Errorf("absent: got %+v, %v after %d snapshots; want not enforced, no I/O", snap, err, mem.snapshots)
	}
	mem.state = corefacts.TaskControlPartial
	if _, err := g.TaskSnapshot(ctx, "s", ""); err != nil {
		t.Errorf("partial before the interval: got %v; want the cached absent", err)
	}
	now = now.Add(time.Minute)
	if _, err := g.TaskSnapshot(ctx, "s", ""); !errors.Is(err, corefacts.ErrTaskUnavailable) {
		t.Errorf("partial: got %v; want ErrTaskUnavailable", err)
	}
	if got := testkit.Metric(t, reg, "knowledge_sidecar_task_control_state", map[string]string{"state": "partial"}); got != 1 {
		t.Errorf("task_control_state{partial}: got %v; want 1", got)
	}
	mem.state = corefacts.TaskControlEnforced
	now = now.Add(time.Minute)
	if snap, err := g.TaskSnapshot(ctx, "s", ""); err != nil || !snap.Enforced || mem.snapshots != 1 {
		t.Errorf("enforced: got %+v, %v after %d snapshots; want the catalog's snapshot", snap, err, mem.snapshots)
	}
	if got := testkit.Metric(t, reg, "knowledge_sidecar_task_control_state", map[string]string{"state": "partial"}); got != 0 {
		t.Errorf("task_control_state{partial} once enforced: got %v; want 0", got)
	}

	// A gate whose first probe fails is unavailable, not absent.
	down := &taskMem{schemaMem: schemaMem{MemCatalog: catalog.NewMemCatalog()}, err: corefacts.ErrUnavailable}
	g2 := catalog.NewSchemaGate(down, time.Minute, func() time.Time { return now }, nil)
	if err := g2.Check(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := g2.TaskSnapshot(ctx, "s", ""); !errors.Is(err, corefacts.ErrUnavailable) {
		t.Errorf("presence never probed: got %v; want ErrUnavailable", err)
	}
}

// taskMem is a schemaMem whose task presence the test sets.
type taskMem struct {
	schemaMem
	state     corefacts.TaskControlState
	err       error
	snapshots int
}

func (m *taskMem) TaskPresence(context.Context) (corefacts.TaskControlState, error) {
	return m.state, m.err
}

func (m *taskMem) TaskSnapshot(context.Context, string, string) (corefacts.TaskSnapshot, error) {
	m.snapshots++
	return corefacts.TaskSnapshot{Enforced: true}, nil
}

// BenchmarkTaskSnapshot compares the task query with the run query (Q5), the
// catalog round trip it is meant to cost at most: unmanaged (marker only),
// and a managed run of a two-member task.
func BenchmarkTaskSnapshot(b *testing.B) {
	ctx := context.Background()
	db := testdb.New(b)
	db.InstallTaskControl(b)
	seedTask(b, db, "active", "null", testdb.SessionB, testdb.AppB, "conv-b")
	const run = seedRun
	c, err := catalog.Open(catalog.Options{DSN: db.ReadOnlyDSN})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	b.Run("run query (Q5)", func(b *testing.B) {
		for b.Loop() {
			if _, err := c.Run(ctx, run); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("task, unmanaged", func(b *testing.B) {
		for b.Loop() {
			if _, err := c.TaskSnapshot(ctx, testdb.SessionB, ""); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("task, managed run", func(b *testing.B) {
		for b.Loop() {
			if s, err := c.TaskSnapshot(ctx, testdb.SessionA, run); err != nil || len(s.Members) != 2 {
				b.Fatal(s, err)
			}
		}
	})
}

// The task and run seedTask inserts.
const (
	seedTaskID = "70000000-0000-4000-8000-000000000001"
	seedRun    = "e0000000-0000-4000-8000-000000000001"
)

// seedTask inserts a task in state with expiresAt (JSON), member A (app-a,
// kb-multi, conv-a) and a second member, A's marker, and A's context_ready
// run seedRun bound to the task.
func seedTask(tb testing.TB, db *testdb.DB, state, expiresAt, session2, client2, conv2 string) {
	tb.Helper()
	db.Exec(tb, `INSERT INTO bz_agent_tasks (task_id, create_key, create_hash, scope_hash, state, revision, ledger_sequence, policy_json,
		created_by, created_at, updated_at) VALUES (?, REPEAT('a', 64), REPEAT('b', 64), REPEAT('c', 64), ?, 2, 3,
		CONCAT('{"maxWriteCalls":null,"maxConcurrent":2,"expiresAt":', ?, '}'), 'admin', '2026-01-01', '2026-01-01')`, seedTaskID, state, expiresAt)
	db.Exec(tb, `INSERT INTO bz_agent_task_members VALUES (?, REPEAT('1', 64), ?, REPEAT('e', 64), ?, ?, 'conv-a', '["x"]'),
		(?, REPEAT('2', 64), ?, REPEAT('e', 64), ?, ?, ?, '["x"]')`,
		seedTaskID, testdb.SessionA, testdb.AppA, testdb.RouteMulti, seedTaskID, session2, client2, testdb.RouteMulti, conv2)
	db.Exec(tb, `INSERT INTO bz_agent_task_enforcements VALUES (?, ?, 'admin', '2026-01-01')`, testdb.SessionA, seedTaskID)
	db.Exec(tb, `INSERT INTO bz_agent_client_runs (run_id, session_id, client_app_id, route_key, client_conversation_id, status,
		created_at, updated_at) VALUES (?, ?, ?, ?, 'conv-a', 'context_ready', '2026-01-01', '2026-01-01')`,
		seedRun, testdb.SessionA, testdb.AppA, testdb.RouteMulti)
	db.Exec(tb, `INSERT INTO bz_agent_task_runs VALUES (?, ?, ?, '2026-01-01')`, seedRun, seedTaskID, testdb.SessionA)
}

// The task statement runs on every managed search and read page, so its plan
// is part of its contract: every table is reached through a key (no scan),
// and it needs no on-disk temporary table. An ORDER BY on the join did: its
// JSON columns are TEXT, so MariaDB sorted through an Aria table per request,
// doubling the statement's server time and giving it a long tail.
func TestTaskStatementPlan(t *testing.T) {
	ctx := context.Background()
	db := testdb.New(t)
	db.InstallTaskControl(t)
	seedTask(t, db, "active", "null", testdb.SessionB, testdb.AppB, "conv-b")
	args := []any{testdb.SessionA, seedRun, testdb.SessionA}
	conn, err := db.Admin.Conn(ctx) // session status counters are per connection
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()

	diskTables := func() int64 {
		var name string
		var n int64
		if err := conn.QueryRowContext(ctx, "SHOW SESSION STATUS LIKE 'Created_tmp_disk_tables'").Scan(&name, &n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	before := diskTables()
	rows, err := conn.QueryContext(ctx, catalog.QTaskSnapshot, args...)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for rows.Next() {
		n++
	}
	if err := rows.Close(); err != nil || n != 2 {
		t.Fatalf("rows %d, %v; want the 2 members", n, err)
	}
	if d := diskTables() - before; d != 0 {
		t.Errorf("the task statement created %d on-disk temporary tables; want 0", d)
	}

	rows, err = conn.QueryContext(ctx, "EXPLAIN "+catalog.QTaskSnapshot, args...)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	cols, _ := rows.Columns()
	for rows.Next() {
		vals := make([]sql.NullString, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			t.Fatal(err)
		}
		row := map[string]string{}
		for i, c := range cols {
			row[c] = vals[i].String
		}
		if ty := row["type"]; ty == "ALL" || ty == "index" {
			t.Errorf("table %s is scanned (type %s); every task table must be reached through a key", row["table"], ty)
		}
		if strings.Contains(row["Extra"], "temporary") || strings.Contains(row["Extra"], "filesort") {
			t.Errorf("table %s: %s; the statement must not sort or materialize", row["table"], row["Extra"])
		}
	}
}
