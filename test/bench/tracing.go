package main

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync/atomic"
	"text/tabwriter"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"
)

// The tracing section (issue 24, item 6): three sidecar children that
// differ only in tracing — off; on with OTEL_TRACES_SAMPLER=always_off (on,
// nothing sampled); on with always_on — each exporting OTLP/HTTP to its own
// sink in this process, loaded with the same pass-through requests at the
// same fixed rate in interleaved rounds.

// traceVariant is one of the three children.
type traceVariant struct {
	label   string
	enabled string // KNOWLEDGE_SIDECAR_TRACING_ENABLED
	sampler string // OTEL_TRACES_SAMPLER
}

// The off child gets the sampler and the endpoint too: tracing.enabled
// false alone must keep it silent.
var traceVariants = []traceVariant{
	{"off", "false", "always_on"},
	{"not-sampled", "true", "always_off"},
	{"always-on", "true", "always_on"},
}

// otlpSink is a local OTLP/HTTP collector: it accepts POST /v1/traces,
// counts the spans and answers 200 with an empty response.
type otlpSink struct {
	srv          *httptest.Server
	posts, spans atomic.Int64
	bytes, bad   atomic.Int64
}

func startSink() *otlpSink {
	s := &otlpSink{}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/traces", func(w http.ResponseWriter, r *http.Request) {
		var body io.Reader = io.LimitReader(r.Body, 64<<20)
		if r.Header.Get("Content-Encoding") == "gzip" {
			zr, err := gzip.NewReader(body)
			if err != nil {
				s.bad.Add(1)
				http.Error(w, "bad gzip", http.StatusBadRequest)
				return
			}
			defer zr.Close()
			body = zr
		}
		b, err := io.ReadAll(body)
		s.posts.Add(1)
		s.bytes.Add(int64(len(b)))
		var req coltracepb.ExportTraceServiceRequest
		if err != nil || proto.Unmarshal(b, &req) != nil {
			s.bad.Add(1)
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		n := 0
		for _, rs := range req.ResourceSpans {
			for _, ss := range rs.ScopeSpans {
				n += len(ss.Spans)
			}
		}
		s.spans.Add(int64(n))
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.WriteHeader(http.StatusOK) // an empty ExportTraceServiceResponse
	})
	s.srv = httptest.NewServer(mux) // 127.0.0.1, a kernel-chosen port
	return s
}

// tracingResult is the section's outcome.
type tracingResult struct {
	Rate int          `json:"rate_rps"`
	Rows []tracingRow `json:"rows"`
	// What each child's sink received, read after the children stopped
	// (their shutdown flushes the batch processor).
	Spans     map[string]int64 `json:"spans_received"`
	Exports   map[string]int64 `json:"export_requests"`
	BadPosts  map[string]int64 `json:"bad_export_requests"`
	Requests  map[string]int   `json:"requests_measured"`
	CPUSource string           `json:"cpu_source"`
}

// tracingRow is one load: medians over the rounds of CPU per request and
// latency per child, and medians of the per-round ratios to off.
type tracingRow struct {
	Load  string             `json:"load"`
	Rate  int                `json:"rate_rps"`
	CPU   map[string]float64 `json:"cpu_us_per_req"`
	Ratio map[string]float64 `json:"cpu_ratio"` // "not-sampled/off", "always-on/off"
	// Pooled is Σ CPU / Σ requests over all rounds, and PooledRatio its
	// ratio to off: a cross-check of the median of per-round ratios.
	Pooled      map[string]float64 `json:"cpu_us_per_req_pooled"`
	PooledRatio map[string]float64 `json:"cpu_ratio_pooled"`
	P50         map[string]float64 `json:"p50_ms"`
	P99         map[string]float64 `json:"p99_ms"`
	Errors      int                `json:"errors"`
}

// statsCPU reads the child's own user+system CPU time (getrusage) from its
// /stats, falling back to /proc/PID/stat.
func statsCPU(ep *endpoint, pid int) func() time.Duration {
	return func() time.Duration {
		resp, err := ep.client.Get("http://" + ep.stats + "/stats")
		if err == nil {
			defer resp.Body.Close()
			var v struct {
				CPU *int64 `json:"cpu_us"`
			}
			if json.NewDecoder(resp.Body).Decode(&v) == nil && v.CPU != nil {
				return time.Duration(*v.CPU) * time.Microsecond
			}
		}
		return cpuTime([]int{pid})
	}
}

