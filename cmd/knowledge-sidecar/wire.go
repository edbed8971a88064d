package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"net/url"
	"reflect"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/redis/go-redis/v9"

	"github.com/bailinghub/knowledge-sidecar/config"
	"github.com/bailinghub/knowledge-sidecar/coreclient"
	"github.com/bailinghub/knowledge-sidecar/knowledge"
	"github.com/bailinghub/knowledge-sidecar/ledger"
	"github.com/bailinghub/knowledge-sidecar/proxy"
	"github.com/bailinghub/knowledge-sidecar/rollout"
)

// extraChecks are the Validate checks that live in other packages.
var extraChecks = []func(*config.Config) (string, error){
	func(c *config.Config) (string, error) {
		_, err := rollout.Parse(c.Rollout)
		return "rollout", err
	},
	func(c *config.Config) (string, error) {
		if ok, _ := c.KnowledgeEnabled(); !ok && c.Signing.Keys == "" {
			return "", nil
		}
		_, err := knowledge.NewKeyring(c.Signing.Keys, c.Core.Token)
		return "signing.keys", err
	},
}

// app is a built sidecar: the edge plus what must be closed after it.
type app struct {
	server  *proxy.Server
	log     *slog.Logger
	closers []func() error
	cfg     config.Config
}

func (a *app) Close() {
	for i := len(a.closers) - 1; i >= 0; i-- {
		if err := a.closers[i](); err != nil {
			a.log.Warn("close failed", slog.Any("error", err))
		}
	}
}

func breaker(b config.Breaker) coreclient.BreakerSettings {
	return coreclient.BreakerSettings{Failures: b.Failures, Window: b.Window, OpenTimeout: b.OpenTimeout, HalfOpenMax: b.HalfOpenMax}
}

// build wires the configuration into a server. Secrets go only into the
// components that use them; nothing here logs them.
func build(ctx context.Context, cfg config.Config, log *slog.Logger) (*app, error) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	a := &app{log: log, cfg: cfg}
	coreURL, _ := url.Parse(cfg.Core.URL) // validated
	var trusted []netip.Prefix
	for _, s := range cfg.Proxy.TrustedProxies {
		p, _ := config.ParsePrefix(s) // validated
		trusted = append(trusted, p)
	}
	opts := proxy.Options{
		CoreURL: coreURL,
		Transport: proxy.NewTransport(proxy.TransportOptions{
			DialTimeout:           cfg.Proxy.DialTimeout,
			ResponseHeaderTimeout: cfg.Proxy.ResponseHeaderTimeout,
			MaxIdleConnsPerHost:   cfg.Proxy.MaxIdleConnsPerHost,
		}),
		TrustedProxies:  trusted,
		PreserveHost:    cfg.Proxy.PreserveHost,
		Logger:          log,
		Registry:        reg,
		Version:         version,
		BodyIdleTimeout: cfg.Proxy.BodyIdleTimeout,
	}
	if ok, reason := cfg.KnowledgeEnabled(); !ok {
		log.Warn("knowledge features are off; running as a pure pass-through proxy", slog.String("reason", reason))
	} else {
		f, err := a.buildFeatures(ctx, cfg, reg, log)
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
	a.server = srv
	return a, nil
}

