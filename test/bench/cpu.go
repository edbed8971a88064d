package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"text/tabwriter"
)

// The CPU section (issue 22): CPU per request — the proxy process's own
// user+system time over the requests it served — in closed loop (like
// `wrk -t1 -c32`), every proxy interleaved in rotating order, with the lean
// stdlib proxy as the unit. CPU per request is robust on a shared machine
// where throughput is not: a proxy that waits for the cores spends no CPU
// while it waits.

// cpuRow is one load: medians of each target's CPU per request, medians of
// the per-round ratios to the unit target, and ratios of the pooled figures
// (Σ CPU / Σ requests over every round).
type cpuRow struct {
	Load        string             `json:"load"`
	Conc        int                `json:"concurrency"`
	Unit        string             `json:"unit"` // the target the ratios divide by
	CPU         map[string]float64 `json:"cpu_us_per_req"`
	Ratio       map[string]float64 `json:"ratio"`        // target → median of per-round target/unit
	PooledRatio map[string]float64 `json:"ratio_pooled"` // target → pooled target / pooled unit
	RPS         map[string]float64 `json:"rps"`
	P50         map[string]float64 `json:"p50_ms"`
	Errors      int                `json:"errors"`
	FirstError  string             `json:"first_error,omitempty"`
	g           *group             // the rounds, for the variants' ratios
}

type cpuResult struct {
	Conc      int      `json:"concurrency"`
	KBConc    int      `json:"knowledge_concurrency"`
	Source    string   `json:"cpu_source"`
	Nginx     string   `json:"nginx"`
	Pass      []cpuRow `json:"passthrough"`
	Knowledge *cpuRow  `json:"knowledge,omitempty"`
	// Variants are the --cpu-variant children; MaxRSSMiB the peak RSS of
	// the sidecar and of each variant over the whole run.
	Variants  []cpuVariantInfo `json:"variants,omitempty"`
	MaxRSSMiB []namedNum       `json:"max_rss_mib"`
}

type cpuVariantInfo struct {
	Name string   `json:"name"`
	Bin  string   `json:"bin,omitempty"`
	Env  []string `json:"env,omitempty"`
}

type namedNum struct {
	Name  string  `json:"name"`
	Value float64 `json:"value"`
}

// maxRSS is the child's peak resident set (getrusage ru_maxrss) in MiB, or
// -1 when its /stats does not say.
func maxRSS(ep *endpoint) float64 {
	resp, err := ep.client.Get("http://" + ep.stats + "/stats")
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	var v struct {
		KiB *int64 `json:"maxrss_kib"`
	}
	if json.NewDecoder(resp.Body).Decode(&v) != nil || v.KiB == nil {
		return -1
	}
	return float64(*v.KiB*10/1024) / 10
}

func cpuRowOf(load, unit string, g *group) cpuRow {
	row := cpuRow{Load: load, Conc: g.Conc, Unit: unit, CPU: map[string]float64{}, Ratio: map[string]float64{}, PooledRatio: map[string]float64{},
		RPS: map[string]float64{}, P50: map[string]float64{}, Errors: g.errors(), FirstError: g.firstError(), g: g}
	pooled := map[string]float64{}
	for i, name := range g.Targets {
		if p, ok := g.pooledCPU(i); ok {
			pooled[name] = p
		}
		row.CPU[name] = g.med(func(r []runStats) float64 { return r[i].CPUPerReq })
		row.RPS[name] = g.med(func(r []runStats) float64 { return r[i].Throughput })
		row.P50[name] = g.med(func(r []runStats) float64 { return r[i].P50 })
	}
	u := g.idx(unit)
	for i, name := range g.Targets {
		if i == u {
			continue
		}
		row.Ratio[name] = g.med(func(r []runStats) float64 {
			if r[u].CPUPerReq == 0 {
				return 0
			}
			return r[i].CPUPerReq / r[u].CPUPerReq
		})
		if p := pooled[unit]; p > 0 {
			row.PooledRatio[name] = pooled[name] / p
		}
	}
	return row
}

