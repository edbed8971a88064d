package main

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"time"

	"github.com/bailinghub/knowledge-sidecar/internal/testkit/testdb"
)

// bench is one orchestrated run: the children every section measures and
// the report the sections fill.
type bench struct {
	c     config
	logw  io.Writer
	exe   string
	dir   string
	upURL string
	up    *child
	sc    *child // the sidecar
	rp    *child // the bare ReverseProxy
	// direct (the upstream), side (the sidecar), bare (the ReverseProxy)
	// and, when started, nginx: every pass-through endpoint.
	direct, side, bare *endpoint
	eps                []*endpoint
	ports              map[int]string // TIME_WAIT counting: port → endpoint name
	auth               http.Header
	turnSeq            *turnBodies
	kbProfiles         []namedSpec
	r                  *report
	// stops run in reverse order when the run ends.
	stops []func()
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
	b := &bench{c: c, logw: logw}
	defer b.stop()
	if err := b.start(led); err != nil {
		return nil, err
	}
	if err := b.measure(); err != nil {
		return nil, err
	}
	r := b.r
	r.Resources.AfterRSSMiB = mib(rss([]int{b.sc.info.PID}))
	r.Resources.AfterGoroutines = goroutines(b.side)
	r.Resources.TimeWaitAfter, r.Resources.TimeWaitBy = timeWait(b.ports)
	r.Meta.LoadAvgAfter = loadAvg()
	r.Meta.Finished = time.Now().UTC().Format(time.RFC3339)
	r.evaluate()
	return r, nil
}

// atEnd schedules f for the end of the run.
func (b *bench) atEnd(f func()) { b.stops = append(b.stops, f) }

// stop runs the scheduled stops, last first.
func (b *bench) stop() {
	for i := len(b.stops) - 1; i >= 0; i-- {
		b.stops[i]()
	}
}

// start makes the work directory, the upstream, the catalog database (sql),
// the sidecar, the bare ReverseProxy and (when asked) nginx, and checks that
// every endpoint answers.
func (b *bench) start(led *ledgerResult) error {
	c := b.c
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	b.exe = exe
	if b.dir, err = os.MkdirTemp("", "ks-bench-"); err != nil {
		return err
	}
	if c.keep {
		progress(b.logw, "work directory (kept): %s", b.dir)
	} else {
		b.atEnd(func() { os.RemoveAll(b.dir) })
	}
	if err := os.Chmod(b.dir, 0o755); err != nil {
		return err
	}
	if b.up, err = b.spawn("upstream", ""); err != nil {
		return err
	}
	b.upURL = "http://" + b.up.info.Addr
	if c.catalog == "sql" {
		if err := b.catalogDB(); err != nil {
			return err
		}
	}
	// Tracing stays off in the sidecar children whatever the caller's
	// environment says (nothing is exported anywhere but to the tracing
	// section's local sinks, whose children set it again).
	os.Setenv("KNOWLEDGE_SIDECAR_TRACING_ENABLED", "false")
	if c.noHints {
		os.Setenv(noHintsEnv, "1")
		b.atEnd(func() { os.Unsetenv(noHintsEnv) })
	}
	if b.sc, err = b.spawn("sidecar", b.upURL); err != nil {
		return err
	}
	if b.rp, err = b.spawn("revproxy", b.upURL); err != nil {
		return err
	}
	up, sc, rp := b.up, b.sc, b.rp
	single := func(pid int) func() []int { return func() []int { return []int{pid} } }
	b.direct = newEndpoint("direct", up.info.Addr, nil, "")
	b.side = newEndpoint("sidecar", sc.info.Addr, single(sc.info.PID), sc.info.Stats)
	b.bare = newEndpoint("revproxy", rp.info.Addr, single(rp.info.PID), rp.info.Stats)
	b.eps = []*endpoint{b.direct, b.side, b.bare}
	b.ports = map[int]string{portOf(up.info.Addr): "direct", portOf(sc.info.Addr): "sidecar", portOf(rp.info.Addr): "revproxy"}

	b.r = &report{Ledger: led, Meta: meta{Catalog: c.catalog, TurnHints: !c.noHints, Managed: c.managed,
		Started: time.Now().UTC().Format(time.RFC3339), GoVersion: runtime.Version(), CPUs: runtime.NumCPU(),
		Quick: c.quick, Pairs: c.pairs, RunMS: c.dur.Milliseconds(), SatRunMS: c.satDur.Milliseconds(),
		WarmupMS: c.warm.Milliseconds(), Concurrency: c.conc, LoadAvgBefore: loadAvg(),
	}}
	b.startNginx()

	// Every endpoint answers before anything is measured.
	for _, ep := range b.eps {
		if err := check(ep, passLoads["1k"]); err != nil {
			return fmt.Errorf("%s: %w", ep.name, err)
		}
	}
	b.r.Resources.IdleRSSMiB = mib(rss([]int{sc.info.PID}))
	b.r.Resources.IdleGoroutines = goroutines(b.side)
	b.r.Resources.TimeWaitBefore, _ = timeWait(b.ports)
	b.auth = http.Header{"Authorization": {"Bearer " + benchToken}, "Content-Type": {"application/json"}}
	b.turnSeq = newTurnBodies()
	return nil
}

