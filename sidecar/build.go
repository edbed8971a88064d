// Package sidecar builds the running sidecar from a config.Config: the Core
// client, the catalog behind its schema gate, the knowledge service, the
// turn ledger, the rollout policy and the edge, with one metrics registry.
// serve, demo and the load tool all build through Build; a caller replaces
// a real part (the demo's in-memory catalog) through Deps, never by wiring
// its own.
package sidecar

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"net/netip"
	"net/url"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"go.opentelemetry.io/otel/trace"

	"github.com/bailinghub/knowledge-sidecar/audit"
	"github.com/bailinghub/knowledge-sidecar/breaker"
	"github.com/bailinghub/knowledge-sidecar/catalog"
	"github.com/bailinghub/knowledge-sidecar/config"
	"github.com/bailinghub/knowledge-sidecar/coreclient"
	"github.com/bailinghub/knowledge-sidecar/corefacts"
	"github.com/bailinghub/knowledge-sidecar/internal/prom"
	"github.com/bailinghub/knowledge-sidecar/knowledge"
	"github.com/bailinghub/knowledge-sidecar/ledger"
	"github.com/bailinghub/knowledge-sidecar/mcpauth"
	"github.com/bailinghub/knowledge-sidecar/mcpserver"
	"github.com/bailinghub/knowledge-sidecar/native"
	"github.com/bailinghub/knowledge-sidecar/proxy"
	"github.com/bailinghub/knowledge-sidecar/rollout"
	"github.com/bailinghub/knowledge-sidecar/sharedredis"
	"github.com/bailinghub/knowledge-sidecar/telemetry"
	"github.com/bailinghub/knowledge-sidecar/turn"
)

// ExtraChecks are the Validate checks that live in other packages.
var ExtraChecks = []func(*config.Config) (string, error){
	func(c *config.Config) (string, error) {
		_, err := rollout.Parse(c.Rollout)
		return "rollout", err
	},
	func(c *config.Config) (string, error) {
		if ok, _ := c.KnowledgeEnabled(); (!ok && c.Signing.Keys == "") || config.IsPlaceholder(c.Signing.Keys) || config.IsPlaceholder(c.Core.Token) {
			return "", nil // off, or a placeholder Validate reports
		}
		_, err := knowledge.NewKeyring(c.Signing.Keys, c.Core.Token)
		return "signing.keys", err
	},
	func(c *config.Config) (string, error) {
		if c.Catalog.DSN == "" || config.IsPlaceholder(c.Catalog.DSN) {
			return "", nil // unset, or a placeholder Validate reports
		}
		if _, err := catalog.NormalizeDSN(c.Catalog.DSN); err != nil {
			return "catalog.dsn", errors.New("is not a valid go-sql-driver/mysql DSN such as user:password@tcp(host:3306)/bailinghub (value not shown)")
		}
		return "", nil
	},
	func(c *config.Config) (string, error) {
		u := c.Ledger.RedisURL
		if (!strings.HasPrefix(u, "redis://") && !strings.HasPrefix(u, "rediss://")) || config.IsPlaceholder(u) {
			return "", nil // empty, or already reported by Validate
		}
		if err := sharedredis.ParseURL(c.Ledger.RedisMode, u); err != nil {
			switch c.Ledger.RedisMode {
			case "cluster":
				return "ledger.redis_url", errors.New("is not a valid Redis Cluster URL such as redis://host1:6379?addr=host2:6379&addr=host3:6379 (value not shown)")
			case "sentinel":
				return "ledger.redis_url", errors.New("is not a valid Sentinel URL such as redis://sentinel1:26379?master_name=mymaster&addr=sentinel2:26379, master_name required (value not shown)")
			case "single":
				return "ledger.redis_url", errors.New("is not a valid Redis URL such as redis://host:6379/0 (value not shown)")
			}
			return "", nil // the mode is reported by Validate
		}
		return "", nil
	},
	func(c *config.Config) (string, error) {
		if c.Core.CAFile == "" || !strings.HasPrefix(c.Core.URL, "https://") {
			return "", nil // unset, or already reported by Validate
		}
		if _, err := CoreTLS(*c); err != nil {
			return "core.ca_file", errors.New(strings.TrimPrefix(err.Error(), "core.ca_file "))
		}
		return "", nil
	},
	func(c *config.Config) (string, error) {
		if c.Ledger.RedisCAFile == "" || !strings.HasPrefix(c.Ledger.RedisURL, "rediss://") {
			return "", nil // unset, or already reported by Validate
		}
		if err := sharedredis.CheckCAFile(c.Ledger.RedisCAFile); err != nil {
			return "ledger.redis_ca_file", fmt.Errorf("%q: %w", c.Ledger.RedisCAFile, err)
		}
		return "", nil
	},
}

