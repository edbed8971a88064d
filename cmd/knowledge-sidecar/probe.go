package main

import (
	"cmp"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/bailinghub/knowledge-sidecar/breaker"
	"github.com/bailinghub/knowledge-sidecar/catalog"
	"github.com/bailinghub/knowledge-sidecar/config"
	"github.com/bailinghub/knowledge-sidecar/coreclient"
	"github.com/bailinghub/knowledge-sidecar/corefacts"
	"github.com/bailinghub/knowledge-sidecar/knowledge"
	"github.com/bailinghub/knowledge-sidecar/ledger"
	"github.com/bailinghub/knowledge-sidecar/rollout"
	"github.com/bailinghub/knowledge-sidecar/sharedredis"
	"github.com/bailinghub/knowledge-sidecar/sidecar"
)

// probeAgentTokenEnv optionally holds an Agent access token (bha_…) with
// which check-config --probe asks Core whether it has system-info. It is
// read only by the probe and never printed.
const probeAgentTokenEnv = "KNOWLEDGE_SIDECAR_PROBE_AGENT_TOKEN"

// Verdicts of one probe line.
const (
	verdictOK   = "ok"
	verdictFail = "FAIL"
	verdictWarn = "warn"
	verdictSkip = "skip"
)

// probeLine is one dependency's verdict. The detail never holds a secret or
// SQL: it is built from our own words, errors whose messages are documented
// to exclude them, and the addresses, database and user names of the
// operator's own configuration (Core's URL, the DSN's address), never a
// password or token.
type probeLine struct {
	name, verdict, detail string
}

// prober runs the probes of check-config --probe against live dependencies.
type prober struct {
	cfg     config.Config
	timeout time.Duration
	lines   []probeLine
}

func (p *prober) add(name, verdict, format string, args ...any) {
	p.lines = append(p.lines, probeLine{name, verdict, fmt.Sprintf(format, args...)})
}

// runProbes prints one line per dependency and a summary; exit 0 only when
// no probe failed (skipped ones — not configured — do not fail).
func runProbes(ctx context.Context, cfg config.Config, timeout time.Duration, stdout io.Writer) int {
	p := &prober{cfg: cfg, timeout: timeout}
	p.core(ctx)
	if !slices.ContainsFunc(p.lines, func(l probeLine) bool { return l.name == "mcp-oauth" }) {
		p.add("mcp-oauth", verdictSkip, "Core is not reachable")
	}
	p.catalog(ctx)
	p.redis(ctx)
	p.signing()
	failed := 0
	for _, l := range p.lines {
		if l.verdict == verdictFail {
			failed++
		}
		fmt.Fprintf(stdout, "probe %-14s %-4s  %s\n", l.name, l.verdict, l.detail)
	}
	if failed > 0 {
		fmt.Fprintf(stdout, "probe: %d of %d checks failed\n", failed, len(p.lines))
		return 1
	}
	fmt.Fprintf(stdout, "probe: every check passed (%d lines)\n", len(p.lines))
	return 0
}

