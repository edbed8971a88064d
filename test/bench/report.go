package main

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

type report struct {
	Meta        meta         `json:"meta"`
	PassLatency []latencyRow `json:"passthrough_latency"`
	Saturation  []satRow     `json:"saturation"`
	Intercepted []interRow   `json:"intercepted"`
	SSE         sseResult    `json:"sse"`
	Resources   resources    `json:"resources"`
	Soak        *soakResult  `json:"soak,omitempty"`
	// Tracing is the tracing section (issue 24): off, on not sampled, always on.
	Tracing *tracingResult `json:"tracing,omitempty"`
	// CPU is the CPU-per-request section (issue 22).
	CPU *cpuResult `json:"cpu,omitempty"`
	// Ledger is the ledger section (issue 23): single node vs Redis Cluster.
	Ledger *ledgerResult `json:"ledger,omitempty"`
	// CatalogRTT is one simple catalog round trip timed during the search
	// and read loads (rtt.go); nil with the in-memory catalog.
	CatalogRTT *pcts     `json:"catalog_round_trip,omitempty"`
	Targets    []verdict `json:"targets"`
	Groups     []*group  `json:"groups"` // every run, for re-analysis
}

type meta struct {
	Started       string `json:"started"`
	Finished      string `json:"finished"`
	GoVersion     string `json:"go_version"`
	CPUs          int    `json:"cpus"`
	Quick         bool   `json:"quick"`
	Pairs         int    `json:"pairs"`
	WarmupMS      int64  `json:"warmup_ms"`
	RunMS         int64  `json:"run_ms"`
	SatRunMS      int64  `json:"saturation_run_ms"`
	Concurrency   int    `json:"saturation_concurrency"`
	Nginx         string `json:"nginx"`
	Catalog       string `json:"catalog"` // sql (MariaDB, the production catalog) or mem
	TurnHints     bool   `json:"turn_hints"`
	Managed       bool   `json:"managed"` // searches and reads inside a managed task
	LoadAvgBefore string `json:"loadavg_before"`
	LoadAvgAfter  string `json:"loadavg_after"`
	// LedgerOnly: --only ledger, no child process was started.
	LedgerOnly bool `json:"ledger_only,omitempty"`
}

// latencyRow: medians over the pairs of each side's percentiles, and the
// median of the per-pair differences (sidecar − direct).
type latencyRow struct {
	Load     string  `json:"load"`
	Rate     int     `json:"rate_rps"`
	Direct   pcts    `json:"direct"`
	Sidecar  pcts    `json:"sidecar"`
	DP50     float64 `json:"delta_p50_ms"`
	DP99     float64 `json:"delta_p99_ms"`
	DP999    float64 `json:"delta_p999_ms"`
	CPUPerRq float64 `json:"sidecar_cpu_us_per_req"`
	// Against the bare ReverseProxy at the same rate: what our edge adds
	// on top of the hop itself.
	BareDP50 *float64 `json:"delta_p50_vs_revproxy_ms,omitempty"`
	BareDP99 *float64 `json:"delta_p99_vs_revproxy_ms,omitempty"`
	BareCPU  *float64 `json:"revproxy_cpu_us_per_req,omitempty"`
	Errors   int      `json:"errors"`
}

type pcts struct {
	P50  float64 `json:"p50_ms"`
	P99  float64 `json:"p99_ms"`
	P999 float64 `json:"p999_ms"`
}

func pctsOf(g *group, i int) pcts {
	return pcts{
		P50:  g.med(func(r []runStats) float64 { return r[i].P50 }),
		P99:  g.med(func(r []runStats) float64 { return r[i].P99 }),
		P999: g.med(func(r []runStats) float64 { return r[i].P999 }),
	}
}