// recorder is the Registerer every component registers with: it forwards to
// the registry and remembers the collectors, so that the set of exported
// metric names is known even for vectors that have no series yet
// (docs/metrics.md, the alert rules and the dashboard are tested against it).
type recorder struct {
	prometheus.Registerer
	mu         sync.Mutex
	collectors []prometheus.Collector
}

func (r *recorder) Register(c prometheus.Collector) error {
	if err := r.Registerer.Register(c); err != nil {
		return err
	}
	r.mu.Lock()
	r.collectors = append(r.collectors, c)
	r.mu.Unlock()
	return nil
}

func (r *recorder) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := r.Register(c); err != nil {
			panic(err)
		}
	}
}

// Deps are the parts a caller puts in place of the real ones, and what the
// process owns. Zero values mean the real part.
type Deps struct {
	Logger *slog.Logger // nil: discard
	// Level is the logger's level, which reloads change (nil: a private one).
	Level   *slog.LevelVar
	Version string // build version, in build_info and /-/status
	// Revision is the VCS revision, in /-/status.
	Revision string
	// Catalog replaces the SQL catalog of catalog.dsn (the demo's in-memory
	// twin): no DSN is needed and no schema check runs. It must also
	// implement knowledge.Tasks to apply task rules; otherwise none apply.
	Catalog knowledge.Catalog
	// Now is the clock of the knowledge service and the edge (nil:
	// time.Now); tests move it to expire references without waiting.
	Now func() time.Time
	// SingleProcess says this process is the whole deployment (the demo):
	// the in-memory ledger then sees every retry, and its one-replica
	// warning is not logged.
	SingleProcess bool
	// TracerProvider replaces the OTLP tracer provider of tracing.enabled
	// (tests record spans with it); set, tracing is on.
	TracerProvider trace.TracerProvider
	// AuditStdout replaces standard output for audit.file "-" (tests).
	AuditStdout io.Writer
	// Ledger replaces the turn ledger of ledger.* (tests: one they read, fail
	// or share between replicas). Build uses it as given, neither wrapped in
	// the retrying release nor closed: the caller owns it.
	Ledger ledger.Ledger
	// SharedLimiter replaces the Redis shared rate limit of
	// rate_limit.backend (nil: the configured one, or none).
	SharedLimiter knowledge.SharedLimiter
	// Transport replaces the pass-through transport to Core of proxy.*
	// (nil: proxy.NewTransport with the configured timeouts and core.ca_file).
	Transport http.RoundTripper
}

// App is a built sidecar: the edge plus what must be closed after it.
type App struct {
	// Server is the edge; Run it, or mount its Handler.
	Server  *proxy.Server
	log     *slog.Logger
	closers []func() error
	metrics *recorder

	mu     sync.Mutex // serializes reloads (signal, endpoint, watch)
	cfg    config.Config
	level  *slog.LevelVar
	single bool // Deps.SingleProcess

	audit *audit.Log // nil: audit off

	// What /-/status and /-/explain read (status.go).
	version, revision string
	started           time.Time
	now               func() time.Time
	registry          *prometheus.Registry
	knowledgeOff      string              // why the knowledge features are off; "": on
	sqlCatalog        bool                // the catalog is catalog.dsn's, behind its schema gate
	routes            RouteLookup         // the knowledge endpoints' catalog
	rdb               *sharedredis.Client // nil: no Redis
	coreTLS           *tls.Config         // core.ca_file's; nil: the system roots
	lastReload        *ReloadStatus       // under mu; nil: none since start

	// rollout is the policy in effect, for the OAuth front's resource
	// check (SPEC §12: a rolled-out route's MCP URL); swapped on reload.
	rollout atomic.Pointer[rollout.Policy]

	tp      trace.TracerProvider // nil: tracing off
	tracing *telemetry.Tracing   // the OTLP provider Build set up, flushed by ShutdownTracing
	traceMu sync.Once
}

