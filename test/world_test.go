package test

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/base64"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/bailinghub/knowledge-sidecar/breaker"
	"github.com/bailinghub/knowledge-sidecar/config"
	"github.com/bailinghub/knowledge-sidecar/corefacts"
	"github.com/bailinghub/knowledge-sidecar/hostclient"
	"github.com/bailinghub/knowledge-sidecar/internal/fakecore"
	"github.com/bailinghub/knowledge-sidecar/internal/testkit/testdb"
	"github.com/bailinghub/knowledge-sidecar/knowledge"
	"github.com/bailinghub/knowledge-sidecar/ledger"
	"github.com/bailinghub/knowledge-sidecar/sidecar"
)

// World is a complete environment for end-to-end tests: a fresh MariaDB
// database loaded with the testdb fixtures (the catalog, read through the
// read-only user), and a fake Core on a real socket that knows the same
// knowledge bases, documents, sessions and routes. Runs the fake Core
// creates on turns are inserted into the database, as Core would.
type World struct {
	DB           *testdb.DB
	Core         *fakecore.Core
	CoreURL      string
	ServiceToken string
	// TokenA and TokenB are Agent bearer tokens of testdb.SessionA (app-a,
	// routes kb-multi and kb-legacy) and testdb.SessionB (app-b, kb-multi).
	TokenA, TokenB string
}

// WorldOptions are the fake Core's switches; ServiceToken and OnRun are the world's.
type WorldOptions struct {
	Core fakecore.Options
}

// NewWorld builds a World; everything is torn down by t.Cleanup.
func NewWorld(t testing.TB, o WorldOptions) *World {
	t.Helper()
	db := testdb.New(t)
	w := &World{DB: db, ServiceToken: randomToken(t, "svc_")}
	co := o.Core
	co.ServiceToken = w.ServiceToken
	co.OnRun = func(r corefacts.Run) {
		_, err := db.Admin.Exec(`INSERT INTO bz_agent_client_runs
			(run_id, session_id, client_app_id, route_key, status, created_at, updated_at)
			VALUES (?, ?, ?, ?, 'context_ready', UTC_TIMESTAMP(), UTC_TIMESTAMP())`,
			r.RunID, r.SessionID, r.ClientAppID, r.RouteKey)
		if err != nil {
			t.Errorf("world: insert run: %v", err)
		}
	}
	w.Core = fakecore.New(co)
	srv := httptest.NewServer(w.Core)
	t.Cleanup(func() { w.Core.Close(); srv.Close() })
	w.CoreURL = srv.URL

	if err := w.DB.IndexIn(context.Background(), w.Core); err != nil {
		t.Fatalf("world: %v", err)
	}
	for _, key := range queryStrings(t, db.Admin, `SELECT route_key FROM bz_routes`) {
		w.Core.SetRoute(key, fakecore.GateAllowed)
	}
	w.Core.SetTurnKnowledge(testdb.RouteMulti, []fakecore.TurnKnowledge{
		{DocID: testdb.DocRefund, Title: testdb.DocRefundTitle, Content: testdb.DocRefundContent, Score: 0.82},
	})
	w.TokenA = fakecore.Token("session-a")
	w.Core.AddSession(w.TokenA, corefacts.Session{
		SessionID: testdb.SessionA, ClientAppID: testdb.AppA,
		Principal:     corefacts.Principal{ID: "user-42", Tenant: "tenant-7", Roles: []string{"manager"}, Audience: "internal"},
		OnBehalfOf:    "tenant-7:user-42",
		AllowedRoutes: []string{testdb.RouteMulti, testdb.RouteLegacy},
		ExpiresAt:     time.Now().Add(15 * time.Minute),
	})
	w.TokenB = fakecore.Token("session-b")
	w.Core.AddSession(w.TokenB, corefacts.Session{
		SessionID: testdb.SessionB, ClientAppID: testdb.AppB,
		Principal:     corefacts.Principal{ID: "user-7"},
		OnBehalfOf:    "user-7",
		AllowedRoutes: []string{testdb.RouteMulti},
		ExpiresAt:     time.Now().Add(15 * time.Minute),
	})
	return w
}

