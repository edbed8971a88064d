package testdb

import (
	"context"
	"crypto/rand"
	"database/sql"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/bailinghub/knowledge-sidecar/internal/testkit"
)

//go:embed schema.sql
var schemaSQL string

//go:embed fixtures.sql
var fixturesSQL string

//go:embed grants.sql
var grantsSQL string

//go:embed tasks.sql
var tasksSQL string

//go:embed grants_tasks.sql
var taskGrantsSQL string

// DefaultDSN is used when KS_TEST_MYSQL_DSN is not set.
const DefaultDSN = "root@tcp(127.0.0.1:3306)/ks_test?parseTime=true&loc=UTC&charset=utf8mb4"

// setupTimeout bounds each setup and cleanup step.
const setupTimeout = 30 * time.Second

// DB is one private test database.
type DB struct {
	ReadOnlyDSN string  // the read-only user, column GRANTs only, on Name
	Admin       *sql.DB // the server account of KS_TEST_MYSQL_DSN, on Name, for mutations
	Name        string  // ks_test_<random>

	root    *sql.DB // the server account, for GRANTs
	account string  // the read-only account, 'ks_ro_…'@'%'
}

// Grants renders the read-only user's GRANT statements (grants.sql) for a
// database and an account such as 'bz_sidecar_ro'@'%'. docs/core-contract.md
// carries the same statements for database bailinghub.
func Grants(database, account string) []string { return render(grantsSQL, database, account) }

// TaskGrants renders the additional GRANTs for Core ≥ 0.8 (grants_tasks.sql),
// which docs/core-contract.md carries too.
func TaskGrants(database, account string) []string { return render(taskGrantsSQL, database, account) }

func render(grants, database, account string) []string {
	var out []string
	for _, line := range strings.Split(strings.TrimSpace(grants), "\n") {
		line = strings.ReplaceAll(line, "{{db}}", database)
		out = append(out, strings.ReplaceAll(line, "{{user}}", account))
	}
	return out
}

// New creates a fresh database ks_test_<random> on the server of
// KS_TEST_MYSQL_DSN, loads schema + fixtures, creates a read-only user with
// exactly the column GRANTs of docs/core-contract.md for it, registers cleanup
// (drop database + user), and returns the read-only DSN and an admin *sql.DB
// for mutations. Unreachable server: t.Fatal when CI=true, else t.Skip.
func New(t testing.TB) *DB {
	t.Helper()
	dsn := os.Getenv("KS_TEST_MYSQL_DSN")
	if dsn == "" {
		dsn = DefaultDSN
	}
	ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
	defer cancel()
	d, drop, err := Create(ctx, dsn)
	if errors.Is(err, ErrUnreachable) {
		unreachable(t, err)
	}
	if err != nil {
		t.Fatalf("testdb: %v", err)
	}
	t.Cleanup(func() {
		if err := drop(); err != nil {
			t.Errorf("testdb: %v", err)
		}
	})
	return d
}

// ErrUnreachable: the database server of the DSN did not answer.
var ErrUnreachable = errors.New("database server unreachable")

// Create is New for programs that are not tests (the load tool): it builds
// the same database and read-only user on the server of dsn and returns a
// function that drops both.
func Create(ctx context.Context, dsn string) (d *DB, drop func() error, err error) {
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return nil, nil, errors.New("the DSN is not valid")
	}
	cfg.ParseTime, cfg.Loc, cfg.MultiStatements = true, time.UTC, true
	if err := cfg.Apply(mysql.Charset("utf8mb4", "")); err != nil {
		return nil, nil, fmt.Errorf("dsn: %w", err)
	}
	server := cfg.Clone()
	server.DBName = ""
	root, err := sql.Open("mysql", server.FormatDSN())
	if err != nil {
		return nil, nil, fmt.Errorf("open: %w", err)
	}
	if err := root.PingContext(ctx); err != nil {
		root.Close()
		return nil, nil, fmt.Errorf("%w: %v", ErrUnreachable, err)
	}
	d = &DB{Name: "ks_test_" + randomHex(6), root: root}
	user, password := "ks_ro_"+randomHex(5), randomHex(16)
	d.account = fmt.Sprintf("'%s'@'%%'", user)
	drop = func() error {
		ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
		defer cancel()
		if d.Admin != nil {
			d.Admin.Close()
		}
		defer root.Close()
		if _, err := root.ExecContext(ctx, "DROP USER IF EXISTS "+d.account); err != nil {
			return fmt.Errorf("drop user: %w", err)
		}
		if _, err := root.ExecContext(ctx, "DROP DATABASE IF EXISTS `"+d.Name+"`"); err != nil {
			return fmt.Errorf("drop database: %w", err)
		}
		return nil
	}
	fail := func(err error) (*DB, func() error, error) {
		_ = drop()
		return nil, nil, fmt.Errorf("setup: %w", err)
	}
	if _, err := root.ExecContext(ctx, "CREATE DATABASE `"+d.Name+"` CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci"); err != nil {
		return fail(err)
	}
	admin := cfg.Clone()
	admin.DBName = d.Name
	if d.Admin, err = sql.Open("mysql", admin.FormatDSN()); err != nil {
		return fail(err)
	}
	stmts := []struct {
		db *sql.DB
		q  string
	}{{d.Admin, schemaSQL}, {d.Admin, fixturesSQL}, {root, fmt.Sprintf("CREATE USER %s IDENTIFIED BY '%s'", d.account, password)}}
	for _, g := range Grants(d.Name, d.account) {
		stmts = append(stmts, struct {
			db *sql.DB
			q  string
		}{root, g})
	}
	for _, st := range stmts {
		if _, err := st.db.ExecContext(ctx, st.q); err != nil {
			return fail(err)
		}
	}
	ro := cfg.Clone()
	ro.User, ro.Passwd, ro.DBName, ro.MultiStatements = user, password, d.Name, false
	d.ReadOnlyDSN = ro.FormatDSN()
	return d, drop, nil
}

