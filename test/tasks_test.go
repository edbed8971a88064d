package test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/bailinghub/knowledge-sidecar/internal/fakecore"
	"github.com/bailinghub/knowledge-sidecar/internal/testkit"
	"github.com/bailinghub/knowledge-sidecar/internal/testkit/testdb"
)

// Managed tasks (SPEC §4a) end to end: the sidecar, the fake Core and the
// real MariaDB with the six task tables of internal/coredb/tasks.sql, read by the read-only
// user holding exactly the GRANTs of docs/core-contract.md (base + Core 0.8).

const (
	taskConvA   = "conv-a"
	taskConvB   = "conv-b"
	taskMessage = "The governed task operation could not be accepted."
)

// taskWorld is a kworld migrated to Core 0.8 whose sessions A and B can pass
// Core's member revalidation: refresh expiry far ahead, kb-multi a direct-tool
// agent workspace.
type taskWorld struct {
	*kworld
	n int // ids handed out
}

func newTaskWorld(t *testing.T, o fakecore.Options) *taskWorld {
	t.Helper()
	kw := newKWorld(t, o)
	kw.DB.InstallTaskControl(t)
	tw := &taskWorld{kworld: kw}
	tw.exec(t, "UPDATE bz_agent_sessions SET refresh_expires_at = '2099-01-01 00:00:00'")
	tw.exec(t, `UPDATE bz_routes SET tools = '{"agent_direct":{"enabled":true}}', agent_client = NULL WHERE route_key = ?`, testdb.RouteMulti)
	return tw
}

func (tw *taskWorld) exec(t *testing.T, q string, args ...any) { t.Helper(); tw.DB.Exec(t, q, args...) }

// uuid hands out a fresh lower-case UUID with a readable prefix.
func (tw *taskWorld) uuid(prefix byte) string {
	tw.n++
	return fmt.Sprintf("%c%07x-0000-4000-8000-%012x", prefix, tw.n, tw.n)
}

// task is one managed task: members A (app-a, kb-multi, conv-a) and B (app-b,
// kb-multi, conv-b), both sessions marked, and A's run bound to it.
type task struct {
	ID, Run string
}

// newTask inserts an active task (policy without expiry), its members, the
// markers and a context_ready run of session A bound to it.
func (tw *taskWorld) newTask(t *testing.T) task {
	t.Helper()
	tk := task{ID: tw.uuid('7'), Run: tw.uuid('e')}
	tw.exec(t, `INSERT INTO bz_agent_tasks (task_id, create_key, create_hash, scope_hash, state, revision, ledger_sequence,
		policy_json, created_by, created_at, updated_at) VALUES (?, SHA2(?, 256), REPEAT('c', 64), REPEAT('d', 64), 'active', 1, 1,
		'{"maxWriteCalls":null,"maxConcurrent":1,"expiresAt":null}', 'admin', '2026-01-01 00:00:00.000', '2026-01-01 00:00:00.000')`,
		tk.ID, tk.ID)
	for _, m := range []struct{ session, client, conv string }{
		{testdb.SessionA, testdb.AppA, taskConvA}, {testdb.SessionB, testdb.AppB, taskConvB},
	} {
		tw.addMember(t, tk.ID, m.session, m.client, testdb.RouteMulti, m.conv)
		tw.exec(t, `INSERT INTO bz_agent_task_enforcements (session_id, first_task_id, created_by, created_at)
			VALUES (?, ?, 'admin', '2026-01-01 00:00:00.000') ON DUPLICATE KEY UPDATE session_id = session_id`, m.session, tk.ID)
	}
	tw.exec(t, `INSERT INTO bz_agent_client_runs (run_id, session_id, client_app_id, route_key, client_conversation_id, status,
		created_at, updated_at) VALUES (?, ?, ?, ?, ?, 'context_ready', '2026-01-01 00:00:00', '2026-01-01 00:00:00')`,
		tk.Run, testdb.SessionA, testdb.AppA, testdb.RouteMulti, taskConvA)
	tw.exec(t, `INSERT INTO bz_agent_task_runs (run_id, task_id, session_id, created_at) VALUES (?, ?, ?, '2026-01-01 00:00:00.000')`,
		tk.Run, tk.ID, testdb.SessionA)
	return tk
}

