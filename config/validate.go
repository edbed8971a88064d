package config

import (
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// Validate reports every problem at once, each as "field.path: message".
// A message quotes the offending value (`log.level: "verbose" is not one of
// debug, info, warn, error`), except a secret's (core.token, catalog.dsn,
// ledger.redis_url, signing.keys), which is never shown; a URL is shown
// without its credentials, query and fragment. extra lets callers add checks that
// live in other packages (rollout spec, signing keys) without an import cycle;
// each returns nil or a message for its field path.
func (c *Config) Validate(extra ...func(*Config) (path string, err error)) error {
	var p problems
	p.addr("listen", c.Listen)
	p.addr("admin_listen", c.AdminListen)
	if c.Listen != "" && c.Listen == c.AdminListen && !strings.HasSuffix(c.Listen, ":0") {
		p.add("admin_listen", quote(c.AdminListen)+" must differ from listen")
	}

	if c.Core.URL == "" {
		p.add("core.url", "is required (KNOWLEDGE_SIDECAR_CORE_URL)")
	} else if u, err := url.Parse(c.Core.URL); err != nil {
		p.add("core.url", "is not a URL (value not shown)")
	} else if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		p.add("core.url", showURL(u)+" is not an absolute http(s) URL")
	} else {
		if u.User != nil {
			p.add("core.url", showURL(u)+" must not contain credentials; give the token in KNOWLEDGE_SIDECAR_CORE_TOKEN or core.token_file")
		}
		if u.RawQuery != "" || u.Fragment != "" {
			p.add("core.url", showURL(u)+" must not have a query or fragment")
		}
	}
	if id := c.Core.ClientAppID; id != "" && (utf8.RuneCountInString(id) > 64 || strings.TrimSpace(id) != id || strings.ContainsFunc(id, unicode.IsControl)) {
		p.add("core.client_app_id", quote(id)+" is not a Core app_id: 1 to 64 characters, no control characters or outer spaces")
	}
	p.positive("core.timeout", c.Core.Timeout, time.Minute)
	p.breaker("core.identity_breaker", c.Core.Identity)
	p.breaker("core.retrieval_breaker", c.Core.Retrieval)

	p.atLeast("catalog.max_open_conns", int64(c.Catalog.MaxOpenConns), 1)
	if c.Catalog.MaxIdleConns < 0 || c.Catalog.MaxIdleConns > c.Catalog.MaxOpenConns {
		p.outOfRange("catalog.max_idle_conns", c.Catalog.MaxIdleConns, fmt.Sprintf("must be between 0 and catalog.max_open_conns, %d", c.Catalog.MaxOpenConns))
	}
	if c.Catalog.ConnMaxLifetime < 0 {
		p.outOfRange("catalog.conn_max_lifetime", c.Catalog.ConnMaxLifetime, "must not be negative")
	}
	p.positive("catalog.query_timeout", c.Catalog.QueryTimeout, time.Minute)
	p.atLeast("catalog.doc_cache_entries", int64(c.Catalog.DocCacheEntries), 1)
	p.atLeast("catalog.doc_cache_bytes", c.Catalog.DocCacheBytes, 1<<20)
	p.breaker("catalog.breaker", c.Catalog.Breaker)

	if !slices.Contains(NativeDetectionModes, c.NativeDetection) {
		p.add("native_detection", quote(c.NativeDetection)+" is not one of "+strings.Join(NativeDetectionModes, ", "))
	}
	if c.ProbeInterval < time.Second {
		p.outOfRange("probe_interval", c.ProbeInterval, "must be at least 1s")
	}
	if r := strings.TrimSpace(c.Rollout); r != "off" && r != "" { // every missing prerequisite at once
		if c.Catalog.DSN == "" {
			p.add("rollout", quote(c.Rollout)+" rolls the protocol out, but no catalog DSN (KNOWLEDGE_SIDECAR_CATALOG_DSN) is configured")
		}
		if c.Core.Token == "" {
			p.add("rollout", quote(c.Rollout)+" rolls the protocol out, but no Core service token (KNOWLEDGE_SIDECAR_CORE_TOKEN or core.token_file) is configured for /kb/search")
		}
	}

	switch c.Ledger.Backend {
	case "", "memory":
	case "redis":
		if c.Ledger.RedisURL == "" {
			p.add("ledger.redis_url", "is required when ledger.backend is redis (KNOWLEDGE_SIDECAR_LEDGER_REDIS_URL)")
		}
	default:
		p.add("ledger.backend", quote(c.Ledger.Backend)+" is not one of memory, redis")
	}
	if c.Ledger.RedisURL != "" {
		// A secret (it may carry a password): never shown.
		if u, err := url.Parse(c.Ledger.RedisURL); err != nil || (u.Scheme != "redis" && u.Scheme != "rediss") {
			p.add("ledger.redis_url", "is not a redis:// or rediss:// URL (value not shown)")
		}
	}
	switch c.Ledger.RedisMode {
	case "single", "cluster", "sentinel":
	default:
		p.add("ledger.redis_mode", quote(c.Ledger.RedisMode)+" is not one of single, cluster, sentinel")
	}
	if c.Ledger.RedisCAFile != "" {
		if u, err := url.Parse(c.Ledger.RedisURL); c.Ledger.RedisURL != "" && err == nil && u.Scheme != "rediss" {
			p.add("ledger.redis_ca_file", quote(c.Ledger.RedisCAFile)+" is set but ledger.redis_url is not a rediss:// URL (TLS is off)")
		}
	}
	if c.Ledger.RedisWaitReplicas < 0 || c.Ledger.RedisWaitReplicas > 16 {
		p.outOfRange("ledger.redis_wait_replicas", c.Ledger.RedisWaitReplicas, "must be from 0 (off) to 16")
	}
	if c.Ledger.TTL < time.Minute {
		p.outOfRange("ledger.ttl", c.Ledger.TTL, "must be at least 1m")
	}
	p.atLeast("ledger.max_entries", int64(c.Ledger.MaxEntries), 1)

	if c.RateLimit.RPS <= 0 {
		p.outOfRange("rate_limit.rps", strconv.FormatFloat(c.RateLimit.RPS, 'g', -1, 64), "must be greater than 0")
	}
	p.atLeast("rate_limit.burst", int64(c.RateLimit.Burst), 1)
	switch c.RateLimit.Backend {
	case "", "local":
	case "redis":
		if c.Ledger.RedisURL == "" {
			p.add("rate_limit.backend", quote(c.RateLimit.Backend)+" needs the ledger's Redis (KNOWLEDGE_SIDECAR_LEDGER_REDIS_URL or ledger.redis_url_file)")
		}
	default:
		p.add("rate_limit.backend", quote(c.RateLimit.Backend)+" is not one of local, redis")
	}

	for i, s := range c.Proxy.TrustedProxies {
		if _, err := ParsePrefix(s); err != nil {
			p.add(fmt.Sprintf("proxy.trusted_proxies[%d]", i), quote(s)+" is not an IP address or CIDR such as 10.0.0.0/8")
		}
	}
	p.positive("proxy.read_header_timeout", c.Proxy.ReadHeaderTimeout, 10*time.Minute)
	p.positive("proxy.idle_timeout", c.Proxy.IdleTimeout, time.Hour)
	p.positive("proxy.body_idle_timeout", c.Proxy.BodyIdleTimeout, 10*time.Minute)
	p.atLeast("proxy.max_header_bytes", int64(c.Proxy.MaxHeaderBytes), 4096)
	if c.Proxy.MaxHeaderBytes > 1<<20 {
		p.outOfRange("proxy.max_header_bytes", c.Proxy.MaxHeaderBytes, "must be at most 1048576 (1 MiB); Core refuses headers over 16 KiB anyway")
	}
	p.atLeast("proxy.body_min_rate", c.Proxy.BodyMinRate, 0)
	if w := c.Proxy.BodyMinRateWindow; c.Proxy.BodyMinRate > 0 && (w < time.Second || w > 10*time.Minute) {
		p.outOfRange("proxy.body_min_rate_window", w, "must be from 1s to 10m0s")
	}
	if c.Proxy.BodyTimeout < 0 {
		p.outOfRange("proxy.body_timeout", c.Proxy.BodyTimeout, "must not be negative; 0 disables it")
	}
	p.atLeast("proxy.max_connections", int64(c.Proxy.MaxConnections), 1)
	p.atLeast("proxy.max_in_flight", int64(c.Proxy.MaxInFlight), 1)
	if c.Proxy.TurnBodyBudget < 1<<20 {
		p.outOfRange("proxy.turn_body_budget", c.Proxy.TurnBodyBudget, "must be at least 1048576 (1 MiB: two turns of Core's 512 KiB limit)")
	}
	if c.Proxy.MemoryLimit != 0 && c.Proxy.MemoryLimit < 32<<20 {
		p.outOfRange("proxy.memory_limit", c.Proxy.MemoryLimit, "must be 0 (from GOMEMLIMIT or the cgroup) or at least 33554432 (32 MiB)")
	}
	p.positive("proxy.dial_timeout", c.Proxy.DialTimeout, 5*time.Minute)
	if c.Proxy.ResponseHeaderTimeout < 0 {
		p.outOfRange("proxy.response_header_timeout", c.Proxy.ResponseHeaderTimeout, "must not be negative; 0 disables it")
	}
	p.atLeast("proxy.max_idle_conns_per_host", int64(c.Proxy.MaxIdleConnsPerHost), 1)

	if c.Shutdown.DrainDelay < 0 {
		p.outOfRange("shutdown.drain_delay", c.Shutdown.DrainDelay, "must not be negative")
	}
	p.positive("shutdown.timeout", c.Shutdown.Timeout, 10*time.Minute)

	switch c.Log.Level {
	case "debug", "info", "warn", "error":
	default:
		p.add("log.level", quote(c.Log.Level)+" is not one of debug, info, warn, error")
	}

	if c.Reload.WatchInterval < time.Second {
		p.outOfRange("reload.watch_interval", c.Reload.WatchInterval, "must be at least 1s")
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
		p.add(path, quote(v)+" is not host:port, such as :8080 or 127.0.0.1:9090")
		return
	}
	n, err := strconv.Atoi(port)
	switch {
	case err != nil:
		p.add(path, "port "+quote(port)+" is not a number from 1 to 65535 (0 picks a free port)")
	case n < 0 || n > 65535:
		p.add(path, fmt.Sprintf("port %d is out of range: 1 to 65535 (0 picks a free port)", n))
	}
}