// answerLen sends rq to ep once and returns the length of its 200 answer,
// which rq.valid, when set, accepts.
func answerLen(ep *endpoint, rq reqSpec) (int, error) {
	req, err := http.NewRequest(rq.method, ep.base+rq.path, bytes.NewReader(rq.body))
	if err != nil {
		return 0, err
	}
	req.Header = rq.header.Clone()
	resp, err := ep.client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("%s %s answered %d", rq.method, rq.path, resp.StatusCode)
	}
	if rq.valid != nil {
		if err := rq.valid(b); err != nil {
			return 0, fmt.Errorf("%s %s: %w", rq.method, rq.path, err)
		}
	}
	return len(b), nil
}

// cpuEndpoint is ep again, with CPU read from the child's own getrusage
// (µs) instead of /proc ticks (10 ms).
func cpuEndpoint(name string, ch *child) *endpoint {
	ep := newEndpoint(name, ch.info.Addr, func() []int { return []int{ch.info.PID} }, ch.info.Stats)
	ep.cpu = statsCPU(ep, ch.info.PID)
	return ep
}

// runCPU runs the CPU section: the pass-through loads through lean,
// sidecar, revproxy and a one-worker nginx at c.conc connections, then the
// knowledge paths and a 10 KiB on_demand turn through the sidecar at
// c.cpuKBConc connections next to a lean 1 KiB pass-through in the same
// rounds. The children are the orchestrator's (sidecar, revproxy) plus a
// lean proxy and an nginx started here.
func runCPU(c config, exe, upURL, upAddr, dir string, sc, rp *child, auth http.Header, logw io.Writer) (*cpuResult, []*group, error) {
	lc, err := spawn(exe, "lean", upURL, dir)
	if err != nil {
		return nil, nil, err
	}
	defer lc.stop()
	lean := cpuEndpoint("lean", lc)
	side := cpuEndpoint("sidecar", sc)
	bare := cpuEndpoint("revproxy", rp)
	eps := []*endpoint{lean, side, bare}
	res := &cpuResult{Conc: c.conc, KBConc: c.cpuKBConc,
		Source: "Go children: getrusage(RUSAGE_SELF) from the child, µs; nginx: /proc/PID/stat utime+stime of master and worker, 10 ms ticks"}
	if c.nginx {
		ndir := filepath.Join(dir, "nginx-1w")
		if err := os.MkdirAll(ndir, 0o755); err != nil {
			return nil, nil, err
		}
		n, why := startNginx(ndir, upAddr, 1)
		if n != nil {
			defer n.stop()
			eps = append(eps, newEndpoint("nginx", n.addr, func() []int { return withChildren(n.cmd.Process.Pid) }, ""))
			res.Nginx = n.version + ", 1 worker"
		} else {
			res.Nginx = "skipped: " + why
		}
	} else {
		res.Nginx = "skipped: --nginx=false"
	}
	for _, ep := range eps {
		if err := check(ep, passLoads["1k"]); err != nil {
			return nil, nil, fmt.Errorf("cpu section, %s: %w", ep.name, err)
		}
	}
	var extras []*endpoint
	for _, v := range c.cpuExtra {
		bin := exe
		if v.bin != "" {
			bin = v.bin
		}
		ch, err := spawnEnv(bin, "sidecar", "sidecar-"+v.name, upURL, dir, v.env)
		if err != nil {
			return nil, nil, err
		}
		defer ch.stop()
		ep := cpuEndpoint("sidecar-"+v.name, ch)
		if err := check(ep, passLoads["1k"]); err != nil {
			return nil, nil, fmt.Errorf("cpu section, %s: %w", ep.name, err)
		}
		extras = append(extras, ep)
		res.Variants = append(res.Variants, cpuVariantInfo{Name: ep.name, Bin: v.bin, Env: v.env})
	}
	var groups []*group
	for _, l := range c.cpuLoads {
		progress(logw, "cpu: pass-through %s, closed loop, %d connections", l, c.conc)
		var ts []target
		for _, ep := range append(eps, extras...) {
			ts = append(ts, target{ep.name, ep, passLoads[l]})
		}
		g := runGroup("cpu/"+l, ts, 0, c.conc, c.warm, c.cpuDur, c.pairs)
		groups = append(groups, g)
		res.Pass = append(res.Pass, cpuRowOf(l, "lean", g))
	}
	var kb []namedSpec
	if c.want("cpu") {
		row, g, specs, err := cpuKnowledge(c, exe, upURL, dir, lean, side, extras, auth, logw)
		if err != nil {
			return nil, nil, err
		}
		groups = append(groups, g)
		res.Knowledge, kb = row, specs
	}
	for _, ep := range append([]*endpoint{side}, extras...) {
		res.MaxRSSMiB = append(res.MaxRSSMiB, namedNum{ep.name, maxRSS(ep)})
	}
	if c.profileDir != "" {
		if err := cpuProfiles(c, lean, side, kb, logw); err != nil {
			return nil, nil, err
		}
	}
	return res, groups, nil
}