// ShutdownTracing flushes the spans still queued to the collector and stops
// the exporter, giving up (dropping what is left) when ctx ends. Safe to
// call more than once and with tracing off.
func (a *App) ShutdownTracing(ctx context.Context) {
	a.traceMu.Do(func() {
		if err := a.tracing.Shutdown(ctx); err != nil {
			a.log.Warn("tracing: spans not flushed at shutdown", slog.Any("error", err))
		}
	})
}

// setupTracing turns tracing on when configured (or given in deps) and
// returns the logger to use: with tracing on, its lines of a sampled
// request carry trace_id and span_id.
func (a *App) setupTracing(ctx context.Context, cfg config.Config, deps Deps, reg prometheus.Registerer, log *slog.Logger) (*slog.Logger, error) {
	m := telemetry.NewMetrics(reg)
	a.tp = deps.TracerProvider
	if a.tp == nil && cfg.Tracing.Enabled {
		t, err := telemetry.Setup(ctx, telemetry.Options{Version: deps.Version, Metrics: m, Logger: log})
		if err != nil {
			return nil, err
		}
		if t != nil { // nil: OTEL_SDK_DISABLED
			a.tracing, a.tp = t, t.Provider
			a.closers = append(a.closers, func() error {
				sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				a.ShutdownTracing(sctx)
				return nil
			})
		}
	}
	if a.tp == nil {
		return log, nil
	}
	return slog.New(telemetry.LogHandler(log.Handler())), nil
}

// Collectors are every metrics collector registered, including vectors
// without series yet (docs/metrics.md is tested against them).
func (a *App) Collectors() []prometheus.Collector {
	a.metrics.mu.Lock()
	defer a.metrics.mu.Unlock()
	return append([]prometheus.Collector(nil), a.metrics.collectors...)
}

// Close releases pools and caches, after the server stopped.
func (a *App) Close() {
	for i := len(a.closers) - 1; i >= 0; i-- {
		if err := a.closers[i](); err != nil {
			a.log.Warn("close failed", slog.Any("error", err))
		}
	}
}

func breakerSettings(b config.Breaker) breaker.Settings {
	return breaker.Settings{Failures: b.Failures, Window: b.Window, OpenTimeout: b.OpenTimeout, HalfOpenMax: b.HalfOpenMax}
}

// ProxyLimits are the edge's bounds of cfg (a limit of 0 in the
// configuration means off, which proxy.Limits spells negative).
func ProxyLimits(cfg config.Config) proxy.Limits {
	off := func(v int64) int64 {
		if v == 0 {
			return -1
		}
		return v
	}
	return proxy.Limits{
		BodyMinRate:       off(cfg.Proxy.BodyMinRate),
		BodyMinRateWindow: cfg.Proxy.BodyMinRateWindow,
		BodyTimeout:       cfg.Proxy.BodyTimeout,
		MaxInFlight:       cfg.Proxy.MaxInFlight,
		TurnBodyBudget:    cfg.Proxy.TurnBodyBudget,
		InFlightPerClient: cfg.Proxy.MaxInFlightPerClient,
		TurnBodyPerClient: cfg.Proxy.TurnBodyBudgetPerClient,
	}
}