func latencyRowOf(load string, g *group, a, b string) latencyRow {
	i, j := g.idx(a), g.idx(b)
	row := latencyRow{
		Load: load, Rate: g.Rate, Direct: pctsOf(g, i), Sidecar: pctsOf(g, j),
		DP50:     g.med(func(r []runStats) float64 { return r[j].P50 - r[i].P50 }),
		DP99:     g.med(func(r []runStats) float64 { return r[j].P99 - r[i].P99 }),
		DP999:    g.med(func(r []runStats) float64 { return r[j].P999 - r[i].P999 }),
		CPUPerRq: g.med(func(r []runStats) float64 { return r[j].CPUPerReq }),
		Errors:   g.errors(),
	}
	if k := g.idx("revproxy"); k >= 0 {
		p50 := g.med(func(r []runStats) float64 { return r[j].P50 - r[k].P50 })
		p99 := g.med(func(r []runStats) float64 { return r[j].P99 - r[k].P99 })
		cpu := g.med(func(r []runStats) float64 { return r[k].CPUPerReq })
		row.BareDP50, row.BareDP99, row.BareCPU = &p50, &p99, &cpu
	}
	return row
}

// satRow: median throughput per target and medians of per-rep ratios.
type satRow struct {
	Load   string             `json:"load"`
	Conc   int                `json:"concurrency"`
	RPS    map[string]float64 `json:"rps"`
	Ratio  map[string]float64 `json:"ratio"` // "sidecar/direct", "sidecar/revproxy", ...
	CPU    map[string]float64 `json:"cpu_us_per_req"`
	Errors int                `json:"errors"`
}

func satRowOf(load string, g *group) satRow {
	row := satRow{Load: load, Conc: g.Conc, RPS: map[string]float64{}, Ratio: map[string]float64{}, CPU: map[string]float64{}, Errors: g.errors()}
	for i, name := range g.Targets {
		row.RPS[name] = g.med(func(r []runStats) float64 { return r[i].Throughput })
		if name != "direct" {
			row.CPU[name] = g.med(func(r []runStats) float64 { return r[i].CPUPerReq })
		}
	}
	ratio := func(a, b string) {
		i, j := g.idx(a), g.idx(b)
		if i < 0 || j < 0 {
			return
		}
		row.Ratio[a+"/"+b] = g.med(func(r []runStats) float64 {
			if r[j].Throughput == 0 {
				return 0
			}
			return r[i].Throughput / r[j].Throughput
		})
	}
	ratio("sidecar", "direct")
	ratio("sidecar", "revproxy")
	ratio("sidecar", "nginx")
	ratio("revproxy", "direct")
	ratio("nginx", "direct")
	return row
}

// interRow is an intercepted path: sidecar percentiles, the delta to the
// same request sent straight to the upstream where that exists, and the CPU
// the sidecar spends per request (and over plain pass-through for turns).
type interRow struct {
	Name       string   `json:"name"`
	Rate       int      `json:"rate_rps"`
	Direct     *pcts    `json:"direct,omitempty"`
	Sidecar    pcts     `json:"sidecar"`
	DP50       *float64 `json:"delta_p50_ms,omitempty"`
	DP99       *float64 `json:"delta_p99_ms,omitempty"`
	DP999      *float64 `json:"delta_p999_ms,omitempty"`
	CPUPerRq   float64  `json:"sidecar_cpu_us_per_req"`
	PassCPU    *float64 `json:"passthrough_cpu_us_per_req,omitempty"`
	AddedCPU   *float64 `json:"added_cpu_us_per_req,omitempty"`
	Errors     int      `json:"errors"`
	FirstError string   `json:"first_error,omitempty"`
}

func interRowOf(name string, g *group, direct, side, pass string) interRow {
	j := g.idx(side)
	row := interRow{Name: name, Rate: g.Rate, Sidecar: pctsOf(g, j),
		CPUPerRq: g.med(func(r []runStats) float64 { return r[j].CPUPerReq }), Errors: g.errors(), FirstError: g.firstError()}
	if i := g.idx(direct); direct != "" && i >= 0 {
		d := pctsOf(g, i)
		row.Direct = &d
		p50 := g.med(func(r []runStats) float64 { return r[j].P50 - r[i].P50 })
		p99 := g.med(func(r []runStats) float64 { return r[j].P99 - r[i].P99 })
		p999 := g.med(func(r []runStats) float64 { return r[j].P999 - r[i].P999 })
		row.DP50, row.DP99, row.DP999 = &p50, &p99, &p999
	}
	if k := g.idx(pass); pass != "" && k >= 0 {
		pc := g.med(func(r []runStats) float64 { return r[k].CPUPerReq })
		added := g.med(func(r []runStats) float64 { return r[j].CPUPerReq - r[k].CPUPerReq })
		row.PassCPU, row.AddedCPU = &pc, &added
	}
	return row
}

