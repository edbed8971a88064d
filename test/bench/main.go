package main

import (
	"cmp"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/bailinghub/knowledge-sidecar/internal/testkit/testdb"
)

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

// config are the orchestrator's flags.
type config struct {
	quick      bool
	out        string
	pairs      int
	warm, dur  time.Duration
	satDur     time.Duration
	conc       int
	rates      []int
	loads      []string
	satLoads   []string
	turnRate   int
	turn256    int
	kbRate     int
	twRate     int
	twDur      time.Duration
	soak       time.Duration
	soakRate   int
	nginx      bool
	profileDir string
	profileDur time.Duration
	catalog    string
	noHints    bool
	managed    bool
	keep       bool
	only       map[string]bool
	traceRate  int
	traceLoads []string
	// The ledger section: Redis URLs (secrets: never printed) and its rate.
	redisSingle, redisCluster string
	ledgerRate                int
	ledgerDur                 time.Duration
	// The CPU section (issue 22).
	cpuLoads  []string
	cpuDur    time.Duration
	cpuKBConc int
	cpuExtra  []cpuVariant
}

// cpuVariant is an extra sidecar child of the CPU section (--cpu-variant):
// another build of this tool (bin) and/or more environment (env).
type cpuVariant struct {
	name, bin string
	env       []string
}

// cpuVariants collects --cpu-variant NAME=[bin:PATH][;ENV=VALUE...].
type cpuVariants struct{ v *[]cpuVariant }

func (f cpuVariants) String() string { return "" }

func (f cpuVariants) Set(s string) error {
	name, spec, ok := strings.Cut(s, "=")
	if !ok || name == "" {
		return fmt.Errorf("want NAME=[bin:PATH][;ENV=VALUE...]")
	}
	v := cpuVariant{name: name}
	for _, part := range strings.Split(spec, ";") {
		switch {
		case part == "":
		case strings.HasPrefix(part, "bin:"):
			v.bin = strings.TrimPrefix(part, "bin:")
		case strings.Contains(part, "="):
			v.env = append(v.env, part)
		default:
			return fmt.Errorf("%q: want bin:PATH or ENV=VALUE", part)
		}
	}
	*f.v = append(*f.v, v)
	return nil
}

// sections of a run, for --only.
var sections = []string{"timewait", "latency", "saturation", "turns", "kb", "sse", "tracing", "ledger", "cpu"}