// Build wires a validated configuration into a sidecar. Secrets go only
// into the components that use them; nothing here logs them.
func Build(ctx context.Context, cfg config.Config, deps Deps) (*App, error) {
	reg := prometheus.NewRegistry()
	rec := &recorder{Registerer: reg}
	rec.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	log, level := deps.Logger, deps.Level
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if level == nil {
		level = new(slog.LevelVar)
	}
	a := &App{log: log, cfg: cfg, metrics: rec, level: level, single: deps.SingleProcess,
		version: deps.Version, revision: deps.Revision, now: deps.Now, registry: reg}
	if a.now == nil {
		a.now = time.Now
	}
	a.started = a.now()
	log, err := a.setupTracing(ctx, cfg, deps, rec, log)
	if err != nil {
		return nil, err
	}
	a.log = log
	coreURL, _ := url.Parse(cfg.Core.URL) // validated
	// One TLS configuration for every connection to Core (core.ca_file).
	a.coreTLS, err = CoreTLS(cfg)
	if err != nil {
		a.Close()
		return nil, err
	}
	var trusted []netip.Prefix
	for _, s := range cfg.Proxy.TrustedProxies {
		p, _ := config.ParsePrefix(s) // validated
		trusted = append(trusted, p)
	}
	transport := deps.Transport
	if transport == nil {
		transport = proxy.NewTransport(proxy.TransportOptions{
			DialTimeout:           cfg.Proxy.DialTimeout,
			ResponseHeaderTimeout: cfg.Proxy.ResponseHeaderTimeout,
			MaxIdleConnsPerHost:   cfg.Proxy.MaxIdleConnsPerHost,
			TLSClientConfig:       a.coreTLS,
		})
	}
	opts := proxy.Options{
		CoreURL:         coreURL,
		Transport:       transport,
		TrustedProxies:  trusted,
		PreserveHost:    cfg.Proxy.PreserveHost,
		Logger:          log,
		Registry:        reg,
		Registerer:      rec,
		AccessLog:       cfg.Log.Access,
		Version:         deps.Version,
		BodyIdleTimeout: cfg.Proxy.BodyIdleTimeout,
		Limits:          ProxyLimits(cfg),
		TracerProvider:  a.tp,

		ClientAddressHeadersExtra: cfg.Proxy.ClientAddressHeadersExtra,
		AdminAllowedHosts:         cfg.AdminAllowedHosts,
	}
	opts.TraceTrustInbound, _ = proxy.ParseTraceTrust(cfg.Tracing.TrustInbound) // validated
	ok, reason := cfg.KnowledgeEnabled()
	if !ok && deps.Catalog != nil && cfg.Core.Token != "" {
		ok = true // the catalog is given, not dialled
	}
	if !ok {
		a.knowledgeOff = reason
		log.Warn("knowledge features are off; running as a pure pass-through proxy", slog.String("reason", reason))
	} else {
		f, err := a.buildFeatures(ctx, cfg, deps, rec, log)
		if err != nil {
			a.Close()
			return nil, err
		}
		opts.Features = f
	}
	srv, err := proxy.New(opts)
	if err != nil {
		a.Close()
		return nil, err
	}
	a.Server = srv
	a.registerOps()
	return a, nil
}

