package catalog_test

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net"
	"reflect"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/go-sql-driver/mysql"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/bailinghub/knowledge-sidecar/breaker"
	"github.com/bailinghub/knowledge-sidecar/catalog"
	"github.com/bailinghub/knowledge-sidecar/corefacts"
	"github.com/bailinghub/knowledge-sidecar/internal/testkit"
	"github.com/bailinghub/knowledge-sidecar/internal/testkit/testdb"
	"github.com/bailinghub/knowledge-sidecar/knowledge"
)

// TestMain prints one line when tests were skipped for want of MariaDB.
func TestMain(m *testing.M) { testkit.Main(m) }

// Both catalogs satisfy the consumer's interface.
var (
	_ knowledge.Catalog = (*catalog.SQLCatalog)(nil)
	_ knowledge.Catalog = (*catalog.MemCatalog)(nil)
)

func sha(title, content string) string {
	h := sha256.Sum256([]byte(title + "\x00" + content))
	return hex.EncodeToString(h[:])
}

// openSQL opens the catalog AS the read-only user, which has only the column
// GRANTs of docs/core-contract.md: every query of these tests proves it reads
// nothing else.
func openSQL(t *testing.T, db *testdb.DB, reg prometheus.Registerer) *catalog.SQLCatalog {
	t.Helper()
	c, err := catalog.Open(catalog.Options{DSN: db.ReadOnlyDSN, Metrics: catalog.NewMetrics(reg)})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// memFromDB fills a MemCatalog with the rows of the test database, so both
// catalogs answer from the very same fixtures.
func memFromDB(t *testing.T, db *testdb.DB) *catalog.MemCatalog {
	t.Helper()
	ctx := context.Background()
	m := catalog.NewMemCatalog()
	each := func(q string, scan func(*sql.Rows) error) {
		rows, err := db.Admin.QueryContext(ctx, q)
		if err != nil {
			t.Fatalf("load: %v", err)
		}
		defer rows.Close()
		for rows.Next() {
			if err := scan(rows); err != nil {
				t.Fatalf("load: %v", err)
			}
		}
		if err := rows.Err(); err != nil {
			t.Fatalf("load: %v", err)
		}
	}
	each("SELECT route_key, enabled, knowledge, audience FROM bz_routes", func(r *sql.Rows) error {
		var key string
		var enabled int
		var kn, aud sql.NullString
		if err := r.Scan(&key, &enabled, &kn, &aud); err != nil {
			return err
		}
		m.PutRoute(key, enabled != 0, kn.String)
		m.SetAudience(key, aud.String)
		return nil
	})
	each("SELECT kb_id, enabled FROM bz_kb_bases", func(r *sql.Rows) error {
		var id string
		var enabled int
		if err := r.Scan(&id, &enabled); err != nil {
			return err
		}
		m.PutKB(id, enabled != 0)
		return nil
	})
	each("SELECT doc_id, kb_id, title, content, content_hash, status, updated_at FROM bz_kb_docs", func(r *sql.Rows) error {
		var d corefacts.Document
		var hash sql.NullString
		if err := r.Scan(&d.DocID, &d.KBID, &d.Title, &d.Content, &hash, &d.Status, &d.UpdatedAt); err != nil {
			return err
		}
		d.ContentHash = hash.String
		m.PutDoc(d)
		return nil
	})
	each("SELECT run_id, session_id, client_app_id, route_key, status, completed_at FROM bz_agent_client_runs", func(r *sql.Rows) error {
		var run corefacts.Run
		var done sql.NullTime
		if err := r.Scan(&run.RunID, &run.SessionID, &run.ClientAppID, &run.RouteKey, &run.Status, &done); err != nil {
			return err
		}
		if done.Valid {
			run.CompletedAt = &done.Time
		}
		m.PutRun(run)
		return nil
	})
	each("SELECT app_id, enabled, allowed_routes, agent_authorize_url FROM bz_clients", func(r *sql.Rows) error {
		var id string
		var enabled int
		var routes []byte
		var url sql.NullString
		if err := r.Scan(&id, &enabled, &routes, &url); err != nil {
			return err
		}
		var list []string
		if routes != nil {
			if err := json.Unmarshal(routes, &list); err != nil {
				return err
			}
		}
		m.PutClient(id, enabled != 0, list, url.String)
		return nil
	})
	return m
}

// docView is what the parity table compares of a Document.
type docView struct {
	KBID, Title, Status, Revision string
	Chars                         int
}

func view(d corefacts.Document) docView {
	return docView{KBID: d.KBID, Title: d.Title, Status: d.Status, Revision: d.Revision, Chars: utf8.RuneCountInString(d.Content)}
}

func views(m map[int64]corefacts.Document) map[int64]docView {
	out := make(map[int64]docView, len(m))
	for id, d := range m {
		out[id] = view(d)
	}
	return out
}

func gateCode(err error) string {
	var ce *corefacts.CoreError
	if errors.As(err, &ce) {
		return strconv.Itoa(ce.Status) + " " + ce.Code
	}
	if err != nil {
		return "error: " + err.Error()
	}
	return "allowed"
}

var multiKBs = []string{testdb.KBFAQ, testdb.KBManuals, testdb.KBDisabled, testdb.KBMissing}

// The shared table: every catalog query against the fixtures, run on the SQL
// catalog (real MariaDB, read-only user) and on the MemCatalog loaded from
// the same rows. Both must give the same answers.
func TestCatalogParity(t *testing.T) {
	db := testdb.New(t)
	sqlCat := openSQL(t, db, nil)
	memCat := memFromDB(t, db)

	refund := docView{KBID: testdb.KBFAQ, Title: testdb.DocRefundTitle, Status: "ready",
		Revision: sha(testdb.DocRefundTitle, testdb.DocRefundContent), Chars: utf8.RuneCountInString(testdb.DocRefundContent)}
	multi := docView{KBID: testdb.KBFAQ, Title: testdb.DocMultiByteTitle, Status: "ready",
		Revision: sha(testdb.DocMultiByteTitle, testdb.DocMultiByteContent), Chars: utf8.RuneCountInString(testdb.DocMultiByteContent)}
	big := docView{KBID: testdb.KBManuals, Title: testdb.DocBigTitle, Status: "ready",
		Revision: sha(testdb.DocBigTitle, testdb.BigDocContent()), Chars: testdb.BigDocChars}

	all := []string{testdb.RouteNull, testdb.RouteLegacy, testdb.RouteMulti, testdb.RouteEmptyKBIDs, testdb.RouteDisabled,
		testdb.RouteAudience, testdb.RouteAudienceOff, testdb.RouteQuirky, testdb.RouteCase}
	sessA := corefacts.Session{SessionID: testdb.SessionA, ClientAppID: testdb.AppA,
		Principal:     corefacts.Principal{ID: "user-42", Tenant: "tenant-7", Roles: []string{"manager"}, Audience: "internal"},
		AllowedRoutes: all}
	sess := func(app string, routes []string, f func(*corefacts.Principal)) corefacts.Session {
		s := sessA
		s.ClientAppID, s.AllowedRoutes = app, routes
		s.Principal.Roles = append([]string(nil), sessA.Principal.Roles...)
		if f != nil {
			f(&s.Principal)
		}
		return s
	}

	type tc struct {
		name string
		call func(context.Context, knowledge.Catalog) (any, error)
		want any
		err  error // errors.Is target; want ignored when set
	}
	route := func(key string) func(context.Context, knowledge.Catalog) (any, error) {
		return func(ctx context.Context, c knowledge.Catalog) (any, error) {
			return c.Route(ctx, testkit.RouteKey(key))
		}
	}
	kc := func(ids []string, topK int, min float64, inject string, maxDocs int, boost bool) *corefacts.KnowledgeConfig {
		return &corefacts.KnowledgeConfig{KBIDs: ids, TopK: topK, MinScore: min, Inject: inject, MaxDocs: maxDocs, PageBoost: boost}
	}
	gate := func(r string, s corefacts.Session) func(context.Context, knowledge.Catalog) (any, error) {
		return func(ctx context.Context, c knowledge.Catalog) (any, error) {
			return gateCode(c.RouteGate(ctx, testkit.RouteKey(r), s)), nil
		}
	}
	docs := func(ids []int64, kbs []string) func(context.Context, knowledge.Catalog) (any, error) {
		return func(ctx context.Context, c knowledge.Catalog) (any, error) {
			m, err := c.Documents(ctx, ids, kbs)
			return views(m), err
		}
	}
	doc := func(id int64, kbs []string) func(context.Context, knowledge.Catalog) (any, error) {
		return func(ctx context.Context, c knowledge.Catalog) (any, error) {
			d, err := c.Document(ctx, id, kbs)
			return view(d), err
		}
	}
	run := func(id string) func(context.Context, knowledge.Catalog) (any, error) {
		return func(ctx context.Context, c knowledge.Catalog) (any, error) { return c.Run(ctx, id) }
	}
	kbs := func(ids ...string) func(context.Context, knowledge.Catalog) (any, error) {
		return func(ctx context.Context, c knowledge.Catalog) (any, error) { return c.KBEnabled(ctx, ids) }
	}
	stored := func(ids ...string) func(context.Context, knowledge.Catalog) (any, error) {
		return func(ctx context.Context, c knowledge.Catalog) (any, error) { return c.KBs(ctx, ids) }
	}
	completedAt := testdb.RunCompletedAt

	cases := []tc{
		// Q1 routes and knowledge normalization
		{"route NULL knowledge", route(testdb.RouteNull), corefacts.Route{Key: testdb.RouteNull, Enabled: true}, nil},
		{"route legacy kb_id", route(testdb.RouteLegacy),
			corefacts.Route{Key: testdb.RouteLegacy, Enabled: true, Knowledge: kc([]string{"faq"}, 5, 0.35, "chunk", 4, false)}, nil},
		{"route kb_ids", route(testdb.RouteMulti),
			corefacts.Route{Key: testdb.RouteMulti, Enabled: true, Knowledge: kc(multiKBs, 8, 0.5, "doc", 2, true)}, nil},
		{"route empty kb_ids", route(testdb.RouteEmptyKBIDs), corefacts.Route{Key: testdb.RouteEmptyKBIDs, Enabled: true}, nil},
		{"route disabled", route(testdb.RouteDisabled),
			corefacts.Route{Key: testdb.RouteDisabled, Enabled: false, Knowledge: kc([]string{"faq"}, 5, 0.35, "chunk", 4, false)}, nil},
		{"route case variant", route(testdb.RouteCase),
			corefacts.Route{Key: testdb.RouteCaseStored, Enabled: true, Knowledge: kc([]string{testdb.KBFAQUpper}, 5, 0.35, "chunk", 4, false)}, nil},
		{"route quirky values", route(testdb.RouteQuirky),
			corefacts.Route{Key: testdb.RouteQuirky, Enabled: true, Knowledge: kc([]string{"faq"}, 7, 0, "chunk", 20, false)}, nil},
		{"route missing", route(testdb.RouteMissing), nil, corefacts.ErrNotFound},

		// Q2 KB flags
		{"kbs of multi route", kbs(multiKBs...), map[string]bool{"faq": true, "manuals": true, "kb-disabled": false}, nil},
		{"kbs case variant keyed as asked", kbs(testdb.KBFAQUpper, testdb.KBOther), map[string]bool{"FAQ": true, "other-kb": true}, nil},
		{"kbs none", kbs(), map[string]bool{}, nil},
		// The spelling stored in bz_kb_bases, the one to send to /kb/search.
		{"kbs stored spelling", stored(testdb.KBFAQUpper, testdb.KBOther, "kb-missing"),
			map[string]corefacts.KB{"FAQ": {ID: "faq", Enabled: true}, "other-kb": {ID: "other-kb", Enabled: true}}, nil},

		// Q3/Q4 documents
		{"documents fenced", docs([]int64{101, 102, 103, 104, 105, 106, 107, 999}, multiKBs), map[int64]docView{
			101: refund, 102: multi,
			103: {KBID: "faq", Title: "Embedding doc", Status: "embedding"},
			104: {KBID: "manuals", Title: "Broken doc", Status: "error"},
			105: big,
			106: {KBID: "kb-disabled", Title: "Disabled KB doc", Status: "ready",
				Revision: sha("Disabled KB doc", "Body in a disabled knowledge base."), Chars: len("Body in a disabled knowledge base.")},
		}, nil},
		{"documents fence spelled like the route", docs([]int64{101, 104}, []string{testdb.KBFAQUpper}), map[int64]docView{
			101: {KBID: "FAQ", Title: refund.Title, Status: "ready", Revision: refund.Revision, Chars: refund.Chars},
		}, nil},
		{"documents empty fence", docs([]int64{101}, nil), map[int64]docView{}, nil},
		{"documents none", docs(nil, multiKBs), map[int64]docView{}, nil},
		{"document big body", doc(testdb.DocBig, multiKBs), big, nil},
		{"document multi-byte", doc(testdb.DocMultiByte, []string{"faq"}), multi, nil},
		{"document not ready has no body", doc(testdb.DocEmbedding, multiKBs), docView{KBID: "faq", Title: "Embedding doc", Status: "embedding"}, nil},
		{"document outside fence", doc(testdb.DocOtherKB, multiKBs), nil, corefacts.ErrNotFound},
		{"document missing", doc(testdb.DocMissing, multiKBs), nil, corefacts.ErrNotFound},

		// Q5 runs
		{"run active", run(testdb.RunActive), corefacts.Run{RunID: testdb.RunActive, SessionID: testdb.SessionA,
			ClientAppID: testdb.AppA, RouteKey: testdb.RouteMulti, Status: "context_ready"}, nil},
		{"run completed", run(testdb.RunCompleted), corefacts.Run{RunID: testdb.RunCompleted, SessionID: testdb.SessionA,
			ClientAppID: testdb.AppA, RouteKey: testdb.RouteMulti, Status: "completed", CompletedAt: &completedAt}, nil},
		{"run foreign", run(testdb.RunForeign), corefacts.Run{RunID: testdb.RunForeign, SessionID: testdb.SessionB,
			ClientAppID: testdb.AppB, RouteKey: testdb.RouteMulti, Status: "context_ready"}, nil},
		{"run id case variant", run(strings.ToUpper(testdb.RunActive)), corefacts.Run{RunID: testdb.RunActive, SessionID: testdb.SessionA,
			ClientAppID: testdb.AppA, RouteKey: testdb.RouteMulti, Status: "context_ready"}, nil},
		{"run missing", run(testdb.RunMissing), nil, corefacts.ErrNotFound},

		// Route gate (Q1 + Q7 + session)
		{"gate allowed without agent_direct or agent_client", gate(testdb.RouteMulti, sessA), "allowed", nil},
		{"gate route missing", gate(testdb.RouteMissing, sessA), "404 route_unavailable", nil},
		{"gate route disabled", gate(testdb.RouteDisabled, sessA), "404 route_unavailable", nil},
		{"gate session lacks route", gate(testdb.RouteLegacy, sess(testdb.AppA, []string{testdb.RouteMulti}, nil)), "403 route_not_allowed", nil},
		{"gate session wildcard", gate(testdb.RouteLegacy, sess(testdb.AppA, []string{"*"}, nil)), "allowed", nil},
		{"gate client lacks route", gate(testdb.RouteLegacy, sess(testdb.AppB, all, nil)), "403 route_not_allowed", nil},
		{"gate client wildcard", gate(testdb.RouteLegacy, sess(testdb.AppStar, all, nil)), "allowed", nil},
		{"gate client disabled", gate(testdb.RouteLegacy, sess(testdb.AppDisabled, all, nil)), "403 route_not_allowed", nil},
		{"gate client without authorize url", gate(testdb.RouteLegacy, sess(testdb.AppNoURL, all, nil)), "403 route_not_allowed", nil},
		{"gate client allowed_routes NULL", gate(testdb.RouteLegacy, sess(testdb.AppNullRoutes, all, nil)), "403 route_not_allowed", nil},
		{"gate client missing", gate(testdb.RouteLegacy, sess(testdb.AppMissing, all, nil)), "403 route_not_allowed", nil},
		{"gate client id case variant", gate(testdb.RouteLegacy, sess(testdb.AppCase, all, nil)), "allowed", nil},
		{"gate route key case variant", gate(testdb.RouteCase, sess(testdb.AppStar, all, nil)), "allowed", nil},
		{"gate audience allows", gate(testdb.RouteAudience, sessA), "allowed", nil},
		{"gate audience role", gate(testdb.RouteAudience, sess(testdb.AppA, all, func(p *corefacts.Principal) { p.Roles = []string{"clerk"} })),
			"403 audience_not_allowed", nil},
		{"gate audience tenant", gate(testdb.RouteAudience, sess(testdb.AppA, all, func(p *corefacts.Principal) { p.Tenant = "tenant-9" })),
			"403 audience_not_allowed", nil},
		{"gate audience comma list", gate(testdb.RouteAudience, sess(testdb.AppA, all, func(p *corefacts.Principal) { p.Tenant = "tenant-8" })),
			"allowed", nil},
		{"gate audience disabled", gate(testdb.RouteAudienceOff, sess(testdb.AppA, all, func(p *corefacts.Principal) { p.Roles = nil })),
			"allowed", nil},
	}

	impls := []struct {
		name string
		cat  knowledge.Catalog
	}{{"sql", sqlCat}, {"mem", memCat}}
	for _, c := range cases {
		for _, impl := range impls {
			t.Run(c.name+"/"+impl.name, func(t *testing.T) {
				got, err := c.call(context.Background(), impl.cat)
				if c.err != nil {
					if !errors.Is(err, c.err) {
						t.Fatalf("got error %v; want %v", err, c.err)
					}
					return
				}
				if err != nil {
					t.Fatalf("got error %v; want none", err)
				}
				if !reflect.DeepEqual(got, c.want) {
					t.Errorf("got %+v; want %+v", got, c.want)
				}
			})
		}
	}
}

// The 300 000-character body survives the round trip byte for byte.
func TestSQLCatalogBigBodyRoundTrip(t *testing.T) {
	db := testdb.New(t)
	c := openSQL(t, db, nil)
	d, err := c.Document(context.Background(), testdb.DocBig, []string{testdb.KBManuals})
	if err != nil {
		t.Fatalf("Document: %v", err)
	}
	want := testdb.BigDocContent()
	if d.Content != want {
		t.Fatalf("got %d characters (%d bytes); want %d characters (%d bytes), identical",
			utf8.RuneCountInString(d.Content), len(d.Content), testdb.BigDocChars, len(want))
	}
	if got, w := d.Revision, sha(testdb.DocBigTitle, want); got != w {
		t.Errorf("got revision %s; want %s", got, w)
	}
	if d.UpdatedAt.Location() != time.UTC {
		t.Errorf("got updated_at in %v; want UTC", d.UpdatedAt.Location())
	}
}

// catalogQueries reads knowledge_sidecar_catalog_queries_total{query=q} summed
// over outcomes.
func catalogQueries(t *testing.T, g prometheus.Gatherer, q string) float64 {
	t.Helper()
	return testkit.MetricSum(t, g, "knowledge_sidecar_catalog_queries_total", map[string]string{"query": q})
}

func TestSQLCatalogBodyCache(t *testing.T) {
	ctx := context.Background()
	ids := []int64{testdb.DocRefund, testdb.DocMultiByte, testdb.DocBig}

	t.Run("a cache hit reads no body", func(t *testing.T) {
		db := testdb.New(t)
		reg := prometheus.NewRegistry()
		c := openSQL(t, db, reg)
		first, err := c.Documents(ctx, ids, multiKBs)
		if err != nil {
			t.Fatal(err)
		}
		if got := catalogQueries(t, reg, catalog.QueryDocBody); got != 3 {
			t.Fatalf("body queries after first call: got %v; want 3", got)
		}
		for range 3 {
			again, err := c.Documents(ctx, ids, multiKBs)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(views(again), views(first)) {
				t.Errorf("got %+v; want %+v", views(again), views(first))
			}
		}
		if _, err := c.Document(ctx, testdb.DocBig, multiKBs); err != nil {
			t.Fatal(err)
		}
		if got := catalogQueries(t, reg, catalog.QueryDocBody); got != 3 {
			t.Errorf("body queries after cached calls: got %v; want 3", got)
		}
		if got := catalogQueries(t, reg, catalog.QueryDocMeta); got != 5 {
			t.Errorf("metadata queries: got %v; want 5 (one per call)", got)
		}
	})

	// Changing the body behind the cache's back without moving the key shows
	// the cached body is served; moving updated_at shows the key works, also
	// with a NULL content_hash.
	t.Run("key is doc_id, content_hash, updated_at", func(t *testing.T) {
		db := testdb.New(t)
		c := openSQL(t, db, nil)
		if _, err := c.Documents(ctx, ids, multiKBs); err != nil {
			t.Fatal(err)
		}
		db.Exec(t, "UPDATE bz_kb_docs SET content = 'changed' WHERE doc_id IN (?, ?)", testdb.DocRefund, testdb.DocMultiByte)
		got, err := c.Documents(ctx, ids, multiKBs)
		if err != nil {
			t.Fatal(err)
		}
		if got[testdb.DocRefund].Content != testdb.DocRefundContent || got[testdb.DocMultiByte].Content != testdb.DocMultiByteContent {
			t.Fatalf("got bodies re-read with an unchanged key; want cached")
		}
		db.Exec(t, "UPDATE bz_kb_docs SET content_hash = 'ffffffffffffffffffffffffffffffff' WHERE doc_id = ?", testdb.DocRefund)
		db.Exec(t, "UPDATE bz_kb_docs SET updated_at = '2026-02-01 00:00:00' WHERE doc_id = ?", testdb.DocMultiByte)
		got, err = c.Documents(ctx, ids, multiKBs)
		if err != nil {
			t.Fatal(err)
		}
		for _, id := range []int64{testdb.DocRefund, testdb.DocMultiByte} {
			d := got[id]
			if d.Content != "changed" || d.Revision != sha(d.Title, "changed") {
				t.Errorf("doc %d: got %q rev %s; want the new body and its revision", id, d.Content, d.Revision)
			}
		}
	})

	t.Run("status and fence come from fresh metadata", func(t *testing.T) {
		db := testdb.New(t)
		c := openSQL(t, db, nil)
		if _, err := c.Document(ctx, testdb.DocRefund, multiKBs); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Document(ctx, testdb.DocRefund, []string{testdb.KBManuals}); !errors.Is(err, corefacts.ErrNotFound) {
			t.Errorf("cached doc outside the fence: got %v; want ErrNotFound", err)
		}
		db.Exec(t, "UPDATE bz_kb_docs SET status = 'embedding' WHERE doc_id = ?", testdb.DocRefund) // key unchanged
		d, err := c.Document(ctx, testdb.DocRefund, multiKBs)
		if err != nil {
			t.Fatal(err)
		}
		if d.Status != "embedding" || d.Content != "" || d.Revision != "" {
			t.Errorf("got status %q content %d bytes revision %q; want embedding without body", d.Status, len(d.Content), d.Revision)
		}
		db.Exec(t, "DELETE FROM bz_kb_docs WHERE doc_id = ?", testdb.DocRefund)
		if _, err := c.Document(ctx, testdb.DocRefund, multiKBs); !errors.Is(err, corefacts.ErrNotFound) {
			t.Errorf("deleted doc: got %v; want ErrNotFound", err)
		}
	})
}

// More ids than one IN list may hold are split, not truncated.
func TestSQLCatalogManyIDs(t *testing.T) {
	db := testdb.New(t)
	c := openSQL(t, db, nil)
	ids := make([]int64, 0, 150)
	for i := range int64(150) {
		ids = append(ids, 1000+i)
	}
	ids = append(ids, testdb.DocBig)
	fence := []string{}
	for i := range 70 {
		fence = append(fence, "kb-"+strconv.Itoa(i))
	}
	fence = append(fence, testdb.KBManuals)
	got, err := c.Documents(context.Background(), ids, fence)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[testdb.DocBig].Title != testdb.DocBigTitle {
		t.Errorf("got %d docs; want only the big manual", len(got))
	}
	flags, err := c.KBEnabled(context.Background(), fence)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(flags, map[string]bool{testdb.KBManuals: true}) {
		t.Errorf("got %v; want only manuals", flags)
	}
}

func TestSQLCatalogCheckSchema(t *testing.T) {
	ctx := context.Background()
	t.Run("complete", func(t *testing.T) {
		db := testdb.New(t)
		if err := openSQL(t, db, nil).CheckSchema(ctx); err != nil {
			t.Errorf("got %v; want nil", err)
		}
	})
	t.Run("missing migrations are named", func(t *testing.T) {
		db := testdb.New(t)
		db.Exec(t, "DELETE FROM bz_schema_migrations WHERE filename IN ('055_agent_auth.sql', '056_agent_client_runtime.sql')")
		err := openSQL(t, db, nil).CheckSchema(ctx)
		var se *catalog.SchemaError
		if !errors.As(err, &se) {
			t.Fatalf("got %v; want *SchemaError", err)
		}
		want := "catalog schema is missing core migrations: 055_agent_auth.sql, 056_agent_client_runtime.sql"
		if err.Error() != want {
			t.Errorf("got %q; want %q", err.Error(), want)
		}
		if errors.Is(err, corefacts.ErrUnavailable) {
			t.Errorf("got a SchemaError that is ErrUnavailable; want a distinct schema problem")
		}
	})
	t.Run("no migrations table", func(t *testing.T) {
		db := testdb.New(t)
		db.Exec(t, "DROP TABLE bz_schema_migrations")
		err := openSQL(t, db, nil).CheckSchema(ctx)
		var se *catalog.SchemaError
		if !errors.As(err, &se) || len(se.Missing) != len(testdb.RequiredMigrations) {
			t.Errorf("got %v; want *SchemaError naming all %d migrations", err, len(testdb.RequiredMigrations))
		}
	})
}

func TestSQLCatalogUnreachable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().(*net.TCPAddr)
	ln.Close()
	const password = "s3cret-Pa55word"
	c, err := catalog.Open(catalog.Options{
		DSN:          "sidecar:" + password + "@tcp(" + addr.String() + ")/bailinghub",
		QueryTimeout: 5 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	calls := map[string]func() error{
		"route":     func() error { _, err := c.Route(ctx, testkit.RouteKey("r")); return err },
		"gate":      func() error { return c.RouteGate(ctx, testkit.RouteKey("r"), corefacts.Session{ClientAppID: "a"}) },
		"kbs":       func() error { _, err := c.KBEnabled(ctx, []string{"k"}); return err },
		"documents": func() error { _, err := c.Documents(ctx, []int64{1}, []string{"k"}); return err },
		"document":  func() error { _, err := c.Document(ctx, 1, []string{"k"}); return err },
		"run":       func() error { _, err := c.Run(ctx, "x"); return err },
		"schema":    func() error { return c.CheckSchema(ctx) },
	}
	for name, call := range calls {
		t.Run(name, func(t *testing.T) {
			err := call()
			if !errors.Is(err, corefacts.ErrUnavailable) {
				t.Fatalf("got %v; want ErrUnavailable", err)
			}
			msg := err.Error()
			for _, secret := range []string{password, "sidecar", "127.0.0.1", strconv.Itoa(addr.Port), "SELECT", "bailinghub", "tcp"} {
				if strings.Contains(msg, secret) {
					t.Errorf("got error %q; want it without %q", msg, secret)
				}
			}
		})
	}
}

// A server that accepts and immediately drops connections: every query fails,
// and the accept count shows whether the catalog still touches it.
func resettingServer(t *testing.T) (addr string, accepted *atomic.Int64) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	accepted = new(atomic.Int64)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			conn.Close()
		}
	}()
	t.Cleanup(func() { ln.Close(); <-done })
	return ln.Addr().String(), accepted
}

