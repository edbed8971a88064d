package ledger

import (
	"context"
	"errors"

	"github.com/redis/go-redis/v9"
)

// errWaitShort: WAIT returned before enough replicas acknowledged.
var errWaitShort = errors.New("fewer replicas than ledger.redis_wait_replicas acknowledged the reservation")

// reserveAndWait runs the reservation script and then WAIT on the same
// connection of the primary that owns the keys (WAIT counts the replicas
// that acknowledged that connection's writes). Fewer replicas than asked
// within the timeout is an error (the turn answers 503): the record may
// exist on the primary alone, and a failover could lose it. The record
// stays (bound to its mode until its TTL), so a retry in the other mode is
// still refused while the primary lives. A conflict wrote nothing and does
// not wait.
func (r *Redis) reserveAndWait(ctx context.Context, keys []string, args []any) ([]any, error) {
	node, err := r.primaryFor(ctx, keys[0])
	if err != nil {
		return nil, err
	}
	conn := node.Conn()
	defer conn.Close()
	v, err := reserveScript.Run(ctx, conn, keys, args...).Slice()
	if err != nil {
		return nil, err
	}
	if len(v) == 0 {
		return v, nil
	}
	if n, _ := v[0].(int64); n == 0 {
		return v, nil
	}
	got, err := conn.Do(ctx, "WAIT", r.waitReplicas, r.waitTimeout.Milliseconds()).Int64()
	if err != nil {
		return nil, err
	}
	if got < int64(r.waitReplicas) {
		return nil, errWaitShort
	}
	return v, nil
}

// primaryFor is the client of the primary that owns key: the cluster's
// node for the key's slot, else the one client (single, or the failover
// client that follows the sentinels' primary).
func (r *Redis) primaryFor(ctx context.Context, key string) (*redis.Client, error) {
	switch c := r.client.(type) {
	case *redis.ClusterClient:
		return c.MasterForKey(ctx, key)
	case *redis.Client:
		return c, nil
	}
	return nil, errors.New("ledger: unknown redis client")
}