// cpuKnowledge measures search (REST and MCP), read and an on_demand turn
// through the sidecar (and the extra sidecars) next to the lean 1 KiB
// pass-through and a floor child answering bodies of the same sizes. It
// returns the round's row and group and the specs to profile.
func cpuKnowledge(c config, exe, upURL, dir string, lean, side *endpoint, extras []*endpoint, auth http.Header, logw io.Writer) (*cpuRow, *group, []namedSpec, error) {
	search := reqSpec{method: http.MethodPost, path: kbPath + "search", body: searchBody, header: auth, valid: validSearch}
	// The same search as a tools/call on the remote MCP endpoint, in
	// an initialize-era revision and in 2026-07-28.
	mcpInit, mcpNew := mcpSearch(auth, mcpRevisionInit), mcpSearch(auth, mcpRevisionNew)
	for _, rq := range []reqSpec{search, mcpInit, mcpNew} {
		if _, err := answerLen(side, rq); err != nil {
			return nil, nil, nil, fmt.Errorf("cpu section: %w", err)
		}
	}
	read, err := readSpec(side, auth)
	if err != nil {
		return nil, nil, nil, err
	}
	turns := newTurnBodies()
	turn := reqSpec{method: http.MethodPost, path: "/agent-api/v1/workspaces/" + routeTurn10 + "/turns", gen: turns.next, header: auth}
	// The floor answers with bodies of the sidecar's sizes.
	fc, err := spawn(exe, "floor", upURL, dir)
	if err != nil {
		return nil, nil, nil, err
	}
	defer fc.stop()
	fl := cpuEndpoint("floor", fc)
	floorSearch, floorRead := search, read
	floorSearch.valid = nil // the floor's answer is canned bytes
	for _, p := range []*reqSpec{&floorSearch, &floorRead} {
		n, err := answerLen(side, *p)
		if err != nil {
			return nil, nil, nil, err
		}
		p.path = "/floor/" + p.path[strings.LastIndexByte(p.path, '/')+1:] + "?bytes=" + strconv.Itoa(n)
		if _, err := answerLen(fl, *p); err != nil {
			return nil, nil, nil, fmt.Errorf("cpu section, floor: %w", err)
		}
	}
	progress(logw, "cpu: search (REST and MCP), read 32 KiB, turn 10 KiB on_demand vs a lean pass-through, closed loop, %d connections", c.cpuKBConc)
	ts := []target{
		{"lean", lean, passLoads["1k"]}, {"sidecar pass-through", side, passLoads["1k"]},
		{"search", side, search}, {mcpSearchName, side, mcpInit}, {mcpSearchNewName, side, mcpNew},
		{"read 32 KiB", side, read}, {"turn 10 KiB on_demand", side, turn},
		{"floor search", fl, floorSearch}, {"floor read 32 KiB", fl, floorRead},
	}
	for _, ep := range extras {
		// The ref is sealed with the bench world's keys, which every
		// sidecar child derives alike.
		ts = append(ts, target{ep.name + " search", ep, search}, target{ep.name + " read 32 KiB", ep, read})
	}
	g := runGroup("cpu/knowledge", ts, 0, c.cpuKBConc, c.warm, c.cpuDur, c.pairs)
	row := cpuRowOf("knowledge", "lean", g)
	return &row, g, []namedSpec{{"search", search}, {"mcp-search", mcpInit}, {"read", read}, {"turn-10k", turn}}, nil
}

