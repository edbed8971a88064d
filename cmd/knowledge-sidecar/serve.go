package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/bailinghub/knowledge-sidecar/config"
	"github.com/bailinghub/knowledge-sidecar/proxy"
)

func configFlag(fs *flag.FlagSet) *string {
	return fs.String("config", os.Getenv("KNOWLEDGE_SIDECAR_CONFIG"), "YAML configuration file (optional; env overrides it)")
}

// loadConfig loads and validates; the error lists every problem.
func loadConfig(path string) (config.Config, error) {
	cfg, err := config.Load(path, os.LookupEnv)
	var ce *config.Error
	if err != nil && !errors.As(err, &ce) {
		return config.Config{}, err // the file itself is unreadable or malformed
	}
	// Report environment problems and validation problems together.
	if err := config.Join(err, cfg.Validate(extraChecks...)); err != nil {
		return config.Config{}, err
	}
	return cfg, nil
}

func cmdCheckConfig(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("check-config", flag.ContinueOnError)
	fs.SetOutput(stderr)
	path := configFlag(fs)
	if err := fs.Parse(args); err != nil {
		return 2
	}
	cfg, err := loadConfig(*path)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	if ok, reason := cfg.KnowledgeEnabled(); !ok {
		fmt.Fprintf(stdout, "configuration is valid; knowledge features are off: %s (pure pass-through)\n", reason)
		return 0
	}
	fmt.Fprintln(stdout, "configuration is valid")
	return 0
}

func newLogger(w io.Writer, level *slog.LevelVar) *slog.Logger {
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: level}))
}

func parseLevel(s string) slog.Level {
	var l slog.Level
	_ = l.UnmarshalText([]byte(s)) // validated by config
	return l
}

func cmdServe(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	path := configFlag(fs)
	check := fs.Bool("check-config", false, "validate the configuration, print the result and exit")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *check {
		return cmdCheckConfig([]string{"--config", *path}, stdout, stderr)
	}
	cfg, err := loadConfig(*path)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	level := new(slog.LevelVar)
	level.Set(parseLevel(cfg.Log.Level))
	log := newLogger(stderr, level)

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	app, err := build(ctx, cfg, log)
	if err != nil {
		log.Error("cannot start", slog.Any("error", err))
		return 1
	}
	defer app.Close()

	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
				app.reload(*path, level)
			}
		}
	}()

	err = app.server.Run(ctx, serveOptions(cfg))
	if err != nil && !errors.Is(err, context.Canceled) {
		log.Error("server failed", slog.Any("error", err))
		return 1
	}
	return 0
}

func serveOptions(cfg config.Config) proxy.ServeOptions {
	return proxy.ServeOptions{
		Listen:            cfg.Listen,
		AdminListen:       cfg.AdminListen,
		ReadHeaderTimeout: cfg.Proxy.ReadHeaderTimeout,
		IdleTimeout:       cfg.Proxy.IdleTimeout,
		MaxHeaderBytes:    cfg.Proxy.MaxHeaderBytes,
		DrainDelay:        cfg.Shutdown.DrainDelay,
		ShutdownTimeout:   cfg.Shutdown.Timeout,
	}
}
