package main

// What a child process holds and costs while the load runs: goroutines,
// load average, the RSS soak, CPU profiles.

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"
)

func goroutines(ep *endpoint) int {
	if ep.stats == "" {
		return 0
	}
	resp, err := ep.client.Get("http://" + ep.stats + "/stats")
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	var v struct {
		Goroutines int `json:"goroutines"`
	}
	if json.NewDecoder(resp.Body).Decode(&v) != nil {
		return -1
	}
	return v.Goroutines
}

func mib(b int64) float64 { return float64(b*10/(1<<20)) / 10 }

func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}

// soak runs the sidecar at rate for d, sampling its RSS every 5 s.
func soak(ep *endpoint, pid, rate int, d time.Duration) *soakResult {
	s := &soakResult{Rate: rate, Seconds: int(d.Seconds())}
	done := make(chan runStats, 1)
	go func() { done <- load(target{"sidecar", ep, passLoads["1k"]}, rate, 0, d) }()
	tick := time.NewTicker(5 * time.Second)
	defer tick.Stop()
	for {
		select {
		case rs := <-done:
			s.Errors = rs.Errors
			s.P99 = rs.P99
			s.finish()
			return s
		case <-tick.C:
			s.RSSMiB = append(s.RSSMiB, mib(rss([]int{pid})))
		}
	}
}

// namedSpec is a request to profile, named for its profile file.
type namedSpec struct {
	name string
	spec reqSpec
}

// profile takes a CPU profile of the sidecar while loading it for d.
func profile(ep *endpoint, path string, t target, rate, conc int, d time.Duration) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		load(t, rate, conc, d+time.Second)
	}()
	c := &http.Client{Timeout: d + 15*time.Second}
	resp, err := c.Get(fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", ep.stats, max(1, int(d.Seconds()))))
	if err == nil {
		if f, ferr := os.Create(path); ferr == nil {
			_, _ = io.Copy(f, resp.Body)
			f.Close()
		}
		resp.Body.Close()
	}
	<-done
}