// runTracing starts the three children over the upstream at upURL, runs
// every load of c.traceLoads at c.traceRate, optionally profiles each child,
// stops them and reads the sinks.
func runTracing(c config, exe, upURL, dir string, logw io.Writer) (*tracingResult, []*group, error) {
	var groups []*group
	res := &tracingResult{Rate: c.traceRate, Spans: map[string]int64{}, Exports: map[string]int64{}, BadPosts: map[string]int64{},
		Requests: map[string]int{}, CPUSource: "getrusage(RUSAGE_SELF) of each child, µs (the /proc/PID/stat utime+stime quantity without its 10 ms ticks)"}
	type running struct {
		v    traceVariant
		sink *otlpSink
		ch   *child
		ep   *endpoint
	}
	var rs []*running
	stopAll := func() {
		for _, r := range rs {
			if r.ch != nil {
				r.ch.stop()
				r.ch = nil
			}
		}
	}
	defer func() {
		stopAll()
		for _, r := range rs {
			r.sink.srv.Close()
		}
	}()
	for _, v := range traceVariants {
		r := &running{v: v, sink: startSink()}
		rs = append(rs, r)
		env := []string{
			"KNOWLEDGE_SIDECAR_TRACING_ENABLED=" + v.enabled,
			"OTEL_SDK_DISABLED=false",
			"OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf",
			"OTEL_EXPORTER_OTLP_ENDPOINT=" + r.sink.srv.URL,
			"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=" + r.sink.srv.URL + "/v1/traces",
			"OTEL_TRACES_SAMPLER=" + v.sampler,
			"OTEL_TRACES_SAMPLER_ARG=",
		}
		ch, err := spawnEnv(exe, "sidecar", "sidecar-tracing-"+v.label, upURL, dir, env)
		if err != nil {
			return nil, nil, err
		}
		r.ch = ch
		r.ep = newEndpoint(v.label, ch.info.Addr, func() []int { return []int{ch.info.PID} }, ch.info.Stats)
		r.ep.cpu = statsCPU(r.ep, ch.info.PID)
		if err := check(r.ep, passLoads["1k"]); err != nil {
			return nil, nil, fmt.Errorf("sidecar, tracing %s: %w", v.label, err)
		}
	}
	for _, l := range c.traceLoads {
		progress(logw, "tracing: %s at %d req/s, off / not sampled / always on", l, c.traceRate)
		var ts []target
		for _, r := range rs {
			ts = append(ts, target{r.v.label, r.ep, passLoads[l]})
		}
		g := runGroup(fmt.Sprintf("tracing/%s/%d", l, c.traceRate), ts, c.traceRate, 0, c.warm, c.dur, c.pairs)
		res.Rows = append(res.Rows, tracingRowOf(l, g))
		for _, rep := range g.Reps {
			for _, s := range rep {
				res.Requests[s.Target] += s.Requests
			}
		}
		groups = append(groups, g)
	}
	if c.profileDir != "" {
		for _, r := range rs {
			path := filepath.Join(c.profileDir, "sidecar-tracing-"+r.v.label+"-1k.pprof")
			progress(logw, "tracing: profile %s", path)
			profile(r.ep, path, target{r.v.label, r.ep, passLoads["1k"]}, c.traceRate, 0, c.profileDur)
		}
	}
	stopAll() // flushes the always-on child's queued spans
	for _, r := range rs {
		res.Spans[r.v.label] = r.sink.spans.Load()
		res.Exports[r.v.label] = r.sink.posts.Load()
		res.BadPosts[r.v.label] = r.sink.bad.Load()
	}
	return res, groups, nil
}

