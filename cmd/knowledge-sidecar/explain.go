package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strings"
	"time"

	"github.com/bailinghub/knowledge-sidecar/breaker"
	"github.com/bailinghub/knowledge-sidecar/catalog"
	"github.com/bailinghub/knowledge-sidecar/config"
	"github.com/bailinghub/knowledge-sidecar/native"
	"github.com/bailinghub/knowledge-sidecar/protocol"
	"github.com/bailinghub/knowledge-sidecar/rollout"
	"github.com/bailinghub/knowledge-sidecar/sidecar"
)

// explainRoute is check-config --route: whether the configuration serves
// route and why, offline. The native verdict is only known for never and
// always (auto decides at run time: GET /-/explain on a running sidecar
// shows the verdict it holds); with a catalog DSN the route's row is looked
// up (read-only, bounded by timeout).
func explainRoute(ctx context.Context, cfg config.Config, route string, timeout time.Duration, stdout, stderr io.Writer, asJSON bool) int {
	pol, _ := rollout.Parse(cfg.Rollout) // validated
	in := sidecar.ExplainInput{Config: cfg, Policy: pol}
	if ok, why := cfg.KnowledgeEnabled(); !ok {
		in.KnowledgeOff = why
	}
	switch cfg.NativeDetection {
	case native.ModeNever:
		in.Verdict = "legacy"
	case native.ModeAlways:
		in.Verdict = "native"
	default:
		in.Verdict = "unknown"
	}
	if cfg.Catalog.DSN != "" {
		cat, err := catalog.Open(catalog.Options{
			DSN: cfg.Catalog.DSN, MaxOpenConns: 2, MaxIdleConns: 2, QueryTimeout: timeout,
			DocCacheEntries: 1, DocCacheBytes: 1 << 20,
			Breaker: breaker.Settings{Failures: math.MaxUint32},
		})
		if err == nil {
			defer cat.Close()
			gate := catalog.NewSchemaGate(cat, 0, nil, nil)
			cctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			_ = gate.Check(cctx) // a failure shows as "schema not verified"
			in.Catalog = gate
			ctx = cctx
		}
	}
	ex, err := sidecar.Explain(ctx, in, route)
	if err != nil {
		fmt.Fprintf(stderr, "check-config --route: %v\n", err)
		return 2
	}
	if asJSON {
		out, _ := json.MarshalIndent(ex, "", "  ")
		fmt.Fprintf(stdout, "%s\n", out)
		return 0
	}
	printExplanation(stdout, ex)
	return 0
}

func printExplanation(w io.Writer, ex sidecar.Explanation) {
	row := func(k, format string, a ...any) { fmt.Fprintf(w, "%-17s %s\n", k+":", fmt.Sprintf(format, a...)) }
	row("route", "%s", ex.Route)
	row("served", "%v — %s", ex.Served, ex.Reason)
	row("rollout", "%s: %s", ex.Rollout.Rule, ex.Rollout.Reason)
	verdict := ex.Native.Verdict
	if verdict == "unknown" && ex.Native.Mode == native.ModeAuto {
		verdict = "unknown (auto probes Core at run time; GET /-/explain on a running sidecar shows the verdict held)"
	}
	row("native detection", "%s, verdict %s", ex.Native.Mode, verdict)
	c := ex.Catalog
	switch {
	case !c.Checked:
		row("catalog", "not looked up (no catalog DSN)")
	case c.Error != "":
		row("catalog", "%s", c.Error)
	case !c.Found:
		row("catalog", "no route %q in Core's catalog", ex.Route)
	default:
		kbs := make([]string, 0, len(c.KBs))
		for _, kb := range c.KBs {
			s := "enabled"
			switch {
			case !kb.Exists:
				s = "deleted"
			case !kb.Enabled:
				s = "disabled"
			}
			kbs = append(kbs, kb.ID+" "+s)
		}
		kb := "no knowledge configured"
		if c.KnowledgeConfigured {
			kb = "knowledge bases: " + strings.Join(kbs, ", ")
		}
		row("catalog", "route found, enabled %v; %s", c.Enabled, kb)
	}
	if ex.OversizedCount != nil {
		row("oversized docs", "%d over the %d-byte read chain (GET /-/explain lists them; docs/rollout.md)", *ex.OversizedCount, protocol.ReadChainMaxBytes)
	}
}