type sseResult struct {
	Streams       int        `json:"streams"`
	EventsPerStrm int        `json:"events_per_stream"`
	GapMS         float64    `json:"gap_ms"`
	Reps          []sseStats `json:"reps"`
	DirectP99     float64    `json:"direct_p99_ms"`
	SidecarP99    float64    `json:"sidecar_p99_ms"`
	DirectMax     float64    `json:"direct_max_ms"`
	SidecarMax    float64    `json:"sidecar_max_ms"`
	Lost          int        `json:"lost_events"`
}

func (s *sseResult) summarize(streams, events int, gap time.Duration) {
	s.Streams, s.EventsPerStrm, s.GapMS = streams, events, float64(gap.Microseconds())/1000
	var dp, sp []float64
	for _, r := range s.Reps {
		s.Lost += r.Lost
		if r.Target == "direct" {
			dp = append(dp, r.P99)
			s.DirectMax = max(s.DirectMax, r.Max)
		} else {
			sp = append(sp, r.P99)
			s.SidecarMax = max(s.SidecarMax, r.Max)
		}
	}
	s.DirectP99, s.SidecarP99 = median(dp), median(sp)
}

type resources struct {
	IdleRSSMiB      float64        `json:"sidecar_idle_rss_mib"`
	AfterRSSMiB     float64        `json:"sidecar_rss_after_mib"`
	IdleGoroutines  int            `json:"sidecar_idle_goroutines"`
	AfterGoroutines int            `json:"sidecar_goroutines_after"`
	TimeWaitBefore  int            `json:"time_wait_before"`
	TimeWaitAfter   int            `json:"time_wait_after"`
	TimeWaitBy      map[string]int `json:"time_wait_after_by_closer"`
	TWRun           string         `json:"time_wait_run"`
	TWRunBefore     int            `json:"time_wait_run_before"`
	TWRunAfter      int            `json:"time_wait_run_after"`
	TWRunBy         map[string]int `json:"time_wait_run_after_by_closer"`
	TWRunErrors     int            `json:"time_wait_run_errors"`
}

type soakResult struct {
	Rate    int       `json:"rate_rps"`
	Seconds int       `json:"seconds"`
	RSSMiB  []float64 `json:"rss_mib_samples"`
	MinMiB  float64   `json:"rss_min_mib"`
	MaxMiB  float64   `json:"rss_max_mib"`
	Spread  float64   `json:"rss_spread_pct"` // (max − min) / min over the second half
	P99     float64   `json:"p99_ms"`
	Errors  int       `json:"errors"`
}

func (s *soakResult) finish() {
	if len(s.RSSMiB) == 0 {
		return
	}
	half := s.RSSMiB[len(s.RSSMiB)/2:]
	s.MinMiB, s.MaxMiB = slices.Min(half), slices.Max(half)
	if s.MinMiB > 0 {
		s.Spread = (s.MaxMiB - s.MinMiB) / s.MinMiB * 100
	}
}

// verdict is one target from issue 6 against this run's measurement.
type verdict struct {
	Target   string `json:"target"`
	Measured string `json:"measured"`
	Status   string `json:"status"` // met, missed, not measured (why)
}

