package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"regexp"
	"syscall"

	"github.com/bailinghub/knowledge-sidecar/conformance"
	"github.com/bailinghub/knowledge-sidecar/hostclient"
)

var uuidPattern = regexp.MustCompile(`^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$`)

// cmdConformance checks an implementation of the protocol from outside.
// Exit 0 all checks pass (or skip), 1 any fails (a request without an answer
// fails its check), 2 usage error, a rejected token, or no request answered.
func cmdConformance(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("conformance", flag.ContinueOnError)
	fs.SetOutput(stderr)
	hf := addHostFlags(fs)
	runID := fs.String("run-id", "", "run UUID to send with every search and read (sessions in a managed task)")
	format := fs.String("format", "text", "output: text (one line per check) or json")
	query := fs.String("query", "", "a search known to return a hint (default: try common English and Chinese words)")
	turns := fs.Bool("turns", false, "also check turn interception (creates real turns on the workspace)")
	rate := fs.Float64("rate", 8, "requests per second, at most 10 (the protocol's default per-session limit)")
	timeout := fs.Duration("timeout", conformance.DefaultTimeout, "deadline of each request: one without an answer by then fails its check and the run goes on")
	mcp := fs.Bool("mcp", false, "check the route's remote MCP endpoint (SPEC §10: tools, schemas, results, paging, near, errors, no-store, stateless) instead of the REST protocol")
	tokenFile := fs.String("token-file", "", "file holding the Agent access token, read once (default: $"+tokenEnv+")")
	if code, stop := parseFlags(fs, args); stop {
		return code
	}
	if *format != "text" && *format != "json" {
		fmt.Fprintf(stderr, "conformance: --format must be text or json, not %q\n", *format)
		return 2
	}
	if *runID != "" && !uuidPattern.MatchString(*runID) {
		fmt.Fprintln(stderr, "conformance: --run-id must be a UUID")
		return 2
	}
	if *rate <= 0 || *rate > 10 {
		fmt.Fprintln(stderr, "conformance: --rate must be more than 0 and at most 10")
		return 2
	}
	if *timeout <= 0 {
		fmt.Fprintln(stderr, "conformance: --timeout must be more than 0, like 10s")
		return 2
	}
	token := os.Getenv(tokenEnv)
	if *tokenFile != "" {
		t, err := hostclient.ReadTokenFile(*tokenFile) // its errors never carry the content
		if err != nil {
			fmt.Fprintln(stderr, "conformance: --token-file:", err)
			return 2
		}
		token = t
	}
	// No client-wide timeout: each request has the --timeout deadline.
	client, err := hf.client(token, &http.Client{})
	if err != nil {
		fmt.Fprintln(stderr, "conformance:", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if *mcp && (*turns || *runID != "") {
		fmt.Fprintln(stderr, "conformance: --mcp checks the MCP endpoint only; --turns and --run-id are for the REST protocol")
		return 2
	}
	run := conformance.Run
	if *mcp {
		run = conformance.RunMCP
	}
	rep, err := run(ctx, conformance.Options{Client: client, RunID: *runID, Query: *query, Turns: *turns, Rate: *rate, Timeout: *timeout})
	if err != nil {
		switch {
		case errors.Is(err, conformance.ErrConnection):
			fmt.Fprintf(stderr, "conformance: nothing answered at --url %s: %v\n", *hf.url, err)
		case errors.Is(err, conformance.ErrRejected):
			fmt.Fprintf(stderr, "conformance: %v; check %s\n", err, tokenEnv)
		default:
			fmt.Fprintln(stderr, "conformance:", err)
		}
		return 2
	}
	if *format == "json" {
		err = rep.WriteJSON(stdout)
	} else {
		err = rep.WriteText(stdout)
	}
	if err != nil {
		fmt.Fprintln(stderr, "conformance:", err)
		return 2
	}
	return rep.ExitCode()
}
