package config

import (
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"golang.org/x/net/http/httpguts"

	"github.com/bailinghub/knowledge-sidecar/native"
)

// Validate reports every problem at once, each as "field.path: message".
// A message quotes the offending value (`log.level: "verbose" is not one of
// debug, info, warn, error`), except a secret's (Secrets), which is never
// shown; a URL is shown without its credentials, query and fragment. extra
// lets callers add checks that live in other packages (rollout spec, signing
// keys) without an import cycle; each returns nil or a message for its field
// path.
//
// Each part of the file has its own check, called here in the order its
// problems are listed; a check gets its section and, as arguments, the few
// settings of other sections it depends on. Signing (sidecar.ExtraChecks
// builds the keyring) has none here; tracing's OTEL_* variables are the
// SDK's.
func (c *Config) Validate(extra ...func(*Config) (path string, err error)) error {
	var p problems
	p.placeholders(c)
	p.listeners(c.Listen, c.AdminListen)
	p.adminHosts(c.AdminAllowedHosts)
	p.core(c.Core)
	p.catalog(c.Catalog)
	p.nativeDetection(c.NativeDetection, c.ProbeInterval)
	p.rollout(c.Rollout, c.Catalog.DSN, c.Core.Token)
	p.ledger(c.Ledger)
	p.rateLimit(c.RateLimit, c.Ledger.RedisURL)
	p.proxy(c.Proxy)
	p.shutdown(c.Shutdown)
	p.log(c.Log)
	p.reload(c.Reload)
	p.tracing(c.Tracing)
	p.audit(c.Audit, c.Tracing.Enabled)
	p.mcp(c.MCP)
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

// listeners: listen and admin_listen, which must differ.
func (p *problems) listeners(listen, admin string) {
	p.addr("listen", listen)
	p.addr("admin_listen", admin)
	if listen != "" && listen == admin && !strings.HasSuffix(listen, ":0") {
		p.add("admin_listen", quote(admin)+" must differ from listen")
	}
}

// adminHosts: admin_allowed_hosts, host names without port or scheme.
func (p *problems) adminHosts(hosts []string) {
	for i, h := range hosts {
		path := fmt.Sprintf("admin_allowed_hosts[%d]", i)
		if h == "" || strings.ContainsAny(h, ":/[]@ \t") || !httpguts.ValidHostHeader(h) {
			p.add(path, quote(h)+" must be a host name without port or scheme")
		}
	}
}

// core: the core section.
func (p *problems) core(core Core) {
	if core.URL == "" {
		p.add("core.url", "is required (KNOWLEDGE_SIDECAR_CORE_URL)")
	} else if IsPlaceholder(core.URL) {
		// reported by placeholders
	} else if u, err := url.Parse(core.URL); err != nil {
		p.add("core.url", "is not a URL (value not shown)")
	} else if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		p.add("core.url", showURL(u)+" is not an absolute http(s) URL")
	} else {
		if u.User != nil {
			p.add("core.url", showURL(u)+" must not contain credentials; give the token in "+secret("core.token").Hint())
		}
		if u.RawQuery != "" || u.Fragment != "" {
			p.add("core.url", showURL(u)+" must not have a query or fragment")
		}
		if core.CAFile != "" && u.Scheme != "https" {
			p.add("core.ca_file", "is set but core.url is not https:// (the CA only verifies Core's TLS certificate)")
		}
	}
	if id := core.ClientAppID; id != "" && (utf8.RuneCountInString(id) > 64 || strings.TrimSpace(id) != id || strings.ContainsFunc(id, unicode.IsControl)) {
		p.add("core.client_app_id", quote(id)+" is not a Core app_id: 1 to 64 characters, no control characters or outer spaces")
	}
	p.positive("core.timeout", core.Timeout, time.Minute)
	p.breaker("core.identity_breaker", core.Identity)
	p.breaker("core.retrieval_breaker", core.Retrieval)
}

