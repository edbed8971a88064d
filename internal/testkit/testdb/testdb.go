package testdb

import (
	"context"
	_ "embed"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/bailinghub/knowledge-sidecar/internal/coredb"
	"github.com/bailinghub/knowledge-sidecar/internal/testkit"
)

//go:embed fixtures.sql
var fixturesSQL string

// DefaultDSN is used when KS_TEST_MYSQL_DSN is not set.
const DefaultDSN = "root@tcp(127.0.0.1:3306)/ks_test?parseTime=true&loc=UTC&charset=utf8mb4"

// setupTimeout bounds each setup and cleanup step.
const setupTimeout = 30 * time.Second

// DB is one private test database (ReadOnlyDSN, Admin, Name and the task
// migration come from coredb.DB).
type DB struct{ *coredb.DB }

// Grants renders the read-only user's GRANT statements: coredb.Grants.
func Grants(database, account string) []string { return coredb.Grants(database, account) }

// TaskGrants renders the GRANTs for Core ≥ 0.8: coredb.TaskGrants.
func TaskGrants(database, account string) []string { return coredb.TaskGrants(database, account) }

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
var ErrUnreachable = coredb.ErrUnreachable

// Create is New for programs that are not tests (the load tool): it builds
// the same database (with the fixtures) and read-only user on the server of
// dsn and returns a function that drops both.
func Create(ctx context.Context, dsn string) (d *DB, drop func() error, err error) {
	db, err := coredb.Create(ctx, dsn, coredb.Options{Seed: []string{fixturesSQL}})
	if err != nil {
		return nil, nil, err
	}
	return &DB{db}, func() error { return db.Drop(context.Background()) }, nil
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
var TaskTables = coredb.TaskTables

// TaskMigration is the Core migration that creates TaskTables.
const TaskMigration = coredb.TaskMigration

// InstallTaskControl migrates the test database to Core 0.8's task control
// (coredb.DB.InstallTasks, which programs that are not tests call).
func (d *DB) InstallTaskControl(t testing.TB, tables ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
	defer cancel()
	if err := d.InstallTasks(ctx, tables...); err != nil {
		t.Fatalf("testdb: task control: %v", err)
	}
}

func unreachable(t testing.TB, err error) {
	t.Helper()
	testkit.RequireService(t, "MySQL/MariaDB at KS_TEST_MYSQL_DSN", err)
}
