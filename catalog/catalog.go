package catalog

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"log"
	"strings"
	"sync"
	"time"

	"github.com/go-sql-driver/mysql"
	"go.opentelemetry.io/otel/trace"

	"github.com/bailinghub/knowledge-sidecar/breaker"
	"github.com/bailinghub/knowledge-sidecar/corefacts"
	"github.com/bailinghub/knowledge-sidecar/telemetry"
)

// The catalog's queries: CONTRACT.md's column set, after CORE_SCHEMA §8
// (Q0–Q5, Q7; Q6 is not needed because the session comes from Core over
// HTTP). Columns are always listed; bz_clients.token is never read. The
// column GRANTs in docs/core-contract.md cover exactly these columns.
const (
	q0Schema = "SELECT filename FROM bz_schema_migrations WHERE filename IN (%s)"
	q1Route  = "SELECT route_key, enabled, knowledge, audience FROM bz_routes WHERE route_key = ? LIMIT 1"
	q2KBs    = "SELECT kb_id, enabled FROM bz_kb_bases WHERE kb_id IN (%s)"
	q3Meta   = "SELECT doc_id, kb_id, title, status, content_hash, updated_at FROM bz_kb_docs WHERE doc_id IN (%s) AND kb_id IN (%s)"
	q4Body   = "SELECT doc_id, kb_id, title, content, content_hash, status, updated_at FROM bz_kb_docs WHERE doc_id = ? AND kb_id IN (%s) LIMIT 1"
	q5Run    = "SELECT run_id, session_id, client_app_id, route_key, status, completed_at FROM bz_agent_client_runs WHERE run_id = ? LIMIT 1"
	q7Client = "SELECT app_id, enabled, allowed_routes, agent_authorize_url FROM bz_clients WHERE app_id = ? LIMIT 1"
	// q9ReadyKBs: which of these KBs hold a ready document. EXISTS stops at
	// the first such row of idx_kb(kb_id); only granted columns are read.
	q9ReadyKBs = "SELECT b.kb_id FROM bz_kb_bases b WHERE b.kb_id IN (%s) AND EXISTS (SELECT 1 FROM bz_kb_docs d WHERE d.kb_id = b.kb_id AND d.status = ?)"
	// q1Bundle is Q1 with Q2 (and, q1BundleDoc, Q3 of one document fenced to
	// those KBs) in one statement: the route row joined with the rows a
	// knowledge request reads next, so a read is one round trip instead of
	// three and a search one instead of two (RouteBundle). One row per
	// matching KB (at least one while the route exists); only granted
	// columns are read.
	q1Bundle    = "SELECT r.route_key, r.enabled, r.knowledge, b.kb_id, b.enabled FROM bz_routes r LEFT JOIN bz_kb_bases b ON b.kb_id IN (%s) WHERE r.route_key = ?"
	q1BundleDoc = "SELECT r.route_key, r.enabled, r.knowledge, b.kb_id, b.enabled, d.doc_id, d.kb_id, d.title, d.status, d.content_hash, d.updated_at FROM bz_routes r LEFT JOIN bz_kb_bases b ON b.kb_id IN (%s) LEFT JOIN bz_kb_docs d ON d.doc_id = ? AND d.kb_id IN (%s) WHERE r.route_key = ?"
)

// Catalog query names (the "query" label of the catalog metrics).
const (
	QuerySchema  = "schema"
	QueryRoute   = "route"
	QueryKBs     = "kbs"
	QueryDocMeta = "doc_meta"
	QueryDocBody = "doc_body"
	QueryRun     = "run"
	QueryClient  = "client"
	// QueryReadyKBs is ReadyKBs (search: a KB that answered no hit at all).
	QueryReadyKBs = "kb_ready"
)

// MaxIDsPerQuery caps the placeholders of one IN (...) list; longer lists are
// split into several queries.
const MaxIDsPerQuery = 64

// requiredMigrations are the Core migrations whose tables and columns the
// catalog reads (Q0).
var requiredMigrations = []string{
	"008_kb.sql",
	"018_kb_ingest.sql",
	"019_kb_datasources.sql",
	"055_agent_auth.sql",
	"056_agent_client_runtime.sql",
}

