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

// client checks the shared flags and builds the protocol client; problems are usage errors.
func (f hostFlags) client(token string) (*hostclient.Client, error) {
	if *f.url == "" {
		return nil, errors.New("--url is required")
	}
	if *f.route == "" {
		return nil, errors.New("--route is required")
	}
	if token == "" {
		return nil, fmt.Errorf("no Agent access token: set %s", tokenEnv)
	}
	return hostclient.New(*f.url, *f.route, token, nil)
}

// cmdMCP serves the two knowledge tools over stdio until stdin closes.
// stdout carries only JSON-RPC; everything else goes to stderr.
func cmdMCP(args []string, stdin io.ReadCloser, stdout io.Writer, stderr io.Writer) int {
	fs := flag.NewFlagSet("mcp", flag.ContinueOnError)
	fs.SetOutput(stderr)
	hf := addHostFlags(fs)
	tokenFile := fs.String("token-file", "", "file holding the Agent access token (default: $"+tokenEnv+")")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	token := os.Getenv(tokenEnv)
	if *tokenFile != "" {
		t, err := hostclient.ReadTokenFile(*tokenFile)
		if err != nil {
			fmt.Fprintln(stderr, "mcp:", err)
			return 2
		}
		token = t
	}
	client, err := hf.client(token)
	if err != nil {
		fmt.Fprintln(stderr, "mcp:", err)
		return 2
	}
	log := slog.New(slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
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
