package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/bailinghub/knowledge-sidecar/config"
	"github.com/bailinghub/knowledge-sidecar/sidecar"
)

// statusTimeout bounds the one request of `status`.
const statusTimeout = 10 * time.Second

// cmdStatus prints a running sidecar's GET /-/status for a person (or as
// the JSON itself with --json).
func cmdStatus(args []string, stdout, stderr io.Writer, now func() time.Time) int {
	fs := flag.NewFlagSet("status", flag.ContinueOnError)
	fs.SetOutput(stderr)
	path := configFlag(fs)
	admin := fs.String("admin", "", "admin listener URL, such as http://127.0.0.1:9090 (default: from the configuration's admin_listen)")
	asJSON := fs.Bool("json", false, "print the status document as JSON")
	if code, stop := parseFlags(fs, args); stop {
		return code
	}
	base := *admin
	if base == "" {
		// Only admin_listen is needed: the file and environment are read,
		// not validated (the secrets need not be present here).
		cfg, _, err := config.LoadWithWarnings(*path, os.LookupEnv)
		if cfg.AdminListen == "" {
			fmt.Fprintf(stderr, "status: no admin_listen in the configuration (%v); give --admin URL\n", err)
			return 2
		}
		base = adminURLOf(cfg.AdminListen)
	}
	base = strings.TrimRight(base, "/")
	client := &http.Client{Timeout: statusTimeout}
	res, err := client.Get(base + "/-/status")
	if err != nil {
		fmt.Fprintf(stderr, "status: the admin listener at %s does not answer: %v\n", base, err)
		return 1
	}
	defer res.Body.Close()
	body, err := io.ReadAll(io.LimitReader(res.Body, 1<<20))
	if err != nil || res.StatusCode != http.StatusOK {
		fmt.Fprintf(stderr, "status: %s/-/status answered %d (an older sidecar has none)\n", base, res.StatusCode)
		return 1
	}
	if *asJSON {
		_, _ = stdout.Write(body)
		return 0
	}
	var st sidecar.Status
	if err := json.Unmarshal(body, &st); err != nil {
		fmt.Fprintf(stderr, "status: %s/-/status is not a status document: %v\n", base, err)
		return 1
	}
	printStatus(stdout, st, now())
	return 0
}

// adminURLOf turns an admin_listen address into a URL to call from the same
// host: an empty or wildcard host is 127.0.0.1.
func adminURLOf(listen string) string {
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return "http://" + listen
	}
	if host == "" || host == "0.0.0.0" || host == "::" {
		host = "127.0.0.1"
	}
	return "http://" + net.JoinHostPort(host, port)
}

func printStatus(w io.Writer, st sidecar.Status, now time.Time) {
	row := func(k, format string, a ...any) { fmt.Fprintf(w, "%-17s %s\n", k+":", fmt.Sprintf(format, a...)) }
	row("version", "%s (revision %s)", st.Version, st.Revision)
	row("started", "%s (up %s)", st.StartedAt.UTC().Format(time.RFC3339), now.Sub(st.StartedAt).Round(time.Second))
	row("config sha256", "%s", st.ConfigSHA256)
	if st.Knowledge {
		row("knowledge", "on")
	} else {
		row("knowledge", "off: %s (pure pass-through)", st.KnowledgeOff)
	}
	row("rollout", "%s", st.Rollout)
	row("native detection", "%s, verdict %s", st.NativeDetection.Mode, st.NativeDetection.Verdict)
	if len(st.Breakers) == 0 {
		row("breakers", "none")
	} else {
		fams := make([]string, 0, len(st.Breakers))
		for f := range st.Breakers {
			fams = append(fams, f)
		}
		slices.Sort(fams)
		parts := make([]string, len(fams))
		for i, f := range fams {
			parts[i] = f + " " + st.Breakers[f]
		}
		row("breakers", "%s", strings.Join(parts, ", "))
	}
	row("catalog", "schema %s, task control %s", st.Catalog.Schema, st.Catalog.TaskControl)
	reach := "reachable"
	if !st.Ledger.Reachable {
		reach = "NOT reachable"
	}
	if st.Ledger.Backend == "off" {
		row("ledger", "off")
	} else {
		row("ledger", "%s, %s", st.Ledger.Backend, reach)
	}
	row("tracing", "%s", map[bool]string{true: "on", false: "off"}[st.Tracing])
	row("audit", "%s", map[bool]string{true: "on", false: "off"}[st.Audit])
	switch r := st.LastReload; {
	case r == nil:
		row("last reload", "none since start")
	case r.Problems > 0:
		row("last reload", "%s %s (%s; the running configuration was kept)", r.At.UTC().Format(time.RFC3339), r.Result, plural(r.Problems, "problem", "problems"))
	default:
		row("last reload", "%s %s", r.At.UTC().Format(time.RFC3339), r.Result)
	}
}