// catalog: the catalog section.
func (p *problems) catalog(cat Catalog) {
	p.atLeast("catalog.max_open_conns", int64(cat.MaxOpenConns), 1)
	if cat.MaxIdleConns < 0 || cat.MaxIdleConns > cat.MaxOpenConns {
		p.outOfRange("catalog.max_idle_conns", cat.MaxIdleConns, fmt.Sprintf("must be between 0 and catalog.max_open_conns, %d", cat.MaxOpenConns))
	}
	if cat.ConnMaxLifetime < 0 {
		p.outOfRange("catalog.conn_max_lifetime", cat.ConnMaxLifetime, "must not be negative")
	}
	p.positive("catalog.query_timeout", cat.QueryTimeout, time.Minute)
	p.atLeast("catalog.doc_cache_entries", int64(cat.DocCacheEntries), 1)
	p.atLeast("catalog.doc_cache_bytes", cat.DocCacheBytes, 1<<20)
	p.breaker("catalog.breaker", cat.Breaker)
}

// nativeDetection: native_detection and probe_interval.
func (p *problems) nativeDetection(mode string, interval time.Duration) {
	if !slices.Contains(native.Modes, mode) {
		p.add("native_detection", quote(mode)+" is not one of "+strings.Join(native.Modes, ", "))
	}
	if interval < time.Second {
		p.outOfRange("probe_interval", interval, "must be at least 1s")
	}
}

// rollout: a rollout other than off needs the catalog's DSN and Core's
// service token (every missing one at once; the spec itself is checked by
// the rollout package, sidecar.ExtraChecks).
func (p *problems) rollout(rollout, dsn, token string) {
	if r := strings.TrimSpace(rollout); r != "off" && r != "" {
		if dsn == "" {
			p.add("rollout", quote(rollout)+" rolls the protocol out, but no catalog DSN ("+secret("catalog.dsn").Env+") is configured")
		}
		if token == "" {
			p.add("rollout", quote(rollout)+" rolls the protocol out, but no Core service token ("+secret("core.token").Hint()+") is configured for /kb/search")
		}
	}
}

// ledger: the ledger section (its Redis URL a secret, never shown).
func (p *problems) ledger(l Ledger) {
	switch l.Backend {
	case "", "memory":
	case "redis":
		if l.RedisURL == "" {
			p.add("ledger.redis_url", "is required when ledger.backend is redis ("+secret("ledger.redis_url").Env+")")
		}
	default:
		p.add("ledger.backend", quote(l.Backend)+" is not one of memory, redis")
	}
	if l.RedisURL != "" && !IsPlaceholder(l.RedisURL) { // a placeholder is reported by placeholders
		// A secret (it may carry a password): never shown.
		if u, err := url.Parse(l.RedisURL); err != nil || (u.Scheme != "redis" && u.Scheme != "rediss") {
			p.add("ledger.redis_url", "is not a redis:// or rediss:// URL (value not shown)")
		}
	}
	switch l.RedisMode {
	case "single", "cluster", "sentinel":
	default:
		p.add("ledger.redis_mode", quote(l.RedisMode)+" is not one of single, cluster, sentinel")
	}
	if l.RedisCAFile != "" {
		if u, err := url.Parse(l.RedisURL); l.RedisURL != "" && err == nil && u.Scheme != "rediss" {
			p.add("ledger.redis_ca_file", quote(l.RedisCAFile)+" is set but ledger.redis_url is not a rediss:// URL (TLS is off)")
		}
	}
	if l.RedisWaitReplicas < 0 || l.RedisWaitReplicas > 16 {
		p.outOfRange("ledger.redis_wait_replicas", l.RedisWaitReplicas, "must be from 0 (off) to 16")
	}
	if l.TTL < time.Minute {
		p.outOfRange("ledger.ttl", l.TTL, "must be at least 1m")
	}
	p.atLeast("ledger.max_entries", int64(l.MaxEntries), 1)
}

// rateLimit: the rate_limit section; the redis backend needs the ledger's
// Redis URL.
func (p *problems) rateLimit(r RateLimit, redisURL string) {
	if r.RPS <= 0 {
		p.outOfRange("rate_limit.rps", strconv.FormatFloat(r.RPS, 'g', -1, 64), "must be greater than 0")
	}
	p.atLeast("rate_limit.burst", int64(r.Burst), 1)
	switch r.Backend {
	case "", "local":
	case "redis":
		if redisURL == "" {
			p.add("rate_limit.backend", quote(r.Backend)+" needs the ledger's Redis ("+secret("ledger.redis_url").Hint()+")")
		}
	default:
		p.add("rate_limit.backend", quote(r.Backend)+" is not one of local, redis")
	}
}

