// Command knowledge-sidecar is a reverse proxy deployed beside an unmodified
// legacy BailingHub Core that adds the on-demand knowledge protocol
// bailing.agent-knowledge.v1 and passes all other traffic through unchanged.
//
//	knowledge-sidecar serve [--config FILE]
//	knowledge-sidecar demo [--listen ADDR] [--admin-listen ADDR] [--docs DIR] [--demo-token TOKEN]
//	knowledge-sidecar check-config [--config FILE]
//	knowledge-sidecar keygen [--id ID]
//	knowledge-sidecar version
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

const usage = `usage:
  knowledge-sidecar serve [--config FILE]         run in front of a Core (production)
  knowledge-sidecar demo [--listen ADDR] [--admin-listen ADDR] [--docs DIR] [--demo-token TOKEN]
                                                  run in front of a built-in Core double
  knowledge-sidecar check-config [--config FILE] [--probe]
                                                  validate the configuration and exit; --probe
                                                  also tests Core, the token, the catalog and Redis
                                                  (also: --check-config, serve --check-config)
  knowledge-sidecar keygen [--id ID]              print a new KNOWLEDGE_SIDECAR_SIGNING_KEYS entry
  knowledge-sidecar version                       print version, revision, build time and Go version
The config file may also be named by KNOWLEDGE_SIDECAR_CONFIG.
Host side (token from BAILING_AGENT_TOKEN; mcp also --token-file or --token-command, renewed while it runs):
  knowledge-sidecar mcp --help, knowledge-sidecar conformance --help
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
	case "mcp", "conformance": // host-side tools: mcp.go, conformance.go
		return cmdHost(args[0], args[1:], stdout, stderr)
	case "version", "--version", "-v":
		return cmdVersion(stdout)
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