func (p *prober) core(ctx context.Context) {
	coreTLS, err := sidecar.CoreTLS(p.cfg) // validated
	if err != nil {
		p.add("core", verdictFail, "%v", err)
		return
	}
	client, err := coreclient.NewClient(coreclient.Options{
		BaseURL: p.cfg.Core.URL, ServiceToken: p.cfg.Core.Token, Timeout: p.timeout, ProbeInterval: time.Second,
		Transport: sidecar.CoreClientTransport(p.cfg, coreTLS),
	})
	if err != nil {
		p.add("core", verdictFail, "%v", err)
		return
	}
	at := coreAddress(p.cfg.Core.URL)
	if err := client.ProbeCore(ctx); err != nil {
		p.add("core", verdictFail, "%s (tried %s)", coreProblem(err), at)
		why := "Core is not reachable"
		if errors.Is(err, coreclient.ErrNotACore) {
			why = "Core did not answer like a Core"
		}
		p.add("core-token", verdictSkip, "%s", why)
		p.add("system-info", verdictSkip, "%s", why)
		return
	}
	p.add("core", verdictOK, "reachable at %s; answers like a BailingHub Core (401 unauthorized on /agent-auth/v1/session without a token)", at)
	p.mcpOAuth(ctx, client)

	if p.cfg.Core.Token != "" {
		err = client.ProbeServiceToken(ctx)
	}
	switch {
	case p.cfg.Core.Token == "":
		p.add("core-token", verdictSkip, "no KNOWLEDGE_SIDECAR_CORE_TOKEN: knowledge features are off")
	case err == nil:
		p.add("core-token", verdictOK, "accepted by /kb/search")
	case errors.Is(err, coreclient.ErrTokenRateLimited):
		p.add("core-token", verdictWarn, "accepted by /kb/search, but Core's per-client rate limit is exhausted right now (429)")
	case errors.Is(err, coreclient.ErrTokenRefused):
		p.add("core-token", verdictFail, "refused by /kb/search: use a Client Token or the server token, not an Agent (bha_) or executor token")
	default:
		p.add("core-token", verdictFail, "%s", coreProblem(err))
	}

	agent := strings.TrimSpace(os.Getenv(probeAgentTokenEnv))
	if agent == "" {
		p.add("system-info", verdictSkip, "set %s to an Agent access token to check (without it the sidecar detects it at run time)", probeAgentTokenEnv)
		return
	}
	switch present, err := client.ProbeSystemInfo(ctx, "Bearer "+agent); {
	case err == nil && present:
		p.add("system-info", verdictOK, "present (Core ≥ 0.7): Core gates routes itself")
	case err == nil:
		p.add("system-info", verdictOK, "absent (Core < 0.7): the catalog gates routes (bz_clients grants needed)")
	case errors.Is(err, corefacts.ErrUnauthorized):
		p.add("system-info", verdictFail, "Core refused the Agent token of %s (expired? access tokens live 15 minutes)", probeAgentTokenEnv)
	default:
		p.add("system-info", verdictFail, "%s", coreProblem(err))
	}
}

// coreProblem words a Core probe error for an operator.
func coreProblem(err error) string {
	switch {
	case errors.Is(err, coreclient.ErrUnknownAuthority):
		return "Core's TLS certificate is not signed by a trusted CA: set core.ca_file to the PEM file of the CA that signs it"
	case errors.Is(err, coreclient.ErrCertificate):
		return "Core's TLS certificate does not verify (a host name it is not valid for, or expired)"
	case errors.Is(err, coreclient.ErrNotACore):
		return err.Error()
	case errors.Is(err, context.DeadlineExceeded):
		return "no answer within the probe timeout"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	case errors.Is(err, coreclient.ErrNoSuchHost):
		return "the host name does not resolve"
	case errors.Is(err, corefacts.ErrUnavailable):
		return "unreachable or failing: " + strings.TrimPrefix(err.Error(), corefacts.ErrUnavailable.Error()+": ")
	}
	return err.Error()
}

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

// coreAddress is Core's URL as the probe tried it (core.url carries no
// credentials: Validate refuses them).
func coreAddress(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "core.url"
	}
	return (&url.URL{Scheme: u.Scheme, Host: u.Host, Path: u.Path}).String()
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

func (p *prober) redis(ctx context.Context) {
	if p.cfg.LedgerBackend() != "redis" {
		p.add("redis", verdictSkip, "ledger backend is memory (one replica); set KNOWLEDGE_SIDECAR_LEDGER_REDIS_URL for several")
		return
	}
	sharedredis.QuietLogs()
	c, err := sharedredis.New(sharedredis.Options{URL: p.cfg.Ledger.RedisURL, OpTimeout: p.timeout,
		Mode: p.cfg.Ledger.RedisMode, CAFile: p.cfg.Ledger.RedisCAFile})
	if err != nil {
		p.add("redis", verdictFail, "%v", err)
		return
	}
	r, err := ledger.NewRedis(c, ledger.RedisOptions{TTL: p.cfg.Ledger.TTL})
	if err != nil {
		c.Close()
		p.add("redis", verdictFail, "%v", err)
		return
	}
	defer r.Close()
	mode := "mode " + c.Mode()
	if err := r.Probe(ctx); err != nil {
		p.add("redis", verdictFail, "%s: %v", mode, err)
		return
	}
	top, err := c.Topology(ctx)
	if err != nil {
		p.add("redis", verdictFail, "%s: %v", mode, err)
		return
	}
	switch top.Mode {
	case sharedredis.ModeCluster:
		mode += fmt.Sprintf(", %d primaries (%s), %d replicas", len(top.Primaries), strings.Join(top.Primaries, ", "), top.Replicas)
	case sharedredis.ModeSentinel:
		mode += ", master " + cmp.Or(top.Master, "(none confirmed)")
	}
	p.add("redis", verdictOK, "%s; reachable; the ledger's Lua scripts load (rate limit: %s)", mode, p.cfg.RateLimitBackend())
}