// FeatureOptions choose how a sidecar of the world runs its features. Each
// maps to the configuration field named, or to the sidecar.Deps field named.
type FeatureOptions struct {
	Rollout         string           // rollout; default "all"
	NativeDetection string           // native_detection; default "auto"
	ProbeInterval   time.Duration    // probe_interval; default 1m
	SigningKeys     string           // signing.keys; default: derived from the world's service token
	Now             func() time.Time // sidecar.Deps.Now
	RateLimit       float64          // rate_limit.rps; default 1000 (tests are not about the limit unless they say so)
	RateBurst       int              // rate_limit.burst; default 1000
	// CoreTimeout and the breakers: core.timeout, core.identity_breaker and
	// core.retrieval_breaker (zero fields: defaults).
	CoreTimeout         time.Duration
	Identity, Retrieval breaker.Settings
	// CatalogDSN replaces the world's read-only DSN (catalog.dsn); the
	// schema check is then not required to pass (the catalog may be
	// unreachable on purpose).
	CatalogDSN string
	// Logger is the sidecar's logger (default: SidecarOptions.Logger, else
	// the test log).
	Logger *slog.Logger
	// MCP configures the remote MCP endpoint: mcp.authorization_servers,
	// mcp.scopes, mcp.public_url and proxy.mcp_answer_budget.
	MCP MCPOptions

	// Ledger replaces the turn ledger (sidecar.Deps.Ledger; default: the
	// configured in-memory one); it is closed at test cleanup.
	Ledger ledger.Ledger
	// SharedLimiter is the replicas' shared rate limit
	// (sidecar.Deps.SharedLimiter; default none: local buckets).
	SharedLimiter knowledge.SharedLimiter
}

// Features are a world's knowledge features for StartSidecar: the
// configuration sidecar.Build reads (Core's token, the catalog DSN, …) and
// its Deps, as `serve` builds them against the fake Core and MariaDB.
type Features struct {
	w *World
	o FeatureOptions
}

// Features returns the world's features with o; StartSidecar builds them.
func (w *World) Features(t testing.TB, o FeatureOptions) *Features {
	t.Helper()
	if o.Rollout == "" {
		o.Rollout = "all"
	}
	if o.NativeDetection == "" {
		o.NativeDetection = "auto"
	}
	if o.ProbeInterval == 0 {
		o.ProbeInterval = time.Minute
	}
	if o.RateLimit == 0 {
		o.RateLimit, o.RateBurst = 1000, 1000
	}
	return &Features{w: w, o: o}
}

// MCPOptions are the remote MCP endpoint's settings a test sets.
type MCPOptions struct {
	AuthorizationServers, Scopes []string
	PublicURL                    string
	AnswerBudget                 int64
}

// configure sets the knowledge part of cfg and deps.
func (f *Features) configure(cfg *config.Config, deps *sidecar.Deps) {
	o := f.o
	cfg.Core.Token = f.w.ServiceToken
	cfg.Catalog.DSN = cmp.Or(o.CatalogDSN, f.w.DB.ReadOnlyDSN)
	cfg.Catalog.QueryTimeout = 2 * time.Second
	cfg.Signing.Keys = o.SigningKeys
	cfg.Rollout, cfg.NativeDetection, cfg.ProbeInterval = o.Rollout, o.NativeDetection, o.ProbeInterval
	cfg.RateLimit.RPS, cfg.RateLimit.Burst = o.RateLimit, o.RateBurst
	cfg.Core.Timeout = cmp.Or(o.CoreTimeout, cfg.Core.Timeout)
	cfg.Core.Identity = breakerConfig(o.Identity, cfg.Core.Identity)
	cfg.Core.Retrieval = breakerConfig(o.Retrieval, cfg.Core.Retrieval)
	cfg.MCP.AuthorizationServers, cfg.MCP.Scopes, cfg.MCP.PublicURL = o.MCP.AuthorizationServers, o.MCP.Scopes, o.MCP.PublicURL
	cfg.Proxy.MCPAnswerBudget = cmp.Or(o.MCP.AnswerBudget, cfg.Proxy.MCPAnswerBudget)
	deps.Now = o.Now
	deps.Ledger, deps.SharedLimiter = o.Ledger, o.SharedLimiter
	if o.Logger != nil {
		deps.Logger = o.Logger
	}
}

// breakerConfig is def with the non-zero fields of s.
func breakerConfig(s breaker.Settings, def config.Breaker) config.Breaker {
	return config.Breaker{
		Failures: cmp.Or(s.Failures, def.Failures), Window: cmp.Or(s.Window, def.Window),
		OpenTimeout: cmp.Or(s.OpenTimeout, def.OpenTimeout), HalfOpenMax: cmp.Or(s.HalfOpenMax, def.HalfOpenMax),
	}
}

// StartSidecar runs a sidecar in front of the world's Core with features.
func (w *World) StartSidecar(t testing.TB, o FeatureOptions) *Sidecar {
	t.Helper()
	return StartSidecar(t, SidecarOptions{CoreURL: w.CoreURL, Features: w.Features(t, o)})
}