// proxy: the proxy section.
func (p *problems) proxy(x Proxy) {
	for i, s := range x.TrustedProxies {
		if _, err := ParsePrefix(s); err != nil {
			p.add(fmt.Sprintf("proxy.trusted_proxies[%d]", i), quote(s)+" is not an IP address or CIDR such as 10.0.0.0/8")
		}
	}
	p.positive("proxy.read_header_timeout", x.ReadHeaderTimeout, 10*time.Minute)
	p.positive("proxy.idle_timeout", x.IdleTimeout, time.Hour)
	p.positive("proxy.body_idle_timeout", x.BodyIdleTimeout, 10*time.Minute)
	p.atLeast("proxy.max_header_bytes", int64(x.MaxHeaderBytes), 4096)
	if x.MaxHeaderBytes > 1<<20 {
		p.outOfRange("proxy.max_header_bytes", x.MaxHeaderBytes, "must be at most 1048576 (1 MiB); Core refuses headers over 16 KiB anyway")
	}
	p.atLeast("proxy.body_min_rate", x.BodyMinRate, 0)
	if w := x.BodyMinRateWindow; x.BodyMinRate > 0 && (w < time.Second || w > 10*time.Minute) {
		p.outOfRange("proxy.body_min_rate_window", w, "must be from 1s to 10m0s")
	}
	if x.BodyTimeout < 0 {
		p.outOfRange("proxy.body_timeout", x.BodyTimeout, "must not be negative; 0 disables it")
	}
	p.atLeast("proxy.max_connections", int64(x.MaxConnections), 1)
	p.atLeast("proxy.max_in_flight", int64(x.MaxInFlight), 1)
	for _, f := range []struct {
		path string
		v    int64
	}{
		{"proxy.max_connections_per_client", int64(x.MaxConnectionsPerClient)},
		{"proxy.max_in_flight_per_client", int64(x.MaxInFlightPerClient)},
		{"proxy.turn_body_budget_per_client", x.TurnBodyBudgetPerClient},
	} {
		p.atLeast(f.path, f.v, -1)
	}
	if x.TurnBodyBudget < 1<<20 {
		p.outOfRange("proxy.turn_body_budget", x.TurnBodyBudget, "must be at least 1048576 (1 MiB: two turns of Core's 512 KiB limit)")
	}
	if x.MCPAnswerBudget < 4<<20 {
		p.outOfRange("proxy.mcp_answer_budget", x.MCPAnswerBudget, "must be at least 4194304 (4 MiB: two answers of a whole read chain)")
	}
	if x.MemoryLimit != 0 && x.MemoryLimit < 32<<20 {
		p.outOfRange("proxy.memory_limit", x.MemoryLimit, "must be 0 (from GOMEMLIMIT or the cgroup) or at least 33554432 (32 MiB)")
	}
	p.positive("proxy.dial_timeout", x.DialTimeout, 5*time.Minute)
	if x.ResponseHeaderTimeout < 0 {
		p.outOfRange("proxy.response_header_timeout", x.ResponseHeaderTimeout, "must not be negative; 0 disables it")
	}
	p.atLeast("proxy.max_idle_conns_per_host", int64(x.MaxIdleConnsPerHost), 1)
	for i, h := range x.ClientAddressHeadersExtra {
		name, _ := strings.CutSuffix(h, "*")
		if !httpguts.ValidHeaderFieldName(name) || strings.Contains(name, "*") {
			p.add(fmt.Sprintf("proxy.client_address_headers_extra[%d]", i), quote(h)+" is not a header name, or a prefix ending in *, such as X-Real-IP or X-Akamai-*")
		}
	}
}

// tracing: the tracing section (the OTEL_* variables are the SDK's).
func (p *problems) tracing(t Tracing) {
	switch t.TrustInbound {
	case "trusted_proxies", "all", "none":
	default:
		p.add("tracing.trust_inbound", quote(t.TrustInbound)+" is not one of trusted_proxies, all, none")
	}
}

// AuditQueryKeyMin is the shortest audit.query_hmac_key accepted (bytes).
const AuditQueryKeyMin = 32