// spawn starts a child of role, stopped when the run ends.
func (b *bench) spawn(role, upstream string) (*child, error) {
	ch, err := spawn(b.exe, role, upstream, b.dir)
	if err != nil {
		return nil, err
	}
	b.atEnd(ch.stop)
	return ch, nil
}

// catalogDB creates and seeds the catalog database the sidecar children
// read (through the environment they inherit), dropped when the run ends.
func (b *bench) catalogDB() error {
	dsn := cmp.Or(os.Getenv("KS_TEST_MYSQL_DSN"), testdb.DefaultDSN)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db, drop, err := testdb.Create(ctx, dsn)
	if err == nil {
		err = seedCatalog(ctx, db.Admin)
		if err == nil && b.c.managed {
			var run string
			run, err = seedTask(ctx, db)
			searchBody, _ = json.Marshal(map[string]any{"query": searchQuery, "limit": 3, "run_id": run})
			runID = run
		}
		if err != nil {
			_ = drop()
		}
	}
	if err != nil {
		return fmt.Errorf("catalog database: %w", err)
	}
	b.atEnd(func() { _ = drop() })
	// The sidecar child inherits the environment.
	catalogDSN = db.ReadOnlyDSN
	os.Setenv(catalogEnv, db.ReadOnlyDSN)
	b.atEnd(func() { os.Unsetenv(catalogEnv) })
	return nil
}

// startNginx adds nginx (2 workers) to the pass-through endpoints when
// asked and found, and says which in the report.
func (b *bench) startNginx() {
	if !b.c.nginx {
		b.r.Meta.Nginx = "skipped: --nginx=false"
		return
	}
	n, why := startNginx(b.dir, b.up.info.Addr, 2)
	if n == nil {
		b.r.Meta.Nginx = "skipped: " + why
		return
	}
	b.atEnd(n.stop)
	b.eps = append(b.eps, newEndpoint("nginx", n.addr, func() []int { return withChildren(n.cmd.Process.Pid) }, ""))
	b.ports[portOf(n.addr)] = "nginx"
	b.r.Meta.Nginx = n.version
}