func (c config) want(section string) bool { return len(c.only) == 0 || c.only[section] }

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	role := fs.String("serve-target", "", "internal: serve one role (upstream, sidecar, revproxy) for the orchestrator")
	upstream := fs.String("upstream", "", "internal: upstream URL for --serve-target")
	var c config
	fs.BoolVar(&c.quick, "quick", false, "short runs (finishes well under a minute; numbers are noisier)")
	fs.StringVar(&c.out, "out", "", "write the full results as JSON to this file")
	fs.IntVar(&c.pairs, "pairs", 5, "interleaved repetitions per comparison (A/B pairs); at least 5")
	fs.DurationVar(&c.warm, "warmup", 1*time.Second, "warm-up run per target before the pairs")
	fs.DurationVar(&c.dur, "dur", 2*time.Second, "length of each open-loop run")
	fs.DurationVar(&c.satDur, "sat-dur", 2*time.Second, "length of each closed-loop (saturation) run")
	fs.IntVar(&c.conc, "conc", 32, "closed-loop concurrency (connections) for saturation")
	rates := fs.String("rates", "1000,2000", "open-loop rates in req/s for the pass-through comparison")
	loads := fs.String("loads", "1k,10k,64k,sse", "pass-through loads: 1k, 10k, 64k (JSON bodies), sse")
	satLoads := fs.String("sat-loads", "", "loads for saturation (default: same as --loads; --quick: 1k,64k)")
	fs.IntVar(&c.turnRate, "turn-rate", 1000, "open-loop rate for 10 KiB turns (req/s)")
	fs.IntVar(&c.turn256, "turn256-rate", 200, "open-loop rate for 256 KiB turns (req/s)")
	fs.IntVar(&c.kbRate, "kb-rate", 1000, "open-loop rate for search and read (req/s)")
	fs.IntVar(&c.twRate, "tw-rate", 2000, "rate of the TIME_WAIT run through the sidecar (req/s)")
	fs.IntVar(&c.traceRate, "trace-rate", 1000, "open-loop rate of the tracing section (req/s)")
	traceLoads := fs.String("trace-loads", "1k,64k", "pass-through loads of the tracing section")
	fs.StringVar(&c.redisSingle, "redis-single", cmp.Or(os.Getenv("KS_TEST_REDIS_URL"), testdb.DefaultRedisURL), "ledger section: single-node Redis URL (default $KS_TEST_REDIS_URL, else "+testdb.DefaultRedisURL+")")
	fs.StringVar(&c.redisCluster, "redis-cluster", os.Getenv("KS_TEST_REDIS_CLUSTER_URL"), "ledger section: Redis Cluster URL (default $KS_TEST_REDIS_CLUSTER_URL; none: the section is skipped)")
	fs.IntVar(&c.ledgerRate, "ledger-rate", 500, "ledger section: open-loop rate of turn ledger operations (ops/s)")
	fs.DurationVar(&c.ledgerDur, "ledger-dur", 2*time.Second, "ledger section: length of each round")
	cpuLoads := fs.String("cpu-loads", "1k,64k,sse", "cpu section: pass-through loads")
	fs.DurationVar(&c.cpuDur, "cpu-dur", 2*time.Second, "cpu section: length of each closed-loop round")
	fs.IntVar(&c.cpuKBConc, "cpu-kb-conc", 8, "cpu section: connections of the knowledge-path rounds (search, read, turn and their lean pass-through unit)")
	fs.Var(cpuVariants{&c.cpuExtra}, "cpu-variant", "cpu section: an extra sidecar child NAME=[bin:PATH][;ENV=VALUE...] (another build of this tool, e.g. with -pgo, and/or environment, e.g. GOGC=200), measured beside the sidecar; repeatable")
	fs.DurationVar(&c.twDur, "tw-dur", 20*time.Second, "length of the TIME_WAIT run")
	fs.DurationVar(&c.soak, "soak", 0, "RSS soak through the sidecar at 50% of its 1 KiB knee (e.g. 5m; 0: skip)")
	fs.IntVar(&c.soakRate, "soak-rate", 0, "soak rate in req/s instead of half the knee (the closed-loop knee overstates what an open-loop generator sharing the cores can sustain)")
	fs.BoolVar(&c.nginx, "nginx", true, "compare with nginx when the nginx binary is installed")
	fs.DurationVar(&c.profileDur, "profile-dur", 5*time.Second, "length of each CPU profile (--profile)")
	fs.StringVar(&c.profileDir, "profile", "", "directory for CPU profiles of the sidecar under load of the sections run: pass-through 1 KiB at saturation; 10 KiB turns, search and read at their open-loop rates")
	only := fs.String("only", "", "run only these sections: "+strings.Join(sections, ",")+" (default: all)")
	fs.StringVar(&c.catalog, "catalog", "sql", "the sidecar's catalog: sql (a MariaDB database made for the run on the server of KS_TEST_MYSQL_DSN, as in production) or mem (the in-memory twin)")
	fs.BoolVar(&c.managed, "managed", false, "with --catalog sql: Core 0.8 task tables present and the bench session inside a managed task; searches and reads carry its run_id, so every task rule runs")
	fs.BoolVar(&c.noHints, "no-turn-hints", false, "run the sidecar with turn_hints: false (on_demand turns without same-run hints)")
	fs.BoolVar(&c.keep, "keep", false, "keep the work directory (child logs, nginx config) and print its path")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *role != "" {
		return serveTarget(*role, *upstream, stdout, stderr)
	}
	if c.quick {
		set := map[string]bool{}
		fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
		def := func(name string, d *time.Duration, v time.Duration) {
			if !set[name] {
				*d = v
			}
		}
		def("warmup", &c.warm, 100*time.Millisecond)
		def("dur", &c.dur, 150*time.Millisecond)
		def("sat-dur", &c.satDur, 200*time.Millisecond)
		def("tw-dur", &c.twDur, 2*time.Second)
		def("ledger-dur", &c.ledgerDur, 500*time.Millisecond)
		def("cpu-dur", &c.cpuDur, 300*time.Millisecond)
		if !set["sat-loads"] {
			*satLoads = "1k,64k"
		}
	}
	var err error
	if c.rates, err = parseInts(*rates); err != nil {
		fmt.Fprintln(stderr, "bench: --rates:", err)
		return 2
	}
	for _, s := range splitList(*only) {
		if !slices.Contains(sections, s) {
			fmt.Fprintf(stderr, "bench: unknown section %q (want %s)\n", s, strings.Join(sections, ", "))
			return 2
		}
		if c.only == nil {
			c.only = map[string]bool{}
		}
		c.only[s] = true
	}
	c.loads = splitList(*loads)
	c.satLoads = splitList(*satLoads)
	c.traceLoads = splitList(*traceLoads)
	c.cpuLoads = splitList(*cpuLoads)
	if c.cpuDur <= 0 || c.cpuKBConc <= 0 {
		fmt.Fprintln(stderr, "bench: --cpu-dur and --cpu-kb-conc must be positive")
		return 2
	}
	if len(c.satLoads) == 0 {
		c.satLoads = c.loads
	}
	for _, l := range append(append(append([]string(nil), c.loads...), c.satLoads...), append(c.traceLoads, c.cpuLoads...)...) {
		if _, ok := passLoads[l]; !ok {
			fmt.Fprintf(stderr, "bench: unknown load %q (want 1k, 10k, 64k, sse)\n", l)
			return 2
		}
	}
	if c.catalog != "sql" && c.catalog != "mem" {
		fmt.Fprintln(stderr, "bench: --catalog must be sql or mem")
		return 2
	}
	if c.managed && c.catalog != "sql" {
		fmt.Fprintln(stderr, "bench: --managed needs --catalog sql")
		return 2
	}
	if c.ledgerRate <= 0 || c.ledgerDur <= 0 {
		fmt.Fprintln(stderr, "bench: --ledger-rate and --ledger-dur must be positive")
		return 2
	}
	if c.pairs < 5 {
		fmt.Fprintln(stderr, "bench: --pairs must be at least 5")
		return 2
	}
	rep, err := orchestrate(c, stderr)
	if err != nil {
		fmt.Fprintln(stderr, "bench:", err)
		return 1
	}
	printReport(stdout, rep)
	if c.out != "" {
		b, _ := json.MarshalIndent(rep, "", "  ")
		if err := os.WriteFile(c.out, append(b, '\n'), 0o644); err != nil {
			fmt.Fprintln(stderr, "bench:", err)
			return 1
		}
	}
	return 0
}