func (a *App) buildFeatures(ctx context.Context, cfg config.Config, deps Deps, reg prometheus.Registerer, log *slog.Logger) (*proxy.Features, error) {
	client, err := coreclient.NewClient(coreclient.Options{
		BaseURL:        cfg.Core.URL,
		ServiceToken:   cfg.Core.Token,
		Transport:      CoreClientTransport(cfg, a.coreTLS),
		Timeout:        cfg.Core.Timeout,
		ProbeInterval:  cfg.ProbeInterval,
		Identity:       breakerSettings(cfg.Core.Identity),
		Retrieval:      breakerSettings(cfg.Core.Retrieval),
		Metrics:        coreclient.NewMetrics(reg),
		TracerProvider: a.tp,
	})
	if err != nil {
		return nil, fmt.Errorf("core client: %w", err)
	}
	catalog, tasks, err := a.buildCatalog(ctx, cfg, deps, reg, log)
	if err != nil {
		return nil, err
	}
	keys, err := knowledge.NewKeyring(cfg.Signing.Keys, cfg.Core.Token)
	if err != nil {
		return nil, fmt.Errorf("signing keys: %w", err)
	}
	rdb, shared, err := a.buildRedis(ctx, cfg, deps, log)
	if err != nil {
		return nil, err
	}
	auditor, err := a.buildAudit(ctx, cfg, deps, reg, log)
	if err != nil {
		return nil, err
	}
	svc, err := knowledge.New(knowledge.Options{
		Auditor:          auditor,
		SharedLimiter:    shared,
		Now:              deps.Now,
		Identity:         client,
		Retriever:        client,
		Catalog:          catalog,
		Tasks:            tasks,
		Keys:             keys,
		RateLimit:        cfg.RateLimit.RPS,
		RateBurst:        cfg.RateLimit.Burst,
		RetrievalTimeout: cfg.Core.Timeout,
		Logger:           log,
		Registerer:       reg,
	})
	if err != nil {
		return nil, fmt.Errorf("knowledge: %w", err)
	}
	led, err := a.buildLedger(cfg, deps, rdb, reg, log)
	if err != nil {
		return nil, err
	}
	pol, _ := rollout.Parse(cfg.Rollout) // validated
	a.rollout.Store(&pol)
	mcpOpts, mcpH, front, err := a.buildMCP(cfg, deps, svc, client, reg, log)
	if err != nil {
		return nil, err
	}
	// The parts the edge holds by small interfaces: native detection (its
	// verdict held for probe_interval) and the turn feature's decisions.
	nd, err := native.New(native.Options{Mode: cfg.NativeDetection, Interval: cfg.ProbeInterval, Prober: client,
		Now: deps.Now, OnState: native.StateMetric(reg)})
	if err != nil {
		return nil, err
	}
	ti, err := turn.NewInterceptor(turn.Options{Knowledge: svc, Ledger: led, Recorder: turn.NewMetrics(reg, log, proxy.RequestID),
		NoHints: !cfg.TurnHints})
	if err != nil {
		return nil, err
	}
	return &proxy.Features{
		Knowledge:    svc,
		Native:       nd,
		Turns:        ti,
		Rollout:      pol,
		ProbeTimeout: cfg.Core.Timeout,
		MCP:          mcpOpts,
		MCPHandler:   mcpH,
		OAuth:        front,
	}, nil
}

// buildRedis connects the one Redis client the ledger and the shared rate
// limit use when either is configured for Redis (nil otherwise), and the
// shared limiter: deps.SharedLimiter, else Redis's when rate_limit is
// shared, else nil (the local buckets).
func (a *App) buildRedis(ctx context.Context, cfg config.Config, deps Deps, log *slog.Logger) (*sharedredis.Client, knowledge.SharedLimiter, error) {
	var rdb *sharedredis.Client
	if cfg.LedgerBackend() == "redis" || cfg.RateLimitBackend() == "redis" {
		sharedredis.QuietLogs()
		var err error
		rdb, err = sharedredis.New(sharedredis.Options{
			URL: cfg.Ledger.RedisURL, Mode: cfg.Ledger.RedisMode, CAFile: cfg.Ledger.RedisCAFile,
			TracerProvider: a.tp,
		})
		if err != nil {
			return nil, nil, err
		}
		a.closers = append(a.closers, rdb.Close)
		a.rdb = rdb
		pctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		if err := rdb.Ping(pctx); err != nil {
			// Not fatal: pass-through and turns without the field keep working;
			// turns that need the ledger answer 503 until Redis is back, and
			// the rate limit uses the local buckets meanwhile.
			log.Warn("redis (turn ledger, shared rate limit) not reachable at startup", slog.Any("error", err))
		}
		cancel()
	}
	shared := deps.SharedLimiter
	if shared == nil && cfg.RateLimitBackend() == "redis" {
		rl, err := rdb.Limiter("")
		if err != nil {
			return nil, nil, err
		}
		shared = rl
	}
	return rdb, shared, nil
}

