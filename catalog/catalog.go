package catalog

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/go-sql-driver/mysql"
	"go.opentelemetry.io/otel/trace"

	"github.com/bailinghub/knowledge-sidecar/breaker"
	"github.com/bailinghub/knowledge-sidecar/config"
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

// withDefaults fills zero settings from config.Defaults, their one source.
func (o Options) withDefaults() Options {
	d := config.Defaults().Catalog
	if o.MaxOpenConns <= 0 {
		o.MaxOpenConns = d.MaxOpenConns
	}
	if o.MaxIdleConns <= 0 {
		o.MaxIdleConns = d.MaxIdleConns
	}
	if o.ConnMaxLifetime <= 0 {
		o.ConnMaxLifetime = d.ConnMaxLifetime
	}
	if o.QueryTimeout <= 0 {
		o.QueryTimeout = d.QueryTimeout
	}
	if o.DocCacheEntries <= 0 {
		o.DocCacheEntries = d.DocCacheEntries
	}
	if o.DocCacheBytes <= 0 {
		o.DocCacheBytes = d.DocCacheBytes
	}
	return o
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
		breaker: breaker.New(breaker.FamilyCatalog, o.Breaker, o.Metrics.breakerMetrics()),
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
		rows, err := c.db.QueryContext(ctx, fmt.Sprintf(q0Schema, placeholders(len(requiredMigrations))), anys(requiredMigrations)...)
		var me *mysql.MySQLError
		if errors.As(err, &me) && me.Number == 1146 { // ER_NO_SUCH_TABLE
			noTable = true
			return nil
		}
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var f string
			if err := rows.Scan(&f); err != nil {
				return err
			}
			found[strings.ToLower(f)] = true
		}
		return rows.Err()
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

// Route (Q1) returns the route with its normalized knowledge config. Key is
// the stored route_key (the lookup is case-insensitive, as the database's
// collation is). ErrNotFound when unknown.
func (c *SQLCatalog) Route(ctx context.Context, key corefacts.RouteKey) (corefacts.Route, error) {
	row, err := c.route(ctx, key)
	if err != nil {
		return corefacts.Route{}, err
	}
	return routeOf(row.key, row.enabled, row.knowledge)
}

type routeRow struct {
	key                 string
	enabled             bool
	knowledge, audience []byte
}

func (c *SQLCatalog) route(ctx context.Context, key corefacts.RouteKey) (routeRow, error) {
	var r routeRow
	err := c.do(ctx, QueryRoute, func(ctx context.Context) error {
		var enabled int64
		err := c.db.QueryRowContext(ctx, q1Route, key.String()).Scan(&r.key, &enabled, &r.knowledge, &r.audience)
		r.enabled = enabled != 0
		return err
	})
	return r, err
}

