package ledger

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net/url"
	"os"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

// ParseRedisURL checks url in mode (ModeSingle or "", ModeCluster,
// ModeSentinel) the way NewRedis reads it. The error never quotes the URL
// (it is a secret: it may carry a password).
func ParseRedisURL(mode, rawURL string) error {
	_, err := universalOptions(RedisOptions{Mode: mode, URL: rawURL})
	return err
}

// universalOptions reads the URL per mode with go-redis's own parsers and
// returns the options of one client kind: *redis.Options,
// *redis.ClusterOptions or *redis.FailoverOptions.
func universalOptions(o RedisOptions) (any, error) {
	u, err := url.Parse(o.URL)
	if err != nil || (u.Scheme != "redis" && u.Scheme != "rediss" && !(u.Scheme == "unix" && cmpOr(o.Mode, ModeSingle) == ModeSingle)) {
		return nil, errors.New("ledger: redis url is not a valid redis:// or rediss:// url")
	}
	switch cmpOr(o.Mode, ModeSingle) {
	case ModeSingle:
		opts, err := redis.ParseURL(o.URL)
		if err != nil {
			// The parser's message may quote parts of the URL: do not wrap it.
			return nil, errors.New("ledger: redis url is not a valid redis://, rediss:// or unix:// url (redis_mode single: redis://[user:pass@]host:port/db)")
		}
		return opts, nil
	case ModeCluster:
		opts, err := redis.ParseClusterURL(o.URL)
		if err != nil {
			return nil, errors.New("ledger: redis url is not a valid cluster url (redis_mode cluster: redis://[user:pass@]host:port?addr=host2:port2&addr=host3:port3)")
		}
		return opts, nil
	case ModeSentinel:
		opts, err := redis.ParseFailoverURL(o.URL)
		if err != nil {
			return nil, errors.New("ledger: redis url is not a valid sentinel url (redis_mode sentinel: redis://[user:pass@]host:port?master_name=NAME&addr=host2:port2)")
		}
		if opts.MasterName == "" {
			return nil, errors.New("ledger: redis url has no master_name (redis_mode sentinel: redis://[user:pass@]host:port?master_name=NAME&addr=host2:port2)")
		}
		return opts, nil
	default:
		return nil, errors.New("ledger: redis mode is not one of single, cluster, sentinel")
	}
}

// tlsConfig is the explicit TLS configuration of rediss:// in every mode
// (the URL parsers' defaults differ): TLS 1.2 at least, the CA file's
// roots when one is given. ServerName is left to the dialer, which takes
// it from each node's address (cluster nodes and sentinel-announced
// primaries have their own names).
func tlsConfig(o RedisOptions) (*tls.Config, error) {
	if !isTLSURL(o.URL) {
		if o.CAFile != "" {
			return nil, errors.New("ledger: redis ca file is set but the redis url is not rediss://")
		}
		return nil, nil
	}
	c := &tls.Config{MinVersion: tls.VersionTLS12}
	if o.CAFile != "" {
		pool, err := caPool(o.CAFile)
		if err != nil {
			return nil, errors.New("ledger: redis ca file " + err.Error())
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

// newUniversalClient builds the client of o.Mode with the ledger's
// fail-fast settings: short dial, read and write timeouts, one dial attempt
// and one command retry (go-redis defaults to five and three), no CLIENT
// SETINFO and no maintenance notifications (older servers and proxies
// reject them).
func newUniversalClient(o RedisOptions) (redis.UniversalClient, error) {
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
		opts.DialTimeout, opts.ReadTimeout, opts.WriteTimeout = o.DialTimeout, o.OpTimeout, o.OpTimeout
		opts.ContextTimeoutEnabled = true
		opts.DialerRetries, opts.MaxRetries = 1, 1
		opts.DisableIdentity = true
		opts.MaintNotificationsConfig = off
		if opts.Network != "unix" {
			opts.TLSConfig = tc
		}
		return redis.NewClient(opts), nil
	case *redis.ClusterOptions:
		opts.DialTimeout, opts.ReadTimeout, opts.WriteTimeout = o.DialTimeout, o.OpTimeout, o.OpTimeout
		opts.ContextTimeoutEnabled = true
		opts.DialerRetries, opts.MaxRetries = 1, 1
		// A MOVED or ASK during resharding or a failover is followed at
		// most this often per command before it fails (503).
		opts.MaxRedirects = 3
		// go-redis re-reads the slot map on MOVED, and otherwise every
		// minute: a stalled primary answers no MOVED, so the ledger also
		// asks for a reload on each timeout (Redis.fail) and re-reads it
		// every few seconds regardless.
		opts.ClusterStateReloadInterval = clusterReloadInterval
		opts.DisableIdentity = true
		opts.MaintNotificationsConfig = off
		opts.TLSConfig = tc
		return redis.NewClusterClient(opts), nil
	case *redis.FailoverOptions:
		opts.DialTimeout, opts.ReadTimeout, opts.WriteTimeout = o.DialTimeout, o.OpTimeout, o.OpTimeout
		opts.ContextTimeoutEnabled = true
		opts.DialerRetries, opts.MaxRetries = 1, 1
		opts.DisableIdentity = true
		opts.TLSConfig = tc
		return redis.NewFailoverClient(opts), nil
	}
	return nil, errors.New("ledger: redis mode is not one of single, cluster, sentinel")
}
