package sharedredis

import (
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
	"go.opentelemetry.io/otel/trace"
)

// Defaults of Options.
const (
	DefaultDialTimeout = 2 * time.Second
	DefaultOpTimeout   = time.Second
)

// Redis modes (ledger.redis_mode).
const (
	ModeSingle   = "single"
	ModeCluster  = "cluster"
	ModeSentinel = "sentinel"
)

// ErrUnavailable: Redis cannot be reached (or the client is closed).
var ErrUnavailable = errors.New("redis unavailable")

// Options configures the client of the Redis the replicas share.
type Options struct {
	// URL is redis://[user:password@]host:port/db (or rediss://, unix://).
	// It is a secret: it never appears in errors or logs. Required.
	URL string
	// Mode is ModeSingle ("" too), ModeCluster or ModeSentinel; it chooses
	// how URL is read (go-redis's ParseURL, ParseClusterURL or
	// ParseFailoverURL) and which client is built.
	Mode string
	// CAFile is a PEM file of the CA that signs the servers' certificates
	// (rediss:// only); "" → the system roots.
	CAFile string
	// DialTimeout bounds connecting; ≤ 0 → DefaultDialTimeout (2s).
	DialTimeout time.Duration
	// OpTimeout bounds every operation of the client's users (a ledger
	// Reserve, a rate-limit Allow, Ping) including retries, below the
	// caller's own deadline; ≤ 0 → DefaultOpTimeout (1s).
	OpTimeout time.Duration
	// TracerProvider, when set, gives every Redis command (and pipeline) a
	// CLIENT span carrying only the command name (SPEC §9). nil: none.
	TracerProvider trace.TracerProvider
}

// Client is one go-redis client of the mode Options.Mode with fail-fast
// settings, shared by the turn ledger and the rate limit. It does not
// connect until used: call Ping to check reachability.
type Client struct {
	rdb       redis.UniversalClient
	mode      string
	opTimeout time.Duration
	// sentinels is how to ask the sentinels (sentinel mode; Topology).
	sentinels *redis.FailoverOptions
}

// New builds the client. It does not connect. Errors never contain the URL.
func New(o Options) (*Client, error) {
	if strings.TrimSpace(o.URL) == "" {
		return nil, errors.New("sharedredis: redis url is empty")
	}
	if o.DialTimeout <= 0 {
		o.DialTimeout = DefaultDialTimeout
	}
	if o.OpTimeout <= 0 {
		o.OpTimeout = DefaultOpTimeout
	}
	rdb, err := newUniversalClient(o)
	if err != nil {
		return nil, err
	}
	if o.TracerProvider != nil {
		rdb.AddHook(traceHook{tracer: o.TracerProvider.Tracer(traceScope)})
	}
	var sentinels *redis.FailoverOptions
	if o.Mode == ModeSentinel {
		parsed, _ := universalOptions(o) // parsed once already
		sentinels, _ = parsed.(*redis.FailoverOptions)
		if sentinels != nil {
			sentinels.TLSConfig, _ = tlsConfig(o)
		}
	}
	return &Client{rdb: rdb, mode: cmp.Or(o.Mode, ModeSingle), opTimeout: o.OpTimeout, sentinels: sentinels}, nil
}

// Redis is the go-redis client (a *redis.Client or *redis.ClusterClient).
func (c *Client) Redis() redis.UniversalClient { return c.rdb }

// Mode is the Redis mode the client was built with.
func (c *Client) Mode() string { return c.mode }

// OpTimeout bounds each operation of the client's users.
func (c *Client) OpTimeout() time.Duration { return c.opTimeout }

// Ping checks that Redis answers, within OpTimeout.
func (c *Client) Ping(ctx context.Context) error {
	opCtx, cancel := context.WithTimeout(ctx, c.opTimeout)
	defer cancel()
	if err := c.rdb.Ping(opCtx).Err(); err != nil {
		return c.fail(ctx, "ping", err)
	}
	return nil
}

// Close closes the client's connections; closing twice is not an error.
func (c *Client) Close() error {
	if err := c.rdb.Close(); err != nil && !errors.Is(err, redis.ErrClosed) {
		return fmt.Errorf("redis: close: %w", ErrUnavailable)
	}
	return nil
}

// NoteFailure is told of every failed command. In cluster mode a timeout or
// a broken connection means the slot's primary may have stalled or moved
// without a MOVED to say so: the slot map is reloaded (in the background,
// at most one reload at a time).
func (c *Client) NoteFailure(ctx context.Context, err error) {
	if cc, ok := c.rdb.(*redis.ClusterClient); ok && !errors.As(err, new(redis.Error)) {
		cc.ReloadState(ctx)
	}
}