// passLoads are the pass-through request kinds.
var passLoads = map[string]reqSpec{
	"1k":  {method: http.MethodGet, path: "/bench/json/1k"},
	"10k": {method: http.MethodGet, path: "/bench/json/10k"},
	"64k": {method: http.MethodGet, path: "/bench/json/64k"},
	"sse": {method: http.MethodGet, path: "/bench/sse"},
}

func parseInts(s string) ([]int, error) {
	var out []int
	for _, f := range splitList(s) {
		n, err := strconv.Atoi(f)
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("%q is not a positive integer", f)
		}
		out = append(out, n)
	}
	return out, nil
}

func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

func progress(w io.Writer, format string, a ...any) {
	fmt.Fprintf(w, "[%s] %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, a...))
}

// orchestrate starts the processes, runs every measurement and assembles
// the report.
func orchestrate(c config, logw io.Writer) (*report, error) {
	// The ledger section talks to Redis only: it runs first, before any
	// child is started, and alone when it is the only section asked for.
	var led *ledgerResult
	ledgerLoadBefore := loadAvg()
	if c.want("ledger") {
		led = runLedger(c, logw)
	}
	if len(c.only) == 1 && c.only["ledger"] {
		r := &report{Ledger: led, Meta: meta{LedgerOnly: true, Started: time.Now().UTC().Format(time.RFC3339), GoVersion: runtime.Version(),
			CPUs: runtime.NumCPU(), Quick: c.quick, Pairs: c.pairs, RunMS: c.ledgerDur.Milliseconds(), WarmupMS: c.warm.Milliseconds(), LoadAvgBefore: ledgerLoadBefore}}
		r.Meta.LoadAvgAfter = loadAvg()
		r.Meta.Finished = time.Now().UTC().Format(time.RFC3339)
		r.evaluate()
		return r, nil
	}
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "ks-bench-")
	if err != nil {
		return nil, err
	}
	if c.keep {
		progress(logw, "work directory (kept): %s", dir)
	} else {
		defer os.RemoveAll(dir)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		return nil, err
	}

	up, err := spawn(exe, "upstream", "", dir)
	if err != nil {
		return nil, err
	}
	defer up.stop()
	upURL := "http://" + up.info.Addr
	if c.catalog == "sql" {
		dsn := cmp.Or(os.Getenv("KS_TEST_MYSQL_DSN"), testdb.DefaultDSN)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		db, drop, err := testdb.Create(ctx, dsn)
		if err == nil {
			err = seedCatalog(ctx, db.Admin)
			if err == nil && c.managed {
				var run string
				run, err = seedTask(ctx, db)
				searchBody, _ = json.Marshal(map[string]any{"query": searchQuery, "limit": 3, "run_id": run})
				runID = run
			}
			if err != nil {
				_ = drop()
			}
		}
		cancel()
		if err != nil {
			return nil, fmt.Errorf("catalog database: %w", err)
		}
		defer drop()
		// The sidecar child inherits the environment.
		catalogDSN = db.ReadOnlyDSN
		os.Setenv(catalogEnv, db.ReadOnlyDSN)
		defer os.Unsetenv(catalogEnv)
	}
	// Tracing stays off in the sidecar children whatever the caller's
	// environment says (nothing is exported anywhere but to the tracing
	// section's local sinks, whose children set it again).
	os.Setenv("KNOWLEDGE_SIDECAR_TRACING_ENABLED", "false")
	if c.noHints {
		os.Setenv(noHintsEnv, "1")
		defer os.Unsetenv(noHintsEnv)
	}
	sc, err := spawn(exe, "sidecar", upURL, dir)
	if err != nil {
		return nil, err
	}
	defer sc.stop()
	rp, err := spawn(exe, "revproxy", upURL, dir)
	if err != nil {
		return nil, err
	}
	defer rp.stop()
	single := func(pid int) func() []int { return func() []int { return []int{pid} } }
	direct := newEndpoint("direct", up.info.Addr, nil, "")
	side := newEndpoint("sidecar", sc.info.Addr, single(sc.info.PID), sc.info.Stats)
	bare := newEndpoint("revproxy", rp.info.Addr, single(rp.info.PID), rp.info.Stats)
	eps := []*endpoint{direct, side, bare}
	ports := map[int]string{portOf(up.info.Addr): "direct", portOf(sc.info.Addr): "sidecar", portOf(rp.info.Addr): "revproxy"}

	r := &report{Ledger: led, Meta: meta{Catalog: c.catalog, TurnHints: !c.noHints, Managed: c.managed,
		Started: time.Now().UTC().Format(time.RFC3339), GoVersion: runtime.Version(), CPUs: runtime.NumCPU(),
		Quick: c.quick, Pairs: c.pairs, RunMS: c.dur.Milliseconds(), SatRunMS: c.satDur.Milliseconds(),
		WarmupMS: c.warm.Milliseconds(), Concurrency: c.conc, LoadAvgBefore: loadAvg(),
	}}
	var ngx *endpoint
	if c.nginx {
		n, why := startNginx(dir, up.info.Addr, 2)
		if n != nil {
			defer n.stop()
			ngx = newEndpoint("nginx", n.addr, func() []int { return withChildren(n.cmd.Process.Pid) }, "")
			eps = append(eps, ngx)
			ports[portOf(n.addr)] = "nginx"
			r.Meta.Nginx = n.version
		} else {
			r.Meta.Nginx = "skipped: " + why
		}
	} else {
		r.Meta.Nginx = "skipped: --nginx=false"
	}

	// Every endpoint answers before anything is measured.
	for _, ep := range eps {
		if err := check(ep, passLoads["1k"]); err != nil {
			return nil, fmt.Errorf("%s: %w", ep.name, err)
		}
	}
	r.Resources.IdleRSSMiB = mib(rss([]int{sc.info.PID}))
	r.Resources.IdleGoroutines = goroutines(side)
	r.Resources.TimeWaitBefore, _ = timeWait(ports)

	auth := http.Header{"Authorization": {"Bearer " + benchToken}, "Content-Type": {"application/json"}}

	// 0. TIME_WAIT over a sustained pass-through run, first, so sockets
	// closed by later phases (they live 60 s) are not counted.
	if c.want("timewait") {
		progress(logw, "TIME_WAIT run: %s at %d req/s", c.twDur, c.twRate)
		load(target{"sidecar", side, passLoads["1k"]}, c.twRate, 0, c.warm) // warm the pools first
		r.Resources.TWRunBefore, _ = timeWait(ports)
		tw := load(target{"sidecar", side, passLoads["1k"]}, c.twRate, 0, c.twDur)
		r.Resources.TWRunAfter, r.Resources.TWRunBy = timeWait(ports)
		r.Resources.TWRun = fmt.Sprintf("%s at %d req/s, 1 KiB", c.twDur, c.twRate)
		r.Resources.TWRunErrors = tw.Errors
	}

	// 1. Pass-through latency at fixed rates, direct vs sidecar.
	for _, l := range c.loads {
		if !c.want("latency") {
			break
		}
		for _, rate := range c.rates {
			progress(logw, "latency %s at %d req/s", l, rate)
			g := runGroup(fmt.Sprintf("latency/%s/%d", l, rate), []target{
				{"direct", direct, passLoads[l]}, {"sidecar", side, passLoads[l]}, {"revproxy", bare, passLoads[l]},
			}, rate, 0, c.warm, c.dur, c.pairs)
			r.Groups = append(r.Groups, g)
			r.PassLatency = append(r.PassLatency, latencyRowOf(l, g, "direct", "sidecar"))
		}
	}

	// 2. Saturation, closed loop: direct, sidecar, bare ReverseProxy, nginx.
	var knee float64
	for _, l := range c.satLoads {
		if !c.want("saturation") {
			break
		}
		progress(logw, "saturation %s, %d connections", l, c.conc)
		var ts []target
		for _, ep := range eps {
			ts = append(ts, target{ep.name, ep, passLoads[l]})
		}
		g := runGroup("saturation/"+l, ts, 0, c.conc, c.warm, c.satDur, c.pairs)
		r.Groups = append(r.Groups, g)
		row := satRowOf(l, g)
		if l == "1k" {
			knee = row.RPS["sidecar"]
		}
		r.Saturation = append(r.Saturation, row)
	}

	// 3. Intercepted paths with a zero-latency Core.
	var turnSeq = newTurnBodies()
	turn := func(route string) reqSpec {
		return reqSpec{method: http.MethodPost, path: "/agent-api/v1/workspaces/" + route + "/turns", gen: turnSeq.next, header: auth}
	}
	if c.want("turns") {
		progress(logw, "turns 10 KiB at %d req/s", c.turnRate)
		g := runGroup("turn/10k", []target{
			{"direct", direct, turn(routeTurn10)}, {"sidecar", side, turn(routeTurn10)}, {"sidecar-passthrough", side, turn(routePass10)},
		}, c.turnRate, 0, c.warm, c.dur, c.pairs)
		r.Groups = append(r.Groups, g)
		r.Intercepted = append(r.Intercepted, interRowOf("turn 10 KiB (on_demand)", g, "direct", "sidecar", "sidecar-passthrough"))
		progress(logw, "turns 256 KiB at %d req/s", c.turn256)
		g = runGroup("turn/256k", []target{{"direct", direct, turn(routeTurn256)}, {"sidecar", side, turn(routeTurn256)}},
			c.turn256, 0, c.warm, c.dur, c.pairs)
		r.Groups = append(r.Groups, g)
		r.Intercepted = append(r.Intercepted, interRowOf("turn 256 KiB (on_demand)", g, "direct", "sidecar", ""))
	}
	var kbProfiles []namedSpec
	if c.want("kb") {
		kbPath := "/agent-api/v1/workspaces/" + routeKB + "/knowledge/"
		progress(logw, "search and read at %d req/s", c.kbRate)
		rtt := startRTT(catalogDSN, 50)
		search := reqSpec{method: http.MethodPost, path: kbPath + "search", body: searchBody, header: auth}
		g := runGroup("search", []target{{"sidecar", side, search}},
			c.kbRate, 0, c.warm, c.dur, c.pairs)
		r.Groups = append(r.Groups, g)
		r.Intercepted = append(r.Intercepted, interRowOf("search (3 Core calls)", g, "", "sidecar", ""))
		// Refs live 5 minutes: take a fresh one just before the read load.
		ref, err := searchRef(side, auth)
		if err != nil {
			return nil, err
		}
		rb := map[string]any{"ref": ref, "max_bytes": 32768}
		if runID != "" {
			rb["run_id"] = runID
		}
		readBody, _ := json.Marshal(rb)
		read := reqSpec{method: http.MethodPost, path: kbPath + "read", body: readBody, header: auth}
		g = runGroup("read", []target{{"sidecar", side, read}},
			c.kbRate, 0, c.warm, c.dur, c.pairs)
		r.Groups = append(r.Groups, g)
		r.Intercepted = append(r.Intercepted, interRowOf("read 32 KiB page", g, "", "sidecar", ""))
		kbProfiles = []namedSpec{{"search", search}, {"read", read}}
		r.CatalogRTT = rtt.finish()
	}

	// 3b. CPU per request against the lean stdlib proxy (issue 22).
	if c.want("cpu") {
		x, gs, err := runCPU(c, exe, upURL, up.info.Addr, dir, sc, rp, auth, logw)
		if err != nil {
			return nil, err
		}
		r.CPU = x
		r.Groups = append(r.Groups, gs...)
	}

	// 4. SSE event delay, direct vs sidecar, quiet machine.
	if c.want("sse") {
		progress(logw, "sse event delay")
		streams, events, gap := 8, 40, 5*time.Millisecond
		if c.quick {
			events = 15
		}
		for i := 0; i < c.pairs; i++ {
			a, b := direct, side
			if i%2 == 1 {
				a, b = b, a
			}
			r.SSE.Reps = append(r.SSE.Reps, sseProbe(a, streams, events, gap), sseProbe(b, streams, events, gap))
		}
		r.SSE.summarize(streams, events, gap)
	}

	// 4b. Tracing off / on, not sampled / always on: three more sidecars,
	// started for this section only.
	if c.want("tracing") {
		if c.profileDir != "" {
			if err := os.MkdirAll(c.profileDir, 0o755); err != nil {
				return nil, err
			}
		}
		t, gs, err := runTracing(c, exe, upURL, dir, logw)
		if err != nil {
			return nil, err
		}
		r.Tracing = t
		r.Groups = append(r.Groups, gs...)
	}

	// 5. Optional RSS soak at half the knee.
	if rate := int(knee / 2); c.soak > 0 && (knee > 0 || c.soakRate > 0) {
		if c.soakRate > 0 {
			rate = c.soakRate
		}
		progress(logw, "soak %s at %d req/s", c.soak, rate)
		r.Soak = soak(side, sc.info.PID, rate, c.soak)
	}

	// 6. Optional CPU profiles of the sidecar under load.
	if c.profileDir != "" {
		progress(logw, "profiles into %s", c.profileDir)
		if err := os.MkdirAll(c.profileDir, 0o755); err != nil {
			return nil, err
		}
		if c.want("latency") || c.want("saturation") {
			profile(side, filepath.Join(c.profileDir, "sidecar-passthrough-1k.pprof"), target{"sidecar", side, passLoads["1k"]}, 0, c.conc, c.profileDur)
		}
		if c.want("turns") {
			// Open loop at the measured rate: CPU per request at a rate is
			// what the turn rows report.
			profile(side, filepath.Join(c.profileDir, "sidecar-turn-10k.pprof"), target{"sidecar", side, turn(routeTurn10)}, c.turnRate, 0, c.profileDur)
		}
		// The knowledge paths at their open-loop rate: a closed loop would
		// measure the catalog's queueing instead of the sidecar's work.
		for _, k := range kbProfiles {
			profile(side, filepath.Join(c.profileDir, "sidecar-"+k.name+".pprof"), target{"sidecar", side, k.spec}, c.kbRate, 0, c.profileDur)
		}
	}

	r.Resources.AfterRSSMiB = mib(rss([]int{sc.info.PID}))
	r.Resources.AfterGoroutines = goroutines(side)
	r.Resources.TimeWaitAfter, r.Resources.TimeWaitBy = timeWait(ports)
	r.Meta.LoadAvgAfter = loadAvg()
	r.Meta.Finished = time.Now().UTC().Format(time.RFC3339)
	r.evaluate()
	return r, nil
}