// Call sends a JSON request with the bearer and returns status, headers and body.
func Call(t testing.TB, c *http.Client, method, url, token string, body any) (int, http.Header, []byte) {
	t.Helper()
	var r io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		r = strings.NewReader(b)
	case []byte:
		r = bytes.NewReader(b)
	default:
		raw, err := json.Marshal(b)
		if err != nil {
			t.Fatal(err)
		}
		r = bytes.NewReader(raw)
	}
	req, err := http.NewRequest(method, url, r)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if r != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, raw := doRead(t, c, req)
	return resp.StatusCode, resp.Header, raw
}

// WS is the base URL of a workspace behind the sidecar.
func (s *Sidecar) WS(route string) string { return s.URL + "/agent-api/v1/workspaces/" + route }

// queryStrings is the one string column of every row query returns.
func queryStrings(t testing.TB, db *sql.DB, query string) []string {
	t.Helper()
	rows, err := db.Query(query)
	if err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var v string
		if err := rows.Scan(&v); err != nil {
			t.Fatal(err)
		}
		out = append(out, v)
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return out
}

// Config is the configuration `serve` would read for a sidecar in front of
// the world: config.Defaults with its Core, token and catalog, rolled out
// everywhere.
func (w *World) Config() config.Config {
	cfg := config.Defaults()
	cfg.Core.URL, cfg.Core.Token, cfg.Catalog.DSN, cfg.Rollout = w.CoreURL, w.ServiceToken, w.DB.ReadOnlyDSN, "all"
	return cfg
}

// hintRef is the ref of the hint titled title in a search answer, failing
// the test when there is none.
func hintRef(t testing.TB, answer []byte, title string) string {
	t.Helper()
	var a hostclient.SearchAnswer
	if err := json.Unmarshal(answer, &a); err != nil {
		t.Fatalf("search answer: %v: %s", err, clip(string(answer)))
	}
	for _, h := range a.Hints {
		if h.Title == title {
			return h.Ref
		}
	}
	t.Fatalf("no hint of %q in %s", title, clip(string(answer)))
	return ""
}

func randomToken(t testing.TB, prefix string) string {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return prefix + base64.RawURLEncoding.EncodeToString(b)
}

// TestWorldSmoke: negotiate, search and read end to end through the sidecar,
// the fake Core and the real MariaDB catalog.
func TestWorldSmoke(t *testing.T) {
	w := NewWorld(t, WorldOptions{Core: fakecore.Options{SystemInfo: true}})
	sc := w.StartSidecar(t, FeatureOptions{})
	c := newClient(t)
	code, h, body := Call(t, c, "GET", sc.WS(testdb.RouteMulti)+"/knowledge/capabilities", w.TokenA, nil)
	if code != 200 || h.Get("Cache-Control") != "no-store" || !bytes.Contains(body, []byte(`"enabled":true`)) {
		t.Fatalf("capabilities: got %d %q %s", code, h.Get("Cache-Control"), body)
	}
	code, _, body = Call(t, c, "POST", sc.WS(testdb.RouteMulti)+"/knowledge/search", w.TokenA,
		map[string]any{"query": "refunds accepted within days of delivery", "limit": 3})
	var sr struct {
		Status string `json:"status"`
		Hints  []struct {
			Ref   string `json:"ref"`
			Title string `json:"title"`
		} `json:"hints"`
	}
	if code != 200 || json.Unmarshal(body, &sr) != nil || len(sr.Hints) == 0 {
		t.Fatalf("search: got %d %s", code, body)
	}
	if sr.Status != "partial" { // kb-multi lists a disabled and a missing KB
		t.Errorf("search status: got %q; want partial", sr.Status)
	}
	code, _, body = Call(t, c, "POST", sc.WS(testdb.RouteMulti)+"/knowledge/read", w.TokenA,
		map[string]any{"ref": sr.Hints[0].Ref})
	if code != 200 || !bytes.Contains(body, []byte(`"schema_version":"bailing.agent-knowledge-read.v1"`)) {
		t.Fatalf("read: got %d %s", code, body)
	}
}

// tappedWorld is a new world with a sidecar whose Core is behind a coreTap,
// and a client.
func tappedWorld(t testing.TB) (*World, *coreTap, *Sidecar, *http.Client) {
	t.Helper()
	w := NewWorld(t, WorldOptions{})
	tap, side := w.startTapped(t, FeatureOptions{})
	return w, tap, side, newClient(t)
}

// startTapped runs a sidecar of the world whose Core is behind a coreTap,
// which records the proxied traffic.
func (w *World) startTapped(t testing.TB, o FeatureOptions) (*coreTap, *Sidecar) {
	t.Helper()
	tap := newCoreTap(t, w.Core)
	return tap, StartSidecar(t, SidecarOptions{CoreURL: tap.URL, Features: w.Features(t, o)})
}
