package sharedredis

import (
	"context"
	"fmt"
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

// Topology asks Redis which nodes serve the client (cluster: the primaries
// from CLUSTER SLOTS; sentinel: the current primary). Its result names
// addresses: it is for the operator's probe only, never for logs of
// requests.
func (c *Client) Topology(ctx context.Context) (Topology, error) {
	opCtx, cancel := context.WithTimeout(ctx, c.opTimeout)
	defer cancel()
	t := Topology{Mode: c.mode}
	switch rc := c.rdb.(type) {
	case *redis.ClusterClient:
		var mu sync.Mutex
		err := rc.ForEachMaster(opCtx, func(ctx context.Context, n *redis.Client) error {
			mu.Lock()
			t.Primaries = append(t.Primaries, n.Options().Addr)
			mu.Unlock()
			return nil
		})
		if err != nil {
			return t, c.fail(ctx, "cluster nodes", err)
		}
		err = rc.ForEachSlave(opCtx, func(ctx context.Context, n *redis.Client) error {
			mu.Lock()
			t.Replicas++
			mu.Unlock()
			return nil
		})
		if err != nil {
			return t, c.fail(ctx, "cluster nodes", err)
		}
		sort.Strings(t.Primaries)
	case *redis.Client:
		if c.mode == ModeSentinel {
			// The failover client dials the primary the sentinels name;
			// ROLE on it confirms it is one.
			role, err := rc.Do(opCtx, "ROLE").Slice()
			if err != nil {
				return t, c.fail(ctx, "role", err)
			}
			if len(role) > 0 && role[0] == "master" {
				t.Master = c.sentinelMaster(opCtx)
			}
		}
	}
	return t, nil
}

// sentinelMaster asks the sentinels, in turn, for the primary's address;
// "" when none answers.
func (c *Client) sentinelMaster(ctx context.Context) string {
	o := c.sentinels
	if o == nil {
		return ""
	}
	for _, addr := range o.SentinelAddrs {
		sc := redis.NewSentinelClient(&redis.Options{Addr: addr, Username: o.SentinelUsername, Password: o.SentinelPassword,
			TLSConfig: o.TLSConfig, DialTimeout: DefaultDialTimeout, ReadTimeout: c.opTimeout, WriteTimeout: c.opTimeout,
			DisableIdentity: true, MaxRetries: -1})
		a, err := sc.GetMasterAddrByName(ctx, o.MasterName).Result()
		sc.Close()
		if err == nil && len(a) == 2 {
			return net.JoinHostPort(a[0], a[1])
		}
	}
	return ""
}

// fail is a failed operation's error: its kind from a closed set, never
// the driver's message (it names the server address).
func (c *Client) fail(ctx context.Context, op string, err error) error {
	c.NoteFailure(ctx, err)
	if ctxErr := ctx.Err(); ctxErr != nil {
		return fmt.Errorf("redis: %s: %w: %w", op, ErrUnavailable, ctxErr)
	}
	return fmt.Errorf("redis: %s: %s: %w", op, Reason(err), ErrUnavailable)
}
