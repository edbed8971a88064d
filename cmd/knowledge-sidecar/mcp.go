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
		return nil, errors.New(noTokenMessage)
	}
	return hostclient.StaticToken(t), nil
}

// noTokenMessage is mcp's answer when no token source is given. MCP hosts
// (the official SDKs' stdio transports, the MCP Inspector) start the server
// with only HOME, PATH, SHELL and TERM (and whatever their own config names),
// so a token exported in the user's shell does not arrive.
const noTokenMessage = "no Agent access token: " + tokenEnv + " is not set in this process's environment. " +
	"MCP hosts start the server with only HOME, PATH, SHELL and TERM, not your shell's exported variables: " +
	"give --token-file FILE or --token-command CMD in the host's args, or set " + tokenEnv +
	" in the \"env\" block of the host's server configuration (docs/hosts.md)"

// runIDEnv binds every call of the MCP server to one run, like --run-id.
const runIDEnv = "BAILING_RUN_ID"

// cmdMCP serves the two tools of --profile over stdio until stdin closes.
// stdout carries only JSON-RPC; everything else goes to stderr.
func cmdMCP(args []string, stdin io.ReadCloser, stdout io.Writer, stderr io.Writer) int {
	fs := flag.NewFlagSet("mcp", flag.ContinueOnError)
	fs.SetOutput(stderr)
	hf := addHostFlags(fs)
	tokenFile := fs.String("token-file", "", "file holding the Agent access token, read again when it changes and after a 401 (default: $"+tokenEnv+")")
	tokenCommand := fs.String("token-command", "", "shell command (sh -c) that prints the Agent access token; run at start and again after a 401")
	profile := fs.String("profile", mcpserver.ProfileKnowledge, "tool set: "+mcpserver.ProfileKnowledge+" (knowledge_search, knowledge_read) or "+mcpserver.ProfileOpenAI+" (search, fetch: the pair OpenAI connectors and deep research require)")
	runID := fs.String("run-id", os.Getenv(runIDEnv), "bind every call to this run (a UUID; default $"+runIDEnv+"), for hosts that start one server per turn: the tools then send it themselves and refuse another")
	fs.Usage = func() {
		fmt.Fprint(stderr, "usage: knowledge-sidecar mcp --url URL --route ROUTE [--token-file FILE | --token-command CMD] [--run-id RUN] [--profile knowledge|openai]\n\n"+
			"Serves knowledge_search and knowledge_read (with --profile openai: search and fetch, the pair OpenAI\n"+
			"connectors and deep research require) over stdio (JSON-RPC on stdin/stdout) to an MCP host, which\n"+
			"starts it; run from a terminal it waits silently for JSON-RPC on stdin (Ctrl-D ends it).\n"+
			"Token: --token-file, --token-command or $"+tokenEnv+" (MCP hosts pass only HOME, PATH, SHELL and TERM\n"+
			"unless their server config has an \"env\" block). Warnings are JSON lines on stderr.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	if code, stop := parseFlags(fs, args); stop {
		return code
	}
	if err := hf.check(); err != nil {
		fmt.Fprintln(stderr, "mcp:", err)
		return 2
	}
	if mcpserver.ToolsFor(*profile) == nil {
		fmt.Fprintf(stderr, "mcp: --profile must be %s or %s\n", mcpserver.ProfileKnowledge, mcpserver.ProfileOpenAI)
		return 2
	}
	if *runID != "" && !uuidPattern.MatchString(*runID) {
		fmt.Fprintf(stderr, "mcp: --run-id (or %s) must be a UUID\n", runIDEnv)
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
	if c, ok := src.(interface{ Close() }); ok {
		defer c.Close() // a token command still running is killed with its children
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
		log.Warn("capabilities probe failed; serving anyway, each tool call will report the error", "detail", detail)
	}
	srv, err := mcpserver.New(mcpserver.Options{Backend: client, Version: readBuildInfo().Version, Logger: log, RunID: *runID, Profile: *profile})
	if err != nil {
		fmt.Fprintln(stderr, "mcp:", err)
		return 1
	}
	// Calls already received when stdin closes are answered first (at most 3 s).
	err = srv.Run(ctx, mcpserver.DrainOnEOF(mcpserver.Stdio(stdin, stdout), 3*time.Second))
	if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, context.Canceled) && !errors.Is(err, mcp.ErrConnectionClosed) {
		fmt.Fprintln(stderr, "mcp:", err)
		return 1
	}
	return 0
}

// cmdHost dispatches the host-side commands.
func cmdHost(name string, args []string, stdout, stderr io.Writer) int {
	if name == "mcp" {
		return cmdMCP(args, os.Stdin, stdout, stderr)
	}
	return cmdConformance(args, stdout, stderr)
}