func (tw *taskWorld) addMember(t *testing.T, taskID, session, client, route, conv string) {
	t.Helper()
	tw.exec(t, `INSERT INTO bz_agent_task_members (task_id, member_key, session_id, identity_hash, client_app_id, route_key,
		client_conversation_id, allowed_tools_json) VALUES (?, SHA2(CONCAT(?, ?, ?), 256), ?, REPEAT('e', 64), ?, ?, ?, '["lookup_order"]')`,
		taskID, session, route, conv, session, client, route, conv)
}

// issued is what a host holds from inside a task: a ref of the big document
// and the cursor of its second page.
type issued struct{ ref, cursor string }

func (tw *taskWorld) issue(t *testing.T, sc *ksidecar, run string) issued {
	t.Helper()
	_, h := tw.mustSearch(t, sc, testdb.RouteMulti, tw.TokenA, map[string]any{"query": testdb.BigDocUnit, "run_id": run}, testdb.DocBigTitle)
	r, a := tw.read(t, sc, testdb.RouteMulti, tw.TokenA, map[string]any{"ref": h.Ref, "run_id": run, "max_bytes": 4096})
	if r.Status != 200 || a.NextCursor == nil {
		t.Fatalf("first page inside the task: got %d %s; want 200 with a next_cursor", r.Status, clip(string(r.Body)))
	}
	return issued{ref: h.Ref, cursor: *a.NextCursor}
}

// taskCall is one of the three requests every rule is checked on.
type taskCall struct {
	name string
	do   func(t *testing.T, tw *taskWorld, sc *ksidecar, route, run string, is issued) kresp
}

var taskCalls = []taskCall{
	{"search", func(t *testing.T, tw *taskWorld, sc *ksidecar, route, run string, _ issued) kresp {
		r, _ := tw.search(t, sc, route, tw.TokenA, withRun(map[string]any{"query": testdb.BigDocUnit}, run))
		return r
	}},
	{"read of an earlier ref", func(t *testing.T, tw *taskWorld, sc *ksidecar, route, run string, is issued) kresp {
		r, _ := tw.read(t, sc, route, tw.TokenA, withRun(map[string]any{"ref": is.ref, "max_bytes": 4096}, run))
		return r
	}},
	{"read with a cursor", func(t *testing.T, tw *taskWorld, sc *ksidecar, route, run string, is issued) kresp {
		r, _ := tw.read(t, sc, route, tw.TokenA, withRun(map[string]any{"ref": is.ref, "cursor": is.cursor, "max_bytes": 4096}, run))
		return r
	}},
}

func withRun(m map[string]any, run string) map[string]any {
	if run != "" {
		m["run_id"] = run
	}
	return m
}

// wantTaskAnswer checks a TASK_* answer: status, code and Core's message.
func wantTaskAnswer(t *testing.T, what string, r kresp, status int, code string) {
	t.Helper()
	var e struct{ Error, Message string }
	_ = json.Unmarshal(r.Body, &e)
	if r.Status != status || e.Error != code || e.Message != taskMessage {
		t.Errorf("%s: got %d %s; want %d {\"error\":%q,\"message\":%q}", what, r.Status, clip(string(r.Body)), status, code, taskMessage)
	}
}