// buildLedger is the turn ledger: deps.Ledger, else Redis's or the
// in-memory one per ledger.backend, behind the retrying release.
func (a *App) buildLedger(cfg config.Config, deps Deps, rdb *sharedredis.Client, reg prometheus.Registerer, log *slog.Logger) (ledger.Ledger, error) {
	if deps.Ledger != nil {
		return deps.Ledger, nil
	}
	var backend ledger.Ledger
	if cfg.LedgerBackend() == "redis" {
		rl, err := ledger.NewRedis(rdb, ledger.RedisOptions{TTL: cfg.Ledger.TTL, WaitReplicas: cfg.Ledger.RedisWaitReplicas})
		if err != nil {
			return nil, err
		}
		backend = rl
		ledger.RegisterEvictions(reg) // Redis evicts nothing before ledger.ttl: the series stay 0
	} else {
		mem := ledger.NewMemory(cfg.Ledger.MaxEntries, cfg.Ledger.TTL, time.Now)
		mem.Register(reg)
		backend = mem
		if pol, _ := rollout.Parse(cfg.Rollout); !pol.EnablesNone() && !a.single {
			warnMemoryLedger(log, pol)
		}
	}
	// A release that fails (Redis hung) is retried until it succeeds or its
	// record expires, and never leaves a 409 behind (SPEC §7).
	retrying := ledger.NewRetrying(backend, cfg.Ledger.TTL, time.Now)
	retrying.Register(reg)
	a.closers = append(a.closers, retrying.Close) // closes the backend too (rdb's own Close, registered above, is then a no-op)
	return retrying, nil
}

// buildMCP builds the remote MCP endpoint (SPEC §10): its options, its
// handler — mcpserver's, its tools answered in process by svc or, after a
// flip, by the native Core (mcp.go) — and the OAuth front hosts sign in
// through when mcp.oauth is configured (SPEC §12; nil otherwise).
func (a *App) buildMCP(cfg config.Config, deps Deps, svc *knowledge.Service, client *coreclient.Client,
	reg prometheus.Registerer, log *slog.Logger) (proxy.MCPOptions, proxy.MCPHandler, proxy.OAuth, error) {
	native := newNativeMCP(cfg, a.coreTLS, telemetry.Tracer(a.tp))
	opts := proxy.MCPOptions{AuthorizationServers: cfg.MCP.AuthorizationServers, Scopes: cfg.MCP.Scopes,
		PublicURL: cfg.MCP.PublicURL, Native: native != nil}
	h, err := mcpserver.NewHTTP(mcpserver.HTTPOptions{
		Knowledge: &mcpBackend{k: svc, native: native, log: log},
		Version:   deps.Version,
		Logger:    log,
		Tracer:    telemetry.Tracer(a.tp),
		TrustMeta: func(ctx context.Context) bool { return proxy.MCPCallOf(ctx).TraceTrusted },
		Observe:   mcpserver.RequestCounter(reg),
		Budget:    proxy.NewMCPBudget(cfg.Proxy.MCPAnswerBudget, reg),
	})
	if err != nil {
		return opts, nil, nil, err
	}
	// oauth_requests_total exists (at 0) whether or not the front is on.
	oauthRequests := prom.CounterVec("oauth_requests_total",
		"Requests of the OAuth front MCP hosts sign in through (SPEC §12), by endpoint and outcome.", "endpoint", "outcome")
	for _, e := range mcpauth.Endpoints {
		for _, o := range mcpauth.Outcomes {
			oauthRequests.WithLabelValues(e, o)
		}
	}
	reg.MustRegister(oauthRequests)
	var front proxy.OAuth // nil unless configured: a typed nil would turn the front on
	if id := cfg.MCP.OAuth.ClientAppID; id != "" {
		oa, err := mcpauth.New(mcpauth.Options{
			Core: client, ClientAppID: id, DeviceLabel: cfg.MCP.OAuth.DeviceLabel, Issuer: cfg.MCP.PublicURL,
			Served:  func(route string) bool { return a.rollout.Load().Enabled(route) },
			Observe: func(endpoint, outcome string) { oauthRequests.WithLabelValues(endpoint, outcome).Inc() },
		})
		if err != nil {
			return opts, nil, nil, fmt.Errorf("mcp oauth: %w", err)
		}
		front = oa
		// The 401 and the RFC 9728 document point hosts at the front.
		opts.AuthorizationServers = []string{oa.Issuer()}
	}
	return opts, h, front, nil
}