func (r *report) evaluate() {
	add := func(target, measured string, ok bool) {
		st := "missed"
		if ok {
			st = "met"
		}
		r.Targets = append(r.Targets, verdict{target, measured, st})
	}
	skip := func(target, why string) {
		r.Targets = append(r.Targets, verdict{target, "", "not measured (" + why + ")"})
	}
	if r.Ledger != nil {
		r.Ledger.evaluate(add, skip)
	}
	if r.Meta.LedgerOnly {
		return
	}

	for _, row := range r.PassLatency {
		if row.Rate != 1000 && row.Rate != 2000 {
			continue
		}
		add(fmt.Sprintf("pass-through %s @%d: Δp50 ≤ 0.2 ms, Δp99 ≤ 0.5 ms", row.Load, row.Rate),
			fmt.Sprintf("Δp50 %.3f ms, Δp99 %.3f ms", row.DP50, row.DP99), row.DP50 <= 0.2 && row.DP99 <= 0.5 && row.Errors == 0)
	}
	for _, row := range r.Saturation {
		if v, ok := row.Ratio["sidecar/revproxy"]; ok && (row.Load == "1k" || row.Load == "64k") {
			add("saturation "+row.Load+": sidecar ≥ 1.0× bare ReverseProxy", fmt.Sprintf("%.2f×", v), v >= 0.995)
		}
		if v, ok := row.Ratio["sidecar/nginx"]; ok {
			switch row.Load {
			case "64k":
				add("saturation 64k: sidecar ≥ nginx", fmt.Sprintf("%.2f× nginx", v), v >= 0.995)
			case "1k":
				add("saturation 1k: aiming at nginx's ratio (goal, not a gate)", fmt.Sprintf("sidecar/direct %.2f vs nginx/direct %.2f",
					row.Ratio["sidecar/direct"], row.Ratio["nginx/direct"]), v >= 0.995)
			}
		} else if row.Load == "64k" {
			skip("saturation 64k: sidecar ≥ nginx", "nginx not run")
		}
	}
	worst := 0.0
	for _, row := range r.PassLatency {
		worst = max(worst, row.CPUPerRq)
	}
	if len(r.PassLatency) > 0 {
		add("pass-through CPU ≤ 120 µs per request", fmt.Sprintf("worst load/rate %.0f µs", worst), worst <= 120)
	}
	if r.Resources.TWRun != "" {
		add("TIME_WAIT after the sustained run ≤ 1000", fmt.Sprintf("%d (%s)", r.Resources.TWRunAfter, r.Resources.TWRun), r.Resources.TWRunAfter <= 1000)
	}
	for _, row := range r.Intercepted {
		switch {
		case strings.HasPrefix(row.Name, "turn 10 KiB") && row.AddedCPU != nil:
			add("turn 10 KiB: ≤ 80 µs CPU over pass-through", fmt.Sprintf("%.0f µs (%.0f − %.0f)", *row.AddedCPU, row.CPUPerRq, *row.PassCPU), *row.AddedCPU <= 80 && row.Errors == 0)
		case strings.HasPrefix(row.Name, "turn 256 KiB") && row.DP99 != nil:
			add(fmt.Sprintf("turn 256 KiB @%d: Δp99 ≤ 2 ms", row.Rate), fmt.Sprintf("%.3f ms", *row.DP99), *row.DP99 <= 2 && row.Errors == 0)
		case strings.HasPrefix(row.Name, "search") || strings.HasPrefix(row.Name, "read"):
			add(fmt.Sprintf("%s @%d: p99 ≤ 1 ms", strings.Fields(row.Name)[0], row.Rate), fmt.Sprintf("%.3f ms", row.Sidecar.P99), row.Sidecar.P99 <= 1 && row.Errors == 0)
		}
	}
	if len(r.SSE.Reps) > 0 {
		add("SSE: every event within 5 ms of the upstream flush", fmt.Sprintf("max %.3f ms, p99 %.3f ms, lost %d", r.SSE.SidecarMax, r.SSE.SidecarP99, r.SSE.Lost),
			r.SSE.SidecarMax <= 5 && r.SSE.Lost == 0)
	}
	add("idle RSS ≤ 40 MiB", fmt.Sprintf("%.1f MiB", r.Resources.IdleRSSMiB), r.Resources.IdleRSSMiB <= 40)
	if r.Soak != nil {
		add("RSS stable ±10% over the soak", fmt.Sprintf("%.1f–%.1f MiB over %ds (%.1f%%)", r.Soak.MinMiB, r.Soak.MaxMiB, r.Soak.Seconds, r.Soak.Spread), r.Soak.Spread <= 20)
	} else {
		skip("RSS stable ±10% over a 5-minute soak at 50% of the knee", "run with --soak 5m")
	}
	if r.CPU != nil {
		r.CPU.evaluate(add)
	}
	if r.Tracing != nil {
		note := func(target, measured string) { r.Targets = append(r.Targets, verdict{target, measured, "measured"}) }
		r.Tracing.evaluate(add, note)
	}
	skip("ref verify < 2 µs; read page (32 KiB) < 100 µs", "Go benchmarks: go test -bench 'OpenRef|ReadPage' ./knowledge/")
}