// TestTaskRules: one row per SPEC §4a rule × {search, read of an earlier ref,
// read with a cursor}. Every ref and cursor is issued inside an active task
// first; the row's change to Core's tables then applies to all three.
func TestTaskRules(t *testing.T) {
	tw := newTaskWorld(t, fakecore.Options{SystemInfo: true})
	sc := tw.start(t, kopts{FeatureOptions: FeatureOptions{}})
	reg := sc.Registry

	type row struct {
		name string
		// sql changes Core's tables after the refs were issued; {task},
		// {run}, {sessionA} and {sessionB} stand for those ids.
		sql    []string
		change func(t *testing.T, tk task)
		// run is the run_id of the three requests (default: the task's run;
		// "-" for none).
		run    func(tk task) string
		route  string // default kb-multi
		status int    // 200: allowed
		code   string
	}
	runOf := func(tk task) string { return tk.Run }
	rows := []row{
		{name: "active task, caller a member", status: 200},
		{name: "marked session, no run_id", run: func(task) string { return "-" }, status: 409, code: "TASK_REQUIRED"},
		{name: "marked session, run_id not bound to a task", run: func(task) string { return testdb.RunActive }, status: 409, code: "TASK_REQUIRED"},
		{name: "run_id in upper case is lower-cased", run: func(tk task) string { return strings.ToUpper(tk.Run) }, status: 200},
		{name: "unmarked session, unbound run (unmanaged)", sql: []string{`DELETE FROM bz_agent_task_enforcements WHERE session_id = '{sessionA}'`, `DELETE FROM bz_agent_task_runs WHERE run_id = '{run}'`}, status: 200},
		{name: "unmarked session, unbound completed run: §4 run rules", sql: []string{`DELETE FROM bz_agent_task_enforcements WHERE session_id = '{sessionA}'`, `DELETE FROM bz_agent_task_runs WHERE run_id = '{run}'`, `UPDATE bz_agent_client_runs SET status = 'completed', completed_at = '2026-01-01 00:05:00' WHERE run_id = '{run}'`}, status: 409, code: "run_not_active"},
		{name: "bound run: run row missing", sql: []string{`DELETE FROM bz_agent_client_runs WHERE run_id = '{run}'`}, status: 409, code: "TASK_RECORD_INVALID"},
		{name: "bound run: run session is not the caller", sql: []string{`UPDATE bz_agent_client_runs SET session_id = '{sessionB}' WHERE run_id = '{run}'`}, status: 409, code: "TASK_RECORD_INVALID"},
		{name: "bound run: task row missing", sql: []string{`DELETE FROM bz_agent_tasks WHERE task_id = '{task}'`}, status: 409, code: "TASK_RECORD_INVALID"},
		{name: "bound run: task state unknown", sql: []string{`UPDATE bz_agent_tasks SET state = 'expired' WHERE task_id = '{task}'`}, status: 409, code: "TASK_RECORD_INVALID"},
		{name: "bound run: no member with the run's client, route and conversation", sql: []string{`UPDATE bz_agent_client_runs SET client_conversation_id = 'conv-gone' WHERE run_id = '{run}'`}, status: 409, code: "TASK_RECORD_INVALID"},
		{name: "bound run: stored policy does not parse", sql: []string{`UPDATE bz_agent_tasks SET policy_json = '{"maxConcurrent":0}' WHERE task_id = '{task}'`}, status: 400, code: "TASK_INVALID_INPUT"},
		{name: "bound run: run client is not the caller's", sql: []string{`UPDATE bz_agent_client_runs SET client_app_id = 'app-b', client_conversation_id = 'conv-b' WHERE run_id = '{run}'`}, status: 409, code: "TASK_BINDING_CONFLICT"},
		{name: "bound run: run route is not the URL route", change: func(t *testing.T, tk task) {
			tw.addMember(t, tk.ID, testdb.SessionA, testdb.AppA, testdb.RouteLegacy, taskConvA)
			tw.exec(t, "UPDATE bz_agent_client_runs SET route_key = ? WHERE run_id = ?", testdb.RouteLegacy, tk.Run)
		}, status: 409, code: "TASK_BINDING_CONFLICT"},
		{name: "bound run not context_ready", sql: []string{`UPDATE bz_agent_client_runs SET status = 'preparing' WHERE run_id = '{run}'`}, status: 409, code: "TASK_RUN_INACTIVE"},
		{name: "bound run completed", sql: []string{`UPDATE bz_agent_client_runs SET status = 'completed', completed_at = '2026-01-01 00:05:00' WHERE run_id = '{run}'`}, status: 409, code: "TASK_RUN_INACTIVE"},
		{name: "caller's membership removed", sql: []string{`UPDATE bz_agent_task_members SET session_id = 'f0000000-0000-4000-8000-00000000000f' WHERE task_id = '{task}' AND session_id = '{sessionA}'`}, status: 409, code: "TASK_MEMBER_MISMATCH"},
		{name: "another member's session revoked", sql: []string{`UPDATE bz_agent_sessions SET revoked_at = '2026-01-01 00:00:00' WHERE session_id = '{sessionB}'`}, status: 409, code: "TASK_SCOPE_BLOCKED"},
		{name: "another member's session refresh-expired", sql: []string{`UPDATE bz_agent_sessions SET refresh_expires_at = '2026-01-01 00:00:00' WHERE session_id = '{sessionB}'`}, status: 409, code: "TASK_SCOPE_BLOCKED"},
		{name: "another member's access token expired only", sql: []string{`UPDATE bz_agent_sessions SET access_expires_at = '2026-01-01 00:00:00' WHERE session_id = '{sessionB}'`}, status: 200},
		{name: "another member's client disabled", sql: []string{`UPDATE bz_clients SET enabled = 0 WHERE app_id = 'app-b'`}, status: 409, code: "TASK_SCOPE_BLOCKED"},
		{name: "another member's client lost its authorize URL", sql: []string{`UPDATE bz_clients SET agent_authorize_url = NULL WHERE app_id = 'app-b'`}, status: 409, code: "TASK_SCOPE_BLOCKED"},
		{name: "route no longer allowed for a member's client", sql: []string{`UPDATE bz_clients SET allowed_routes = '["kb-legacy"]' WHERE app_id = 'app-b'`}, status: 409, code: "TASK_SCOPE_BLOCKED"},
		{name: "route no longer allowed for a member's session", sql: []string{`UPDATE bz_agent_sessions SET allowed_routes = '["kb-legacy"]' WHERE session_id = '{sessionB}'`}, status: 409, code: "TASK_SCOPE_BLOCKED"},
		{name: "member route disabled", sql: []string{`UPDATE bz_routes SET enabled = 0 WHERE route_key = 'kb-multi'`}, status: 409, code: "TASK_SCOPE_BLOCKED"},
		{name: "member route without direct tools", sql: []string{`UPDATE bz_routes SET tools = '{"agent_direct":{"enabled":false}}' WHERE route_key = 'kb-multi'`}, status: 409, code: "TASK_SCOPE_BLOCKED"},
		{name: "member route with the agent client switched off", sql: []string{`UPDATE bz_routes SET agent_client = '{"enabled":false}' WHERE route_key = 'kb-multi'`}, status: 409, code: "TASK_SCOPE_BLOCKED"},
		{name: "route audience refuses a member", sql: []string{`UPDATE bz_routes SET audience = '{"principals":["user-42"]}' WHERE route_key = 'kb-multi'`}, status: 409, code: "TASK_SCOPE_BLOCKED"},
		{name: "task paused", sql: []string{`UPDATE bz_agent_tasks SET state = 'paused' WHERE task_id = '{task}'`}, status: 409, code: "TASK_PAUSED"},
		{name: "task cancelled", sql: []string{`UPDATE bz_agent_tasks SET state = 'cancelled' WHERE task_id = '{task}'`}, status: 409, code: "TASK_CANCELLED"},
		{name: "task blocked", sql: []string{`UPDATE bz_agent_tasks SET state = 'blocked' WHERE task_id = '{task}'`}, status: 409, code: "TASK_SCOPE_BLOCKED"},
		{name: "task active but expired", sql: []string{`UPDATE bz_agent_tasks SET policy_json = '{"maxWriteCalls":0,"maxConcurrent":1,"expiresAt":"2026-01-01T00:00:00.000Z"}' WHERE task_id = '{task}'`}, status: 409, code: "TASK_EXPIRED"},
		{name: "task active, expiry ahead", sql: []string{`UPDATE bz_agent_tasks SET policy_json = '{"maxWriteCalls":0,"maxConcurrent":1,"expiresAt":"2999-01-01T00:00:00.000Z"}' WHERE task_id = '{task}'`}, status: 200},
	}
	// Baseline tables every row starts from (rows change sessions, clients
	// and routes as well as task rows).
	restore := func(t *testing.T) {
		tw.exec(t, "UPDATE bz_agent_sessions SET revoked_at = NULL, refresh_expires_at = '2099-01-01 00:00:00', access_expires_at = '2099-01-01 00:00:00'")
		tw.exec(t, `UPDATE bz_agent_sessions SET allowed_routes = '["kb-multi"]' WHERE session_id = ?`, testdb.SessionB)
		tw.exec(t, `UPDATE bz_clients SET enabled = 1, allowed_routes = '["kb-multi"]', agent_authorize_url = 'https://app-b.example/agent/authorize' WHERE app_id = ?`, testdb.AppB)
		tw.exec(t, `UPDATE bz_routes SET enabled = 1, audience = NULL, tools = '{"agent_direct":{"enabled":true}}', agent_client = NULL WHERE route_key = ?`, testdb.RouteMulti)
	}
	for _, rw := range rows {
		t.Run(rw.name, func(t *testing.T) {
			restore(t)
			tk := tw.newTask(t)
			is := tw.issue(t, sc, tk.Run)
			for _, q := range rw.sql {
				tw.exec(t, strings.NewReplacer("{task}", tk.ID, "{run}", tk.Run,
					"{sessionA}", testdb.SessionA, "{sessionB}", testdb.SessionB).Replace(q))
			}
			if rw.change != nil {
				rw.change(t, tk)
			}
			run := runOf(tk)
			if rw.run != nil {
				run = rw.run(tk)
			}
			if run == "-" {
				run = ""
			}
			route := rw.route
			if route == "" {
				route = testdb.RouteMulti
			}
			for _, c := range taskCalls {
				r := c.do(t, tw, sc, route, run, is)
				switch {
				case rw.status == 200 && r.Status != 200:
					t.Errorf("%s: got %d %s; want 200", c.name, r.Status, clip(string(r.Body)))
				case rw.status != 200 && strings.HasPrefix(rw.code, "TASK_"):
					wantTaskAnswer(t, c.name, r, rw.status, rw.code)
				case rw.status != 200:
					wantError(t, c.name, r, rw.status, rw.code)
				}
			}
		})
	}
	if got := testkit.Metric(t, reg, "knowledge_sidecar_knowledge_task_denials_total", map[string]string{"code": "TASK_PAUSED"}); got != 3 {
		t.Errorf("task_denials_total{code=TASK_PAUSED}: got %v; want 3", got)
	}
	if got := testkit.Metric(t, reg, "knowledge_sidecar_task_control_state", map[string]string{"state": "enforced"}); got != 1 {
		t.Errorf("task_control_state{state=enforced}: got %v; want 1", got)
	}
}

