package config

import (
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// Validate reports every problem at once, each as "field.path: message".
// Messages never contain secret values. extra lets callers add checks that
// live in other packages (rollout spec, signing keys) without an import cycle;
// each returns nil or a message for its field path.
func (c *Config) Validate(extra ...func(*Config) (path string, err error)) error {
	var p problems
	p.addr("listen", c.Listen)
	p.addr("admin_listen", c.AdminListen)
	if c.Listen != "" && c.Listen == c.AdminListen && !strings.HasSuffix(c.Listen, ":0") {
		p.add("admin_listen", "must differ from listen")
	}

	if c.Core.URL == "" {
		p.add("core.url", "is required (KNOWLEDGE_SIDECAR_CORE_URL)")
	} else if u, err := url.Parse(c.Core.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		p.add("core.url", "must be an absolute http(s) URL")
	} else {
		if u.User != nil {
			p.add("core.url", "must not contain credentials; give the token in KNOWLEDGE_SIDECAR_CORE_TOKEN or core.token_file")
		}
		if u.RawQuery != "" || u.Fragment != "" {
			p.add("core.url", "must not have a query or fragment")
		}
	}
	if id := c.Core.ClientAppID; id != "" && (utf8.RuneCountInString(id) > 64 || strings.TrimSpace(id) != id || strings.ContainsFunc(id, unicode.IsControl)) {
		p.add("core.client_app_id", "must be a Core app_id: 1 to 64 characters, no control characters or outer spaces")
	}
	p.positive("core.timeout", c.Core.Timeout, time.Minute)
	p.breaker("core.identity_breaker", c.Core.Identity)
	p.breaker("core.retrieval_breaker", c.Core.Retrieval)

	if c.Catalog.MaxOpenConns < 1 {
		p.add("catalog.max_open_conns", "must be at least 1")
	}
	if c.Catalog.MaxIdleConns < 0 || c.Catalog.MaxIdleConns > c.Catalog.MaxOpenConns {
		p.add("catalog.max_idle_conns", "must be between 0 and catalog.max_open_conns")
	}
	if c.Catalog.ConnMaxLifetime < 0 {
		p.add("catalog.conn_max_lifetime", "must not be negative")
	}
	p.positive("catalog.query_timeout", c.Catalog.QueryTimeout, time.Minute)
	if c.Catalog.DocCacheEntries < 1 {
		p.add("catalog.doc_cache_entries", "must be at least 1")
	}
	if c.Catalog.DocCacheBytes < 1<<20 {
		p.add("catalog.doc_cache_bytes", "must be at least 1048576")
	}
	p.breaker("catalog.breaker", c.Catalog.Breaker)

	switch c.NativeDetection {
	case "auto", "never", "always":
	default:
		p.add("native_detection", "must be auto, never or always")
	}
	if c.ProbeInterval < time.Second {
		p.add("probe_interval", "must be at least 1s")
	}
	if r := strings.TrimSpace(c.Rollout); r != "off" && r != "" { // every missing prerequisite at once
		if c.Catalog.DSN == "" {
			p.add("rollout", "rolls the protocol out, but no catalog DSN (KNOWLEDGE_SIDECAR_CATALOG_DSN) is configured")
		}
		if c.Core.Token == "" {
			p.add("rollout", "rolls the protocol out, but no Core service token (KNOWLEDGE_SIDECAR_CORE_TOKEN or core.token_file) is configured for /kb/search")
		}
	}

	switch c.Ledger.Backend {
	case "", "memory":
	case "redis":
		if c.Ledger.RedisURL == "" {
			p.add("ledger.redis_url", "is required when ledger.backend is redis (KNOWLEDGE_SIDECAR_LEDGER_REDIS_URL)")
		}
	default:
		p.add("ledger.backend", "must be memory or redis")
	}
	if c.Ledger.RedisURL != "" {
		if u, err := url.Parse(c.Ledger.RedisURL); err != nil || (u.Scheme != "redis" && u.Scheme != "rediss") {
			p.add("ledger.redis_url", "must be a redis:// or rediss:// URL")
		}
	}
	if c.Ledger.TTL < time.Minute {
		p.add("ledger.ttl", "must be at least 1m")
	}
	if c.Ledger.MaxEntries < 1 {
		p.add("ledger.max_entries", "must be at least 1")
	}

	if c.RateLimit.RPS <= 0 {
		p.add("rate_limit.rps", "must be greater than 0")
	}
	if c.RateLimit.Burst < 1 {
		p.add("rate_limit.burst", "must be at least 1")
	}

	for i, s := range c.Proxy.TrustedProxies {
		if _, err := ParsePrefix(s); err != nil {
			p.add(fmt.Sprintf("proxy.trusted_proxies[%d]", i), "must be an IP address or CIDR such as 10.0.0.0/8")
		}
	}
	p.positive("proxy.read_header_timeout", c.Proxy.ReadHeaderTimeout, 10*time.Minute)
	p.positive("proxy.idle_timeout", c.Proxy.IdleTimeout, time.Hour)
	p.positive("proxy.body_idle_timeout", c.Proxy.BodyIdleTimeout, 10*time.Minute)
	if c.Proxy.MaxHeaderBytes < 4096 {
		p.add("proxy.max_header_bytes", "must be at least 4096")
	}
	p.positive("proxy.dial_timeout", c.Proxy.DialTimeout, 5*time.Minute)
	if c.Proxy.ResponseHeaderTimeout < 0 {
		p.add("proxy.response_header_timeout", "must not be negative (0 disables it)")
	}
	if c.Proxy.MaxIdleConnsPerHost < 1 {
		p.add("proxy.max_idle_conns_per_host", "must be at least 1")
	}

	if c.Shutdown.DrainDelay < 0 {
		p.add("shutdown.drain_delay", "must not be negative")
	}
	p.positive("shutdown.timeout", c.Shutdown.Timeout, 10*time.Minute)

	switch c.Log.Level {
	case "debug", "info", "warn", "error":
	default:
		p.add("log.level", "must be debug, info, warn or error")
	}

	if c.Reload.WatchInterval < time.Second {
		p.add("reload.watch_interval", "must be at least 1s")
	}

	for _, check := range extra {
		if path, err := check(c); err != nil {
			p.add(path, strings.TrimPrefix(err.Error(), path+": ")) // no "rollout: rollout: …"
		}
	}
	if len(p) == 0 {
		return nil
	}
	return &Error{Problems: p}
}

// ParsePrefix accepts an IP address or a CIDR.
func ParsePrefix(s string) (netip.Prefix, error) {
	if strings.Contains(s, "/") {
		pfx, err := netip.ParsePrefix(s)
		return pfx.Masked(), err
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, err
	}
	return netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()), nil
}

type problems []string

func (p *problems) add(path, msg string) { *p = append(*p, path+": "+msg) }

func (p *problems) addr(path, v string) {
	_, port, err := net.SplitHostPort(v)
	if err != nil || port == "" {
		p.add(path, "must be host:port, such as :8080 or 127.0.0.1:9090")
		return
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		p.add(path, "port must be a number from 1 to 65535 (0 picks a free port)")
	}
}

func (p *problems) positive(path string, d, max time.Duration) {
	if d <= 0 || d > max {
		p.add(path, fmt.Sprintf("must be greater than 0 and at most %s", max))
	}
}

func (p *problems) breaker(path string, b Breaker) {
	if b.Failures < 1 {
		p.add(path+".failures", "must be at least 1")
	}
	if b.Window <= 0 {
		p.add(path+".window", "must be greater than 0")
	}
	if b.OpenTimeout <= 0 {
		p.add(path+".open_timeout", "must be greater than 0")
	}
	if b.HalfOpenMax < 1 {
		p.add(path+".half_open_max", "must be at least 1")
	}
}
