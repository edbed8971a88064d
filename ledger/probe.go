package ledger

import (
	"context"
)

// Probe checks that Redis answers and accepts the ledger's Lua scripts
// (SCRIPT LOAD: a Redis with scripting disabled or an ACL that forbids it
// fails here rather than on the first turn). Errors name no address.
func (r *Redis) Probe(ctx context.Context) error {
	if err := r.Ping(ctx); err != nil {
		return err
	}
	opCtx, cancel := context.WithTimeout(ctx, r.opTimeout)
	defer cancel()
	if err := reserveScript.Load(opCtx, r.client).Err(); err != nil {
		return r.fail(ctx, "script load", err)
	}
	if err := releaseScript.Load(opCtx, r.client).Err(); err != nil {
		return r.fail(ctx, "script load", err)
	}
	return nil
}