func tracingRowOf(load string, g *group) tracingRow {
	row := tracingRow{Load: load, Rate: g.Rate, CPU: map[string]float64{}, Ratio: map[string]float64{},
		P50: map[string]float64{}, P99: map[string]float64{}, Errors: g.errors(), Pooled: map[string]float64{}, PooledRatio: map[string]float64{}}
	for i, name := range g.Targets {
		if p, ok := g.pooledCPU(i); ok {
			row.Pooled[name] = p
		}
		row.CPU[name] = g.med(func(r []runStats) float64 { return r[i].CPUPerReq })
		row.P50[name] = g.med(func(r []runStats) float64 { return r[i].P50 })
		row.P99[name] = g.med(func(r []runStats) float64 { return r[i].P99 })
	}
	off := g.idx("off")
	for i, name := range g.Targets {
		if i == off {
			continue
		}
		row.Ratio[name+"/off"] = g.med(func(r []runStats) float64 {
			if r[off].CPUPerReq == 0 {
				return 0
			}
			return r[i].CPUPerReq / r[off].CPUPerReq
		})
		if p := row.Pooled["off"]; p > 0 {
			row.PooledRatio[name+"/off"] = row.Pooled[name] / p
		}
	}
	return row
}

func (t *tracingResult) evaluate(add func(target, measured string, ok bool), note func(target, measured string)) {
	for _, row := range t.Rows {
		v := row.Ratio["not-sampled/off"]
		add(fmt.Sprintf("tracing on, not sampled: CPU per pass-through %s request @%d ≤ 1.10× off", row.Load, row.Rate),
			fmt.Sprintf("%.3f× (medians %.1f vs %.1f µs; pooled over the rounds %.3f×)", v, row.CPU["not-sampled"], row.CPU["off"], row.PooledRatio["not-sampled/off"]),
			v > 0 && v <= 1.10 && row.Errors == 0)
		note(fmt.Sprintf("tracing, always-on sampling: CPU per pass-through %s request @%d (no target)", row.Load, row.Rate),
			fmt.Sprintf("%.3f× off (medians %.1f vs %.1f µs; pooled %.3f×)", row.Ratio["always-on/off"], row.CPU["always-on"], row.CPU["off"], row.PooledRatio["always-on/off"]))
	}
	add("tracing off or not sampled: no span exported; always on: every request exported",
		fmt.Sprintf("spans received: off %d, not sampled %d, always on %d (%d requests measured)", t.Spans["off"], t.Spans["not-sampled"], t.Spans["always-on"], t.Requests["always-on"]),
		t.Spans["off"] == 0 && t.Spans["not-sampled"] == 0 && t.Spans["always-on"] >= int64(t.Requests["always-on"]) && t.BadPosts["always-on"] == 0)
}

func printTracing(w io.Writer, t *tracingResult) {
	fmt.Fprintf(w, "\nTracing: pass-through, open loop at %d req/s; CPU µs per request (%s)\n", t.Rate, t.CPUSource)
	var b bytes.Buffer
	fmt.Fprintln(&b, "load\toff\tnot sampled\talways on\tnot-sampled/off\talways-on/off\tpooled: not-sampled/off\talways-on/off\tp50 ms off\tnot sampled\talways on\tp99 ms off\tnot sampled\talways on\terrors\t")
	for _, x := range t.Rows {
		fmt.Fprintf(&b, "%s\t%.1f\t%.1f\t%.1f\t%.3f\t%.3f\t%.3f\t%.3f\t%.3f\t%.3f\t%.3f\t%.3f\t%.3f\t%.3f\t%d\t\n", x.Load, x.CPU["off"], x.CPU["not-sampled"], x.CPU["always-on"],
			x.Ratio["not-sampled/off"], x.Ratio["always-on/off"], x.PooledRatio["not-sampled/off"], x.PooledRatio["always-on/off"], x.P50["off"], x.P50["not-sampled"], x.P50["always-on"],
			x.P99["off"], x.P99["not-sampled"], x.P99["always-on"], x.Errors)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight|tabwriter.Debug)
	_, _ = tw.Write(b.Bytes())
	tw.Flush()
	fmt.Fprintf(w, "OTLP sinks: spans received off %d, not sampled %d, always on %d (in %d export requests; %d rejected); requests measured per child %d\n",
		t.Spans["off"], t.Spans["not-sampled"], t.Spans["always-on"], t.Exports["always-on"], t.BadPosts["always-on"], t.Requests["always-on"])
}