// TestTaskOrdering: the task rules sit after the body and before the route
// (SPEC §2), and the run-active rule before the task state.
func TestTaskOrdering(t *testing.T) {
	tw := newTaskWorld(t, fakecore.Options{SystemInfo: true})
	sc := tw.start(t, kopts{})
	tk := tw.newTask(t)
	is := tw.issue(t, sc, tk.Run)

	// kb-audience is not among session A's routes; kb-nowhere does not exist.
	for _, route := range []string{testdb.RouteAudience, testdb.RouteMissing} {
		r, _ := tw.search(t, sc, route, tw.TokenA, map[string]any{"query": "x"})
		wantTaskAnswer(t, "search without run_id on "+route, r, 409, "TASK_REQUIRED")
		r, _ = tw.read(t, sc, route, tw.TokenA, map[string]any{"ref": is.ref})
		wantTaskAnswer(t, "read without run_id on "+route, r, 409, "TASK_REQUIRED")
	}
	// The body still comes first.
	r, _ := tw.search(t, sc, testdb.RouteMulti, tw.TokenA, map[string]any{"query": "x", "run_id": "not-a-uuid"})
	wantError(t, "bad run_id format of a marked session", r, 400, "invalid_request")
	r = tw.call(t, "POST", sc.WS(testdb.RouteMulti)+"/knowledge/search", tw.TokenA, `{"query":"`+strings.Repeat("x", 17000)+`"}`)
	wantError(t, "oversized body of a marked session", r, 413, "payload_too_large")
	// Without the marker the same requests meet the route gate.
	tw.exec(t, "DELETE FROM bz_agent_task_enforcements WHERE session_id = ?", testdb.SessionA)
	r, _ = tw.search(t, sc, testdb.RouteAudience, tw.TokenA, map[string]any{"query": "x"})
	if r.Status != 403 {
		t.Errorf("unmarked session on a route it may not use: got %d %s; want 403", r.Status, clip(string(r.Body)))
	}

	// A completed run on a cancelled task: TASK_RUN_INACTIVE, not TASK_CANCELLED.
	tk2 := tw.newTask(t)
	tw.exec(t, "UPDATE bz_agent_tasks SET state = 'cancelled' WHERE task_id = ?", tk2.ID)
	tw.exec(t, "UPDATE bz_agent_client_runs SET status = 'completed', completed_at = '2026-01-01 00:05:00' WHERE run_id = ?", tk2.Run)
	r, _ = tw.search(t, sc, testdb.RouteMulti, tw.TokenA, map[string]any{"query": "x", "run_id": tk2.Run})
	wantTaskAnswer(t, "completed run on a cancelled task", r, 409, "TASK_RUN_INACTIVE")
	// A revoked member on a cancelled task: TASK_SCOPE_BLOCKED (revalidation before state).
	tw.exec(t, "UPDATE bz_agent_client_runs SET status = 'context_ready', completed_at = NULL WHERE run_id = ?", tk2.Run)
	tw.exec(t, "UPDATE bz_agent_sessions SET revoked_at = '2026-01-01 00:00:00' WHERE session_id = ?", testdb.SessionB)
	r, _ = tw.search(t, sc, testdb.RouteMulti, tw.TokenA, map[string]any{"query": "x", "run_id": tk2.Run})
	wantTaskAnswer(t, "revoked member on a cancelled task", r, 409, "TASK_SCOPE_BLOCKED")
}