// cpuProfiles writes CPU profiles of the sidecar and the lean proxy at
// pass-through loads, and of the sidecar on the knowledge specs kb.
func cpuProfiles(c config, lean, side *endpoint, kb []namedSpec, logw io.Writer) error {
	if err := os.MkdirAll(c.profileDir, 0o755); err != nil {
		return err
	}
	for _, l := range []string{"1k", "64k"} {
		path := filepath.Join(c.profileDir, "cpu-sidecar-passthrough-"+l+".pprof")
		progress(logw, "cpu: profile %s", path)
		profile(side, path, target{"sidecar", side, passLoads[l]}, 0, c.conc, c.profileDur)
		path = filepath.Join(c.profileDir, "cpu-lean-passthrough-"+l+".pprof")
		progress(logw, "cpu: profile %s", path)
		profile(lean, path, target{"lean", lean, passLoads[l]}, 0, c.conc, c.profileDur)
	}
	for _, k := range kb {
		path := filepath.Join(c.profileDir, "cpu-sidecar-"+k.name+".pprof")
		progress(logw, "cpu: profile %s", path)
		profile(side, path, target{"sidecar", side, k.spec}, 0, c.cpuKBConc, c.profileDur)
	}
	return nil
}

func (x *cpuResult) evaluate(add func(target, measured string, ok bool)) {
	for _, row := range x.Pass {
		if row.Load != "1k" && row.Load != "64k" {
			continue
		}
		v := row.Ratio["sidecar"]
		add(fmt.Sprintf("issue 22: pass-through %s, sidecar CPU per request ≤ 1.0× lean stdlib proxy", row.Load),
			fmt.Sprintf("%.2f× (pooled %.2f×; %.1f vs %.1f µs)", v, row.PooledRatio["sidecar"], row.CPU["sidecar"], row.CPU["lean"]),
			v > 0 && v <= 1.0 && row.Errors == 0)
	}
	if k := x.Knowledge; k != nil {
		for _, t := range []struct {
			name string
			max  float64
		}{{"search", 4}, {"read 32 KiB", 3}} {
			v := k.Ratio[t.name]
			add(fmt.Sprintf("issue 22: %s ≤ %.0f× one lean pass-through request", t.name, t.max),
				fmt.Sprintf("%.1f× (pooled %.1f×; %.0f vs %.1f µs)", v, k.PooledRatio[t.name], k.CPU[t.name], k.CPU["lean"]),
				v > 0 && v <= t.max && k.Errors == 0)
		}
		for _, name := range []string{mcpSearchName, mcpSearchNewName} {
			med, pooled, ok := pairRatio(*k, name, "search")
			add(fmt.Sprintf("issue 33: %s vs search, CPU per request ≤ %.2f×", name, mcpSearchMax),
				fmt.Sprintf("%.2f× (pooled %.2f×; %.0f vs %.0f µs)", med, pooled, k.CPU[name], k.CPU["search"]),
				ok && med > 0 && med <= mcpSearchMax && k.Errors == 0)
		}
	}
}