func printReport(w io.Writer, r *report) {
	if r.Meta.LedgerOnly {
		fmt.Fprintf(w, "\nknowledge-sidecar bench, ledger section only — %s, %d CPUs, load average before/after: %s / %s\n",
			r.Meta.GoVersion, r.Meta.CPUs, r.Meta.LoadAvgBefore, r.Meta.LoadAvgAfter)
		printLedger(w, r.Ledger)
		printTargets(w, r)
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight|tabwriter.Debug)
	fmt.Fprintf(w, "\nknowledge-sidecar bench — %s, %d CPUs, %d pairs × %d ms (saturation %d ms, %d conns), quick=%v\n",
		r.Meta.GoVersion, r.Meta.CPUs, r.Meta.Pairs, r.Meta.RunMS, r.Meta.SatRunMS, r.Meta.Concurrency, r.Meta.Quick)
	fmt.Fprintf(w, "load average before/after: %s / %s; nginx: %s; catalog: %s; turn_hints: %v; managed task: %v\n", r.Meta.LoadAvgBefore, r.Meta.LoadAvgAfter, r.Meta.Nginx, r.Meta.Catalog, r.Meta.TurnHints, r.Meta.Managed)
	fmt.Fprintln(w, "Deltas are sidecar − direct, the median of per-pair differences; ratios are medians of per-rep ratios.")

	if len(r.PassLatency) > 0 {
		fmt.Fprintln(w, "\nPass-through latency (open loop)")
		fmt.Fprintln(tw, "load\trate\tdirect p50\tp99\tp99.9\tΔp50 ms\tΔp99 ms\tΔp99.9 ms\tvs revproxy Δp50\tΔp99\tCPU µs/req sidecar\trevproxy\terrors\t")
		for _, x := range r.PassLatency {
			fmt.Fprintf(tw, "%s\t%d\t%.3f\t%.3f\t%.3f\t%+.3f\t%+.3f\t%+.3f\t%s\t%s\t%.0f\t%s\t%d\t\n", x.Load, x.Rate, x.Direct.P50, x.Direct.P99, x.Direct.P999,
				x.DP50, x.DP99, x.DP999, opt(x.BareDP50), opt(x.BareDP99), x.CPUPerRq, optNum(x.BareCPU), x.Errors)
		}
		tw.Flush()
	}

	if len(r.Saturation) > 0 {
		fmt.Fprintln(w, "\nSaturation (closed loop): throughput ratios")
		fmt.Fprintln(tw, "load\tsidecar/direct\tsidecar/revproxy\tsidecar/nginx\trevproxy/direct\tnginx/direct\tCPU µs/req sidecar\trevproxy\tnginx\terrors\t")
		for _, x := range r.Saturation {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t\n", x.Load, ratio(x.Ratio, "sidecar/direct"), ratio(x.Ratio, "sidecar/revproxy"),
				ratio(x.Ratio, "sidecar/nginx"), ratio(x.Ratio, "revproxy/direct"), ratio(x.Ratio, "nginx/direct"),
				num(x.CPU, "sidecar"), num(x.CPU, "revproxy"), num(x.CPU, "nginx"), x.Errors)
		}
		tw.Flush()
	}

	if len(r.Intercepted) > 0 {
		fmt.Fprintln(w, "\nIntercepted paths (zero-latency Core double)")
		fmt.Fprintln(tw, "path\trate\tsidecar p50\tp99\tp99.9\tΔp50 ms\tΔp99 ms\tΔp99.9 ms\tCPU µs/req\tover pass-through\terrors\t")
	}
	for _, x := range r.Intercepted {
		fmt.Fprintf(tw, "%s\t%d\t%.3f\t%.3f\t%.3f\t%s\t%s\t%s\t%.0f\t%s\t%d\t\n", x.Name, x.Rate, x.Sidecar.P50, x.Sidecar.P99, x.Sidecar.P999,
			opt(x.DP50), opt(x.DP99), opt(x.DP999), x.CPUPerRq, optInt(x.AddedCPU), x.Errors)
	}
	tw.Flush()
	for _, x := range r.Intercepted {
		if x.FirstError != "" {
			fmt.Fprintf(w, "  first error, %s: %s\n", x.Name, x.FirstError)
		}
	}
	if x := r.CatalogRTT; x != nil {
		fmt.Fprintf(w, "One catalog round trip during the search and read loads (a primary-key SELECT, 50/s): p50 %.3f ms, p99 %.3f ms, p99.9 %.3f ms\n", x.P50, x.P99, x.P999)
	}

	if len(r.SSE.Reps) > 0 {
		fmt.Fprintf(w, "\nSSE event delay (%d streams × %d events, %.0f ms apart): direct p99 %.3f ms max %.3f; sidecar p99 %.3f ms max %.3f; lost %d\n",
			r.SSE.Streams, r.SSE.EventsPerStrm, r.SSE.GapMS, r.SSE.DirectP99, r.SSE.DirectMax, r.SSE.SidecarP99, r.SSE.SidecarMax, r.SSE.Lost)
	}
	if r.CPU != nil {
		printCPU(w, r.CPU)
	}
	if r.Tracing != nil {
		printTracing(w, r.Tracing)
	}
	x := r.Resources
	fmt.Fprintf(w, "\nSidecar resources: RSS idle %.1f MiB, after %.1f MiB; goroutines idle %d, after %d\n", x.IdleRSSMiB, x.AfterRSSMiB, x.IdleGoroutines, x.AfterGoroutines)
	fmt.Fprintf(w, "TIME_WAIT (our ports): start %d, end %d (by endpoint/closing side: %v)\n", x.TimeWaitBefore, x.TimeWaitAfter, x.TimeWaitBy)
	if x.TWRun != "" {
		fmt.Fprintf(w, "TIME_WAIT run (%s): before %d, after %d (%v), errors %d\n", x.TWRun, x.TWRunBefore, x.TWRunAfter, x.TWRunBy, x.TWRunErrors)
	}
	if r.Soak != nil {
		fmt.Fprintf(w, "Soak: %d s at %d req/s: RSS %.1f–%.1f MiB (spread %.1f%%), p99 %.3f ms, errors %d\n",
			r.Soak.Seconds, r.Soak.Rate, r.Soak.MinMiB, r.Soak.MaxMiB, r.Soak.Spread, r.Soak.P99, r.Soak.Errors)
	}

	if r.Ledger != nil {
		printLedger(w, r.Ledger)
	}
	printTargets(w, r)
}

func printTargets(w io.Writer, r *report) {
	fmt.Fprintln(w, "\nTargets (issue 6)")
	tw2 := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, v := range r.Targets {
		fmt.Fprintf(tw2, "  %s\t%s\t%s\n", v.Status, v.Target, v.Measured)
	}
	tw2.Flush()
}

func ratio(m map[string]float64, k string) string {
	v, ok := m[k]
	if !ok {
		return "—"
	}
	return fmt.Sprintf("%.2f", v)
}

func num(m map[string]float64, k string) string {
	v, ok := m[k]
	if !ok {
		return "—"
	}
	return fmt.Sprintf("%.0f", v)
}

func opt(v *float64) string {
	if v == nil {
		return "—"
	}
	return fmt.Sprintf("%+.3f", *v)
}

func optInt(v *float64) string {
	if v == nil {
		return "—"
	}
	return fmt.Sprintf("%+.0f", *v)
}

func optNum(v *float64) string {
	if v == nil {
		return "—"
	}
	return fmt.Sprintf("%.0f", *v)
}
