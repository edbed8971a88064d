package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"slices"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/bailinghub/knowledge-sidecar/ledger"
	"github.com/bailinghub/knowledge-sidecar/sharedredis"
)

// The ledger section (issue 23, "Done when"): a turn's ledger operation —
// Reserve of a fresh turn (random session, route and ids), the same-mode
// Reserve of its retry, then Release of both attempts, as a turn whose Core
// call failed twice does — against a single Redis node and a Redis Cluster,
// each built by sharedredis.New and ledger.NewRedis as the sidecar builds it, at one fixed
// open-loop rate in interleaved rounds. Latency is measured from each op's
// scheduled start (no coordinated omission). Every key carries a prefix
// unique to the run, each op releases what it reserved, and the records have
// a one-minute TTL besides; nothing is ever flushed.

// ledgerTarget is one Redis under test.
type ledgerTarget struct {
	label, mode, url string
}

// ledgerResult is the section's outcome.
type ledgerResult struct {
	Rate    int    `json:"rate_rps"`
	RoundMS int64  `json:"round_ms"`
	Pairs   int    `json:"pairs"`
	Op      string `json:"op"`
	// Skipped says why the section did not run ("" when it ran).
	Skipped string `json:"skipped,omitempty"`
	// Per target: medians over the rounds of each round's percentiles (ms).
	P50  map[string]float64 `json:"p50_ms"`
	P99  map[string]float64 `json:"p99_ms"`
	P999 map[string]float64 `json:"p999_ms"`
	// P99Ratio is the median of the per-pair ratios cluster p99 / single p99.
	P99Ratio float64 `json:"p99_ratio_cluster_single"`
	// Pooled percentiles over every op of every round, a cross-check.
	PooledP99 map[string]float64 `json:"pooled_p99_ms"`
	Ops       map[string]int     `json:"ops"`
	Errors    map[string]int     `json:"errors"`
	FirstErr  string             `json:"first_error,omitempty"`
	Rounds    []ledgerRound      `json:"rounds"`
}

