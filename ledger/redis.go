package ledger

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bailinghub/knowledge-sidecar/sharedredis"
)

// DefaultKeyPrefix starts every record key (RedisOptions.KeyPrefix).
const DefaultKeyPrefix = "ks:turnmode:v1:"

// RedisOptions configures the shared ledger on a sharedredis.Client (which
// carries the URL, mode, TLS and timeouts).
type RedisOptions struct {
	// TTL is how long a record lives; ≤ 0 → DefaultTTL (24h).
	TTL time.Duration
	// KeyPrefix starts every record key; "" → DefaultKeyPrefix ("ks:turnmode:v1:").
	// It must not contain '{' or '}': the keys carry their own hash tag.
	KeyPrefix string
	// WaitReplicas > 0 sends WAIT WaitReplicas WaitTimeout after each
	// reservation, on the reservation's connection, so the record is on
	// that many replicas before Core sees the turn; fewer within the
	// timeout fails the reservation (ErrUnavailable). 0 (the default): no
	// WAIT.
	WaitReplicas int
	// WaitTimeout bounds that WAIT; ≤ 0 → the client's OpTimeout / 2.
	WaitTimeout time.Duration
}

// Redis is the ledger shared by replicas. Each operation is one Lua script,
// so the check of both records and the write (or compare-and-delete) of both
// is atomic in Redis. All keys of a turn carry one hash tag of (session,
// route), so they stay in one Redis Cluster slot (no CROSSSLOT) while
// sessions spread over the primaries.
type Redis struct {
	conn         *sharedredis.Client
	client       redis.UniversalClient // conn.Redis()
	ttl          time.Duration
	prefix       string
	opTimeout    time.Duration
	waitReplicas int
	waitTimeout  time.Duration
}

var _ Ledger = (*Redis)(nil)

// Each record is two keys: the record itself, whose value is the mode (as
// earlier versions wrote it), and beside it an attempt count, a hash
// {g: generation, n: attempts not released}. A record without the count
// (written by an older version) is kept for its TTL: it is never released.

// reserveScript: KEYS = {turn record, user message record, turn count, user
// message count}; ARGV = {mode, ttl ms, new generation of the turn record,
// of the user message record}. Returns {0} on a conflict (nothing written);
// otherwise both records now hold mode and it returns {2 when neither
// existed before (created) else 1, turn generation, message generation}.
var reserveScript = redis.NewScript(`
local a = redis.call('GET', KEYS[1])
local b = redis.call('GET', KEYS[2])
if (a and a ~= ARGV[1]) or (b and b ~= ARGV[1]) then
  return {0}
end
local out = {2, '', ''}
if a or b then
  out[1] = 1
end
local held = {a, b}
for i = 1, 2 do
  local c = KEYS[i + 2]
  redis.call('SET', KEYS[i], ARGV[1], 'PX', ARGV[2])
  if not held[i] then
    redis.call('DEL', c)
    redis.call('HSET', c, 'g', ARGV[i + 2], 'n', 1)
    out[i + 1] = ARGV[i + 2]
  elseif redis.call('EXISTS', c) == 1 then
    redis.call('HINCRBY', c, 'n', 1)
    out[i + 1] = redis.call('HGET', c, 'g')
  end
  if redis.call('EXISTS', c) == 1 then
    redis.call('PEXPIRE', c, ARGV[2])
  end
end
return out
`)

// releaseScript: KEYS as above; ARGV = {mode, turn generation, message
// generation}. Drops one attempt from each record that still holds mode
// and the generation; removes a record (and its count) when none is left.
// Returns how many records were removed.
var releaseScript = redis.NewScript(`
local n = 0
for i = 1, 2 do
  local g = ARGV[i + 1]
  local c = KEYS[i + 2]
  if g ~= '' and redis.call('GET', KEYS[i]) == ARGV[1] and redis.call('HGET', c, 'g') == g then
    if redis.call('HINCRBY', c, 'n', -1) <= 0 then
      redis.call('DEL', KEYS[i], c)
      n = n + 1
    end
  end
end
return n
`)

// NewRedis builds the shared ledger on c, whose OpTimeout bounds every
// operation (Reserve, Release, Ping) including retries. It does not
// connect: call Ping to check reachability (e.g. at startup). The ledger
// takes c over: its Close closes c.
func NewRedis(c *sharedredis.Client, o RedisOptions) (*Redis, error) {
	if c == nil {
		return nil, errors.New("ledger: no redis client")
	}
	if o.TTL <= 0 {
		o.TTL = DefaultTTL
	}
	if o.TTL < time.Millisecond {
		o.TTL = time.Millisecond
	}
	if o.KeyPrefix == "" {
		o.KeyPrefix = DefaultKeyPrefix
	}
	if strings.ContainsAny(o.KeyPrefix, "{}") {
		return nil, errors.New("ledger: redis key prefix must not contain '{' or '}'")
	}
	if o.WaitReplicas < 0 {
		return nil, errors.New("ledger: redis wait replicas must not be negative")
	}
	if o.WaitTimeout <= 0 {
		o.WaitTimeout = c.OpTimeout() / 2
	}
	return &Redis{
		conn:         c,
		client:       c.Redis(),
		ttl:          o.TTL,
		prefix:       o.KeyPrefix,
		opTimeout:    c.OpTimeout(),
		waitReplicas: o.WaitReplicas,
		waitTimeout:  o.WaitTimeout,
	}, nil
}

