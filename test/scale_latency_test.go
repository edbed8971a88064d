package test

import (
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bailinghub/knowledge-sidecar/internal/testkit"
	"github.com/bailinghub/knowledge-sidecar/internal/testkit/testdb"
	"github.com/bailinghub/knowledge-sidecar/ledger"
	"github.com/bailinghub/knowledge-sidecar/sharedredis"
)

// reserveLatencies times n reservations (new turns of one session each,
// so the keys spread over the slots) and returns p50 and p99.
func reserveLatencies(t *testing.T, l *ledger.Redis, n int) (p50, p99 time.Duration) {
	t.Helper()
	d := make([]time.Duration, 0, n)
	tag := randomToken(t, "")[:8]
	for i := range n {
		k := ledger.Key{SessionID: fmt.Sprintf("lat-%s-%d", tag, i), Route: "kb-multi", ConversationID: "c", TurnID: "t", UserMessageID: "m"}
		start := time.Now()
		if _, err := l.Reserve(t.Context(), k, "inline"); err != nil {
			t.Fatalf("reserve %d: %v", i, err)
		}
		d = append(d, time.Since(start))
	}
	slices.Sort(d)
	return d[n/2], d[n*99/100]
}

// TestScaleLedgerLatency measures one turn's ledger operation (Reserve) on
// the single Redis, the cluster and the sentinel set, and the cost of
// ledger.redis_wait_replicas 1 (sentinel: one replica). Numbers go to the
// test log (docs/scaling.md quotes a run); with KS_SCALE_LATENCY_CHECK=1 the
// issue's bar is enforced: the cluster's p99 within 1.5× the single node's
// (plus 1 ms of scheduling noise on a shared machine).
func TestScaleLedgerLatency(t *testing.T) {
	const n = 400
	single := sharedRedisLedger(t, testdb.RedisPrefix(t))
	clusterURL, sentinelURL := topoURL(t, "KS_TEST_REDIS_CLUSTER_URL"), topoURL(t, "KS_TEST_REDIS_SENTINEL_URL")
	cp := testdb.RedisPrefix(t)
	deleteTopoKeys(t, rawTopo(t, sharedredis.ModeCluster, clusterURL), cp)
	cluster := topoLedger(t, sharedredis.ModeCluster, clusterURL, cp)
	sp := testdb.RedisPrefix(t)
	deleteTopoKeys(t, rawTopo(t, sharedredis.ModeSentinel, sentinelURL), sp)
	sentinel := topoLedger(t, sharedredis.ModeSentinel, sentinelURL, sp)
	waited := topoLedgerWait(t, sharedredis.ModeSentinel, sentinelURL, sp, 1)

	// After a failover test the set may still lack a replica for WAIT
	// (Sentinel turns the old primary into one about 10s after the switch,
	// and a replica that just resynced answers no WAIT until it has caught
	// up): wait for the set to be whole, then for WAIT to answer.
	o, err := redis.ParseFailoverURL(sentinelURL)
	if err != nil {
		t.Fatal(err)
	}
	sent := redis.NewSentinelClient(&redis.Options{Addr: o.SentinelAddrs[0]})
	t.Cleanup(func() { sent.Close() })
	if !testkit.Poll(30*time.Second, func() bool {
		if !sentinelWhole(t.Context(), sent, o.MasterName) {
			return false
		}
		k := ledger.Key{SessionID: "lat-ready-" + randomToken(t, "")[:8], Route: "kb-multi", ConversationID: "c", TurnID: "t", UserMessageID: "m"}
		_, err := waited.Reserve(t.Context(), k, "inline")
		return err == nil
	}) {
		t.Fatal("the sentinel set has no replica in sync acknowledging WAIT after 30s")
	}
	reserveLatencies(t, single, 50) // warm the pools and the script caches
	reserveLatencies(t, cluster, 50)
	reserveLatencies(t, sentinel, 50)
	reserveLatencies(t, waited, 50)
	s50, s99 := reserveLatencies(t, single, n)
	c50, c99 := reserveLatencies(t, cluster, n)
	f50, f99 := reserveLatencies(t, sentinel, n)
	w50, w99 := reserveLatencies(t, waited, n)
	t.Logf("Reserve over %d turns: single p50 %v p99 %v; cluster p50 %v p99 %v (%.2f× single p99); sentinel p50 %v p99 %v; sentinel + WAIT 1 p50 %v p99 %v",
		n, s50, s99, c50, c99, float64(c99)/float64(s99), f50, f99, w50, w99)
	if os.Getenv("KS_SCALE_LATENCY_CHECK") == "1" && c99 > s99*3/2+time.Millisecond {
		t.Errorf("cluster p99 %v over 1.5× the single node's %v", c99, s99)
	}
}
