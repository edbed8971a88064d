package main

import (
	"context"
	"crypto/sha256"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/url"
	"os"
	"os/signal"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/bailinghub/knowledge-sidecar/config"
	"github.com/bailinghub/knowledge-sidecar/proxy"
	"github.com/bailinghub/knowledge-sidecar/sidecar"
)

func configFlag(fs *flag.FlagSet) *string {
	return fs.String("config", os.Getenv("KNOWLEDGE_SIDECAR_CONFIG"), "YAML configuration file (optional; env overrides it)")
}

// parseFlags parses args; stop is true when the command must end with code
// (0 after --help, 2 on a bad flag).
func parseFlags(fs *flag.FlagSet, args []string) (code int, stop bool) {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0, true
		}
		return 2, true
	}
	return 0, false
}

// loadConfig loads and validates; the error lists every problem. Warnings
// are legal settings that are probably not meant (an empty file, no rollout).
func loadConfig(path string) (config.Config, []string, error) {
	cfg, warnings, err := config.LoadWithWarnings(path, os.LookupEnv)
	var ce *config.Error
	if err != nil && !errors.As(err, &ce) {
		return config.Config{}, nil, err // the file itself is unreadable or malformed
	}
	// Report environment problems and validation problems together.
	if err := config.Join(err, cfg.Validate(sidecar.ExtraChecks...)); err != nil {
		return config.Config{}, warnings, err
	}
	return cfg, warnings, nil
}

func cmdCheckConfig(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("check-config", flag.ContinueOnError)
	fs.SetOutput(stderr)
	path := configFlag(fs)
	probe := fs.Bool("probe", false, "also connect to Core, the catalog and Redis and report each (exit 0 only when all work)")
	probeTimeout := fs.Duration("probe-timeout", 5*time.Second, "bound of each probe (and of --route's catalog lookup)")
	route := fs.String("route", "", "say whether this workspace (route key) would be served and why: rollout rule and percent bucket, native verdict, its catalog row and knowledge bases")
	asJSON := fs.Bool("json", false, "with --route: print the explanation as JSON")
	if code, stop := parseFlags(fs, args); stop {
		return code
	}
	cfg, warnings, err := loadConfig(*path)
	var unknownEnv error
	if u := config.UnknownEnv(os.Environ(), probeAgentTokenEnv); len(u) > 0 {
		unknownEnv = &config.Error{Problems: u}
	}
	for _, w := range warnings {
		fmt.Fprintln(stdout, "warning: "+w)
	}
	if err := config.Join(err, unknownEnv); err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	switch ok, reason := cfg.KnowledgeEnabled(); {
	case *route != "" && *asJSON: // stdout is the explanation's JSON alone
	case !ok:
		fmt.Fprintf(stdout, "configuration is valid; knowledge features are off: %s (pure pass-through)\n", reason)
	default:
		fmt.Fprintln(stdout, "configuration is valid")
	}
	code := 0
	if *probe {
		code = runProbes(context.Background(), cfg, *probeTimeout, stdout)
	}
	if *route != "" {
		code = max(code, explainRoute(context.Background(), cfg, *route, *probeTimeout, stdout, stderr, *asJSON))
	}
	return code
}

func newLogger(w io.Writer, level *slog.LevelVar) *slog.Logger {
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: level}))
}

func cmdServe(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	path := configFlag(fs)
	check := fs.Bool("check-config", false, "validate the configuration, print the result and exit")
	if code, stop := parseFlags(fs, args); stop {
		return code
	}
	if *check {
		return cmdCheckConfig([]string{"--config", *path}, stdout, stderr)
	}
	cfg, warnings, err := loadConfig(*path)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	level := new(slog.LevelVar)
	level.Set(sidecar.ParseLevel(cfg.Log.Level))
	log := newLogger(stderr, level)
	for _, w := range append(warnings, config.UnknownEnv(os.Environ(), probeAgentTokenEnv)...) {
		log.Warn("configuration: " + w)
	}

	applyMemoryLimit(log, cfg.Proxy.MemoryLimit, os.LookupEnv, cgroupMemoryLimit)
	gc, gcSource := sidecar.ApplyGCPercent(os.LookupEnv)
	log.Info("garbage collector target", slog.Int("gc_percent", gc), slog.String("source", gcSource))

	ignoreSIGPIPE()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	// One source for the version: build_info, /-/status and the start-up
	// line all show what `version` prints.
	b := readBuildInfo()
	app, err := sidecar.Build(ctx, cfg, sidecar.Deps{Logger: log, Level: level, Version: b.Version, Revision: b.Revision})
	if err != nil {
		log.Error("cannot start", slog.Any("error", err))
		return 1
	}
	defer app.Close()
	logStart(log, cfg, b)

	reload := func() error {
		return app.Reload(func() (config.Config, error) {
			cfg, _, err := loadConfig(*path)
			return cfg, err
		})
	}
	app.Server.SetReloader(reload)
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
				_ = reload() // logged and counted by reload
			}
		}
	}()
	if cfg.Reload.Watch && *path != "" {
		go watchFile(ctx, *path, cfg.Reload.WatchInterval, reload, log)
	}

	err = app.Server.Run(ctx, serveOptions(cfg))
	// The spans of the last requests go to the collector, for at most
	// shutdown.timeout (an unreachable collector does not hold the exit).
	fctx, cancel := context.WithTimeout(context.Background(), cfg.Shutdown.Timeout)
	app.ShutdownTracing(fctx)
	cancel()
	if err != nil && !errors.Is(err, context.Canceled) {
		log.Error("server failed", slog.Any("error", err))
		return 1
	}
	return 0
}

