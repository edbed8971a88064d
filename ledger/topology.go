package ledger

import (
	"context"
	"net"
	"sort"
	"sync"

	"github.com/redis/go-redis/v9"
)

// Topology is what the client found, for `--probe`.
type Topology struct {
	// Mode is single, cluster or sentinel.
	Mode string
	// Primaries are the cluster's primaries (host:port; cluster mode).
	Primaries []string
	// Replicas counts the cluster's replicas (cluster mode).
	Replicas int
	// Master is the primary the sentinels name (sentinel mode).
	Master string
}

// Mode is the Redis mode the ledger was built with.
func (r *Redis) Mode() string { return r.mode }

// Topology asks Redis which nodes serve the ledger (cluster: the primaries
// from CLUSTER SLOTS; sentinel: the current primary). Its result names
// addresses: it is for the operator's probe only, never for logs of
// requests.
func (r *Redis) Topology(ctx context.Context) (Topology, error) {
	opCtx, cancel := context.WithTimeout(ctx, r.opTimeout)
	defer cancel()
	t := Topology{Mode: r.mode}
	switch c := r.client.(type) {
	case *redis.ClusterClient:
		var mu sync.Mutex
		err := c.ForEachMaster(opCtx, func(ctx context.Context, n *redis.Client) error {
			mu.Lock()
			t.Primaries = append(t.Primaries, n.Options().Addr)
			mu.Unlock()
			return nil
		})
		if err != nil {
			return t, r.fail(ctx, "cluster nodes", err)
		}
		err = c.ForEachSlave(opCtx, func(ctx context.Context, n *redis.Client) error {
			mu.Lock()
			t.Replicas++
			mu.Unlock()
			return nil
		})
		if err != nil {
			return t, r.fail(ctx, "cluster nodes", err)
		}
		sort.Strings(t.Primaries)
	case *redis.Client:
		if r.mode == ModeSentinel {
			// The failover client dials the primary the sentinels name;
			// ROLE on it confirms it is one.
			role, err := c.Do(opCtx, "ROLE").Slice()
			if err != nil {
				return t, r.fail(ctx, "role", err)
			}
			if len(role) > 0 && role[0] == "master" {
				t.Master = r.sentinelMaster(opCtx)
			}
		}
	}
	return t, nil
}

// sentinelMaster asks the sentinels, in turn, for the primary's address;
// "" when none answers.
func (r *Redis) sentinelMaster(ctx context.Context) string {
	o := r.sentinels
	if o == nil {
		return ""
	}
	for _, addr := range o.SentinelAddrs {
		sc := redis.NewSentinelClient(&redis.Options{Addr: addr, Username: o.SentinelUsername, Password: o.SentinelPassword,
			TLSConfig: o.TLSConfig, DialTimeout: DefaultDialTimeout, ReadTimeout: r.opTimeout, WriteTimeout: r.opTimeout,
			DisableIdentity: true, MaxRetries: -1})
		a, err := sc.GetMasterAddrByName(ctx, o.MasterName).Result()
		sc.Close()
		if err == nil && len(a) == 2 {
			return net.JoinHostPort(a[0], a[1])
		}
	}
	return ""
}

// RecordKeys are the Redis keys of k's records (the turn record, the user
// message record, their attempt counts), all in one cluster slot. For
// operators' debugging and the scale tests (which primary holds a turn).
func (r *Redis) RecordKeys(k Key) []string { return r.keys(k) }
