// Command knowledge-sidecar is a reverse proxy deployed beside an unmodified
// legacy BailingHub Core that adds the on-demand knowledge protocol
// bailing.agent-knowledge.v1 and passes all other traffic through unchanged.
//
//	knowledge-sidecar serve [--config FILE]
//	knowledge-sidecar demo [--listen ADDR] [--admin-listen ADDR] [--docs DIR] [--demo-token TOKEN] [--sql [--sql-dsn DSN]]
//	knowledge-sidecar check-config [--config FILE] [--probe] [--route KEY]
//	knowledge-sidecar status [--admin URL] [--config FILE] [--json]
//	knowledge-sidecar keygen [--id ID]
//	knowledge-sidecar version
//	knowledge-sidecar mcp --url URL --route ROUTE [--token-file FILE | --token-command CMD] [--run-id RUN]
//	knowledge-sidecar conformance [--mcp] --url URL --route ROUTE [--token-file FILE]
package main

import (
	"fmt"
	"io"
	"os"
	"time"
)

// version is set at build time with -ldflags "-X main.version=…".
var version = "dev"

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

const usage = `usage: knowledge-sidecar COMMAND [flags]   (COMMAND --help lists its flags)

Operator side:
  serve          run in front of a Core (production): serve [--config FILE]
  demo           run in front of a built-in Core double with sample documents, printing a walkthrough
                 (--sql: the SQL catalog on a throwaway database of a local MySQL/MariaDB, as serve reads it)
  check-config   validate the configuration and exit (--probe also tests Core, the token, the catalog and Redis;
                 --route KEY says whether that workspace would be served and why)
  status         print a running sidecar's status from its admin listener: status [--admin URL]
  keygen         print a new KNOWLEDGE_SIDECAR_SIGNING_KEYS entry
  version        print version, revision, build time and Go version
Host side (Agent token from BAILING_AGENT_TOKEN, or --token-file; mcp also --token-command):
  mcp            serve knowledge_search and knowledge_read to an MCP host over stdio
  conformance    check an implementation of the protocol (or, with --mcp, its MCP endpoint) against its MUSTs
  help           print this list

The config file may also be named by KNOWLEDGE_SIDECAR_CONFIG.
`

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	switch args[0] {
	case "serve":
		return cmdServe(args[1:], stdout, stderr)
	case "demo":
		return cmdDemo(args[1:], stdout, stderr)
	case "check-config", "--check-config", "-check-config":
		return cmdCheckConfig(args[1:], stdout, stderr)
	case "status":
		return cmdStatus(args[1:], stdout, stderr, time.Now)
	case "mcp", "conformance": // host-side tools: mcp.go, conformance.go
		return cmdHost(args[0], args[1:], stdout, stderr)
	case "version", "--version", "-v":
		return cmdVersion(args[1:], stdout, stderr)
	case "keygen":
		return cmdKeygen(args[1:], stdout, stderr, time.Now)
	case "help", "--help", "-h":
		fmt.Fprint(stdout, usage)
		return 0
	default:
		fmt.Fprintf(stderr, "unknown command %q\n%s", args[0], usage)
		return 2
	}
}
