package catalog

import (
	"context"
	"errors"
	"fmt"

	"github.com/go-sql-driver/mysql"

	"github.com/bailinghub/knowledge-sidecar/corefacts"
)

// QueryProbe is the result of running one catalog query (check-config --probe).
type QueryProbe struct {
	Query string // one of the Query* names
	Err   error  // nil, or a *CatalogError (its Reason says "access denied", "schema mismatch", …)
}

// ProbeQueries runs every query the catalog uses (Q1–Q5, Q7, Q9) once, with
// arguments that match no row, so that each column GRANT is exercised the way
// serving will exercise it. The schema check (Q0) is CheckSchema.
func (c *SQLCatalog) ProbeQueries(ctx context.Context) []QueryProbe {
	one := placeholders(1)
	probes := []struct {
		name  string
		query string
		args  []any
	}{
		{QueryRoute, q1Route, []any{""}},
		{QueryKBs, fmt.Sprintf(q2KBs, one), []any{""}},
		{QueryDocMeta, fmt.Sprintf(q3Meta, one, one), []any{int64(0), ""}},
		{QueryDocBody, fmt.Sprintf(q4Body, one), []any{int64(0), ""}},
		{QueryRun, q5Run, []any{""}},
		{QueryClient, q7Client, []any{""}},
		{QueryReadyKBs, fmt.Sprintf(q9ReadyKBs, one), []any{"", corefacts.StatusReady}},
	}
	out := make([]QueryProbe, 0, len(probes))
	for _, p := range probes {
		err := c.do(ctx, p.name, func(ctx context.Context) error {
			rows, err := c.db.QueryContext(ctx, p.query, p.args...)
			if err != nil {
				return err
			}
			defer rows.Close()
			for rows.Next() {
			}
			return rows.Err()
		})
		out = append(out, QueryProbe{Query: p.name, Err: err})
	}
	return out
}

// TaskTablesProbe says what the catalog user sees of task control.
type TaskTablesProbe struct {
	Migrated bool     // TaskMigration is recorded in bz_schema_migrations
	Readable []string // tables a SELECT … LIMIT 0 succeeded on
	Missing  []string // tables that do not exist (error 1146)
	Denied   []string // tables the user may not read; MySQL does not say whether they exist
}

// ProbeTaskTables looks for Core's task control: the migration, then each
// table with SELECT 1 … LIMIT 0 (no row is read). A read-only user with
// column GRANTs cannot tell a missing table from an ungranted one, which is
// why the migration is read too. The error is a connection-level failure.
func (c *SQLCatalog) ProbeTaskTables(ctx context.Context) (TaskTablesProbe, error) {
	var p TaskTablesProbe
	err := c.do(ctx, QuerySchema, func(ctx context.Context) error {
		rows, err := c.db.QueryContext(ctx, fmt.Sprintf(q0Schema, placeholders(1)), TaskMigration)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			p.Migrated = true
		}
		return rows.Err()
	})
	if err != nil {
		return p, err
	}
	for _, t := range TaskTables {
		qctx, cancel := context.WithTimeout(ctx, c.opts.QueryTimeout)
		rows, err := c.db.QueryContext(qctx, "SELECT 1 FROM "+t+" LIMIT 0")
		if err == nil {
			rows.Close()
		}
		cancel()
		var me *mysql.MySQLError
		switch {
		case err == nil:
			p.Readable = append(p.Readable, t)
		case errors.As(err, &me) && me.Number == 1146:
			p.Missing = append(p.Missing, t)
		case errors.As(err, &me) && (me.Number == 1142 || me.Number == 1143):
			p.Denied = append(p.Denied, t)
		default:
			return p, classify(ctx, QuerySchema, err)
		}
	}
	return p, nil
}

// Ping checks that the database answers, within the query timeout.
func (c *SQLCatalog) Ping(ctx context.Context) error {
	return c.do(ctx, QuerySchema, func(ctx context.Context) error { return c.db.PingContext(ctx) })
}

// RequiredMigrations are the Core migrations CheckSchema looks for.
func RequiredMigrations() []string { return append([]string(nil), requiredMigrations...) }