// measure runs the sections asked for, in order.
func (b *bench) measure() error {
	c, r := b.c, b.r
	// 0. TIME_WAIT over a sustained pass-through run, first, so sockets
	// closed by later phases (they live 60 s) are not counted.
	if c.want("timewait") {
		b.timeWaitRun()
	}
	// 1. Pass-through latency at fixed rates, direct vs sidecar.
	if c.want("latency") {
		b.latency()
	}
	// 2. Saturation, closed loop: direct, sidecar, bare ReverseProxy, nginx.
	var knee float64
	if c.want("saturation") {
		knee = b.saturation()
	}
	// 3. Intercepted paths with a zero-latency Core.
	if c.want("turns") {
		b.turns()
	}
	if c.want("kb") {
		if err := b.knowledge(); err != nil {
			return err
		}
	}
	// 3b. CPU per request against the lean stdlib proxy (issue 22).
	if c.want("cpu") {
		x, gs, err := runCPU(c, b.exe, b.upURL, b.up.info.Addr, b.dir, b.sc, b.rp, b.auth, b.logw)
		if err != nil {
			return err
		}
		r.CPU = x
		r.Groups = append(r.Groups, gs...)
	}
	// 4. SSE event delay, direct vs sidecar, quiet machine.
	if c.want("sse") {
		b.sse()
	}
	// 4b. Tracing off / on, not sampled / always on: three more sidecars,
	// started for this section only.
	if c.want("tracing") {
		if c.profileDir != "" {
			if err := os.MkdirAll(c.profileDir, 0o755); err != nil {
				return err
			}
		}
		t, gs, err := runTracing(c, b.exe, b.upURL, b.dir, b.logw)
		if err != nil {
			return err
		}
		r.Tracing = t
		r.Groups = append(r.Groups, gs...)
	}
	// 5. Optional RSS soak at half the knee.
	if rate := int(knee / 2); c.soak > 0 && (knee > 0 || c.soakRate > 0) {
		if c.soakRate > 0 {
			rate = c.soakRate
		}
		progress(b.logw, "soak %s at %d req/s", c.soak, rate)
		r.Soak = soak(b.side, b.sc.info.PID, rate, c.soak)
	}
	// 6. Optional CPU profiles of the sidecar under load.
	if c.profileDir != "" {
		return b.profiles()
	}
	return nil
}

func (b *bench) timeWaitRun() {
	c, r, side := b.c, b.r, b.side
	progress(b.logw, "TIME_WAIT run: %s at %d req/s", c.twDur, c.twRate)
	load(target{"sidecar", side, passLoads["1k"]}, c.twRate, 0, c.warm) // warm the pools first
	r.Resources.TWRunBefore, _ = timeWait(b.ports)
	tw := load(target{"sidecar", side, passLoads["1k"]}, c.twRate, 0, c.twDur)
	r.Resources.TWRunAfter, r.Resources.TWRunBy = timeWait(b.ports)
	r.Resources.TWRun = fmt.Sprintf("%s at %d req/s, 1 KiB", c.twDur, c.twRate)
	r.Resources.TWRunErrors = tw.Errors
}

func (b *bench) latency() {
	c, r := b.c, b.r
	for _, l := range c.loads {
		for _, rate := range c.rates {
			progress(b.logw, "latency %s at %d req/s", l, rate)
			g := runGroup(fmt.Sprintf("latency/%s/%d", l, rate), []target{
				{"direct", b.direct, passLoads[l]}, {"sidecar", b.side, passLoads[l]}, {"revproxy", b.bare, passLoads[l]},
			}, rate, 0, c.warm, c.dur, c.pairs)
			r.Groups = append(r.Groups, g)
			r.PassLatency = append(r.PassLatency, latencyRowOf(l, g, "direct", "sidecar"))
		}
	}
}