// audit: the audit section; audit.otlp needs tracing.enabled (its exporter).
func (p *problems) audit(a Audit, tracing bool) {
	if a.File == "" {
		p.add("audit.file", `is required: a path, or "-" for standard output`)
	}
	switch a.OnFailure {
	case AuditContinue, AuditRefuse:
	default:
		p.add("audit.on_failure", quote(a.OnFailure)+" is not one of continue, refuse")
	}
	if a.OTLP && !tracing {
		p.add("audit.otlp", "needs tracing.enabled (the OTLP exporter is tracing's)")
	}
	if a.QueryHMACKey != "" && len(a.QueryHMACKey) < AuditQueryKeyMin {
		p.add("audit.query_hmac_key", fmt.Sprintf("is too short: must be at least %d bytes (%s)", AuditQueryKeyMin, secret("audit.query_hmac_key").Hint()))
	}
}

// mcp: the mcp section; every URL absolute http(s) with a host, no query or
// fragment (hosts compare them verbatim).
func (p *problems) mcp(m MCP) {
	check := func(key, v string) {
		u, err := url.Parse(v)
		switch {
		case err == nil && u.User != nil:
			p.add(key, "must not carry credentials (the value is not shown)")
		case err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.RawQuery != "" || u.Fragment != "":
			p.add(key, quote(v)+" is not an absolute http(s) URL without query or fragment")
		}
	}
	for i, v := range m.AuthorizationServers {
		check(fmt.Sprintf("mcp.authorization_servers[%d]", i), v)
	}
	if m.PublicURL != "" {
		check("mcp.public_url", m.PublicURL)
		if u, err := url.Parse(m.PublicURL); err == nil && strings.Trim(u.Path, "/") != "" {
			p.add("mcp.public_url", quote(m.PublicURL)+" must be scheme and host only (the endpoint's path is added)")
		}
	}
	for i, v := range m.Scopes {
		if v == "" || strings.ContainsAny(v, " \t\"\\") {
			p.add(fmt.Sprintf("mcp.scopes[%d]", i), quote(v)+" is not a scope token (no spaces or quotes)")
		}
	}
	p.mcpOAuth(m)
}

// mcpOAuth: the mcp.oauth section (SPEC §12).
func (p *problems) mcpOAuth(m MCP) {
	o := m.OAuth
	if n := utf8.RuneCountInString(strings.TrimSpace(o.DeviceLabel)); n == 0 || n > 128 {
		p.add("mcp.oauth.device_label", "must be 1 to 128 characters")
	}
	if o.ClientAppID == "" {
		return
	}
	if !appIDPattern.MatchString(o.ClientAppID) {
		p.add("mcp.oauth.client_app_id", quote(o.ClientAppID)+" is not a Core client app_id (^[a-z0-9][a-z0-9_-]{1,63}$)")
	}
	if len(m.AuthorizationServers) > 0 {
		p.add("mcp.oauth.client_app_id", "excludes mcp.authorization_servers (an external authorization server is the other way)")
	}
	switch u, err := url.Parse(m.PublicURL); {
	case m.PublicURL == "":
		p.add("mcp.public_url", "is required with mcp.oauth.client_app_id (it is the issuer hosts sign in with)")
	case err == nil && u.Scheme == "http" && !loopbackHost(u.Hostname()):
		p.add("mcp.public_url", quote(m.PublicURL)+" must be https with mcp.oauth.client_app_id (http only on a loopback address)")
	}
}

// appIDPattern is Core's pattern of client app ids and route keys.
var appIDPattern = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{1,63}$`)

// loopbackHost reports whether h is localhost or a loopback address.
func loopbackHost(h string) bool {
	if strings.EqualFold(h, "localhost") {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}

// shutdown: the shutdown section.
func (p *problems) shutdown(s Shutdown) {
	if s.DrainDelay < 0 {
		p.outOfRange("shutdown.drain_delay", s.DrainDelay, "must not be negative")
	}
	p.positive("shutdown.timeout", s.Timeout, 10*time.Minute)
}

// log: the log section.
func (p *problems) log(l Log) {
	switch l.Level {
	case "debug", "info", "warn", "error":
	default:
		p.add("log.level", quote(l.Level)+" is not one of debug, info, warn, error")
	}
}

// reload: the reload section.
func (p *problems) reload(r Reload) {
	if r.WatchInterval < time.Second {
		p.outOfRange("reload.watch_interval", r.WatchInterval, "must be at least 1s")
	}
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