// TestTaskPresence: none of the six tables → no task rules; some →
// TASK_UNAVAILABLE (fail closed); all six, re-probed while running → enforced
// without a restart.
func TestTaskPresence(t *testing.T) {
	search := func(t *testing.T, kw *kworld, sc *ksidecar) kresp {
		r, _ := kw.search(t, sc, testdb.RouteMulti, kw.TokenA, map[string]any{"query": refundQuery})
		return r
	}
	marker := `INSERT INTO bz_agent_task_enforcements (session_id, first_task_id, created_by, created_at)
		VALUES (?, '70000000-0000-4000-8000-000000000000', 'admin', '2026-01-01 00:00:00.000')`

	t.Run("partial tables", func(t *testing.T) {
		kw := newKWorld(t, fakecore.Options{SystemInfo: true})
		kw.DB.InstallTaskControl(t, "bz_agent_tasks", "bz_agent_task_runs", "bz_agent_task_enforcements")
		sc := kw.start(t, kopts{FeatureOptions: FeatureOptions{}})
		reg := sc.Registry
		wantTaskAnswer(t, "search", search(t, kw, sc), 503, "TASK_UNAVAILABLE")
		r, _ := kw.read(t, sc, testdb.RouteMulti, kw.TokenA, map[string]any{"ref": "kr2.x"})
		wantTaskAnswer(t, "read", r, 503, "TASK_UNAVAILABLE")
		if got := testkit.Metric(t, reg, "knowledge_sidecar_task_control_state", map[string]string{"state": "partial"}); got != 1 {
			t.Errorf("task_control_state{state=partial}: got %v; want 1", got)
		}
	})

	t.Run("migrated but the read-only user lacks the task grants", func(t *testing.T) {
		kw := newKWorld(t, fakecore.Options{SystemInfo: true})
		kw.DB.Exec(t, "INSERT INTO bz_schema_migrations (filename) VALUES (?)", testdb.TaskMigration)
		sc := kw.start(t, kopts{})
		wantTaskAnswer(t, "search", search(t, kw, sc), 503, "TASK_UNAVAILABLE")
	})

	t.Run("absent, then migrated while running", func(t *testing.T) {
		kw := newKWorld(t, fakecore.Options{SystemInfo: true})
		clock := testkit.NewClock(time.Now().UTC())
		sc := kw.start(t, kopts{FeatureOptions: FeatureOptions{Now: clock.Now}})
		reg := sc.Registry
		if r := search(t, kw, sc); r.Status != 200 {
			t.Fatalf("absent task tables: got %d %s; want 200", r.Status, clip(string(r.Body)))
		}
		if got := testkit.Metric(t, reg, "knowledge_sidecar_task_control_state", map[string]string{"state": "absent"}); got != 1 {
			t.Errorf("task_control_state{state=absent}: got %v; want 1", got)
		}
		kw.DB.InstallTaskControl(t)
		kw.DB.Exec(t, marker, testdb.SessionA)
		if r := search(t, kw, sc); r.Status != 200 {
			t.Errorf("before the re-probe interval: got %d; want 200 (presence is not probed per request)", r.Status)
		}
		clock.Advance(31 * time.Second)
		wantTaskAnswer(t, "after the re-probe", search(t, kw, sc), 409, "TASK_REQUIRED")
		if got := testkit.Metric(t, reg, "knowledge_sidecar_task_control_state", map[string]string{"state": "enforced"}); got != 1 {
			t.Errorf("task_control_state{state=enforced}: got %v; want 1", got)
		}
	})
}

