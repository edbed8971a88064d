package ledger

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

// Defaults of RedisOptions.
const (
	DefaultKeyPrefix   = "ks:turnmode:v1:"
	DefaultDialTimeout = 2 * time.Second
	DefaultOpTimeout   = time.Second
)

// RedisOptions configures the shared ledger.
type RedisOptions struct {
	// URL is redis://[user:password@]host:port/db (or rediss://, unix://).
	// It is a secret: it never appears in errors or logs. Required.
	URL string
	// TTL is how long a record lives; ≤ 0 → DefaultTTL (24h).
	TTL time.Duration
	// KeyPrefix starts every record key; "" → DefaultKeyPrefix ("ks:turnmode:v1:").
	// It must not contain '{' or '}': the keys carry their own hash tag.
	KeyPrefix string
	// DialTimeout bounds connecting; ≤ 0 → DefaultDialTimeout (2s).
	DialTimeout time.Duration
	// OpTimeout bounds every operation (Reserve, Release, Ping) including
	// retries, below the caller's own deadline; ≤ 0 → DefaultOpTimeout (1s).
	OpTimeout time.Duration
}

// Redis is the ledger shared by replicas. Each operation is one Lua script,
// so the check of both records and the write (or compare-and-delete) of both
// is atomic in Redis. Both record keys of a turn carry the same hash tag, so
// they stay in one slot behind cluster-aware proxies.
type Redis struct {
	client    *redis.Client
	ttl       time.Duration
	prefix    string
	opTimeout time.Duration
}

var _ Ledger = (*Redis)(nil)

// reserveScript: KEYS = {turn record, user message record}; ARGV = {mode, ttl ms}.
// Returns 0 on a conflict (nothing written); otherwise both records now hold
// mode and it returns 2 when neither existed before (created), 1 for a retry.
var reserveScript = redis.NewScript(`
local a = redis.call('GET', KEYS[1])
local b = redis.call('GET', KEYS[2])
if (a and a ~= ARGV[1]) or (b and b ~= ARGV[1]) then
  return 0
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
redis.call('SET', KEYS[2], ARGV[1], 'PX', ARGV[2])
if a or b then
  return 1
end
return 2
`)

// releaseScript: KEYS as above; ARGV = {mode}. Deletes each record that still
// holds mode and returns how many were deleted.
var releaseScript = redis.NewScript(`
local n = 0
for i = 1, 2 do
  if redis.call('GET', KEYS[i]) == ARGV[1] then
    n = n + redis.call('DEL', KEYS[i])
  end
end
return n
`)

// NewRedis builds the shared ledger. It does not connect: call Ping to check
// reachability (e.g. at startup). Errors never contain the URL.
func NewRedis(o RedisOptions) (*Redis, error) {
	if strings.TrimSpace(o.URL) == "" {
		return nil, errors.New("ledger: redis url is empty")
	}
	opts, err := redis.ParseURL(o.URL)
	if err != nil {
		// The parser's message may quote parts of the URL: do not wrap it.
		return nil, errors.New("ledger: redis url is not a valid redis://, rediss:// or unix:// url")
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
	if o.DialTimeout <= 0 {
		o.DialTimeout = DefaultDialTimeout
	}
	if o.OpTimeout <= 0 {
		o.OpTimeout = DefaultOpTimeout
	}
	opts.DialTimeout = o.DialTimeout
	opts.ReadTimeout = o.OpTimeout
	opts.WriteTimeout = o.OpTimeout
	opts.ContextTimeoutEnabled = true
	// The ledger sits on the turn request path: fail fast when Redis is down
	// (one dial attempt, one command retry) instead of go-redis's default of
	// five dial attempts per command and three command retries.
	opts.DialerRetries = 1
	opts.MaxRetries = 1
	// Plain Redis features only: no CLIENT SETINFO, no maintenance push
	// notifications (older servers and proxies reject them).
	opts.DisableIdentity = true
	opts.MaintNotificationsConfig = &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
	return &Redis{
		client:    redis.NewClient(opts),
		ttl:       o.TTL,
		prefix:    o.KeyPrefix,
		opTimeout: o.OpTimeout,
	}, nil
}

// keys returns the Redis keys of the turn record and the user message record.
func (r *Redis) keys(k Key) []string {
	slot := k.slotHash()
	t, m := k.turnHash(), k.messageHash()
	base := r.prefix + "{" + hex.EncodeToString(slot[:8]) + "}:"
	return []string{base + "t:" + hex.EncodeToString(t[:]), base + "m:" + hex.EncodeToString(m[:])}
}

// Reserve implements Ledger.
func (r *Redis) Reserve(ctx context.Context, k Key, mode string) (bool, error) {
	if err := k.validate(mode); err != nil {
		return false, err
	}
	opCtx, cancel := context.WithTimeout(ctx, r.opTimeout)
	defer cancel()
	n, err := reserveScript.Run(opCtx, r.client, r.keys(k), mode, r.ttl.Milliseconds()).Int64()
	if err != nil {
		return false, r.fail(ctx, "reserve", err)
	}
	switch n {
	case 2:
		return true, nil
	case 1:
		return false, nil
	case 0:
		return false, ErrConflict
	default:
		return false, fmt.Errorf("ledger: reserve: unexpected script reply: %w", ErrUnavailable)
	}
}

// Release implements Ledger.
func (r *Redis) Release(ctx context.Context, k Key, mode string) error {
	if err := k.validate(mode); err != nil {
		return err
	}
	opCtx, cancel := context.WithTimeout(ctx, r.opTimeout)
	defer cancel()
	if err := releaseScript.Run(opCtx, r.client, r.keys(k), mode).Err(); err != nil {
		return r.fail(ctx, "release", err)
	}
	return nil
}

// Ping checks that Redis answers, within OpTimeout.
func (r *Redis) Ping(ctx context.Context) error {
	opCtx, cancel := context.WithTimeout(ctx, r.opTimeout)
	defer cancel()
	if err := r.client.Ping(opCtx).Err(); err != nil {
		return r.fail(ctx, "ping", err)
	}
	return nil
}

// Close closes the client's connections.
func (r *Redis) Close() error {
	if err := r.client.Close(); err != nil && !errors.Is(err, redis.ErrClosed) {
		return fmt.Errorf("ledger: close: %w", ErrUnavailable)
	}
	return nil
}

// fail turns a go-redis error into ErrUnavailable. The driver's own message is
// dropped (it names the server address); only a reason from a closed set is
// kept. When the caller's context ended, its error is wrapped as well.
func (r *Redis) fail(ctx context.Context, op string, err error) error {
	if ctxErr := ctx.Err(); ctxErr != nil {
		return fmt.Errorf("ledger: %s: %w: %w", op, ErrUnavailable, ctxErr)
	}
	return fmt.Errorf("ledger: %s: %s: %w", op, reason(err), ErrUnavailable)
}

func reason(err error) string {
	var ne net.Error
	switch {
	case errors.Is(err, redis.ErrClosed):
		return "client closed"
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return "timeout"
	case errors.As(err, new(*net.OpError)):
		return "connection failed"
	case errors.As(err, new(redis.Error)):
		return "server error"
	default:
		return "error"
	}
}

// QuietRedisLogs silences go-redis's process-wide logger, which prints
// server addresses; the ledger reports its own failures, without them.
func QuietRedisLogs() { redis.SetLogger(quietRedisLog{}) }

type quietRedisLog struct{}

func (quietRedisLog) Printf(context.Context, string, ...any) {}