// The remote MCP endpoint's search next to the REST search (issue 33): the
// same query through the same sidecar, as a tools/call of knowledge_search
// in one stateless POST.
const (
	mcpSearchName    = "mcp search"                   // revision mcpRevisionInit
	mcpSearchNewName = "mcp search " + mcpRevisionNew // per-request _meta
	mcpSearchMax     = 1.25                           // target: CPU per request ≤ 1.25× the REST search's
)

func printCPU(w io.Writer, x *cpuResult) {
	fmt.Fprintf(w, "\nCPU per request (closed loop, %d connections; %s; nginx: %s)\n", x.Conc, x.Source, x.Nginx)
	fmt.Fprintln(w, "µs of the proxy's utime+stime per request served; ×lean: median of per-round ratios (pooled Σ CPU/Σ requests in brackets)")
	var b bytes.Buffer
	fmt.Fprintln(&b, "load\tlean µs\tsidecar µs\trevproxy µs\tnginx µs\tsidecar ×lean\trevproxy ×lean\tnginx ×lean\tsidecar ×nginx\treq/s lean\tsidecar\terrors\t")
	for _, r := range x.Pass {
		xn := "—"
		if n := r.CPU["nginx"]; n > 0 {
			xn = fmt.Sprintf("%.2f", r.CPU["sidecar"]/n)
		}
		fmt.Fprintf(&b, "%s\t%.1f\t%.1f\t%.1f\t%s\t%s\t%s\t%s\t%s\t%.0f\t%.0f\t%d\t\n", r.Load, r.CPU["lean"], r.CPU["sidecar"], r.CPU["revproxy"], num1(r.CPU, "nginx"),
			both(r, "sidecar"), both(r, "revproxy"), both(r, "nginx"), xn, r.RPS["lean"], r.RPS["sidecar"], r.Errors)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight|tabwriter.Debug)
	_, _ = tw.Write(b.Bytes())
	tw.Flush()
	if k := x.Knowledge; k != nil {
		fmt.Fprintf(w, "\nKnowledge paths through the sidecar as multiples of one lean 1 KiB pass-through request (same rounds, closed loop, %d connections)\n", k.Conc)
		b.Reset()
		fmt.Fprintln(&b, "request\tCPU µs\t×lean\tpooled ×lean\treq/s\tp50 ms\t")
		for _, name := range []string{"lean", "sidecar pass-through", "search", mcpSearchName, mcpSearchNewName, "read 32 KiB", "turn 10 KiB on_demand", "floor search", "floor read 32 KiB"} {
			fmt.Fprintf(&b, "%s\t%.1f\t%s\t%s\t%.0f\t%.3f\t\n", name, k.CPU[name], ratio(k.Ratio, name), ratio(k.PooledRatio, name), k.RPS[name], k.P50[name])
		}
		tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight|tabwriter.Debug)
		_, _ = tw.Write(b.Bytes())
		tw.Flush()
		fmt.Fprintln(w, "floor: the same round trips to Core and the catalog made with net/http's client and database/sql, and a canned answer of the same size; nothing else (test/bench/floor.go)")
		for _, t := range []string{"search", "read 32 KiB"} {
			if f := k.CPU["floor "+t]; f > 0 {
				fmt.Fprintf(w, "  %s: the sidecar spends %.1f µs above the floor (%.2f× the floor)\n", t, k.CPU[t]-f, k.CPU[t]/f)
			}
		}
		fmt.Fprintf(w, "Remote MCP (one stateless POST per tools/call knowledge_search, the REST search's arguments; %s: MCP-Protocol-Version header only; %s: with Mcp-Method/Mcp-Name and per-request _meta), target ≤ %.2f× the REST search:\n",
			mcpRevisionInit, mcpRevisionNew, mcpSearchMax)
		for _, name := range []string{mcpSearchName, mcpSearchNewName} {
			fmt.Fprintf(w, "  %s vs search: %s× CPU per request (median of per-round ratios; pooled in brackets), %+.1f µs; p50 %.3f vs %.3f ms\n",
				name, ratioOf(*k, name, "search"), k.CPU[name]-k.CPU["search"], k.P50[name], k.P50["search"])
		}
		fmt.Fprintf(w, "errors %d", k.Errors)
		if k.FirstError != "" {
			fmt.Fprintf(w, " (first: %s)", k.FirstError)
		}
		fmt.Fprintln(w)
	}
	if len(x.Variants) > 0 {
		fmt.Fprintln(w, "\nVariants (the same sidecar in another build or environment), CPU per request as a multiple of the sidecar's in the same rounds (median of per-round ratios; pooled in brackets)")
		b.Reset()
		fmt.Fprintln(&b, "variant\tbuild / environment\tpass-through loads\tsearch\tread 32 KiB\t")
		for _, v := range x.Variants {
			var pass []string
			for _, r := range x.Pass {
				pass = append(pass, fmt.Sprintf("%s %s", r.Load, ratioOf(r, v.Name, "sidecar")))
			}
			sr, rd := "—", "—"
			if k := x.Knowledge; k != nil {
				sr, rd = ratioOf(*k, v.Name+" search", "search"), ratioOf(*k, v.Name+" read 32 KiB", "read 32 KiB")
			}
			desc := strings.Join(v.Env, " ")
			if v.Bin != "" {
				desc = strings.TrimSpace(filepath.Base(v.Bin) + " " + desc)
			}
			fmt.Fprintf(&b, "%s\t%s\t%s\t%s\t%s\t\n", v.Name, desc, strings.Join(pass, ", "), sr, rd)
		}
		tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight|tabwriter.Debug)
		_, _ = tw.Write(b.Bytes())
		tw.Flush()
	}
	var rss []string
	for _, n := range x.MaxRSSMiB {
		rss = append(rss, fmt.Sprintf("%s %.1f MiB", n.Name, n.Value))
	}
	fmt.Fprintf(w, "Peak RSS over the run (getrusage ru_maxrss): %s\n", strings.Join(rss, ", "))
	for _, r := range x.Pass {
		if r.FirstError != "" {
			fmt.Fprintf(w, "  first error, %s: %s\n", r.Load, r.FirstError)
		}
	}
}