type ledgerRound struct {
	Target string  `json:"target"`
	Ops    int     `json:"ops"`
	Errors int     `json:"errors"`
	Late   int     `json:"late_starts"` // ops the generator started > 1 ms after schedule
	P50    float64 `json:"p50_ms"`
	P99    float64 `json:"p99_ms"`
	P999   float64 `json:"p999_ms"`
	Max    float64 `json:"max_ms"`
	lat    []time.Duration
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// ledgerOp is one turn's ledger traffic on a fresh key.
func ledgerOp(ctx context.Context, l *ledger.Redis) error {
	id := randHex(8)
	k := ledger.Key{SessionID: "s-" + randHex(8), Route: "r-" + randHex(4), ConversationID: "c-" + id, TurnID: "t-" + id, UserMessageID: "m-" + id}
	const mode = "on_demand"
	first, err := l.Reserve(ctx, k, mode)
	if err != nil {
		return fmt.Errorf("reserve: %w", err)
	}
	if !first.Created {
		return fmt.Errorf("reserve of a fresh key did not create it")
	}
	retry, err := l.Reserve(ctx, k, mode)
	if err != nil {
		return fmt.Errorf("retry reserve: %w", err)
	}
	if retry.Created {
		return fmt.Errorf("retry reserve created the records anew")
	}
	if err := l.Release(ctx, k, mode, retry); err != nil {
		return fmt.Errorf("release retry: %w", err)
	}
	if err := l.Release(ctx, k, mode, first); err != nil {
		return fmt.Errorf("release: %w", err)
	}
	return nil
}

// ledgerRun runs ops at rate for d, open loop, and returns the round.
func ledgerRun(l *ledger.Redis, label string, rate int, d time.Duration) (ledgerRound, string) {
	n := int(float64(rate) * d.Seconds())
	interval := time.Second / time.Duration(rate)
	r := ledgerRound{Target: label, Ops: n, lat: make([]time.Duration, n)}
	errs := make([]error, n)
	var wg sync.WaitGroup
	start := time.Now()
	for i := 0; i < n; i++ {
		at := start.Add(time.Duration(i) * interval)
		if w := time.Until(at); w > 0 {
			time.Sleep(w) // pacing the generator, not synchronization
		} else if -w > time.Millisecond {
			r.Late++
		}
		wg.Add(1)
		go func(i int, at time.Time) {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			errs[i] = ledgerOp(ctx, l)
			cancel()
			r.lat[i] = time.Since(at)
		}(i, at)
	}
	wg.Wait()
	first := ""
	for _, e := range errs {
		if e != nil {
			r.Errors++
			if first == "" {
				first = e.Error()
			}
		}
	}
	slices.Sort(r.lat)
	r.P50, r.P99, r.P999 = pctMS(r.lat, 0.50), pctMS(r.lat, 0.99), pctMS(r.lat, 0.999)
	if n > 0 {
		r.Max = ms(r.lat[n-1])
	}
	return r, first
}

// pctMS is the nearest-rank percentile of sorted, in ms.
func pctMS(sorted []time.Duration, q float64) float64 { return ms(quantile(sorted, q)) }

// runLedger measures the single node against the cluster.
func runLedger(c config, logw io.Writer) *ledgerResult {
	res := &ledgerResult{Rate: c.ledgerRate, RoundMS: c.ledgerDur.Milliseconds(), Pairs: c.pairs,
		Op:  "Reserve (fresh key) + same-mode Reserve (retry) + Release × 2, random session/route/ids",
		P50: map[string]float64{}, P99: map[string]float64{}, P999: map[string]float64{}, PooledP99: map[string]float64{},
		Ops: map[string]int{}, Errors: map[string]int{}}
	if c.redisCluster == "" {
		res.Skipped = "no cluster URL: pass --redis-cluster or set KS_TEST_REDIS_CLUSTER_URL (scripts/bench-ledger.sh starts one)"
		progress(logw, "ledger: skipped: %s", res.Skipped)
		return res
	}
	if c.redisSingle == "" {
		res.Skipped = "no single-node URL: pass --redis-single or set KS_TEST_REDIS_URL"
		progress(logw, "ledger: skipped: %s", res.Skipped)
		return res
	}
	sharedredis.QuietLogs()
	prefix := "ks:bench:ledger:" + randHex(6) + ":"
	targets := []ledgerTarget{{"single", sharedredis.ModeSingle, c.redisSingle}, {"cluster", sharedredis.ModeCluster, c.redisCluster}}
	leds := map[string]*ledger.Redis{}
	for _, t := range targets {
		var l *ledger.Redis
		rc, err := sharedredis.New(sharedredis.Options{URL: t.url, Mode: t.mode})
		if err == nil {
			if l, err = ledger.NewRedis(rc, ledger.RedisOptions{TTL: time.Minute, KeyPrefix: prefix}); err != nil {
				rc.Close()
			}
		}
		if err == nil {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			err = l.Ping(ctx)
			cancel()
		}
		if err != nil {
			res.Skipped = fmt.Sprintf("%s Redis: %v", t.label, err) // errors never carry the URL
			progress(logw, "ledger: skipped: %s", res.Skipped)
			for _, l := range leds {
				l.Close()
			}
			return res
		}
		defer l.Close()
		leds[t.label] = l
	}
	progress(logw, "ledger: single vs cluster, %d ops/s, %d pairs × %s (+ %s warm-up each)", c.ledgerRate, c.pairs, c.ledgerDur, c.warm)
	for _, t := range targets {
		ledgerRun(leds[t.label], t.label, c.ledgerRate, c.warm)
	}
	pooled := map[string][]time.Duration{}
	var ratios []float64
	perTarget := map[string][]ledgerRound{}
	for i := 0; i < c.pairs; i++ {
		order := targets
		if i%2 == 1 {
			order = []ledgerTarget{targets[1], targets[0]}
		}
		got := map[string]ledgerRound{}
		for _, t := range order {
			r, first := ledgerRun(leds[t.label], t.label, c.ledgerRate, c.ledgerDur)
			if first != "" && res.FirstErr == "" {
				res.FirstErr = t.label + ": " + first
			}
			got[t.label] = r
			perTarget[t.label] = append(perTarget[t.label], r)
			pooled[t.label] = append(pooled[t.label], r.lat...)
			res.Ops[t.label] += r.Ops
			res.Errors[t.label] += r.Errors
			res.Rounds = append(res.Rounds, r)
		}
		if s := got["single"].P99; s > 0 {
			ratios = append(ratios, got["cluster"].P99/s)
		}
	}
	for _, t := range targets {
		var p50, p99, p999 []float64
		for _, r := range perTarget[t.label] {
			p50, p99, p999 = append(p50, r.P50), append(p99, r.P99), append(p999, r.P999)
		}
		res.P50[t.label], res.P99[t.label], res.P999[t.label] = median(p50), median(p99), median(p999)
		all := pooled[t.label]
		slices.Sort(all)
		res.PooledP99[t.label] = pctMS(all, 0.99)
	}
	res.P99Ratio = median(ratios)
	return res
}

func (l *ledgerResult) evaluate(add func(target, measured string, ok bool), skip func(target, why string)) {
	const target = "ledger on cluster: p99 ≤ 1.5× single node"
	if l.Skipped != "" {
		skip(target, l.Skipped)
		return
	}
	errs := l.Errors["single"] + l.Errors["cluster"]
	add(fmt.Sprintf("%s (turn's ledger op @%d ops/s)", target, l.Rate),
		fmt.Sprintf("%.2f× (median of %d per-round ratios; p99 cluster %.3f ms vs single %.3f ms; pooled %.3f vs %.3f ms; errors %d)",
			l.P99Ratio, l.Pairs, l.P99["cluster"], l.P99["single"], l.PooledP99["cluster"], l.PooledP99["single"], errs),
		l.P99Ratio > 0 && l.P99Ratio <= 1.5 && errs == 0)
}

func printLedger(w io.Writer, l *ledgerResult) {
	if l.Skipped != "" {
		fmt.Fprintf(w, "\nLedger on Redis Cluster: skipped (%s)\n", l.Skipped)
		return
	}
	fmt.Fprintf(w, "\nLedger on Redis Cluster: %s; open loop at %d ops/s, %d interleaved pairs × %d ms\n", l.Op, l.Rate, l.Pairs, l.RoundMS)
	var b bytes.Buffer
	fmt.Fprintln(&b, "redis\tp50 ms\tp99 ms\tp99.9 ms\tpooled p99 ms\tops\terrors\t")
	for _, t := range []string{"single", "cluster"} {
		fmt.Fprintf(&b, "%s\t%.3f\t%.3f\t%.3f\t%.3f\t%d\t%d\t\n", t, l.P50[t], l.P99[t], l.P999[t], l.PooledP99[t], l.Ops[t], l.Errors[t])
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight|tabwriter.Debug)
	_, _ = tw.Write(b.Bytes())
	tw.Flush()
	fmt.Fprintf(w, "p99 cluster/single: %.2f× (median of per-round ratios); rounds:", l.P99Ratio)
	for _, r := range l.Rounds {
		fmt.Fprintf(w, " %s %.3f", r.Target, r.P99)
	}
	fmt.Fprintln(w)
	if l.FirstErr != "" {
		fmt.Fprintf(w, "  first error: %s\n", l.FirstErr)
	}
}