// Options configures Open. Zero fields take their defaults.
type Options struct {
	DSN             string        // secret: never logged or in errors
	MaxOpenConns    int           // default 10
	MaxIdleConns    int           // default 10 (MaxOpenConns: see config.Catalog)
	ConnMaxLifetime time.Duration // default 5m
	QueryTimeout    time.Duration // per query, default 2s
	DocCacheEntries int           // revision/body cache size, default 512, never 0
	DocCacheBytes   int64         // revision/body cache text budget in bytes, default 64 MiB
	Breaker         breaker.Settings
	Metrics         *Metrics // nil: no metrics
	// TracerProvider, when set, gives every query a CLIENT span named by
	// its label (SPEC §9). nil: no tracing.
	TracerProvider trace.TracerProvider
}

// DefaultOptions returns the defaults of Options' settings, their one
// source (config's Defaults maps them onto the catalog section): 10 open
// and 10 idle connections, recycled after 5m, 2s per query, a document
// cache of 512 entries and 64 MiB, and the breaker's defaults.
func DefaultOptions() Options {
	return Options{
		MaxOpenConns: 10, MaxIdleConns: 10, ConnMaxLifetime: 5 * time.Minute, QueryTimeout: 2 * time.Second,
		DocCacheEntries: 512, DocCacheBytes: 64 << 20, Breaker: breaker.DefaultSettings(),
	}
}

// withDefaults fills zero settings from DefaultOptions (the breaker fills
// its own).
func (o Options) withDefaults() Options {
	d := DefaultOptions()
	positiveOr(&o.MaxOpenConns, d.MaxOpenConns)
	positiveOr(&o.MaxIdleConns, d.MaxIdleConns)
	positiveOr(&o.ConnMaxLifetime, d.ConnMaxLifetime)
	positiveOr(&o.QueryTimeout, d.QueryTimeout)
	positiveOr(&o.DocCacheEntries, d.DocCacheEntries)
	positiveOr(&o.DocCacheBytes, d.DocCacheBytes)
	return o
}

// positiveOr sets *v to d when it is not positive (a zero setting).
func positiveOr[T int | int64 | time.Duration](v *T, d T) {
	if *v <= 0 {
		*v = d
	}
}

// ErrInvalidDSN: the catalog DSN cannot be parsed. The message never repeats
// the DSN.
var ErrInvalidDSN = errors.New("catalog dsn is not valid")

// SchemaError: Core's database lacks migrations the catalog depends on (Q0).
// It does not wrap ErrUnavailable: the database answered, the schema is wrong.
type SchemaError struct {
	Missing []string // migration file names, e.g. "056_agent_client_runtime.sql"
}

func (e *SchemaError) Error() string {
	return "catalog schema is missing core migrations: " + strings.Join(e.Missing, ", ")
}

// CatalogError is a failed catalog query: connection, timeout, permission or
// server error. It wraps ErrUnavailable; its message names the query and a
// reason, never the DSN, an address, SQL or a value. The driver's error stays
// reachable for errors.As (e.g. *mysql.MySQLError) but is not printed.
type CatalogError struct {
	Query  string // one of the Query* names
	Reason string // "timeout", "access denied", "schema mismatch", "server error", "connection failed"
	err    error
}

func (e *CatalogError) Error() string {
	return "catalog " + e.Query + " query failed: " + e.Reason
}

// Unwrap exposes ErrUnavailable and the cause.
func (e *CatalogError) Unwrap() []error { return []error{corefacts.ErrUnavailable, e.err} }

// NormalizeDSN returns dsn with parseTime=true, loc=UTC and charset=utf8mb4
// forced (a utf8mb4_* collation given in dsn is kept; any other is dropped).
func NormalizeDSN(dsn string) (string, error) {
	cfg, err := normalizedConfig(dsn)
	if err != nil {
		return "", err
	}
	return cfg.FormatDSN(), nil
}

