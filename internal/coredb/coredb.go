package coredb

import (
	"context"
	"crypto/rand"
	"database/sql"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"
)

//go:embed schema.sql
var schemaSQL string

//go:embed migrations.sql
var migrationsSQL string

//go:embed grants.sql
var grantsSQL string

//go:embed tasks.sql
var tasksSQL string

//go:embed grants_tasks.sql
var taskGrantsSQL string

// stepTimeout bounds the drop when its caller's context is gone.
const stepTimeout = 30 * time.Second

// DB is one throwaway database and its read-only user.
type DB struct {
	ReadOnlyDSN string  // the read-only user, column GRANTs only, on Name
	Admin       *sql.DB // the admin account of the DSN given to Create, on Name, for writes
	Name        string  // <prefix><random>
	User        string  // the read-only user's name (host '%')

	root    *sql.DB // the admin account, for GRANTs and the drop
	account string  // 'user'@'%'
}

// Options name what Create makes.
type Options struct {
	DBPrefix   string   // database name prefix (default "ks_test_")
	UserPrefix string   // read-only user name prefix (default "ks_ro_"); at most 21 bytes
	Seed       []string // SQL scripts run as the admin account after the schema (multi-statement)
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

// ErrUnreachable: the database server of the DSN did not answer.
var ErrUnreachable = errors.New("database server unreachable")

// Create makes a fresh database on the server of adminDSN (its database
// name, if any, is ignored), loads schema.sql, migrations.sql and o.Seed,
// and creates a read-only user with exactly Grants on it. On an error
// nothing is left behind. Drop removes both.
func Create(ctx context.Context, adminDSN string, o Options) (*DB, error) {
	cfg, err := mysql.ParseDSN(adminDSN)
	if err != nil {
		return nil, errors.New("the DSN is not valid")
	}
	cfg.ParseTime, cfg.Loc, cfg.MultiStatements = true, time.UTC, true
	if err := cfg.Apply(mysql.Charset("utf8mb4", "")); err != nil {
		return nil, fmt.Errorf("dsn: %w", err)
	}
	server := cfg.Clone()
	server.DBName = ""
	root, err := sql.Open("mysql", server.FormatDSN())
	if err != nil {
		return nil, fmt.Errorf("open: %w", err)
	}
	if err := root.PingContext(ctx); err != nil {
		root.Close()
		return nil, fmt.Errorf("%w: %v", ErrUnreachable, err)
	}
	if o.DBPrefix == "" {
		o.DBPrefix = "ks_test_"
	}
	if o.UserPrefix == "" {
		o.UserPrefix = "ks_ro_"
	}
	d := &DB{Name: o.DBPrefix + randomHex(6), User: o.UserPrefix + randomHex(5), root: root}
	password := randomHex(16)
	d.account = fmt.Sprintf("'%s'@'%%'", d.User)
	fail := func(err error) (*DB, error) {
		_ = d.Drop(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("setup: %w", err)
	}
	if _, err := root.ExecContext(ctx, "CREATE DATABASE `"+d.Name+"` CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci"); err != nil {
		return fail(err)
	}
	admin := cfg.Clone()
	admin.DBName = d.Name
	if d.Admin, err = sql.Open("mysql", admin.FormatDSN()); err != nil {
		return fail(err)
	}
	type stmt struct {
		db *sql.DB
		q  string
	}
	stmts := []stmt{{d.Admin, schemaSQL}, {d.Admin, migrationsSQL}}
	for _, s := range o.Seed {
		stmts = append(stmts, stmt{d.Admin, s})
	}
	stmts = append(stmts, stmt{root, fmt.Sprintf("CREATE USER %s IDENTIFIED BY '%s'", d.account, password)})
	for _, g := range Grants(d.Name, d.account) {
		stmts = append(stmts, stmt{root, g})
	}
	for _, st := range stmts {
		if _, err := st.db.ExecContext(ctx, st.q); err != nil {
			return fail(err)
		}
	}
	ro := cfg.Clone()
	ro.User, ro.Passwd, ro.DBName, ro.MultiStatements = d.User, password, d.Name, false
	d.ReadOnlyDSN = ro.FormatDSN()
	return d, nil
}

// Drop removes the read-only user and the database and closes the
// connections. It is bounded by 30 s beyond ctx's own deadline.
func (d *DB) Drop(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, stepTimeout)
	defer cancel()
	if d.Admin != nil {
		d.Admin.Close()
	}
	defer d.root.Close()
	if _, err := d.root.ExecContext(ctx, "DROP USER IF EXISTS "+d.account); err != nil {
		return fmt.Errorf("drop user: %w", err)
	}
	if _, err := d.root.ExecContext(ctx, "DROP DATABASE IF EXISTS `"+d.Name+"`"); err != nil {
		return fmt.Errorf("drop database: %w", err)
	}
	return nil
}

// TaskTables are the six task-control tables of Core 0.8 (migration 062).
var TaskTables = []string{
	"bz_agent_tasks", "bz_agent_task_members", "bz_agent_task_enforcements",
	"bz_agent_task_invocations", "bz_agent_task_runs", "bz_agent_task_events",
}

// TaskMigration is the Core migration that creates TaskTables.
const TaskMigration = "062_agent_task_control.sql"

// InstallTasks migrates the database to Core 0.8's task control: the six
// tables of tasks.sql, the row of TaskMigration, and the read-only user's
// TaskGrants. With tables, only those tables are created (a partial
// migration: no migration row, and only the grants whose tables exist).
func (d *DB) InstallTasks(ctx context.Context, tables ...string) error {
	all := len(tables) == 0
	type stmt struct {
		db *sql.DB
		q  string
	}
	var stmts []stmt
	for _, s := range strings.Split(tasksSQL, ";") {
		name, ok := createdTable(s)
		if !ok || !all && !slices.Contains(tables, name) {
			continue
		}
		stmts = append(stmts, stmt{d.Admin, s})
	}
	if all {
		stmts = append(stmts, stmt{d.Admin, "INSERT INTO bz_schema_migrations (filename) VALUES ('" + TaskMigration + "')"})
	}
	for _, g := range TaskGrants(d.Name, d.account) {
		table := g[strings.Index(g, "`.")+2:]
		table = table[:strings.IndexByte(table, ' ')]
		if all || !strings.HasPrefix(table, "bz_agent_task") || slices.Contains(tables, table) {
			stmts = append(stmts, stmt{d.root, g})
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

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // crypto/rand.Read never fails (Go 1.24+)
	return hex.EncodeToString(b)
}
