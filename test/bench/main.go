package main

import (
	"cmp"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
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
	if err := c.settle(fs, *rates, *loads, *satLoads, *traceLoads, *cpuLoads, *only); err != nil {
		fmt.Fprintln(stderr, "bench:", err)
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

// settle applies the --quick defaults to the flags not set, parses the list
// flags into c and checks the values.
func (c *config) settle(fs *flag.FlagSet, rates, loads, satLoads, traceLoads, cpuLoads, only string) error {
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
			satLoads = "1k,64k"
		}
	}
	var err error
	if c.rates, err = parseInts(rates); err != nil {
		return fmt.Errorf("--rates: %w", err)
	}
	for _, s := range splitList(only) {
		if !slices.Contains(sections, s) {
			return fmt.Errorf("unknown section %q (want %s)", s, strings.Join(sections, ", "))
		}
		if c.only == nil {
			c.only = map[string]bool{}
		}
		c.only[s] = true
	}
	c.loads = splitList(loads)
	c.satLoads = splitList(satLoads)
	c.traceLoads = splitList(traceLoads)
	c.cpuLoads = splitList(cpuLoads)
	if c.cpuDur <= 0 || c.cpuKBConc <= 0 {
		return errors.New("--cpu-dur and --cpu-kb-conc must be positive")
	}
	if len(c.satLoads) == 0 {
		c.satLoads = c.loads
	}
	for _, l := range append(append(append([]string(nil), c.loads...), c.satLoads...), append(c.traceLoads, c.cpuLoads...)...) {
		if _, ok := passLoads[l]; !ok {
			return fmt.Errorf("unknown load %q (want 1k, 10k, 64k, sse)", l)
		}
	}
	if c.catalog != "sql" && c.catalog != "mem" {
		return errors.New("--catalog must be sql or mem")
	}
	if c.managed && c.catalog != "sql" {
		return errors.New("--managed needs --catalog sql")
	}
	if c.ledgerRate <= 0 || c.ledgerDur <= 0 {
		return errors.New("--ledger-rate and --ledger-dur must be positive")
	}
	if c.pairs < 5 {
		return errors.New("--pairs must be at least 5")
	}
	return nil
}