func TestSQLCatalogBreaker(t *testing.T) {
	addr, accepted := resettingServer(t)
	c, err := catalog.Open(catalog.Options{
		DSN:     "ro:pw@tcp(" + addr + ")/core",
		Breaker: breaker.Settings{Failures: 2, Window: time.Hour, OpenTimeout: time.Hour, HalfOpenMax: 1},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	for i := range 2 {
		_, err := c.Route(ctx, testkit.RouteKey("r"))
		if !errors.Is(err, corefacts.ErrUnavailable) || errors.Is(err, corefacts.ErrBreakerOpen) {
			t.Fatalf("call %d: got %v; want ErrUnavailable from the server", i, err)
		}
	}
	if c.Usable() {
		t.Fatalf("Usable: got true; want false after 2 failures")
	}
	before := accepted.Load()
	if before == 0 {
		t.Fatalf("accepted: got 0; want the failing calls to have reached the server")
	}
	for range 5 {
		if _, err := c.Run(ctx, "x"); !errors.Is(err, corefacts.ErrBreakerOpen) {
			t.Fatalf("got %v; want ErrBreakerOpen", err)
		}
	}
	if got := accepted.Load(); got != before {
		t.Errorf("connections while open: got %d; want %d (no I/O)", got, before)
	}
}

// A canceled caller is not a catalog failure: the breaker stays closed.
func TestSQLCatalogCanceledCallerDoesNotTrip(t *testing.T) {
	addr, _ := resettingServer(t)
	c, err := catalog.Open(catalog.Options{
		DSN:     "ro:pw@tcp(" + addr + ")/core",
		Breaker: breaker.Settings{Failures: 1, Window: time.Hour, OpenTimeout: time.Hour},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = c.Route(ctx, testkit.RouteKey("r"))
	if errors.Is(err, corefacts.ErrUnavailable) || !errors.Is(err, context.Canceled) {
		t.Errorf("got %v; want context.Canceled, not ErrUnavailable", err)
	}
	if !c.Usable() {
		t.Errorf("Usable: got false; want true (a canceled caller is not a failure)")
	}
}

func TestNormalizeDSN(t *testing.T) {
	cases := []struct {
		name, in, collation string
	}{
		{"adds parameters", "u:p@tcp(h:3306)/db", ""},
		{"overrides parameters", "u:p@tcp(h:3306)/db?parseTime=false&loc=Local&charset=latin1", ""},
		{"keeps a utf8mb4 collation", "u:p@tcp(h:3306)/db?collation=utf8mb4_bin", "utf8mb4_bin"},
		{"drops another collation", "u:p@tcp(h:3306)/db?collation=latin1_swedish_ci", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := catalog.NormalizeDSN(tc.in)
			if err != nil {
				t.Fatal(err)
			}
			cfg, err := mysql.ParseDSN(got)
			if err != nil {
				t.Fatalf("normalized DSN does not parse: %v", err)
			}
			if !cfg.ParseTime || cfg.Loc != time.UTC || cfg.Collation != tc.collation {
				t.Errorf("got parseTime=%v loc=%v collation=%q; want true, UTC, %q", cfg.ParseTime, cfg.Loc, cfg.Collation, tc.collation)
			}
			if !strings.Contains(got, "charset=utf8mb4") {
				t.Errorf("got %q; want charset=utf8mb4", got)
			}
		})
	}
	_, err := catalog.NormalizeDSN("u:secretpw@tcp(h:3306)db")
	if !errors.Is(err, catalog.ErrInvalidDSN) || strings.Contains(err.Error(), "secretpw") {
		t.Errorf("got %v; want ErrInvalidDSN without the DSN", err)
	}
}

// A server that accepts and never answers: the per-query timeout turns the
// hang into ErrUnavailable with reason "timeout".
func TestSQLCatalogQueryTimeout(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	conns := make(chan net.Conn, 16)
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				close(conns)
				return
			}
			conns <- conn // held open, silent
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		for conn := range conns {
			conn.Close()
		}
	})
	c, err := catalog.Open(catalog.Options{DSN: "ro:pw@tcp(" + ln.Addr().String() + ")/core", QueryTimeout: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, err = c.Route(context.Background(), testkit.RouteKey("r"))
	var ce *catalog.CatalogError
	if !errors.Is(err, corefacts.ErrUnavailable) || !errors.As(err, &ce) || ce.Reason != "timeout" {
		t.Fatalf("got %v; want a CatalogError with reason timeout", err)
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("got %v; want it to match context.DeadlineExceeded", err)
	}
}

// A query the database does not answer in time (the table is write-locked
// by another session): the per-query deadline ends it, as a timeout, and the
// next query finds a working connection.
func TestSQLCatalogQueryTimeoutMidQuery(t *testing.T) {
	ctx := context.Background()
	db := testdb.New(t)
	c, err := catalog.Open(catalog.Options{DSN: db.ReadOnlyDSN, QueryTimeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Route(ctx, testkit.RouteKey(testdb.RouteMulti)); err != nil { // a pooled, working connection
		t.Fatalf("Route before the lock: %v", err)
	}
	lock, err := db.Admin.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	if _, err := lock.ExecContext(ctx, "LOCK TABLES bz_routes WRITE"); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err = c.Route(ctx, testkit.RouteKey(testdb.RouteMulti))
	took := time.Since(start)
	var ce *catalog.CatalogError
	if !errors.Is(err, corefacts.ErrUnavailable) || !errors.As(err, &ce) || ce.Reason != "timeout" || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("got %v; want a CatalogError with reason timeout", err)
	}
	if took > 3*time.Second {
		t.Errorf("the query ended after %v; want it near the 300ms timeout", took)
	}
	if _, err := lock.ExecContext(ctx, "UNLOCK TABLES"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Route(ctx, testkit.RouteKey(testdb.RouteMulti)); err != nil {
		t.Errorf("Route after the lock: %v", err)
	}
}

// ReadyKBs on both catalogs, from the same rows: a KB counts when it has a
// row and at least one document with status ready, whatever its enabled
// flag; ids are matched case-insensitively and keyed as asked. The SQL
// catalog asks it in one query (the read-only user's GRANTs suffice).
func TestCatalogReadyKBs(t *testing.T) {
	db := testdb.New(t)
	db.Exec(t, `INSERT INTO bz_kb_bases (kb_id, enabled, updated_at) VALUES ('kb-pending', 1, '2026-01-01 00:00:00'), ('kb-blank', 1, '2026-01-01 00:00:00')`)
	db.Exec(t, `INSERT INTO bz_kb_docs (doc_id, kb_id, title, content, status, chunk_count, created_at, updated_at) VALUES
		(801, 'kb-pending', 'Pending', 'Being embedded.', 'embedding', 0, '2026-01-01 00:00:00', '2026-01-01 00:00:00'),
		(802, 'kb-pending', 'Broken', 'Failed to embed.', 'error', 0, '2026-01-01 00:00:00', '2026-01-01 00:00:00'),
		(803, 'kb-gone', 'Orphan', 'A document whose KB row was deleted.', 'ready', 1, '2026-01-01 00:00:00', '2026-01-01 00:00:00')`)
	reg := prometheus.NewRegistry()
	sqlCat := openSQL(t, db, reg)
	ask := []string{testdb.KBFAQ, testdb.KBFAQUpper, testdb.KBManuals, testdb.KBDisabled, testdb.KBMissing, testdb.KBOther, "kb-pending", "kb-blank", "kb-gone"}
	want := map[string]bool{"faq": true, "FAQ": true, "manuals": true, "kb-disabled": true, "other-kb": true}
	check := func(name string, c knowledge.Catalog, want map[string]bool) {
		t.Helper()
		got, err := c.ReadyKBs(context.Background(), ask)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: ReadyKBs got %v; want %v", name, got, want)
		}
	}
	check("sql", sqlCat, want)
	check("mem", memFromDB(t, db), want)
	if got := catalogQueries(t, reg, catalog.QueryReadyKBs); got != 1 {
		t.Errorf("kb_ready queries got %v; want 1", got)
	}

	// The pending document becomes ready.
	db.Exec(t, `UPDATE bz_kb_docs SET status = 'ready', chunk_count = 1 WHERE doc_id = 801`)
	want["kb-pending"] = true
	check("sql after ready", sqlCat, want)
	check("mem after ready", memFromDB(t, db), want)

	if got, err := sqlCat.ReadyKBs(context.Background(), nil); err != nil || len(got) != 0 {
		t.Errorf("ReadyKBs(nil) got %v, %v; want empty", got, err)
	}
}

// RouteBundle reads in one statement what Route, KBs and Document read
// apart, and answers the same for every shape of fixture: KBs that exist,
// are disabled, are missing or are spelled in another case; documents that
// are ready, not ready, outside the fence or absent; routes that are
// missing, disabled or without knowledge.
func TestSQLCatalogRouteBundle(t *testing.T) {
	ctx := context.Background()
	db := testdb.New(t)
	reg := prometheus.NewRegistry()
	c := openSQL(t, db, reg)
	apart := openSQL(t, db, nil)
	cases := []struct {
		name  string
		route string
		kbs   []string
		doc   int64
	}{
		{"multi route, its KBs", testdb.RouteMulti, multiKBs, 0},
		{"multi route, one ready doc", testdb.RouteMulti, []string{testdb.KBFAQ}, testdb.DocRefund},
		{"ready doc with NULL hash", testdb.RouteMulti, []string{testdb.KBFAQ}, testdb.DocMultiByte},
		{"big doc", testdb.RouteMulti, []string{testdb.KBManuals}, testdb.DocBig},
		{"doc not ready", testdb.RouteMulti, []string{testdb.KBFAQ}, testdb.DocEmbedding},
		{"doc in error", testdb.RouteMulti, []string{testdb.KBManuals}, testdb.DocError},
		{"doc outside the fence", testdb.RouteMulti, []string{testdb.KBManuals}, testdb.DocRefund},
		{"doc of a disabled KB", testdb.RouteMulti, []string{testdb.KBDisabled}, testdb.DocDisabledKB},
		{"doc absent", testdb.RouteMulti, []string{testdb.KBFAQ}, testdb.DocMissing},
		{"missing KB", testdb.RouteMulti, []string{testdb.KBMissing}, testdb.DocRefund},
		{"KB spelled in another case", testdb.RouteCase, []string{testdb.KBFAQUpper}, testdb.DocRefund},
		{"route with both spellings", testdb.RouteCase, []string{testdb.KBFAQUpper, testdb.KBFAQ}, 0},
		{"disabled route", testdb.RouteDisabled, []string{testdb.KBFAQ}, testdb.DocRefund},
		{"route without knowledge", testdb.RouteNull, []string{testdb.KBFAQ}, 0},
		{"no KB asked", testdb.RouteMulti, nil, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := c.RouteBundle(ctx, testkit.RouteKey(tc.route), tc.kbs, tc.doc)
			if err != nil {
				t.Fatalf("RouteBundle: %v", err)
			}
			wantRoute, err := apart.Route(ctx, testkit.RouteKey(tc.route))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got.Route, wantRoute) {
				t.Errorf("route: got %+v; want %+v", got.Route, wantRoute)
			}
			if !reflect.DeepEqual(got.Asked, tc.kbs) {
				t.Errorf("asked: got %v; want %v", got.Asked, tc.kbs)
			}
			wantKBs, err := apart.KBs(ctx, tc.kbs)
			if err != nil {
				t.Fatal(err)
			}
			if len(got.KBs) != len(wantKBs) || len(wantKBs) > 0 && !reflect.DeepEqual(got.KBs, wantKBs) {
				t.Errorf("kbs: got %+v; want %+v", got.KBs, wantKBs)
			}
			if tc.doc == 0 {
				if got.DocFound || got.DocErr != nil {
					t.Errorf("no doc asked: got found %v err %v", got.DocFound, got.DocErr)
				}
				return
			}
			wantDoc, err := apart.Document(ctx, tc.doc, tc.kbs)
			wantFound := err == nil
			if err != nil && !errors.Is(err, corefacts.ErrNotFound) {
				t.Fatal(err)
			}
			if got.DocErr != nil || got.DocFound != wantFound {
				t.Fatalf("doc: got found %v err %v; want found %v", got.DocFound, got.DocErr, wantFound)
			}
			if wantFound && !reflect.DeepEqual(view(got.Doc), view(wantDoc)) {
				t.Errorf("doc: got %+v; want %+v", view(got.Doc), view(wantDoc))
			}
		})
	}

	t.Run("unknown route", func(t *testing.T) {
		for _, doc := range []int64{0, testdb.DocRefund} {
			if _, err := c.RouteBundle(ctx, testkit.RouteKey(testdb.RouteMissing), []string{testdb.KBFAQ}, doc); !errors.Is(err, corefacts.ErrNotFound) {
				t.Errorf("doc %d: got %v; want ErrNotFound", doc, err)
			}
		}
	})

	t.Run("one statement", func(t *testing.T) {
		reg := prometheus.NewRegistry()
		c := openSQL(t, db, reg)
		kbs := []string{testdb.KBFAQ}
		if _, err := c.RouteBundle(ctx, testkit.RouteKey(testdb.RouteMulti), kbs, testdb.DocRefund); err != nil { // fills the body cache
			t.Fatal(err)
		}
		for range 3 {
			b, err := c.RouteBundle(ctx, testkit.RouteKey(testdb.RouteMulti), kbs, testdb.DocRefund)
			if err != nil || !b.DocFound || b.Doc.Content != testdb.DocRefundContent {
				t.Fatalf("got %+v, %v; want the refund doc", b, err)
			}
		}
		want := map[string]float64{catalog.QueryRoute: 4, catalog.QueryDocBody: 1,
			catalog.QueryKBs: 0, catalog.QueryDocMeta: 0}
		for q, n := range want {
			if got := catalogQueries(t, reg, q); got != n {
				t.Errorf("%s queries: got %v; want %v", q, got, n)
			}
		}
	})

	t.Run("fresh rows on every call", func(t *testing.T) {
		db := testdb.New(t)
		c := openSQL(t, db, nil)
		kbs := []string{testdb.KBFAQ}
		if b, err := c.RouteBundle(ctx, testkit.RouteKey(testdb.RouteMulti), kbs, testdb.DocRefund); err != nil || !b.KBs[testdb.KBFAQ].Enabled || !b.DocFound {
			t.Fatalf("got %+v, %v; want an enabled KB and the doc", b, err)
		}
		db.Exec(t, "UPDATE bz_kb_bases SET enabled = 0 WHERE kb_id = ?", testdb.KBFAQ)
		db.Exec(t, "UPDATE bz_kb_docs SET status = 'embedding' WHERE doc_id = ?", testdb.DocRefund)
		b, err := c.RouteBundle(ctx, testkit.RouteKey(testdb.RouteMulti), kbs, testdb.DocRefund)
		if err != nil {
			t.Fatal(err)
		}
		if b.KBs[testdb.KBFAQ].Enabled || b.Doc.Status != "embedding" || b.Doc.Content != "" {
			t.Errorf("got KB %+v doc status %q; want the disabled KB and the embedding doc", b.KBs[testdb.KBFAQ], b.Doc.Status)
		}
		db.Exec(t, "DELETE FROM bz_routes WHERE route_key = ?", testdb.RouteMulti)
		if _, err := c.RouteBundle(ctx, testkit.RouteKey(testdb.RouteMulti), kbs, testdb.DocRefund); !errors.Is(err, corefacts.ErrNotFound) {
			t.Errorf("deleted route: got %v; want ErrNotFound", err)
		}
	})

	t.Run("more KBs than one IN list", func(t *testing.T) {
		many := append([]string{testdb.KBFAQ}, make([]string, catalog.MaxIDsPerQuery)...)
		for i := range catalog.MaxIDsPerQuery {
			many[i+1] = "nope-" + strconv.Itoa(i)
		}
		b, err := c.RouteBundle(ctx, testkit.RouteKey(testdb.RouteMulti), many, testdb.DocRefund)
		if err != nil || !b.KBs[testdb.KBFAQ].Enabled || len(b.KBs) != 1 || !b.DocFound {
			t.Errorf("got %+v, %v; want faq only and the doc", b, err)
		}
	})
}