func (p *prober) signing() {
	if ok, _ := p.cfg.KnowledgeEnabled(); !ok && p.cfg.Signing.Keys == "" {
		p.add("signing-keys", verdictSkip, "knowledge features are off")
		return
	}
	keys, err := knowledge.NewKeyring(p.cfg.Signing.Keys, p.cfg.Core.Token)
	switch {
	case err != nil:
		p.add("signing-keys", verdictFail, "%v", err)
	case p.cfg.Signing.Keys != "":
		p.add("signing-keys", verdictOK, "%d key(s), each at least 32 bytes; %q signs", len(keys.KeyIDs()), keys.SigningKeyID())
	case len(p.cfg.Core.Token) < 32:
		p.add("signing-keys", verdictFail, "derived from the Core token, which is shorter than 32 bytes: set KNOWLEDGE_SIDECAR_SIGNING_KEYS (knowledge-sidecar keygen)")
	default:
		p.add("signing-keys", verdictOK, "derived from the Core token (%d bytes); rotating the token invalidates references", len(p.cfg.Core.Token))
	}
}

// mcpOAuth asks Core whether the client MCP hosts sign in as can start a
// sign-in (SPEC §12): one authorization for the rolled-out routes, with a
// loopback callback nobody listens on. It is left unused and expires at
// Core after 10 minutes; no user sees it.
func (p *prober) mcpOAuth(ctx context.Context, client *coreclient.Client) {
	id := p.cfg.MCP.OAuth.ClientAppID
	if id == "" {
		p.add("mcp-oauth", verdictSkip, "mcp.oauth.client_app_id not set: MCP hosts bring a token (or sign in elsewhere)")
		return
	}
	pol, _ := rollout.Parse(p.cfg.Rollout) // validated
	routes := pol.Routes()
	if pol.Mode() != rollout.ModeAllow || len(routes) == 0 || len(routes) > 64 {
		p.add("mcp-oauth", verdictSkip, "the rollout lists no routes to ask for (%s): Core checks client %q at the first sign-in", pol.String(), id)
		return
	}
	state := make([]byte, 16)
	_, _ = rand.Read(state)
	sum := sha256.Sum256(state)
	payload, _ := json.Marshal(map[string]any{
		"client_app_id": id, "redirect_uri": "http://127.0.0.1:9/knowledge-sidecar-probe",
		"state": hex.EncodeToString(state), "requested_routes": routes, "device_label": p.cfg.MCP.OAuth.DeviceLabel,
		"code_challenge": base64.RawURLEncoding.EncodeToString(sum[:]), "code_challenge_method": "S256",
	})
	status, body, err := client.CreateAuthorization(ctx, payload, netip.Addr{})
	var e struct {
		Error string `json:"error"`
	}
	_ = json.Unmarshal(body, &e)
	switch {
	case err != nil:
		p.add("mcp-oauth", verdictFail, "%s", coreProblem(err))
	case status == http.StatusCreated:
		p.add("mcp-oauth", verdictOK, "client %q can sign hosts in for %s (Core created an authorization; unused, it expires in 10 minutes)",
			id, strings.Join(routes, ", "))
	case status == http.StatusTooManyRequests:
		p.add("mcp-oauth", verdictWarn, "Core's sign-in rate limit (10 a minute per client and address) is reached right now; try again in a minute")
	case e.Error == "invalid_client":
		p.add("mcp-oauth", verdictFail, "Core refuses client %q: unknown or disabled, no agent_authorize_url (the business consent page), "+
			"or a rolled-out route (%s) outside its allowed_routes", id, strings.Join(routes, ", "))
	default:
		p.add("mcp-oauth", verdictFail, "Core answered %d %q to a sign-in of client %q (mcp.oauth.device_label 1–128 characters?)", status, e.Error, id)
	}
}