// RouteBundle reads route key with the rows of kbIDs and, when docID > 0,
// the document docID fenced to kbIDs, in one statement (q1Bundle,
// q1BundleDoc; a body missing from the revision cache costs Q4). The route
// is ErrNotFound when unknown, as Route. Longer KB lists than one IN list
// holds fall back to Route, KBs and Document.
func (c *SQLCatalog) RouteBundle(ctx context.Context, key corefacts.RouteKey, kbIDs []string, docID int64) (corefacts.RouteBundle, error) {
	kbs := uniqueIDs(kbIDs)
	if len(kbs) == 0 || len(kbs) > MaxIDsPerQuery {
		return bundleApart(ctx, c, key, kbIDs, docID)
	}
	var (
		row     routeRow
		b       = corefacts.RouteBundle{KBs: make(map[string]corefacts.KB, len(kbs)), Asked: kbIDs}
		meta    metaRow
		hasMeta bool
	)
	err := c.do(ctx, QueryRoute, func(ctx context.Context) error {
		var rows *sql.Rows
		var err error
		if docID > 0 {
			args := append(anys(kbs), docID)
			args = append(append(args, anys(kbs)...), key.String())
			rows, err = c.db.QueryContext(ctx, fmt.Sprintf(q1BundleDoc, placeholders(len(kbs)), placeholders(len(kbs))), args...)
		} else {
			rows, err = c.db.QueryContext(ctx, fmt.Sprintf(q1Bundle, placeholders(len(kbs))), append(anys(kbs), key.String())...)
		}
		if err != nil {
			return err
		}
		defer rows.Close()
		n := 0
		for rows.Next() {
			var (
				enabled   int64
				kbID      sql.NullString
				kbEnabled sql.NullInt64
				dst       = []any{&row.key, &enabled, &row.knowledge, &kbID, &kbEnabled}
				dID       sql.NullInt64
				dKB, dT   sql.NullString
				dSt, hash sql.NullString
				dUp       sql.NullTime
			)
			if docID > 0 {
				dst = append(dst, &dID, &dKB, &dT, &dSt, &hash, &dUp)
			}
			if err := rows.Scan(dst...); err != nil {
				return err
			}
			n++
			row.enabled = enabled != 0
			if kbID.Valid {
				for _, want := range kbIDs {
					if corefacts.SameID(want, kbID.String) {
						b.KBs[want] = corefacts.KB{ID: kbID.String, Enabled: kbEnabled.Int64 != 0}
					}
				}
			}
			if dID.Valid && !hasMeta {
				hasMeta = true
				meta = metaRow{DocMeta: corefacts.DocMeta{DocID: dID.Int64, KBID: fenceSpelling(kbIDs, dKB.String), Title: dT.String,
					Status: dSt.String, ContentHash: hash.String, UpdatedAt: dUp.Time}, hashNull: !hash.Valid}
			}
		}
		if err := rows.Err(); err != nil {
			return err
		}
		if n == 0 {
			return sql.ErrNoRows
		}
		return nil
	})
	if err != nil {
		return corefacts.RouteBundle{}, err
	}
	if b.Route, err = routeOf(row.key, row.enabled, row.knowledge); err != nil {
		return corefacts.RouteBundle{}, err
	}
	if hasMeta {
		b.Doc, b.DocFound, b.DocErr = c.current(ctx, meta, kbIDs)
	}
	return b, nil
}

// bundleSource is what a bundle read apart needs: SQLCatalog and MemCatalog.
type bundleSource interface {
	Route(ctx context.Context, key corefacts.RouteKey) (corefacts.Route, error)
	KBs(ctx context.Context, kbIDs []string) (map[string]corefacts.KB, error)
	Document(ctx context.Context, docID int64, kbIDs []string) (corefacts.Document, error)
}

// bundleApart is RouteBundle in separate reads: the SQL catalog's when no KB
// is asked or more than one IN list holds, and the whole of MemCatalog's.
func bundleApart(ctx context.Context, c bundleSource, key corefacts.RouteKey, kbIDs []string, docID int64) (corefacts.RouteBundle, error) {
	r, err := c.Route(ctx, key)
	if err != nil {
		return corefacts.RouteBundle{}, err
	}
	b := corefacts.RouteBundle{Route: r, Asked: kbIDs}
	if len(kbIDs) == 0 {
		b.KBs = map[string]corefacts.KB{}
		return b, nil
	}
	if b.KBs, err = c.KBs(ctx, kbIDs); err != nil {
		return corefacts.RouteBundle{}, err
	}
	if docID > 0 {
		b.Doc, b.DocErr = c.Document(ctx, docID, kbIDs)
		b.DocFound = b.DocErr == nil
		if errors.Is(b.DocErr, corefacts.ErrNotFound) {
			b.DocErr = nil
		}
	}
	return b, nil
}

// routeOf builds a Route, shared with MemCatalog. A malformed knowledge column
// is reported as unavailable: the sidecar cannot tell what Core would do.
func routeOf(key string, enabled bool, knowledge []byte) (corefacts.Route, error) {
	kc, err := normalized.get(knowledge)
	if err != nil {
		return corefacts.Route{}, fmt.Errorf("%w: route knowledge: %w", corefacts.ErrUnavailable, err)
	}
	return corefacts.Route{Key: key, Enabled: enabled, Knowledge: kc}, nil
}

// Bounds of the normalization memo.
const (
	normMemoEntries = 256
	normMemoMaxRaw  = 4 << 10
)

