package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"strconv"
	"strings"
	"syscall"

	"github.com/go-sql-driver/mysql"

	"github.com/bailinghub/knowledge-sidecar/breaker"
	"github.com/bailinghub/knowledge-sidecar/catalog"
)

// The catalog probes of check-config --probe: Core's database reachable
// with the read-only user, Core's schema, the column grants, task control.

func (p *prober) catalog(ctx context.Context) {
	if p.cfg.Catalog.DSN == "" {
		for _, n := range []string{"catalog", "catalog-schema", "catalog-grants", "task-control"} {
			p.add(n, verdictSkip, "no KNOWLEDGE_SIDECAR_CATALOG_DSN: knowledge features are off")
		}
		return
	}
	// The probe's own failures must not open the catalog breaker: each line
	// reports its own cause, never "circuit open" because of an earlier line.
	cat, err := catalog.Open(catalog.Options{
		DSN: p.cfg.Catalog.DSN, MaxOpenConns: 2, MaxIdleConns: 2, QueryTimeout: p.timeout,
		DocCacheEntries: 1, DocCacheBytes: 1 << 20,
		Breaker: breaker.Settings{Failures: math.MaxUint32},
	})
	if err != nil {
		p.add("catalog", verdictFail, "%v", err)
		return
	}
	defer cat.Close()
	dsn, _ := mysql.ParseDSN(p.cfg.Catalog.DSN) // parsed by OpenCatalog already
	if err := cat.Ping(ctx); err != nil {
		p.add("catalog", verdictFail, "%s", catalogCause(err, dsn))
		for _, n := range []string{"catalog-schema", "catalog-grants", "task-control"} {
			p.add(n, verdictSkip, "the catalog is not reachable")
		}
		return
	}
	p.add("catalog", verdictOK, "reachable at %s, database %q", dsn.Addr, dsn.DBName)

	var se *catalog.SchemaError
	switch err := cat.CheckSchema(ctx); {
	case err == nil:
		p.add("catalog-schema", verdictOK, "Core's migrations 008, 018, 019, 055, 056 are applied")
	case errors.As(err, &se) && len(se.Missing) == len(catalog.RequiredMigrations()):
		p.add("catalog-schema", verdictFail, "no Core schema in database %q: none of Core's migrations is recorded (a different database, or Core never migrated it)", dsn.DBName)
		for _, n := range []string{"catalog-grants", "task-control"} {
			p.add(n, verdictSkip, "no Core schema in this database")
		}
		return
	case errors.As(err, &se):
		p.add("catalog-schema", verdictFail, "missing Core migrations: %s (Core older than 0.5, or a different database)", strings.Join(se.Missing, ", "))
	case mysqlErrorNumber(err) == 1146:
		p.add("catalog-schema", verdictFail, "no Core schema in database %q: it has no bz_schema_migrations table (a different database, or Core never migrated it)", dsn.DBName)
		for _, n := range []string{"catalog-grants", "task-control"} {
			p.add(n, verdictSkip, "no Core schema in this database")
		}
		return
	default:
		p.add("catalog-schema", verdictFail, "%s (GRANT SELECT (filename) ON bz_schema_migrations, docs/core-contract.md)", catalogCause(err, dsn))
	}

	var bad, okNames []string
	for _, q := range cat.ProbeQueries(ctx) {
		if q.Err != nil {
			bad = append(bad, q.Err.Error())
		} else {
			okNames = append(okNames, q.Query)
		}
	}
	if len(bad) > 0 {
		p.add("catalog-grants", verdictFail, "%s (the column GRANTs are in docs/core-contract.md)", strings.Join(bad, "; "))
	} else {
		p.add("catalog-grants", verdictOK, "every query ran with the granted columns: %s", strings.Join(okNames, ", "))
	}
	p.taskControl(ctx, cat)
}

// taskControl is the probe line for Core 0.8's managed tasks. It reports
// what the catalog user sees (absent | partial | present); which of them the
// knowledge endpoints enforce is decided by the task-control presence check
// of the knowledge path (SPEC §4a), which this line mirrors.
func (p *prober) taskControl(ctx context.Context, cat *catalog.SQLCatalog) {
	t, err := cat.ProbeTaskTables(ctx)
	n := len(catalog.TaskTables)
	switch {
	case err != nil:
		p.add("task-control", verdictFail, "%v", err)
	case len(t.Readable) == n:
		// Readable tables do not prove every column GRANT: run the task
		// statement itself, for a session that is in no task.
		if _, err := cat.TaskSnapshot(ctx, "00000000-0000-4000-8000-000000000000", ""); err != nil {
			p.add("task-control", verdictFail, "present, but the task query fails: %v (knowledge answers 503; grant the task columns listed in docs/core-contract.md)", err)
			return
		}
		p.add("task-control", verdictOK, "present: all %d task tables and the task query's columns are readable (Core ≥ 0.8: task rules apply)", n)
	case len(t.Readable) == 0 && !t.Migrated:
		p.add("task-control", verdictOK, "absent: migration %s is not applied (Core < 0.8: no task rules)", catalog.TaskMigration)
	default:
		var why []string
		if len(t.Missing) > 0 {
			why = append(why, "missing: "+strings.Join(t.Missing, ", "))
		}
		if len(t.Denied) > 0 {
			why = append(why, "not granted (or missing): "+strings.Join(t.Denied, ", "))
		}
		p.add("task-control", verdictFail, "partial: %d of %d task tables readable; %s (knowledge answers 503 TASK_UNAVAILABLE)", len(t.Readable), n, strings.Join(why, "; "))
	}
}

// mysqlErrorNumber is the MySQL error number in err's chain, 0 if none.
func mysqlErrorNumber(err error) uint16 {
	var me *mysql.MySQLError
	if errors.As(err, &me) {
		return me.Number
	}
	return 0
}

// catalogCause words a catalog failure by its cause: unknown database,
// access denied, connection refused at the address, a name that does not
// resolve, a timeout. Never the password or the server's own message.
func catalogCause(err error, dsn *mysql.Config) string {
	addr, db, user := "", "", ""
	if dsn != nil {
		addr, db, user = dsn.Addr, dsn.DBName, dsn.User
	}
	var dnsErr *net.DNSError
	var ne net.Error
	switch n := mysqlErrorNumber(err); {
	case n == 1049:
		return fmt.Sprintf("unknown database %q at %s", db, addr)
	case n == 1045:
		return fmt.Sprintf("access denied for user %q at %s: wrong user or password", user, addr)
	case n == 1044:
		return fmt.Sprintf("access denied: user %q may not use database %q, or it does not exist", user, db)
	case n == 1130:
		return fmt.Sprintf("%s does not let user %q connect from this host", addr, user)
	case n == 1146:
		return "a table is missing: no Core schema in database " + strconv.Quote(db)
	case n == 1142 || n == 1143:
		return "access denied to a table or column: " + err.Error()
	case n != 0:
		return fmt.Sprintf("the database at %s answered error %d", addr, n)
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused at " + addr
	case errors.As(err, &dnsErr):
		return "cannot resolve the host of " + addr
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return "no answer from " + addr + " within the probe timeout"
	}
	return err.Error() + " (at " + addr + ")"
}