// buildAudit opens the disclosure audit's sink (SPEC §11) when
// audit.enabled, with its OTLP logger when audit.otlp; nil otherwise.
func (a *App) buildAudit(ctx context.Context, cfg config.Config, deps Deps, reg prometheus.Registerer, log *slog.Logger) (knowledge.Auditor, error) {
	if !cfg.Audit.Enabled {
		return nil, nil
	}
	o := audit.Options{
		File: cfg.Audit.File, Refuse: cfg.Audit.OnFailure == config.AuditRefuse,
		Now: deps.Now, Logger: log, Registerer: reg, Stdout: deps.AuditStdout,
	}
	if cfg.Audit.QueryHMACKey != "" {
		o.QueryKey = []byte(cfg.Audit.QueryHMACKey)
	}
	if cfg.Audit.OTLP {
		p, err := audit.NewOTLP(ctx, telemetry.ServiceName, deps.Version)
		if err != nil {
			return nil, err
		}
		a.closers = append(a.closers, func() error {
			sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			return p.Shutdown(sctx)
		})
		o.OTLP = p.Logger()
	}
	l, err := audit.Open(o)
	if err != nil {
		return nil, err
	}
	a.audit = l
	a.closers = append(a.closers, l.Close)
	return l, nil
}

// buildCatalog opens the SQL catalog behind its schema gate, or takes the
// one given in deps.
func (a *App) buildCatalog(ctx context.Context, cfg config.Config, deps Deps, reg prometheus.Registerer, log *slog.Logger) (knowledge.Catalog, knowledge.Tasks, error) {
	if deps.Catalog != nil {
		tasks, _ := deps.Catalog.(knowledge.Tasks)
		a.routes = deps.Catalog
		return deps.Catalog, tasks, nil
	}
	sqlCat, err := catalog.Open(catalog.Options{
		DSN:             cfg.Catalog.DSN,
		MaxOpenConns:    cfg.Catalog.MaxOpenConns,
		MaxIdleConns:    cfg.Catalog.MaxIdleConns,
		ConnMaxLifetime: cfg.Catalog.ConnMaxLifetime,
		QueryTimeout:    cfg.Catalog.QueryTimeout,
		DocCacheEntries: cfg.Catalog.DocCacheEntries,
		DocCacheBytes:   cfg.Catalog.DocCacheBytes,
		Breaker:         breakerSettings(cfg.Catalog.Breaker),
		Metrics:         catalog.NewMetrics(reg),
		TracerProvider:  a.tp,
	})
	if err != nil {
		return nil, nil, fmt.Errorf("catalog: %w", err)
	}
	a.closers = append(a.closers, sqlCat.Close)
	// The knowledge endpoints answer 503 until Core's tables are verified;
	// pass-through and readiness do not depend on it.
	// A failed check is retried with backoff (1s, 2s, … up to 30s) by the
	// knowledge requests, so a replica started before its catalog serves
	// within seconds of the catalog becoming reachable.
	gated := catalog.NewSchemaGate(sqlCat, 30*time.Second, deps.Now, reg)
	if cfg.Core.ClientAppID != "" {
		// Core's rate limit on our own client: read, logged and exported at
		// start-up and on each schema re-check.
		limits := catalog.NewClientLimitCheck(sqlCat, cfg.Core.ClientAppID, log, reg)
		gated.AfterCheck(func(ctx context.Context) { _ = limits.Check(ctx) })
	}
	sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	startErr := gated.Check(sctx)
	cancel()
	if startErr != nil {
		log.Error("catalog schema check failed; the knowledge endpoints answer 503 until it passes (retried by the next knowledge request after 1s, 2s, 4s, … up to every 30s)",
			slog.Any("error", startErr))
		// Say when it finally passes: the hook runs under the gate's lock,
		// once, since a passed check is not repeated.
		gated.AfterCheck(func(context.Context) {
			log.Info("catalog schema check passed; the knowledge endpoints are served")
		})
	}
	switch st := gated.TaskControlState(); st {
	case corefacts.TaskControlPartial:
		log.Warn("Core's task-control tables are only partly visible (migration 062 without all six tables or grants); knowledge search and read answer 503 TASK_UNAVAILABLE until fixed",
			slog.String("task_control", string(st)))
	case corefacts.TaskControlAbsent, corefacts.TaskControlEnforced:
		log.Info("managed-task rules", slog.String("task_control", string(st)))
	}
	a.routes, a.sqlCatalog = gated, true
	return gated, gated, nil
}

