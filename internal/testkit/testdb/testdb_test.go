package testdb_test

import (
	"context"
	"database/sql"
	"errors"
	"os"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/go-sql-driver/mysql"

	"github.com/bailinghub/knowledge-sidecar/internal/testkit"
	"github.com/bailinghub/knowledge-sidecar/internal/testkit/testdb"
)

// TestMain prints one line when tests were skipped for want of MariaDB.
func TestMain(m *testing.M) { testkit.Main(m) }

func TestFixturesMatchConstants(t *testing.T) {
	db := testdb.New(t)
	ctx := context.Background()

	var title, content string
	if err := db.Admin.QueryRowContext(ctx, "SELECT title, content FROM bz_kb_docs WHERE doc_id = ?", testdb.DocBig).Scan(&title, &content); err != nil {
		t.Fatalf("big doc: %v", err)
	}
	if got := utf8.RuneCountInString(content); got != testdb.BigDocChars {
		t.Errorf("big doc characters: got %d; want %d", got, testdb.BigDocChars)
	}
	if content != testdb.BigDocContent() || title != testdb.DocBigTitle {
		t.Errorf("big doc text differs from BigDocContent()")
	}
	if err := db.Admin.QueryRowContext(ctx, "SELECT title, content FROM bz_kb_docs WHERE doc_id = ?", testdb.DocMultiByte).Scan(&title, &content); err != nil {
		t.Fatalf("multi-byte doc: %v", err)
	}
	if title != testdb.DocMultiByteTitle || content != testdb.DocMultiByteContent {
		t.Errorf("multi-byte doc: got %q / %q; want %q / %q", title, content, testdb.DocMultiByteTitle, testdb.DocMultiByteContent)
	}

	exists := []struct {
		table, column string
		ids           []string
	}{
		{"bz_routes", "route_key", []string{testdb.RouteNull, testdb.RouteLegacy, testdb.RouteMulti, testdb.RouteEmptyKBIDs,
			testdb.RouteDisabled, testdb.RouteAudience, testdb.RouteAudienceOff, testdb.RouteCaseStored, testdb.RouteQuirky}},
		{"bz_kb_bases", "kb_id", []string{testdb.KBFAQ, testdb.KBManuals, testdb.KBDisabled, testdb.KBOther}},
		{"bz_agent_sessions", "session_id", []string{testdb.SessionA, testdb.SessionB}},
		{"bz_clients", "app_id", []string{testdb.AppA, testdb.AppB, testdb.AppStar, testdb.AppDisabled,
			testdb.AppNoURL, testdb.AppNullRoutes, testdb.AppCaseStored}},
		{"bz_agent_client_runs", "run_id", []string{testdb.RunActive, testdb.RunCompleted, testdb.RunForeign, testdb.RunPreparing}},
	}
	for _, e := range exists {
		for _, id := range e.ids {
			var n int
			// Identifiers come from the table above, never from input.
			q := "SELECT COUNT(*) FROM " + e.table + " WHERE BINARY " + e.column + " = ?"
			if err := db.Admin.QueryRowContext(ctx, q, id).Scan(&n); err != nil {
				t.Fatalf("%s %s: %v", e.table, id, err)
			}
			if n != 1 {
				t.Errorf("%s %q rows: got %d; want 1", e.table, id, n)
			}
		}
	}
	for _, f := range testdb.RequiredMigrations {
		var n int
		if err := db.Admin.QueryRowContext(ctx, "SELECT COUNT(*) FROM bz_schema_migrations WHERE filename = ?", f).Scan(&n); err != nil || n != 1 {
			t.Errorf("migration %s: got %d rows, err %v; want 1", f, n, err)
		}
	}
}

// access is one query the read-only user may or may not run.
type access struct {
	query   string
	allowed bool
}