// ratioOf is the median of per-round CPU ratios a/b of row's group, with
// the pooled ratio; both from the stored rounds.
func ratioOf(r cpuRow, a, b string) string {
	med, pooled, ok := pairRatio(r, a, b)
	switch {
	case !ok:
		return "—"
	case pooled == 0:
		return fmt.Sprintf("%.3f", med)
	}
	return fmt.Sprintf("%.3f (%.3f)", med, pooled)
}

// pairRatio is the median of per-round CPU ratios a/b of row's group and
// the pooled ratio (0 when either served nothing); ok is false when the
// group has no such targets.
func pairRatio(r cpuRow, a, b string) (med, pooled float64, ok bool) {
	if r.g == nil {
		return 0, 0, false
	}
	i, j := r.g.idx(a), r.g.idx(b)
	if i < 0 || j < 0 {
		return 0, 0, false
	}
	med = r.g.med(func(rep []runStats) float64 {
		if rep[j].CPUPerReq == 0 {
			return 0
		}
		return rep[i].CPUPerReq / rep[j].CPUPerReq
	})
	pi, iok := r.g.pooledCPU(i)
	pj, jok := r.g.pooledCPU(j)
	if iok && jok && pj > 0 {
		pooled = pi / pj
	}
	return med, pooled, true
}

func both(r cpuRow, name string) string {
	v, ok := r.Ratio[name]
	if !ok {
		return "—"
	}
	return fmt.Sprintf("%.2f (%.2f)", v, r.PooledRatio[name])
}

func num1(m map[string]float64, k string) string {
	v, ok := m[k]
	if !ok {
		return "—"
	}
	return fmt.Sprintf("%.1f", v)
}