// TestTaskCatalogFailures: the catalog down during a task check → 503
// knowledge_unavailable; a task query the database refuses → 503
// TASK_UNAVAILABLE. Never allowed.
func TestTaskCatalogFailures(t *testing.T) {
	t.Run("catalog down", func(t *testing.T) {
		tw := newTaskWorld(t, fakecore.Options{SystemInfo: true})
		fwd := newTCPForwarder(t, tw.DB.ReadOnlyDSN)
		tw.addSecret(fwd.dsn)
		sc := tw.start(t, kopts{FeatureOptions: FeatureOptions{CatalogDSN: fwd.dsn}})
		tk := tw.newTask(t)
		is := tw.issue(t, sc, tk.Run)
		fwd.shut()
		for _, c := range taskCalls {
			for _, run := range []string{tk.Run, ""} {
				r := c.do(t, tw, sc, testdb.RouteMulti, run, is)
				wantError(t, c.name+" run "+run, r, 503, "knowledge_unavailable")
			}
		}
	})
	t.Run("task query refused", func(t *testing.T) {
		tw := newTaskWorld(t, fakecore.Options{SystemInfo: true})
		sc := tw.start(t, kopts{})
		tk := tw.newTask(t)
		is := tw.issue(t, sc, tk.Run)
		cfg, _ := mysql.ParseDSN(tw.DB.ReadOnlyDSN)
		tw.exec(t, "REVOKE SELECT (policy_json) ON `"+tw.DB.Name+"`.bz_agent_tasks FROM '"+cfg.User+"'@'%'")
		for _, c := range taskCalls {
			wantTaskAnswer(t, c.name, c.do(t, tw, sc, testdb.RouteMulti, tk.Run, is), 503, "TASK_UNAVAILABLE")
		}
	})
}

