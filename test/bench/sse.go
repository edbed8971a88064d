package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"
)

// sseStats is the delay between the upstream's flush of an event (its wall
// clock, written into the event) and the event's arrival at the client.
type sseStats struct {
	Target string  `json:"target"`
	Events int     `json:"events"`
	Lost   int     `json:"lost"`
	P50    float64 `json:"p50_ms"`
	P99    float64 `json:"p99_ms"`
	Max    float64 `json:"max_ms"`
}

// sseProbe opens streams concurrent event streams of events events, gap
// apart, and measures each event's delay.
func sseProbe(ep *endpoint, streams, events int, gap time.Duration) sseStats {
	var (
		mu     sync.Mutex
		delays []time.Duration
		lost   int
		wg     sync.WaitGroup
	)
	url := ep.base + "/bench/sse?n=" + strconv.Itoa(events) + "&gap=" + gap.String()
	for i := 0; i < streams; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got := 0
			var local []time.Duration
			defer func() {
				mu.Lock()
				delays = append(delays, local...)
				lost += events - got
				mu.Unlock()
			}()
			resp, err := ep.client.Get(url)
			if err != nil {
				return
			}
			defer resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				return
			}
			sc := bufio.NewScanner(resp.Body)
			for sc.Scan() {
				line := sc.Bytes()
				data, ok := bytes.CutPrefix(line, []byte("data: "))
				if !ok {
					continue
				}
				now := time.Now().UnixNano()
				var ev struct {
					T int64 `json:"t"`
				}
				if json.Unmarshal(data, &ev) != nil {
					continue
				}
				got++
				local = append(local, time.Duration(now-ev.T))
			}
		}()
	}
	wg.Wait()
	slices.Sort(delays)
	st := sseStats{Target: ep.name, Events: len(delays), Lost: lost,
		P50: ms(quantile(delays, 0.5)), P99: ms(quantile(delays, 0.99))}
	if len(delays) > 0 {
		st.Max = ms(delays[len(delays)-1])
	}
	return st
}
