package main

import (
	"net"
	"net/http"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"
)

// endpoint is a server the load is pointed at: the upstream itself
// ("direct"), the sidecar, the bare ReverseProxy or nginx.
type endpoint struct {
	name   string
	base   string // http://127.0.0.1:port
	pids   func() []int
	stats  string // host:port of /stats, "" when none
	client *http.Client
	// cpu, when set, reads the endpoint's CPU time instead of cpuTime(pids):
	// the same quantity (the kernel's user+system time of the process) in
	// microseconds rather than 10 ms clock ticks.
	cpu func() time.Duration
}

func newEndpoint(name, addr string, pids func() []int, stats string) *endpoint {
	t := &http.Transport{
		Proxy:               nil,
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        0,
		MaxIdleConnsPerHost: 10000,
		IdleConnTimeout:     2 * time.Minute,
		DisableCompression:  true,
	}
	return &endpoint{name: name, base: "http://" + addr, pids: pids, stats: stats,
		client: &http.Client{Transport: t, Timeout: 15 * time.Second,
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

// reqSpec is one kind of request.
type reqSpec struct {
	method, path string
	body         []byte
	gen          func(seq uint64) []byte // per-request body (unique turn ids); overrides body
	header       http.Header
	// valid, when set, checks the body of every 2xx answer; an answer it
	// refuses counts as an error, so a request kind that answers 200 with
	// a failure inside (a tool result with isError) cannot make a fast
	// number.
	valid func(body []byte) error
}

// target is a request kind sent to an endpoint; a group compares targets.
type target struct {
	label string
	ep    *endpoint
	req   reqSpec
}

// runStats is one bounded load run against one target.
type runStats struct {
	Target     string  `json:"target"`
	Requests   int     `json:"requests"`
	Errors     int     `json:"errors"`
	Throughput float64 `json:"throughput_rps"`
	P50        float64 `json:"p50_ms"`
	P99        float64 `json:"p99_ms"`
	P999       float64 `json:"p999_ms"`
	Max        float64 `json:"max_ms"`
	CPUPerReq  float64 `json:"cpu_us_per_req"` // of the endpoint's processes; 0 for direct
	FirstError string  `json:"first_error,omitempty"`
}

// load runs t for dur: open loop at rate req/s, or closed loop with conc
// workers when rate is 0.
func load(t target, rate, conc int, dur time.Duration) runStats {
	var seq atomic.Uint64
	url := t.ep.base + t.req.path
	tr := func(tgt *vegeta.Target) error {
		tgt.Method, tgt.URL, tgt.Header = t.req.method, url, t.req.header
		if t.req.gen != nil {
			tgt.Body = t.req.gen(seq.Add(1))
		} else {
			tgt.Body = t.req.body
		}
		return nil
	}
	maxBody := int64(0) // read and discarded
	if t.req.valid != nil {
		maxBody = -1 // kept, for valid
	}
	opts := []func(*vegeta.Attacker){vegeta.Client(t.ep.client), vegeta.MaxBody(maxBody), vegeta.Redirects(vegeta.NoFollow)}
	pacer := vegeta.Rate{Freq: rate, Per: time.Second}
	if rate == 0 {
		opts = append(opts, vegeta.Workers(uint64(conc)), vegeta.MaxWorkers(uint64(conc)))
		pacer = vegeta.Rate{}
	} else {
		opts = append(opts, vegeta.Workers(16), vegeta.MaxWorkers(4096))
	}
	atk := vegeta.NewAttacker(opts...)
	capacity := 1024
	if rate > 0 {
		capacity = int(float64(rate)*dur.Seconds()*1.1) + 16
	}
	lat := make([]time.Duration, 0, capacity)
	var pids []int
	if t.ep.pids != nil {
		pids = t.ep.pids()
	}
	readCPU := func() time.Duration { return cpuTime(pids) }
	if t.ep.cpu != nil {
		readCPU = t.ep.cpu
	}
	cpu0 := readCPU()
	start := time.Now()
	rs := runStats{Target: t.label}
	for r := range atk.Attack(tr, pacer, dur, t.label) {
		rs.Requests++
		if r.Error == "" && r.Code >= 200 && r.Code < 300 && t.req.valid != nil {
			if err := t.req.valid(r.Body); err != nil {
				r.Error = "invalid answer: " + err.Error()
			}
		}
		if r.Error != "" || r.Code < 200 || r.Code >= 300 {
			rs.Errors++
			if rs.FirstError == "" {
				rs.FirstError = r.Error
				if rs.FirstError == "" {
					rs.FirstError = "status " + strconv.Itoa(int(r.Code))
				}
			}
			continue
		}
		lat = append(lat, r.Latency)
	}
	elapsed := time.Since(start)
	cpu := readCPU() - cpu0
	ok := len(lat)
	rs.Throughput = float64(ok) / elapsed.Seconds()
	if ok > 0 && pids != nil {
		rs.CPUPerReq = float64(cpu.Microseconds()) / float64(ok)
	}
	slices.Sort(lat)
	rs.P50, rs.P99, rs.P999 = ms(quantile(lat, 0.50)), ms(quantile(lat, 0.99)), ms(quantile(lat, 0.999))
	if ok > 0 {
		rs.Max = ms(lat[ok-1])
	}
	return rs
}

// quantile is the nearest-rank quantile of sorted d (0 when empty).
func quantile(d []time.Duration, q float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	i := int(q*float64(len(d))+0.999999) - 1
	i = max(0, min(i, len(d)-1))
	return d[i]
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// group is a set of targets measured in interleaved repetitions: each rep
// runs every target once, the order rotating between reps, so drift of the
// machine (other load, thermal, GC) falls on all targets alike.
type group struct {
	Name    string       `json:"name"`
	Rate    int          `json:"rate_rps,omitempty"` // 0: closed loop
	Conc    int          `json:"concurrency,omitempty"`
	DurMS   int64        `json:"run_ms"`
	Targets []string     `json:"targets"`
	Reps    [][]runStats `json:"reps"` // [rep][target index], target order as Targets
}

func runGroup(name string, ts []target, rate, conc int, warm, dur time.Duration, reps int) *group {
	g := &group{Name: name, Rate: rate, Conc: conc, DurMS: dur.Milliseconds()}
	for _, t := range ts {
		g.Targets = append(g.Targets, t.label)
	}
	if rate == 0 {
		g.Rate = 0
	} else {
		g.Conc = 0
	}
	for _, t := range ts {
		if warm > 0 {
			load(t, rate, conc, warm)
		}
	}
	for i := 0; i < reps; i++ {
		row := make([]runStats, len(ts))
		for k := range ts {
			j := (k + i) % len(ts)
			row[j] = load(ts[j], rate, conc, dur)
		}
		g.Reps = append(g.Reps, row)
	}
	return g
}

// med is the median over reps of f(rep).
func (g *group) med(f func(rep []runStats) float64) float64 {
	v := make([]float64, 0, len(g.Reps))
	for _, r := range g.Reps {
		v = append(v, f(r))
	}
	return median(v)
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	v = slices.Clone(v)
	slices.Sort(v)
	n := len(v)
	if n%2 == 1 {
		return v[n/2]
	}
	return (v[n/2-1] + v[n/2]) / 2
}

func (g *group) errors() int {
	n := 0
	for _, r := range g.Reps {
		for _, s := range r {
			n += s.Errors
		}
	}
	return n
}

func (g *group) firstError() string {
	for _, r := range g.Reps {
		for _, s := range r {
			if s.FirstError != "" {
				return s.Target + ": " + s.FirstError
			}
		}
	}
	return ""
}

func (g *group) idx(label string) int { return slices.Index(g.Targets, label) }

// pooledCPU is target i's CPU per successful request over every round
// (Σ CPU / Σ requests); ok is false when it served none.
func (g *group) pooledCPU(i int) (cpu float64, ok bool) {
	var total, n float64
	for _, r := range g.Reps {
		served := float64(r[i].Requests - r[i].Errors)
		total += r[i].CPUPerReq * served
		n += served
	}
	if n == 0 {
		return 0, false
	}
	return total / n, true
}