// Reload applies what load returns (the file and the environment read
// again): on SIGHUP, on POST /-/reload and when the watched file changes.
// Only hot-reloadable settings (rollout, log level) take effect; an invalid
// configuration is rejected (the returned *config.Error lists its
// problems), logged, and the running configuration kept. The audit file is
// reopened first, whatever the configuration says (logrotate renamed it and
// asks for a new one); when it cannot be, the reload is rejected too, with
// the reason as its problem.
func (a *App) Reload(load func() (config.Config, error)) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	cfg, err := config.Config{}, auditReopen(a.audit)
	if err == nil {
		cfg, err = load()
	}
	if err != nil {
		a.Server.ObserveReload("rejected")
		a.noteReload("rejected", err)
		a.log.Error("configuration reload rejected; keeping the running configuration", slog.Any("error", err))
		var ce *config.Error
		if !errors.As(err, &ce) {
			err = &config.Error{Problems: []string{err.Error()}}
		}
		return err
	}
	pol, _ := rollout.Parse(cfg.Rollout)
	switch old, _ := rollout.Parse(a.cfg.Rollout); {
	case pol.EnablesNone() && !old.EnablesNone():
		a.log.Warn("configuration reload turns the knowledge protocol off for every workspace; "+
			"hosts fall back to inline knowledge", slog.String("rollout", pol.String()), slog.String("previous", old.String()))
	case !pol.EnablesNone() && old.EnablesNone() && a.cfg.LedgerBackend() == "memory" && !a.single:
		warnMemoryLedger(a.log, pol)
	}
	a.Server.SetRollout(pol)
	a.rollout.Store(&pol)
	a.Server.SetTurnHints(cfg.TurnHints)
	a.level.Set(ParseLevel(cfg.Log.Level))
	if changed := restartOnly(a.cfg, cfg); len(changed) > 0 {
		a.log.Warn("configuration reload: these settings changed but need a restart to take effect",
			slog.Any("settings", changed))
	}
	a.cfg.Rollout, a.cfg.TurnHints, a.cfg.Log.Level = cfg.Rollout, cfg.TurnHints, cfg.Log.Level
	a.Server.ObserveReload("ok")
	a.noteReload("ok", nil)
	a.log.Info("configuration reloaded", slog.String("rollout", pol.String()), slog.Bool("turn_hints", cfg.TurnHints),
		slog.String("log_level", cfg.Log.Level))
	return nil
}

// auditReopen reopens the audit file (nil: audit off, or reopened); a
// failure is a configuration problem naming why, never the file's content.
func auditReopen(l *audit.Log) error {
	err := l.Reopen()
	if err == nil {
		return nil
	}
	var pe *fs.PathError
	if errors.As(err, &pe) {
		err = pe.Err
	}
	return &config.Error{Problems: []string{"audit.file: cannot be reopened: " + err.Error()}}
}

// warnMemoryLedger says what the in-memory turn ledger cannot do, once the
// protocol is rolled out somewhere.
func warnMemoryLedger(log *slog.Logger, pol rollout.Policy) {
	log.Warn("turn ledger is in memory: a delivery-mode switch on a retried turn is detected only within this process "+
		"(one replica; forgotten on restart). Set KNOWLEDGE_SIDECAR_LEDGER_REDIS_URL (or ledger.redis_url_file) when running several replicas.",
		slog.String("rollout", pol.String()))
}

// ParseLevel reads a validated log level.
func ParseLevel(s string) slog.Level {
	var l slog.Level
	_ = l.UnmarshalText([]byte(s)) // validated by config
	return l
}

// restartOnly names the top-level settings (by YAML key, never by value: some
// hold secrets) that differ between two configurations and cannot be applied
// by a reload: everything but rollout, turn_hints and log.level.
func restartOnly(running, next config.Config) []string {
	running.Rollout, running.TurnHints, running.Log.Level = "", false, ""
	next.Rollout, next.TurnHints, next.Log.Level = "", false, ""
	rv, nv := reflect.ValueOf(running), reflect.ValueOf(next)
	var changed []string
	for i := 0; i < rv.NumField(); i++ {
		if !reflect.DeepEqual(rv.Field(i).Interface(), nv.Field(i).Interface()) {
			changed = append(changed, strings.Split(rv.Type().Field(i).Tag.Get("yaml"), ",")[0])
		}
	}
	return changed
}