// normalized memoizes NormalizeKnowledge, a pure function of the column's
// bytes, so the JSON decoding is not redone on every Route call of every
// request. It is not a cache of the route: the row is still read on every
// call, and a changed column is a different key. Safe for concurrent use.
var normalized = &normMemo{m: map[string]normResult{}}

type normMemo struct {
	mu sync.RWMutex
	m  map[string]normResult // by the raw column bytes
}

type normResult struct {
	kc  *corefacts.KnowledgeConfig
	err error
}

// get returns NormalizeKnowledge(raw), with a config of the caller's own (the
// memo's copy is never handed out, so callers may modify theirs). Columns
// longer than normMemoMaxRaw are not memoized; when the memo is full it is
// emptied (route configurations are few, so this happens only on churn).
func (n *normMemo) get(raw []byte) (*corefacts.KnowledgeConfig, error) {
	if len(raw) > normMemoMaxRaw {
		return NormalizeKnowledge(raw)
	}
	n.mu.RLock()
	r, ok := n.m[string(raw)]
	n.mu.RUnlock()
	if !ok {
		r.kc, r.err = NormalizeKnowledge(raw)
		n.mu.Lock()
		if len(n.m) >= normMemoEntries {
			clear(n.m)
		}
		n.m[string(raw)] = r
		n.mu.Unlock()
	}
	return cloneKnowledge(r.kc), r.err
}

// cloneKnowledge is a deep copy; nil stays nil.
func cloneKnowledge(k *corefacts.KnowledgeConfig) *corefacts.KnowledgeConfig {
	if k == nil {
		return nil
	}
	c := *k
	c.KBIDs = append([]string(nil), k.KBIDs...)
	return &c
}

// RouteGate is the gate for Cores without system-info (Q1 + Q7, session from
// HTTP). See decideGate for the rules; nil means allowed, otherwise a
// *CoreError, or an error wrapping ErrUnavailable.
func (c *SQLCatalog) RouteGate(ctx context.Context, route corefacts.RouteKey, s corefacts.Session) error {
	var gr *gateRoute
	row, err := c.route(ctx, route)
	switch {
	case err == nil:
		gr = &gateRoute{Enabled: row.enabled, Audience: row.audience}
	case !errors.Is(err, corefacts.ErrNotFound):
		return err
	default:
		return decideGate(route.String(), nil, nil, s)
	}
	var gc *gateClient
	if s.ClientAppID != "" {
		var cl gateClient
		err := c.do(ctx, QueryClient, func(ctx context.Context) error {
			var enabled int64
			var url sql.NullString
			var appID string
			err := c.db.QueryRowContext(ctx, q7Client, s.ClientAppID).Scan(&appID, &enabled, &cl.AllowedRoutes, &url)
			cl.Enabled, cl.AuthorizeURL = enabled != 0, url.String
			return err
		})
		switch {
		case err == nil:
			gc = &cl
		case !errors.Is(err, corefacts.ErrNotFound):
			return err
		}
	}
	return decideGate(route.String(), gr, gc, s)
}

// KBEnabled (Q2) maps each requested KB id that exists to its enabled flag
// (enabled <> 0). Keys are the ids as requested; a row matches a requested id
// the way the database's case-insensitive collation does (SameID). A missing
// id was deleted.
func (c *SQLCatalog) KBEnabled(ctx context.Context, kbIDs []string) (map[string]bool, error) {
	kbs, err := c.KBs(ctx, kbIDs)
	return enabledFlags(kbs), err
}

// enabledFlags is KBEnabled's view of a KBs answer (nil stays nil).
func enabledFlags(kbs map[string]corefacts.KB) map[string]bool {
	if kbs == nil {
		return nil
	}
	out := make(map[string]bool, len(kbs))
	for id, kb := range kbs {
		out[id] = kb.Enabled
	}
	return out
}