// TestTaskTurnsForwardBinding (SPEC §4a, §7): the sidecar never task-checks a
// turn; task_binding reaches Core byte for byte and an on_demand rewrite keeps
// Core's top-level task_binding echo.
func TestTaskTurnsForwardBinding(t *testing.T) {
	tw := newTaskWorld(t, fakecore.Options{SystemInfo: true, TaskControl: true})
	sc := tw.start(t, kopts{})
	tk := tw.newTask(t)
	binding := `{"schema_version":"bailing.agent-task-binding.v1","task_id":"` + tk.ID + `","scope_hash":"` + strings.Repeat("d", 64) + `"}`
	for _, mode := range []string{"on_demand", "inline"} {
		mark := tw.rec.mark()
		body := `{"client_conversation_id":"` + taskConvA + `","client_turn_id":"t-` + mode + `","user_message_id":"m-` + mode +
			`","user_input":"refund window?","task_binding":` + binding + `,"knowledge_delivery":"` + mode + `"}`
		r := tw.call(t, "POST", sc.WS(testdb.RouteMulti)+"/turns", tw.TokenA, body)
		if r.Status != 200 {
			t.Fatalf("%s turn: got %d %s; want 200", mode, r.Status, clip(string(r.Body)))
		}
		sent := tw.rec.since(mark, "/agent-api/v1/workspaces/"+testdb.RouteMulti+"/turns")
		if len(sent) != 1 || !bytes.Contains(sent[0].Body, []byte(`"task_binding":`+binding)) {
			t.Errorf("%s turn: Core got %d turns; want one carrying task_binding unchanged", mode, len(sent))
		}
		var resp map[string]json.RawMessage
		if err := json.Unmarshal(r.Body, &resp); err != nil {
			t.Fatalf("%s turn: %v", mode, err)
		}
		var echo, want any
		_ = json.Unmarshal(resp["task_binding"], &echo)
		_ = json.Unmarshal([]byte(binding), &want)
		if fmt.Sprint(echo) != fmt.Sprint(want) || resp["knowledge_delivery"] == nil {
			t.Errorf("%s turn: task_binding %s, knowledge_delivery %s; want Core's echo kept beside the delivery block",
				mode, resp["task_binding"], clip(string(resp["knowledge_delivery"])))
		}
	}
}