// checkAccess runs each query as the read-only user of db: allowed ones must
// succeed, the others must fail with a server (permission) error.
func checkAccess(t *testing.T, db *testdb.DB, cases []access) {
	t.Helper()
	ro, err := sql.Open("mysql", db.ReadOnlyDSN)
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	for _, tc := range cases {
		rows, err := ro.QueryContext(context.Background(), tc.query)
		if err == nil {
			rows.Close()
		}
		var me *mysql.MySQLError
		switch {
		case tc.allowed && err != nil:
			t.Errorf("%s: got error %v; want allowed", tc.query, err)
		case !tc.allowed && !errors.As(err, &me):
			t.Errorf("%s: got %v; want a permission error", tc.query, err)
		}
	}
}

// The read-only user sees the granted columns and nothing else.
func TestReadOnlyUserHasOnlyColumnGrants(t *testing.T) {
	checkAccess(t, testdb.New(t), []access{
		{"SELECT route_key, enabled, knowledge, audience FROM bz_routes LIMIT 1", true},
		{"SELECT doc_id, kb_id, title, content, content_hash, status, updated_at FROM bz_kb_docs LIMIT 1", true},
		{"SELECT tools FROM bz_routes LIMIT 1", false},
		{"SELECT source_key FROM bz_kb_docs LIMIT 1", false},
		{"SELECT app_id, enabled, allowed_routes, agent_authorize_url FROM bz_clients LIMIT 1", true},
		{"SELECT rate_limit_per_min FROM bz_clients WHERE app_id = 'app-a'", true},
		{"SELECT token FROM bz_clients LIMIT 1", false},
		{"SELECT app_id FROM bz_clients WHERE token = 'x'", false},
		{"SELECT * FROM bz_clients LIMIT 1", false},
		{"SELECT context_json FROM bz_agent_client_runs LIMIT 1", false},
		{"SELECT session_id FROM bz_agent_sessions LIMIT 1", false},
		{"UPDATE bz_routes SET enabled = 0 WHERE route_key = 'kb-null'", false},
	})
}

// After InstallTaskControl the read-only user holds exactly the Core 0.8
// grants as well: the columns the task rules read, nothing else.
func TestReadOnlyUserTaskGrants(t *testing.T) {
	db := testdb.New(t)
	db.InstallTaskControl(t)
	checkAccess(t, db, []access{
		{"SELECT session_id, first_task_id FROM bz_agent_task_enforcements", true},
		{"SELECT run_id, task_id, session_id FROM bz_agent_task_runs", true},
		{"SELECT task_id, state, policy_json FROM bz_agent_tasks", true},
		{"SELECT task_id, member_key, session_id, client_app_id, route_key, client_conversation_id FROM bz_agent_task_members", true},
		{"SELECT task_id FROM bz_agent_task_invocations", true},
		{"SELECT task_id FROM bz_agent_task_events", true},
		{"SELECT client_conversation_id FROM bz_agent_client_runs", true},
		{"SELECT session_id, client_app_id, principal_json, on_behalf_of, allowed_routes, refresh_expires_at, revoked_at FROM bz_agent_sessions", true},
		{"SELECT tools, agent_client FROM bz_routes", true},
		{"SELECT create_key FROM bz_agent_tasks", false},
		{"SELECT scope_hash FROM bz_agent_tasks", false},
		{"SELECT allowed_tools_json FROM bz_agent_task_members", false},
		{"SELECT detail_json FROM bz_agent_task_events", false},
		{"SELECT created_by FROM bz_agent_task_enforcements", false},
		{"SELECT access_token_hash FROM bz_agent_sessions", false},
		{"SELECT token FROM bz_clients", false},
		{"SELECT context_json FROM bz_agent_client_runs", false},
		{"UPDATE bz_agent_tasks SET state = 'active'", false},
	})
}

// docs/core-contract.md carries the same GRANTs the test user gets.
func TestContractDocCarriesTheGrants(t *testing.T) {
	doc, err := os.ReadFile("../../../docs/core-contract.md")
	if err != nil {
		t.Fatalf("read docs/core-contract.md: %v", err)
	}
	for _, g := range append(testdb.Grants("bailinghub", "'bz_sidecar_ro'@'%'"), testdb.TaskGrants("bailinghub", "'bz_sidecar_ro'@'%'")...) {
		if !strings.Contains(string(doc), g) {
			t.Errorf("docs/core-contract.md lacks %q", g)
		}
	}
}