// keys returns the Redis keys of the turn record and the user message
// record, then their attempt counts.
func (r *Redis) keys(k Key) []string {
	slot := k.slotHash()
	t, m := k.turnHash(), k.messageHash()
	base := r.prefix + "{" + hex.EncodeToString(slot[:8]) + "}:"
	tk, mk := base+"t:"+hex.EncodeToString(t[:]), base+"m:"+hex.EncodeToString(m[:])
	return []string{tk, mk, tk + ":n", mk + ":n"}
}

// newGeneration names a record created now: random, so replicas never
// hand out the same one.
func newGeneration() string {
	var b [8]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	return hex.EncodeToString(b[:])
}

// Reserve implements Ledger.
func (r *Redis) Reserve(ctx context.Context, k Key, mode string) (Reservation, error) {
	if err := k.validate(mode); err != nil {
		return Reservation{}, err
	}
	opCtx, cancel := context.WithTimeout(ctx, r.opTimeout)
	defer cancel()
	keys, args := r.keys(k), []any{mode, r.ttl.Milliseconds(), newGeneration(), newGeneration()}
	var v []any
	var err error
	if r.waitReplicas > 0 {
		v, err = r.reserveAndWait(opCtx, keys, args)
	} else {
		v, err = reserveScript.Run(opCtx, r.client, keys, args...).Slice()
	}
	if err != nil {
		return Reservation{}, r.fail(ctx, "reserve", err)
	}
	bad := fmt.Errorf("ledger: reserve: unexpected script reply: %w", ErrUnavailable)
	if len(v) == 0 {
		return Reservation{}, bad
	}
	n, _ := v[0].(int64)
	if n == 0 {
		return Reservation{}, ErrConflict
	}
	if (n != 1 && n != 2) || len(v) != 3 {
		return Reservation{}, bad
	}
	res := Reservation{Created: n == 2}
	for i := range res.tokens {
		res.tokens[i], _ = v[i+1].(string)
	}
	return res, nil
}

// Release implements Ledger.
func (r *Redis) Release(ctx context.Context, k Key, mode string, res Reservation) error {
	if err := k.validate(mode); err != nil {
		return err
	}
	if res.tokens == [2]string{} {
		return nil // nothing this attempt could release
	}
	opCtx, cancel := context.WithTimeout(ctx, r.opTimeout)
	defer cancel()
	if err := releaseScript.Run(opCtx, r.client, r.keys(k), mode, res.tokens[0], res.tokens[1]).Err(); err != nil {
		return r.fail(ctx, "release", err)
	}
	return nil
}

// Ping checks that Redis answers, within OpTimeout: the shared client's
// Ping, its error (a reason from a closed set, never the server's address)
// wrapped as ErrUnavailable.
func (r *Redis) Ping(ctx context.Context) error {
	if err := r.conn.Ping(ctx); err != nil {
		return fmt.Errorf("ledger: %w: %w", ErrUnavailable, err)
	}
	return nil
}

// Close closes the client's connections.
func (r *Redis) Close() error {
	if err := r.conn.Close(); err != nil {
		return fmt.Errorf("ledger: close: %w", ErrUnavailable)
	}
	return nil
}

// fail turns a go-redis error into ErrUnavailable. The driver's own message is
// dropped (it names the server address); only a reason from a closed set is
// kept. When the caller's context ended, its error is wrapped as well.
func (r *Redis) fail(ctx context.Context, op string, err error) error {
	r.conn.NoteFailure(ctx, err)
	if ctxErr := ctx.Err(); ctxErr != nil {
		return fmt.Errorf("ledger: %s: %w: %w", op, ErrUnavailable, ctxErr)
	}
	return fmt.Errorf("ledger: %s: %s: %w", op, reason(err), ErrUnavailable)
}

func reason(err error) string {
	if errors.Is(err, errWaitShort) {
		return "replicas did not acknowledge"
	}
	return sharedredis.Reason(err)
}

// RecordKeys are the Redis keys of k's records (the turn record, the user
// message record, their attempt counts), all in one cluster slot. For
// operators' debugging and the scale tests (which primary holds a turn).
func (r *Redis) RecordKeys(k Key) []string { return r.keys(k) }