func (p *problems) positive(path string, d, max time.Duration) {
	if d <= 0 || d > max {
		p.outOfRange(path, d, fmt.Sprintf("must be greater than 0 and at most %s", max))
	}
}

// atLeast reports an integer setting below min.
func (p *problems) atLeast(path string, v, min int64) {
	if v < min {
		p.outOfRange(path, v, fmt.Sprintf("must be at least %d", min))
	}
}

// outOfRange reports a number or duration v that breaks rule, naming v.
func (p *problems) outOfRange(path string, v any, rule string) {
	p.add(path, fmt.Sprintf("%v is out of range: %s", v, rule))
}

func (p *problems) breaker(path string, b Breaker) {
	if b.Failures < 1 {
		p.outOfRange(path+".failures", b.Failures, "must be at least 1")
	}
	if b.Window <= 0 {
		p.outOfRange(path+".window", b.Window, "must be greater than 0")
	}
	if b.OpenTimeout <= 0 {
		p.outOfRange(path+".open_timeout", b.OpenTimeout, "must be greater than 0")
	}
	if b.HalfOpenMax < 1 {
		p.outOfRange(path+".half_open_max", b.HalfOpenMax, "must be at least 1")
	}
}

// quoteMax bounds the part of a value a message quotes.
const quoteMax = 64

// quote renders a non-secret value for a message: Go-quoted (control
// characters escaped), cut after quoteMax characters.
func quote(v string) string {
	if utf8.RuneCountInString(v) > quoteMax {
		return strconv.Quote(string([]rune(v)[:quoteMax])) + "…"
	}
	return strconv.Quote(v)
}

// showURL quotes a URL without what may be a credential: user information
// becomes "xxxxx", a query or fragment "…".
func showURL(u *url.URL) string {
	var b strings.Builder
	if u.Scheme != "" {
		b.WriteString(u.Scheme + ":")
	}
	if u.Host != "" || u.User != nil {
		b.WriteString("//")
	}
	if u.User != nil {
		b.WriteString("xxxxx@")
	}
	b.WriteString(u.Host)
	b.WriteString(u.EscapedPath())
	if u.Opaque != "" {
		b.WriteString(u.Opaque)
	}
	if u.RawQuery != "" || u.ForceQuery {
		b.WriteString("?…")
	}
	if u.Fragment != "" {
		b.WriteString("#…")
	}
	return quote(b.String())
}