// Exec runs a statement as the admin account on the test database.
func (d *DB) Exec(t testing.TB, query string, args ...any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
	defer cancel()
	if _, err := d.Admin.ExecContext(ctx, query, args...); err != nil {
		t.Fatalf("testdb: exec: %v", err)
	}
}

// TaskTables are the six task-control tables of Core 0.8 (migration 062).
var TaskTables = []string{
	"bz_agent_tasks", "bz_agent_task_members", "bz_agent_task_enforcements",
	"bz_agent_task_invocations", "bz_agent_task_runs", "bz_agent_task_events",
}

// TaskMigration is the Core migration that creates TaskTables.
const TaskMigration = "062_agent_task_control.sql"

// InstallTaskControl migrates the test database to Core 0.8's task control:
// the six tables of tasks.sql, the row of TaskMigration, and the read-only
// user's TaskGrants. With tables, only those tables are created (a partial
// migration: no migration row, and only the grants whose tables exist).
func (d *DB) InstallTaskControl(t testing.TB, tables ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
	defer cancel()
	if err := d.InstallTasks(ctx, tables...); err != nil {
		t.Fatalf("testdb: task control: %v", err)
	}
}

// InstallTasks is InstallTaskControl for programs that are not tests.
func (d *DB) InstallTasks(ctx context.Context, tables ...string) error {
	all := len(tables) == 0
	var stmts []struct {
		db *sql.DB
		q  string
	}
	add := func(db *sql.DB, q string) {
		stmts = append(stmts, struct {
			db *sql.DB
			q  string
		}{db, q})
	}
	for _, stmt := range strings.Split(tasksSQL, ";") {
		name, ok := createdTable(stmt)
		if !ok || !all && !slices.Contains(tables, name) {
			continue
		}
		add(d.Admin, stmt)
	}
	if all {
		add(d.Admin, "INSERT INTO bz_schema_migrations (filename) VALUES ('"+TaskMigration+"')")
	}
	for _, g := range TaskGrants(d.Name, d.account) {
		table := g[strings.Index(g, "`.")+2:]
		table = table[:strings.IndexByte(table, ' ')]
		if all || !strings.HasPrefix(table, "bz_agent_task") || slices.Contains(tables, table) {
			add(d.root, g)
		}
	}
	for _, st := range stmts {
		if _, err := st.db.ExecContext(ctx, st.q); err != nil {
			return err
		}
	}
	return nil
}

// createdTable names the table a CREATE TABLE statement of tasks.sql creates.
func createdTable(stmt string) (string, bool) {
	i := strings.Index(stmt, "CREATE TABLE ")
	if i < 0 {
		return "", false
	}
	f := strings.Fields(stmt[i+len("CREATE TABLE "):])
	if len(f) == 0 {
		return "", false
	}
	return f[0], true
}

func unreachable(t testing.TB, err error) {
	t.Helper()
	testkit.RequireService(t, "MySQL/MariaDB at KS_TEST_MYSQL_DSN", err)
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // crypto/rand.Read never fails (Go 1.24+)
	return hex.EncodeToString(b)
}