func (a *app) buildFeatures(ctx context.Context, cfg config.Config, reg prometheus.Registerer, log *slog.Logger) (*proxy.Features, error) {
	cm := coreclient.NewMetrics(reg)
	client, err := coreclient.NewClient(coreclient.Options{
		BaseURL:       cfg.Core.URL,
		ServiceToken:  cfg.Core.Token,
		Timeout:       cfg.Core.Timeout,
		ProbeInterval: cfg.ProbeInterval,
		Identity:      breaker(cfg.Core.Identity),
		Retrieval:     breaker(cfg.Core.Retrieval),
		Metrics:       cm,
	})
	if err != nil {
		return nil, fmt.Errorf("core client: %w", err)
	}
	catalog, err := coreclient.OpenCatalog(coreclient.CatalogOptions{
		DSN:             cfg.Catalog.DSN,
		MaxOpenConns:    cfg.Catalog.MaxOpenConns,
		MaxIdleConns:    cfg.Catalog.MaxIdleConns,
		ConnMaxLifetime: cfg.Catalog.ConnMaxLifetime,
		QueryTimeout:    cfg.Catalog.QueryTimeout,
		DocCacheEntries: cfg.Catalog.DocCacheEntries,
		DocCacheBytes:   cfg.Catalog.DocCacheBytes,
		Breaker:         breaker(cfg.Catalog.Breaker),
		Metrics:         cm,
	})
	if err != nil {
		return nil, fmt.Errorf("catalog: %w", err)
	}
	a.closers = append(a.closers, catalog.Close)
	// The knowledge endpoints answer 503 until Core's tables are verified;
	// pass-through and readiness do not depend on it.
	gated := coreclient.NewSchemaGate(catalog, 30*time.Second, nil, reg)
	if cfg.Core.ClientAppID != "" {
		// Core's rate limit on our own client: read, logged and exported at
		// start-up and on each schema re-check.
		limits := coreclient.NewRateLimitCheck(catalog, cfg.Core.ClientAppID, log, reg)
		gated.AfterCheck(func(ctx context.Context) { _ = limits.Check(ctx) })
	}
	sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	if err := gated.Check(sctx); err != nil {
		log.Error("catalog schema check failed; the knowledge endpoints answer 503 until it passes (re-checked every 30s)",
			slog.Any("error", err))
	}
	cancel()
	keys, err := knowledge.NewKeyring(cfg.Signing.Keys, cfg.Core.Token)
	if err != nil {
		return nil, fmt.Errorf("signing keys: %w", err)
	}
	svc, err := knowledge.New(knowledge.Options{
		Identity:         client,
		Retriever:        client,
		Catalog:          gated,
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
	var led ledger.Ledger
	if cfg.LedgerBackend() == "redis" {
		// go-redis logs process-wide, with server addresses; silence it. The
		// ledger reports its own failures (without addresses).
		redis.SetLogger(quietRedisLog{})
		r, err := ledger.NewRedis(ledger.RedisOptions{URL: cfg.Ledger.RedisURL, TTL: cfg.Ledger.TTL})
		if err != nil {
			return nil, err
		}
		pctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		if err := r.Ping(pctx); err != nil {
			// Not fatal: pass-through and turns without the field keep working;
			// turns that need the ledger answer 503 until Redis is back.
			log.Warn("turn ledger not reachable at startup", slog.Any("error", err))
		}
		cancel()
		led = r
	} else {
		led = ledger.NewMemory(cfg.Ledger.MaxEntries, cfg.Ledger.TTL, time.Now)
		if pol, _ := rollout.Parse(cfg.Rollout); !pol.EnablesNone() {
			warnMemoryLedger(log, pol)
		}
	}
	a.closers = append(a.closers, led.Close)
	pol, _ := rollout.Parse(cfg.Rollout) // validated
	return &proxy.Features{
		Knowledge:       svc,
		Prober:          client,
		Ledger:          led,
		Rollout:         pol,
		NativeDetection: cfg.NativeDetection,
		ProbeInterval:   cfg.ProbeInterval,
		NoTurnHints:     !cfg.TurnHints,
	}, nil
}

// reload re-reads the configuration on SIGHUP. Only hot-reloadable settings
// (rollout, turn_hints, log level) take effect; an invalid file is rejected and logged
// and the running configuration is kept.
func (a *app) reload(path string, level *slog.LevelVar) {
	cfg, err := loadConfig(path)
	if err != nil {
		a.server.ObserveReload("rejected")
		a.log.Error("configuration reload rejected; keeping the running configuration", slog.Any("error", err))
		return
	}
	pol, _ := rollout.Parse(cfg.Rollout)
	switch old, _ := rollout.Parse(a.cfg.Rollout); {
	case pol.EnablesNone() && !old.EnablesNone():
		a.log.Warn("configuration reload turns the knowledge protocol off for every workspace; "+
			"hosts fall back to inline knowledge", slog.String("rollout", pol.String()), slog.String("previous", old.String()))
	case !pol.EnablesNone() && old.EnablesNone() && a.cfg.LedgerBackend() == "memory":
		warnMemoryLedger(a.log, pol)
	}
	a.server.SetRollout(pol)
	a.server.SetTurnHints(cfg.TurnHints)
	level.Set(parseLevel(cfg.Log.Level))
	if changed := restartOnly(a.cfg, cfg); len(changed) > 0 {
		a.log.Warn("configuration reload: these settings changed but need a restart to take effect",
			slog.Any("settings", changed))
	}
	a.cfg.Rollout, a.cfg.TurnHints, a.cfg.Log = cfg.Rollout, cfg.TurnHints, cfg.Log
	a.server.ObserveReload("ok")
	a.log.Info("configuration reloaded", slog.String("rollout", pol.String()), slog.Bool("turn_hints", cfg.TurnHints),
		slog.String("log_level", cfg.Log.Level))
}

// warnMemoryLedger says what the in-memory turn ledger cannot do, once the
// protocol is rolled out somewhere.
func warnMemoryLedger(log *slog.Logger, pol rollout.Policy) {
	log.Warn("turn ledger is in memory: a delivery-mode switch on a retried turn is detected only within this process "+
		"(one replica; forgotten on restart). Set ledger.redis_url when running several replicas.",
		slog.String("rollout", pol.String()))
}

type quietRedisLog struct{}

func (quietRedisLog) Printf(context.Context, string, ...interface{}) {}

// restartOnly names the top-level settings (by YAML key, never by value: some
// hold secrets) that differ between two configurations and cannot be applied
// by a reload: everything but rollout, turn_hints and log.
func restartOnly(running, next config.Config) []string {
	running.Rollout, running.TurnHints, running.Log = "", false, config.Log{}
	next.Rollout, next.TurnHints, next.Log = "", false, config.Log{}
	rv, nv := reflect.ValueOf(running), reflect.ValueOf(next)
	var changed []string
	for i := 0; i < rv.NumField(); i++ {
		if !reflect.DeepEqual(rv.Field(i).Interface(), nv.Field(i).Interface()) {
			changed = append(changed, strings.Split(rv.Type().Field(i).Tag.Get("yaml"), ",")[0])
		}
	}
	return changed
}