// TestTaskCatalogStatements: a managed request that passes costs one catalog
// statement more than an unmanaged one, the task statement. Its run row,
// read in the same snapshot and held to the same session, client, route and
// activity, stands in for the run query of SPEC §2; an unmanaged request with
// a run_id still runs that query.
func TestTaskCatalogStatements(t *testing.T) {
	tw := newTaskWorld(t, fakecore.Options{SystemInfo: true})
	sc := tw.start(t, kopts{FeatureOptions: FeatureOptions{}})
	reg := sc.Registry
	tk := tw.newTask(t)
	is := tw.issue(t, sc, tk.Run)
	count := func(query string) float64 {
		return testkit.Metric(t, reg, "knowledge_sidecar_catalog_queries_total", map[string]string{"query": query, "outcome": "ok"})
	}

	runs, tasks := count("run"), count("task")
	for _, c := range taskCalls {
		if r := c.do(t, tw, sc, testdb.RouteMulti, tk.Run, is); r.Status != 200 {
			t.Fatalf("%s inside the task: got %d %s; want 200", c.name, r.Status, clip(string(r.Body)))
		}
	}
	if got := count("task") - tasks; got != 3 {
		t.Errorf("task statements for 3 managed requests: %v; want 3", got)
	}
	if got := count("run") - runs; got != 0 {
		t.Errorf("run queries for 3 managed requests: %v; want 0 (the task statement read the run)", got)
	}

	tw.exec(t, "DELETE FROM bz_agent_task_enforcements WHERE session_id = ?", testdb.SessionA)
	tw.exec(t, "DELETE FROM bz_agent_task_runs WHERE run_id = ?", tk.Run)
	runs = count("run")
	if r := taskCalls[0].do(t, tw, sc, testdb.RouteMulti, tk.Run, is); r.Status != 200 {
		t.Fatalf("unmanaged search with the run: got %d %s; want 200", r.Status, clip(string(r.Body)))
	}
	if got := count("run") - runs; got != 1 {
		t.Errorf("run queries for an unmanaged search with run_id: %v; want 1", got)
	}
}