// KBs (Q2) is KBEnabled with each row's kb_id as stored: keys are the ids
// as requested, KB.ID the database's spelling (the one to send to Core).
func (c *SQLCatalog) KBs(ctx context.Context, kbIDs []string) (map[string]corefacts.KB, error) {
	out := make(map[string]corefacts.KB, len(kbIDs))
	ids := uniqueIDs(kbIDs)
	for _, chunk := range chunks(ids) {
		err := c.do(ctx, QueryKBs, func(ctx context.Context) error {
			rows, err := c.db.QueryContext(ctx, fmt.Sprintf(q2KBs, placeholders(len(chunk))), anys(chunk)...)
			if err != nil {
				return err
			}
			defer rows.Close()
			for rows.Next() {
				var id string
				var enabled int64
				if err := rows.Scan(&id, &enabled); err != nil {
					return err
				}
				for _, want := range kbIDs {
					if corefacts.SameID(want, id) {
						out[want] = corefacts.KB{ID: id, Enabled: enabled != 0}
					}
				}
			}
			return rows.Err()
		})
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

// ReadyKBs (Q9) reports which of kbIDs hold at least one document with
// status ready: keys are the ids as requested (matched like KBs), only
// true values. A KB without a row is never ready. Search asks it only for
// the KBs whose unfiltered /kb/search answer had no hit at all: such a KB
// that holds a ready document has failed silently (SPEC §4).
func (c *SQLCatalog) ReadyKBs(ctx context.Context, kbIDs []string) (map[string]bool, error) {
	out := make(map[string]bool, len(kbIDs))
	ids := uniqueIDs(kbIDs)
	for _, chunk := range chunks(ids) {
		err := c.do(ctx, QueryReadyKBs, func(ctx context.Context) error {
			rows, err := c.db.QueryContext(ctx, fmt.Sprintf(q9ReadyKBs, placeholders(len(chunk))), append(anys(chunk), corefacts.StatusReady)...)
			if err != nil {
				return err
			}
			defer rows.Close()
			for rows.Next() {
				var id string
				if err := rows.Scan(&id); err != nil {
					return err
				}
				for _, want := range kbIDs {
					if corefacts.SameID(want, id) {
						out[want] = true
					}
				}
			}
			return rows.Err()
		})
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

// Documents (Q3, then Q4 for cache misses) returns the current documents among
// docIDs whose KB is one of kbIDs. Documents outside the fence or absent are
// not in the map. Ready documents carry Content and Revision; others only
// their metadata (Status tells why). KBID is given in the spelling of the
// matching kbIDs entry. Bodies come from the revision cache when the fresh
// metadata (doc_id, content_hash, updated_at) still matches.
func (c *SQLCatalog) Documents(ctx context.Context, docIDs []int64, kbIDs []string) (map[int64]corefacts.Document, error) {
	metas, err := c.metas(ctx, docIDs, kbIDs)
	if err != nil {
		return nil, err
	}
	out := make(map[int64]corefacts.Document, len(metas))
	for _, m := range metas {
		d, ok, err := c.current(ctx, m, kbIDs)
		if err != nil {
			return nil, err
		}
		if ok {
			out[d.DocID] = d
		}
	}
	return out, nil
}

// Document is Documents for one id; ErrNotFound when absent or out of fence.
func (c *SQLCatalog) Document(ctx context.Context, docID int64, kbIDs []string) (corefacts.Document, error) {
	metas, err := c.metas(ctx, []int64{docID}, kbIDs)
	if err != nil {
		return corefacts.Document{}, err
	}
	if len(metas) == 0 {
		return corefacts.Document{}, fmt.Errorf("catalog document: %w", corefacts.ErrNotFound)
	}
	d, ok, err := c.current(ctx, metas[0], kbIDs)
	if err != nil {
		return corefacts.Document{}, err
	}
	if !ok {
		return corefacts.Document{}, fmt.Errorf("catalog document: %w", corefacts.ErrNotFound)
	}
	return d, nil
}

type metaRow struct {
	corefacts.DocMeta
	hashNull bool
}

// metas runs Q3 (no body) over docIDs × kbIDs, split into IN lists of at most
// MaxIDsPerQuery.
func (c *SQLCatalog) metas(ctx context.Context, docIDs []int64, kbIDs []string) ([]metaRow, error) {
	var out []metaRow
	docs := uniqueInts(docIDs)
	kbs := uniqueIDs(kbIDs)
	for _, dc := range chunks(docs) {
		for _, kc := range chunks(kbs) {
			err := c.do(ctx, QueryDocMeta, func(ctx context.Context) error {
				q := fmt.Sprintf(q3Meta, placeholders(len(dc)), placeholders(len(kc)))
				rows, err := c.db.QueryContext(ctx, q, append(anys(dc), anys(kc)...)...)
				if err != nil {
					return err
				}
				defer rows.Close()
				for rows.Next() {
					var m metaRow
					var hash sql.NullString
					if err := rows.Scan(&m.DocID, &m.KBID, &m.Title, &m.Status, &hash, &m.UpdatedAt); err != nil {
						return err
					}
					m.ContentHash, m.hashNull = hash.String, !hash.Valid
					m.KBID = fenceSpelling(kbIDs, m.KBID)
					out = append(out, m)
				}
				return rows.Err()
			})
			if err != nil {
				return nil, err
			}
		}
	}
	return out, nil
}

// current turns fresh metadata into the document: not ready → metadata only;
// cache hit → cached body; miss → Q4, fenced to the document's KB (which is
// one of the route's), and the result is cached. ok is false when the
// document vanished between Q3 and Q4.
func (c *SQLCatalog) current(ctx context.Context, m metaRow, kbIDs []string) (corefacts.Document, bool, error) {
	if m.Status != corefacts.StatusReady {
		return corefacts.Document{DocMeta: m.DocMeta}, true, nil
	}
	if e, ok := c.cache.get(keyOf(m.DocMeta, m.hashNull), m.Title); ok {
		return corefacts.Document{DocMeta: m.DocMeta, Content: e.content, Revision: e.revision}, true, nil
	}
	var b metaRow
	var content string
	err := c.do(ctx, QueryDocBody, func(ctx context.Context) error {
		var hash sql.NullString
		err := c.db.QueryRowContext(ctx, fmt.Sprintf(q4Body, placeholders(1)), m.DocID, m.KBID).
			Scan(&b.DocID, &b.KBID, &b.Title, &content, &hash, &b.Status, &b.UpdatedAt)
		b.ContentHash, b.hashNull = hash.String, !hash.Valid
		return err
	})
	if errors.Is(err, corefacts.ErrNotFound) {
		return corefacts.Document{}, false, nil
	}
	if err != nil {
		return corefacts.Document{}, false, err
	}
	b.KBID = fenceSpelling(kbIDs, b.KBID)
	if b.Status != corefacts.StatusReady { // changed since Q3: the fresher row wins
		return corefacts.Document{DocMeta: b.DocMeta}, true, nil
	}
	rev := corefacts.Revision(b.Title, content)
	c.cache.add(keyOf(b.DocMeta, b.hashNull), docEntry{title: b.Title, content: content, revision: rev})
	return corefacts.Document{DocMeta: b.DocMeta, Content: content, Revision: rev}, true, nil
}

// Run (Q5) returns a run row; ErrNotFound when absent. The lookup is
// case-insensitive (CHAR(36) with a _ci collation).
func (c *SQLCatalog) Run(ctx context.Context, runID string) (corefacts.Run, error) {
	var r corefacts.Run
	err := c.do(ctx, QueryRun, func(ctx context.Context) error {
		var completed sql.NullTime
		err := c.db.QueryRowContext(ctx, q5Run, runID).Scan(&r.RunID, &r.SessionID, &r.ClientAppID, &r.RouteKey, &r.Status, &completed)
		if completed.Valid {
			t := completed.Time.UTC()
			r.CompletedAt = &t
		}
		return err
	})
	if err != nil {
		return corefacts.Run{}, err
	}
	return r, nil
}

// do runs one query through the catalog breaker with the per-query timeout and
// turns its error into the catalog's error contract:
//   - sql.ErrNoRows → ErrNotFound (a success for the breaker);
//   - the caller's ctx done → its ctx error (excluded by the breaker);
//   - anything else → *CatalogError (wraps ErrUnavailable, trips the breaker).
func (c *SQLCatalog) do(ctx context.Context, query string, fn func(context.Context) error) error {
	start := time.Now()
	err := c.breaker.Do(ctx, func(ctx context.Context) error {
		qctx, cancel := context.WithTimeout(ctx, c.opts.QueryTimeout)
		defer cancel()
		if c.tracer != nil && trace.SpanContextFromContext(qctx).IsValid() {
			// Queries of a request only: background checks start no trace.
			var span trace.Span
			qctx, span = startQuerySpan(qctx, c.tracer, query)
			err := classify(ctx, query, fn(qctx))
			endQuerySpan(span, outcomeOf(err))
			return err
		}
		return classify(ctx, query, fn(qctx))
	})
	if c.tracer != nil && errors.Is(err, corefacts.ErrBreakerOpen) {
		breaker.MarkRefused(ctx, c.breaker)
	}
	if c.opts.Metrics != nil {
		c.opts.Metrics.Observe(query, outcomeOf(err), time.Since(start))
	}
	return err
}

func classify(parent context.Context, query string, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, sql.ErrNoRows):
		return fmt.Errorf("catalog %s: %w", query, corefacts.ErrNotFound)
	case parent.Err() != nil:
		return fmt.Errorf("catalog %s query abandoned: %w", query, parent.Err())
	case errors.Is(err, corefacts.ErrTaskUnavailable): // the database answered (tasks.go)
		return err
	}
	reason := "connection failed"
	var me *mysql.MySQLError
	var ne net.Error
	switch {
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		reason = "timeout"
	case errors.As(err, &me):
		switch me.Number {
		case 1044, 1045, 1142, 1143, 1227: // access denied to db/user/table/column/operation
			reason = "access denied"
		case 1054, 1146: // unknown column, no such table
			reason = "schema mismatch"
		default:
			reason = "server error"
		}
	}
	return &CatalogError{Query: query, Reason: reason, err: err}
}

func outcomeOf(err error) string {
	switch {
	case err == nil:
		return OutcomeOK
	case errors.Is(err, corefacts.ErrNotFound):
		return OutcomeNotFound
	case errors.Is(err, corefacts.ErrTaskUnavailable):
		return OutcomeQueryError
	case errors.Is(err, corefacts.ErrBreakerOpen):
		return OutcomeOpen
	case errors.Is(err, corefacts.ErrUnavailable):
		return OutcomeUnavailable
	default:
		return OutcomeCanceled
	}
}

// fenceSpelling returns the entry of kbIDs that names kb, so that callers can
// compare a document's KB with the route's list by plain equality. When none
// matches in Go (an accent-insensitive collation match), kb is kept as stored:
// the database did the fencing and Go never filters it again.
func fenceSpelling(kbIDs []string, kb string) string {
	for _, id := range kbIDs {
		if corefacts.SameID(id, kb) {
			return id
		}
	}
	return kb
}

// uniqueIDs drops empty ids and duplicates under SameID, keeping order.
func uniqueIDs(ids []string) []string {
	out := make([]string, 0, len(ids))
	seen := make(map[string]bool, len(ids))
	for _, id := range ids {
		k := foldID(id)
		if k == "" || seen[k] {
			continue
		}
		seen[k] = true
		out = append(out, id)
	}
	return out
}

func foldID(id string) string { return strings.ToLower(strings.TrimRight(id, " ")) }

func uniqueInts(ids []int64) []int64 {
	out := make([]int64, 0, len(ids))
	seen := make(map[int64]bool, len(ids))
	for _, id := range ids {
		if !seen[id] {
			seen[id] = true
			out = append(out, id)
		}
	}
	return out
}

func chunks[T any](xs []T) [][]T {
	var out [][]T
	for len(xs) > 0 {
		n := min(len(xs), MaxIDsPerQuery)
		out = append(out, xs[:n])
		xs = xs[n:]
	}
	return out
}

func placeholders(n int) string {
	return strings.TrimSuffix(strings.Repeat("?, ", n), ", ")
}

func anys[T any](xs []T) []any {
	out := make([]any, len(xs))
	for i, x := range xs {
		out[i] = x
	}
	return out
}