func normalizedConfig(dsn string) (*mysql.Config, error) {
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return nil, ErrInvalidDSN // the parser's message may quote the DSN
	}
	cfg.ParseTime = true
	cfg.Loc = time.UTC
	// Arguments are interpolated by the driver (utf8mb4 only, which it
	// escapes safely), so a query is one round trip instead of prepare,
	// execute and close: a third of the catalog's latency and driver CPU
	// on the knowledge paths. The task query keeps its prepared statement.
	cfg.InterpolateParams = true
	collation := ""
	if strings.HasPrefix(cfg.Collation, "utf8mb4_") {
		collation = cfg.Collation
	}
	if err := cfg.Apply(mysql.Charset("utf8mb4", collation)); err != nil {
		return nil, ErrInvalidDSN
	}
	return cfg, nil
}

var silenceDriver sync.Once

// SQLCatalog is the read-only catalog on Core's MySQL/MariaDB. It implements
// knowledge.Catalog. Safe for concurrent use.
type SQLCatalog struct {
	db      *sql.DB
	opts    Options
	breaker *breaker.Breaker
	cache   *docCache
	tracer  trace.Tracer // nil: tracing off

	taskMu       sync.Mutex
	taskPrepared *sql.Stmt // tasks.go
}

// Open prepares the connection pool (no I/O yet: use CheckSchema for
// readiness). The DSN gets parseTime=true, loc=UTC and charset=utf8mb4.
//
// It also silences the MySQL driver's process-wide logger, whose messages can
// carry server addresses; failures still reach the caller as *CatalogError
// and the catalog metrics.
func Open(o Options) (*SQLCatalog, error) {
	silenceDriver.Do(func() { _ = mysql.SetLogger(log.New(io.Discard, "", 0)) })
	o = o.withDefaults()
	cfg, err := normalizedConfig(o.DSN)
	if err != nil {
		return nil, err
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = o.QueryTimeout // dial timeout; queries also carry a deadline
	}
	connector, err := mysql.NewConnector(cfg)
	if err != nil {
		return nil, ErrInvalidDSN
	}
	db := sql.OpenDB(connector)
	db.SetMaxOpenConns(o.MaxOpenConns)
	db.SetMaxIdleConns(o.MaxIdleConns)
	db.SetConnMaxLifetime(o.ConnMaxLifetime)
	o.DSN = "" // not kept around
	return &SQLCatalog{
		db:      db,
		opts:    o,
		breaker: breaker.New(breaker.FamilyCatalog, o.Breaker, o.Metrics.Breakers()),
		cache:   newDocCache(o.DocCacheEntries, o.DocCacheBytes),
		tracer:  telemetry.Tracer(o.TracerProvider),
	}, nil
}

// Close closes the connection pool (and the task statement, tasks.go).
func (c *SQLCatalog) Close() error {
	c.taskMu.Lock()
	if c.taskPrepared != nil {
		c.taskPrepared.Close()
		c.taskPrepared = nil
	}
	c.taskMu.Unlock()
	return c.db.Close()
}

// Usable is false while the catalog breaker is open.
func (c *SQLCatalog) Usable() bool { return !c.breaker.Open() }

// CheckSchema (Q0) verifies that the Core migrations the catalog reads are
// applied: 008, 018, 019, 055, 056. A missing migration (or a missing
// bz_schema_migrations table) gives a *SchemaError naming the files.
func (c *SQLCatalog) CheckSchema(ctx context.Context) error {
	found := map[string]bool{}
	noTable := false
	err := c.do(ctx, QuerySchema, func(ctx context.Context) error {
		err := c.eachString(ctx, fmt.Sprintf(q0Schema, placeholders(len(requiredMigrations))), anys(requiredMigrations),
			func(f string) { found[strings.ToLower(f)] = true })
		var me *mysql.MySQLError
		if errors.As(err, &me) && me.Number == 1146 { // ER_NO_SUCH_TABLE
			noTable = true
			return nil
		}
		return err
	})
	if err != nil {
		return err
	}
	var missing []string
	for _, f := range requiredMigrations {
		if noTable || !found[f] {
			missing = append(missing, f)
		}
	}
	if len(missing) > 0 {
		return &SchemaError{Missing: missing}
	}
	return nil
}
