package ledger

import (
	"context"
	"strings"

	"github.com/redis/go-redis/v9"
)

// reserveAndWait runs the reservation script and then WAIT on the same
// connection of the primary that owns the keys (WAIT counts the replicas
// that acknowledged that connection's writes), in one round trip. A WAIT
// that times out with fewer replicas is not an error: it narrows the
// window in which a failover can lose the record, it cannot close it.
func (r *Redis) reserveAndWait(ctx context.Context, keys []string, args []any) ([]any, error) {
	node, err := r.primaryFor(ctx, keys[0])
	if err != nil {
		return nil, err
	}
	run := func() (*redis.Cmd, error) {
		var eval *redis.Cmd
		_, err := node.Pipelined(ctx, func(p redis.Pipeliner) error {
			eval = p.EvalSha(ctx, reserveScript.Hash(), keys, args...)
			p.Do(ctx, "WAIT", r.waitReplicas, r.waitTimeout.Milliseconds())
			return nil
		})
		if err != nil && eval.Err() == nil {
			err = nil // the WAIT failed, the reservation is written
		}
		return eval, err
	}
	eval, err := run()
	if err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT") {
		if err := reserveScript.Load(ctx, node).Err(); err != nil {
			return nil, err
		}
		eval, err = run()
	}
	if err != nil {
		return nil, err
	}
	return eval.Slice()
}

// primaryFor is the client of the primary that owns key: the cluster's
// node for the key's slot, else the one client.
func (r *Redis) primaryFor(ctx context.Context, key string) (redis.Cmdable, error) {
	if c, ok := r.client.(*redis.ClusterClient); ok {
		return c.MasterForKey(ctx, key)
	}
	return r.client, nil
}