// Reason names a go-redis error's kind from a closed set. The driver's own
// message is never used: it names the server address.
func Reason(err error) string {
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

// ParseURL checks url in mode (ModeSingle or "", ModeCluster,
// ModeSentinel) the way New reads it. The error never quotes the URL
// (it is a secret: it may carry a password).
func ParseURL(mode, rawURL string) error {
	_, err := universalOptions(Options{Mode: mode, URL: rawURL})
	return err
}

// universalOptions reads the URL per mode with go-redis's own parsers and
// returns the options of one client kind: *redis.Options,
// *redis.ClusterOptions or *redis.FailoverOptions.
func universalOptions(o Options) (any, error) {
	u, err := url.Parse(o.URL)
	if err != nil || (u.Scheme != "redis" && u.Scheme != "rediss" && !(u.Scheme == "unix" && cmp.Or(o.Mode, ModeSingle) == ModeSingle)) {
		return nil, errors.New("sharedredis: redis url is not a valid redis:// or rediss:// url")
	}
	switch cmp.Or(o.Mode, ModeSingle) {
	case ModeSingle:
		opts, err := redis.ParseURL(o.URL)
		if err != nil {
			// The parser's message may quote parts of the URL: do not wrap it.
			return nil, errors.New("sharedredis: redis url is not a valid redis://, rediss:// or unix:// url (redis_mode single: redis://[user:pass@]host:port/db)")
		}
		return opts, nil
	case ModeCluster:
		opts, err := redis.ParseClusterURL(o.URL)
		if err != nil {
			return nil, errors.New("sharedredis: redis url is not a valid cluster url (redis_mode cluster: redis://[user:pass@]host:port?addr=host2:port2&addr=host3:port3)")
		}
		return opts, nil
	case ModeSentinel:
		opts, err := redis.ParseFailoverURL(o.URL)
		if err != nil {
			return nil, errors.New("sharedredis: redis url is not a valid sentinel url (redis_mode sentinel: redis://[user:pass@]host:port?master_name=NAME&addr=host2:port2)")
		}
		if opts.MasterName == "" {
			return nil, errors.New("sharedredis: redis url has no master_name (redis_mode sentinel: redis://[user:pass@]host:port?master_name=NAME&addr=host2:port2)")
		}
		return opts, nil
	default:
		return nil, errors.New("sharedredis: redis mode is not one of single, cluster, sentinel")
	}
}

// tlsConfig is the explicit TLS configuration of rediss:// in every mode
// (the URL parsers' defaults differ): TLS 1.2 at least, the CA file's
// roots when one is given. ServerName is left to the dialer, which takes
// it from each node's address (cluster nodes and sentinel-announced
// primaries have their own names).
func tlsConfig(o Options) (*tls.Config, error) {
	if !isTLSURL(o.URL) {
		if o.CAFile != "" {
			return nil, errors.New("sharedredis: redis ca file is set but the redis url is not rediss://")
		}
		return nil, nil
	}
	c := &tls.Config{MinVersion: tls.VersionTLS12}
	if o.CAFile != "" {
		pool, err := caPool(o.CAFile)
		if err != nil {
			return nil, errors.New("sharedredis: redis ca file " + err.Error())
		}
		c.RootCAs = pool
	}
	return c, nil
}

// CheckCAFile reports whether path is a readable PEM file with at least one
// certificate (ledger.redis_ca_file).
func CheckCAFile(path string) error {
	_, err := caPool(path)
	return err
}

func caPool(path string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(path)
	if err != nil {
		return nil, errors.New("cannot be read")
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, errors.New("holds no PEM certificate")
	}
	return pool, nil
}

func isTLSURL(raw string) bool {
	u, err := url.Parse(raw)
	return err == nil && u.Scheme == "rediss"
}

// clusterReloadInterval bounds how stale the cluster slot map gets.
const clusterReloadInterval = 5 * time.Second

// newUniversalClient builds the client of o.Mode with fail-fast
// settings: short dial, read and write timeouts, one dial attempt
// and one command retry (go-redis defaults to five and three), no CLIENT
// SETINFO and no maintenance notifications (older servers and proxies
// reject them).
func newUniversalClient(o Options) (redis.UniversalClient, error) {
	parsed, err := universalOptions(o)
	if err != nil {
		return nil, err
	}
	tc, err := tlsConfig(o)
	if err != nil {
		return nil, err
	}
	off := &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
	switch opts := parsed.(type) {
	case *redis.Options:
		failFast(o, &opts.DialTimeout, &opts.ReadTimeout, &opts.WriteTimeout, &opts.ContextTimeoutEnabled,
			&opts.DialerRetries, &opts.MaxRetries, &opts.DisableIdentity)
		opts.MaintNotificationsConfig = off
		if opts.Network != "unix" {
			opts.TLSConfig = tc
		}
		return redis.NewClient(opts), nil
	case *redis.ClusterOptions:
		failFast(o, &opts.DialTimeout, &opts.ReadTimeout, &opts.WriteTimeout, &opts.ContextTimeoutEnabled,
			&opts.DialerRetries, &opts.MaxRetries, &opts.DisableIdentity)
		// A MOVED or ASK during resharding or a failover is followed at
		// most this often per command before it fails (503).
		opts.MaxRedirects = 3
		// go-redis re-reads the slot map on MOVED, and otherwise every
		// minute: a stalled primary answers no MOVED, so the client also
		// asks for a reload on each timeout (Client.NoteFailure) and re-reads it
		// every few seconds regardless.
		opts.ClusterStateReloadInterval = clusterReloadInterval
		opts.MaintNotificationsConfig = off
		opts.TLSConfig = tc
		return redis.NewClusterClient(opts), nil
	case *redis.FailoverOptions:
		failFast(o, &opts.DialTimeout, &opts.ReadTimeout, &opts.WriteTimeout, &opts.ContextTimeoutEnabled,
			&opts.DialerRetries, &opts.MaxRetries, &opts.DisableIdentity)
		opts.TLSConfig = tc
		return redis.NewFailoverClient(opts), nil
	}
	return nil, errors.New("sharedredis: redis mode is not one of single, cluster, sentinel")
}

// failFast sets the fields the three go-redis option types share (passed
// as pointers to one value's fields): o's dial and operation timeouts, the
// context's deadline honoured, one dial attempt and one retry, no CLIENT
// SETINFO.
func failFast(o Options, dial, read, write *time.Duration, ctxTimeout *bool, dialRetries, retries *int, noIdentity *bool) {
	*dial, *read, *write = o.DialTimeout, o.OpTimeout, o.OpTimeout
	*ctxTimeout = true
	*dialRetries, *retries = 1, 1
	*noIdentity = true
}
