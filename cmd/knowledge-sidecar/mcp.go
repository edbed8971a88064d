package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/bailinghub/knowledge-sidecar/hostclient"
	"github.com/bailinghub/knowledge-sidecar/mcpserver"
)

// tokenEnv names the Agent access token's environment variable for the host-side commands.
const tokenEnv = "BAILING_AGENT_TOKEN"

// hostFlags are the flags the host-side commands (mcp, conformance) share.
type hostFlags struct {
	url, route *string
}

func addHostFlags(fs *flag.FlagSet) hostFlags {
	return hostFlags{
		url:   fs.String("url", "", "base URL of the Agent API (the sidecar or a native Core), e.g. http://127.0.0.1:8080"),
		route: fs.String("route", "", "workspace (route) key"),
	}
}

// check reports a missing --url or --route; problems are usage errors.
func (f hostFlags) check() error {
	if *f.url == "" {
		return errors.New("--url is required")
	}
	if *f.route == "" {
		return errors.New("--route is required")
	}
	return nil
}

// client checks the shared flags and builds the protocol client with a
// token that never changes; problems are usage errors.
func (f hostFlags) client(token string, hc *http.Client) (*hostclient.Client, error) {
	if err := f.check(); err != nil {
		return nil, err
	}
	if token == "" {
		return nil, fmt.Errorf("no Agent access token: set %s", tokenEnv)
	}
	return hostclient.New(*f.url, *f.route, token, hc)
}

// tokenSource is where the MCP server takes its token from: --token-file
// (re-read when it changes and after a 401), --token-command (run at start
// and after a 401) or the environment (fixed).
func tokenSource(ctx context.Context, file, command string, stderr io.Writer, log *slog.Logger) (hostclient.TokenSource, error) {
	switch {
	case file != "" && command != "":
		return nil, errors.New("give --token-file or --token-command, not both")
	case file != "":
		return hostclient.NewFileToken(file, log)
	case command != "":
		return hostclient.NewCommandToken(ctx, command, stderr, log)
	}
	t := os.Getenv(tokenEnv)
	if t == "" {
		return nil, fmt.Errorf("no Agent access token: set %s, --token-file or --token-command", tokenEnv)
	}
	return hostclient.StaticToken(t), nil
}

// cmdMCP serves the two knowledge tools over stdio until stdin closes.
// stdout carries only JSON-RPC; everything else goes to stderr.
func cmdMCP(args []string, stdin io.ReadCloser, stdout io.Writer, stderr io.Writer) int {
	fs := flag.NewFlagSet("mcp", flag.ContinueOnError)
	fs.SetOutput(stderr)
	hf := addHostFlags(fs)
	tokenFile := fs.String("token-file", "", "file holding the Agent access token, read again when it changes and after a 401 (default: $"+tokenEnv+")")
	tokenCommand := fs.String("token-command", "", "shell command (sh -c) that prints the Agent access token; run at start and again after a 401")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if err := hf.check(); err != nil {
		fmt.Fprintln(stderr, "mcp:", err)
		return 2
	}
	log := slog.New(slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	src, err := tokenSource(ctx, *tokenFile, *tokenCommand, stderr, log)
	if err != nil {
		fmt.Fprintln(stderr, "mcp:", err)
		return 2
	}
	client, err := hostclient.NewWithTokenSource(*hf.url, *hf.route, src, nil)
	if err != nil {
		fmt.Fprintln(stderr, "mcp:", err)
		return 2
	}
	pctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	support, detail := mcpserver.Probe(pctx, client)
	cancel()
	switch support {
	case mcpserver.Unsupported:
		fmt.Fprintf(stderr, "mcp: %s; not serving the knowledge tools\n", detail)
		return 1
	case mcpserver.Unknown:
		fmt.Fprintf(stderr, "mcp: warning: %s; serving anyway, each tool call will report the error\n", detail)
	}
	srv, err := mcpserver.New(mcpserver.Options{Client: client, Version: version, Logger: log})
	if err != nil {
		fmt.Fprintln(stderr, "mcp:", err)
		return 1
	}
	// Calls already received when stdin closes are answered first (at most 3 s).
	err = srv.Run(ctx, mcpserver.DrainOnEOF(&mcp.IOTransport{Reader: stdin, Writer: nopWriteCloser{stdout}}, 3*time.Second))
	if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, context.Canceled) && !errors.Is(err, mcp.ErrConnectionClosed) {
		fmt.Fprintln(stderr, "mcp:", err)
		return 1
	}
	return 0
}

type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }

// cmdHost dispatches the host-side commands.
func cmdHost(name string, args []string, stdout, stderr io.Writer) int {
	if name == "mcp" {
		return cmdMCP(args, os.Stdin, stdout, stderr)
	}
	return cmdConformance(args, stdout, stderr)
}