// saturation returns the sidecar's 1 KiB knee (0 when not measured).
func (b *bench) saturation() (knee float64) {
	c, r := b.c, b.r
	for _, l := range c.satLoads {
		progress(b.logw, "saturation %s, %d connections", l, c.conc)
		var ts []target
		for _, ep := range b.eps {
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
	return knee
}

// turn is a turn of route with a fresh body each request.
func (b *bench) turn(route string) reqSpec {
	return reqSpec{method: http.MethodPost, path: "/agent-api/v1/workspaces/" + route + "/turns", gen: b.turnSeq.next, header: b.auth}
}

func (b *bench) turns() {
	c, r, direct, side := b.c, b.r, b.direct, b.side
	progress(b.logw, "turns 10 KiB at %d req/s", c.turnRate)
	g := runGroup("turn/10k", []target{
		{"direct", direct, b.turn(routeTurn10)}, {"sidecar", side, b.turn(routeTurn10)}, {"sidecar-passthrough", side, b.turn(routePass10)},
	}, c.turnRate, 0, c.warm, c.dur, c.pairs)
	r.Groups = append(r.Groups, g)
	r.Intercepted = append(r.Intercepted, interRowOf("turn 10 KiB (on_demand)", g, "direct", "sidecar", "sidecar-passthrough"))
	progress(b.logw, "turns 256 KiB at %d req/s", c.turn256)
	g = runGroup("turn/256k", []target{{"direct", direct, b.turn(routeTurn256)}, {"sidecar", side, b.turn(routeTurn256)}},
		c.turn256, 0, c.warm, c.dur, c.pairs)
	r.Groups = append(r.Groups, g)
	r.Intercepted = append(r.Intercepted, interRowOf("turn 256 KiB (on_demand)", g, "direct", "sidecar", ""))
}

// knowledge measures search and read through the sidecar, with the
// catalog's round trip beside them.
func (b *bench) knowledge() error {
	c, r, side := b.c, b.r, b.side
	progress(b.logw, "search and read at %d req/s", c.kbRate)
	rtt := startRTT(catalogDSN, 50)
	search := reqSpec{method: http.MethodPost, path: kbPath + "search", body: searchBody, header: b.auth}
	g := runGroup("search", []target{{"sidecar", side, search}},
		c.kbRate, 0, c.warm, c.dur, c.pairs)
	r.Groups = append(r.Groups, g)
	r.Intercepted = append(r.Intercepted, interRowOf("search (3 Core calls)", g, "", "sidecar", ""))
	// Refs live 5 minutes: take a fresh one just before the read load.
	read, err := readSpec(side, b.auth)
	if err != nil {
		return err
	}
	g = runGroup("read", []target{{"sidecar", side, read}},
		c.kbRate, 0, c.warm, c.dur, c.pairs)
	r.Groups = append(r.Groups, g)
	r.Intercepted = append(r.Intercepted, interRowOf("read 32 KiB page", g, "", "sidecar", ""))
	b.kbProfiles = []namedSpec{{"search", search}, {"read", read}}
	r.CatalogRTT = rtt.finish()
	return nil
}

func (b *bench) sse() {
	c, r := b.c, b.r
	progress(b.logw, "sse event delay")
	streams, events, gap := 8, 40, 5*time.Millisecond
	if c.quick {
		events = 15
	}
	for i := 0; i < c.pairs; i++ {
		x, y := b.direct, b.side
		if i%2 == 1 {
			x, y = y, x
		}
		r.SSE.Reps = append(r.SSE.Reps, sseProbe(x, streams, events, gap), sseProbe(y, streams, events, gap))
	}
	r.SSE.summarize(streams, events, gap)
}

// profiles writes CPU profiles of the sidecar under the loads measured.
func (b *bench) profiles() error {
	c, side := b.c, b.side
	progress(b.logw, "profiles into %s", c.profileDir)
	if err := os.MkdirAll(c.profileDir, 0o755); err != nil {
		return err
	}
	if c.want("latency") || c.want("saturation") {
		profile(side, filepath.Join(c.profileDir, "sidecar-passthrough-1k.pprof"), target{"sidecar", side, passLoads["1k"]}, 0, c.conc, c.profileDur)
	}
	if c.want("turns") {
		// Open loop at the measured rate: CPU per request at a rate is
		// what the turn rows report.
		profile(side, filepath.Join(c.profileDir, "sidecar-turn-10k.pprof"), target{"sidecar", side, b.turn(routeTurn10)}, c.turnRate, 0, c.profileDur)
	}
	// The knowledge paths at their open-loop rate: a closed loop would
	// measure the catalog's queueing instead of the sidecar's work.
	for _, k := range b.kbProfiles {
		profile(side, filepath.Join(c.profileDir, "sidecar-"+k.name+".pprof"), target{"sidecar", side, k.spec}, c.kbRate, 0, c.profileDur)
	}
	return nil
}