// ignoreSIGPIPE keeps a write to a broken pipe from killing the process:
// the Go runtime raises SIGPIPE for a write to standard output or error
// whose reader is gone (audit.file "-" read by a collector that exits), and
// its default action ends the process, pass-through with it. Ignored, the
// write fails with EPIPE like any other write: an audit event then takes
// the audit.on_failure path, a log line is lost.
func ignoreSIGPIPE() { signal.Ignore(syscall.SIGPIPE) }

// logStart writes the one info line an operator looks for first. Never a
// secret: the Core URL's host only, the catalog as on/off.
func logStart(log *slog.Logger, cfg config.Config, b buildInfo) {
	u, _ := url.Parse(cfg.Core.URL) // validated
	knowledgeOn, _ := cfg.KnowledgeEnabled()
	log.Info("starting knowledge-sidecar",
		slog.String("version", b.Version), slog.String("revision", b.Revision), slog.String("go", b.GoVersion),
		slog.String("core_host", u.Host), slog.String("rollout", cfg.Rollout),
		slog.Bool("knowledge", knowledgeOn), slog.Bool("catalog", cfg.Catalog.DSN != ""),
		slog.String("ledger", cfg.LedgerBackend()), slog.String("native_detection", cfg.NativeDetection),
		slog.Bool("reload_watch", cfg.Reload.Watch), slog.Bool("tracing", cfg.Tracing.Enabled))
}

// watchFile calls reload whenever the content of path changes (checked
// every interval; a Kubernetes ConfigMap update swaps a symlink, which a
// content hash sees and an inode watch may not). It stops with ctx.
func watchFile(ctx context.Context, path string, interval time.Duration, reload func() error, log *slog.Logger) {
	last, _ := fileSum(path)
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		sum, err := fileSum(path)
		if err != nil {
			log.Warn("reload watch: cannot read the configuration file", slog.Any("error", err))
			continue
		}
		if sum == last {
			continue
		}
		last = sum
		log.Info("reload watch: the configuration file changed")
		_ = reload() // logged and counted by reload
	}
}

func fileSum(path string) ([sha256.Size]byte, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return [sha256.Size]byte{}, err
	}
	return sha256.Sum256(raw), nil
}

func serveOptions(cfg config.Config) proxy.ServeOptions {
	return proxy.ServeOptions{
		Listen:                  cfg.Listen,
		AdminListen:             cfg.AdminListen,
		ReadHeaderTimeout:       cfg.Proxy.ReadHeaderTimeout,
		IdleTimeout:             cfg.Proxy.IdleTimeout,
		MaxHeaderBytes:          cfg.Proxy.MaxHeaderBytes,
		MaxConnections:          cfg.Proxy.MaxConnections,
		MaxConnectionsPerClient: cfg.Proxy.MaxConnectionsPerClient,
		DrainDelay:              cfg.Shutdown.DrainDelay,
		ShutdownTimeout:         cfg.Shutdown.Timeout,
	}
}

// applyMemoryLimit sets the Go runtime's soft memory limit: an explicit
// GOMEMLIMIT environment variable wins (the runtime has applied it already);
// else proxy.memory_limit; else 90 % of the cgroup's memory limit, when the
// process runs under one. The garbage collector then works harder near the
// limit instead of the heap growing into an OOM kill. It returns the limit
// in effect (math.MaxInt64: none) and where it came from.
func applyMemoryLimit(log *slog.Logger, configured int64, env func(string) (string, bool), cgroup func() int64) (int64, string) {
	limit, source := int64(math.MaxInt64), "none"
	switch v, ok := env("GOMEMLIMIT"); {
	case ok && v != "":
		limit, source = debug.SetMemoryLimit(-1), "GOMEMLIMIT"
	case configured > 0:
		limit, source = configured, "proxy.memory_limit"
		debug.SetMemoryLimit(limit)
	default:
		if c := cgroup(); c > 0 {
			limit, source = c/10*9, "cgroup"
			debug.SetMemoryLimit(limit)
		}
	}
	if limit == math.MaxInt64 {
		log.Info("no memory limit: set proxy.memory_limit or GOMEMLIMIT, or run under a cgroup memory limit")
	} else {
		log.Info("memory limit", slog.Int64("bytes", limit), slog.String("source", source))
	}
	return limit, source
}

// cgroupMemoryLimit is the memory limit of this process's cgroup (bytes),
// or 0 when there is none: cgroup v2's memory.max, else v1's
// memory.limit_in_bytes (v1 reports "no limit" as a huge number).
func cgroupMemoryLimit() int64 {
	for _, f := range []string{"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"} {
		raw, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		return parseCgroupLimit(string(raw))
	}
	return 0
}

func parseCgroupLimit(s string) int64 {
	n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
	if err != nil || n <= 0 || n >= 1<<62 { // "max", or v1's unlimited
		return 0
	}
	return n
}
