package config

import (
	"time"

	"github.com/bailinghub/knowledge-sidecar/breaker"
	"github.com/bailinghub/knowledge-sidecar/catalog"
	"github.com/bailinghub/knowledge-sidecar/corelink"
	"github.com/bailinghub/knowledge-sidecar/knowledge"
	"github.com/bailinghub/knowledge-sidecar/ledger"
	"github.com/bailinghub/knowledge-sidecar/native"
	"github.com/bailinghub/knowledge-sidecar/proxy"
)

// Config is the whole configuration. Field comments state the unit and the
// default; Defaults returns the defaults. The settings kept out of the YAML
// file (yaml:"-") are the secrets, each listed in Secrets.
type Config struct {
	// Listen is the address of the proxy listener. Default ":8080".
	Listen string `yaml:"listen"`
	// AdminListen is the address of /metrics, /healthz and /readyz.
	// Default "127.0.0.1:9090".
	AdminListen string `yaml:"admin_listen"`
	// AdminAllowedHosts are the host names (without port) the admin
	// listener answers in the Host header besides IP literals and
	// localhost, which are always allowed: another Host is 403, so a
	// DNS-rebinding page cannot read it. List the name a scraper or probe
	// uses (a Kubernetes Service name, say). Default none.
	AdminAllowedHosts []string `yaml:"admin_allowed_hosts"`

	Core    Core    `yaml:"core"`
	Catalog Catalog `yaml:"catalog"`
	Signing Signing `yaml:"signing"`

	// Rollout selects the workspaces that get the protocol: "off", "all",
	// "allow:a,b", "deny:a,b" or "percent:N". Default "off". Hot-reloadable.
	Rollout string `yaml:"rollout"`
	// TurnHints gives on_demand turns up to 3 same-run hints built from
	// what Core retrieved for the turn (SPEC §7); false answers "hints": [].
	// Default true. Hot-reloadable.
	TurnHints bool `yaml:"turn_hints"`
	// NativeDetection is "auto" (probe Core's capabilities), "never"
	// (always serve the protocol) or "always" (assume a native Core: pass
	// everything through): one of native.Modes. Default "auto".
	NativeDetection string `yaml:"native_detection"`
	// ProbeInterval is how long a native/legacy probe result is kept. Default 60s.
	ProbeInterval time.Duration `yaml:"probe_interval"`

	Ledger    Ledger    `yaml:"ledger"`
	RateLimit RateLimit `yaml:"rate_limit"`
	Proxy     Proxy     `yaml:"proxy"`
	Shutdown  Shutdown  `yaml:"shutdown"`
	Log       Log       `yaml:"log"`
	Reload    Reload    `yaml:"reload"`
	Tracing   Tracing   `yaml:"tracing"`
	Audit     Audit     `yaml:"audit"`
	MCP       MCP       `yaml:"mcp"`
}

// MCP configures the remote MCP endpoint (SPEC §10, docs/hosts.md), served
// on every rolled-out workspace whatever is set here.
type MCP struct {
	// AuthorizationServers, when set, are the OAuth authorization servers
	// (issuer URLs) that issue the hosts' Agent access tokens: a 401 then
	// names the RFC 9728 Protected Resource Metadata document, which lists
	// them, so an MCP host can discover where to sign in. Default none (a
	// 401 says only "Bearer"). Restart-only.
	AuthorizationServers []string `yaml:"authorization_servers"`
	// Scopes, when set, is the metadata document's scopes_supported.
	// Default none. Restart-only.
	Scopes []string `yaml:"scopes"`
	// PublicURL is the sidecar's address as hosts reach it (scheme and
	// host, e.g. https://agents.example.com): the metadata's resource and
	// the 401's resource_metadata are built on it. Default: the request's
	// own scheme and Host. Set it behind a proxy that rewrites Host.
	// Restart-only.
	PublicURL string `yaml:"public_url"`
	// OAuth signs MCP hosts in through Core's Agent Auth (SPEC §12).
	OAuth MCPOAuth `yaml:"oauth"`
}

// MCPOAuth configures the OAuth 2.1 front MCP hosts sign in through (SPEC
// §12, docs/hosts.md): the sidecar is the authorization server hosts see,
// backed entirely by Core's Agent Auth.
type MCPOAuth struct {
	// ClientAppID is the public Core client (bz_clients app_id) MCP hosts
	// sign in as; it needs an agent_authorize_url (the business system's
	// consent page) and the rolled-out routes in its allowlist. Setting it
	// turns the front on; it requires mcp.public_url and excludes
	// mcp.authorization_servers. Default "" (off). Restart-only.
	ClientAppID string `yaml:"client_app_id"`
	// DeviceLabel is the device name Core's consent shows (1–128
	// characters). Default "MCP host". Restart-only.
	DeviceLabel string `yaml:"device_label"`
}

// Audit configures the disclosure audit (SPEC §11, docs/audit.md): one
// JSON event per answer of search, read and on_demand turns naming the
// documents disclosed, never the query or any document text.
type Audit struct {
	// Enabled turns the audit on. Default false. Restart-only.
	Enabled bool `yaml:"enabled"`
	// File is where events are appended as JSON Lines: a path, or "-" for
	// standard output. Reopened on SIGHUP and POST /-/reload (logrotate).
	// Default "-". Restart-only (the path; reopening is not).
	File string `yaml:"file"`
	// OnFailure is what an answer does when its event cannot be written:
	// "continue" (sent; the failure counted and logged) or "refuse" (503
	// knowledge_unavailable: nothing disclosed without its event). Default
	// "continue". Restart-only.
	OnFailure string `yaml:"on_failure"`
	// OTLP also sends each event as an OpenTelemetry log record to the
	// OTLP collector tracing uses (OTEL_EXPORTER_OTLP_[LOGS_]* variables);
	// needs tracing.enabled. Default false. Restart-only.
	OTLP bool `yaml:"otlp"`
	// QueryHMACKey, when set, records HMAC-SHA256(key, query) in hex beside
	// a search's query length (a plain hash of a short query is guessable).
	// At least 32 bytes. Secret: env or QueryHMACKeyFile only. Default unset.
	QueryHMACKey string `yaml:"-"`
	// QueryHMACKeyFile is a file holding QueryHMACKey.
	QueryHMACKeyFile string `yaml:"query_hmac_key_file"`
}

// Audit failure policies (audit.on_failure).
const (
	AuditContinue = "continue"
	AuditRefuse   = "refuse"
)

// Tracing configures OpenTelemetry tracing (SPEC §9, docs/tracing.md).
type Tracing struct {
	// Enabled turns tracing on: spans exported over OTLP as the standard
	// OTEL_* variables say (endpoint, protocol, headers, service name,
	// sampler; OTEL_SDK_DISABLED=true wins). Default false. Restart-only.
	Enabled bool `yaml:"enabled"`
	// TrustInbound is whose W3C traceparent/tracestate the sidecar honours
	// (parent-based sampling follows them) and forwards: "trusted_proxies"
	// (peers in proxy.trusted_proxies, the trust X-Forwarded-* get), "all"
	// or "none". Anyone else's request starts a new trace decided by the
	// sampler, and their trace headers do not reach Core (also with tracing
	// off). Default "trusted_proxies". Restart-only.
	TrustInbound string `yaml:"trust_inbound"`
}

// Core is the legacy Core the sidecar fronts.
type Core struct {
	// URL is Core's base URL (absolute http or https). Required.
	URL string `yaml:"url"`
	// Token is the sidecar's own Core credential (a Client Token or the
	// server token) used for /kb/search only. Secret: env or TokenFile only.
	Token string `yaml:"-"`
	// TokenFile is a file holding Token (trailing newline trimmed).
	TokenFile string `yaml:"token_file"`
	// CAFile is a PEM file of the CA certificate(s) that sign an https://
	// Core's certificate, trusted in addition to the system roots, by the
	// pass-through and by the sidecar's own Core calls alike (MCP hosts and
	// containers often do not pass SSL_CERT_FILE). Default "" (the system
	// roots only). Restart-only.
	CAFile string `yaml:"ca_file"`
	// ClientAppID is the app_id of the Core client (bz_clients) whose token
	// is Token. Optional, default "" (not checked). When set, the catalog
	// reads its rate_limit_per_min at start-up and on each schema re-check:
	// Core rate-limits every /kb/search call of that client (one per KB of
	// a route, all sessions together), so a non-zero limit is logged at warn
	// with the search capacity it implies and exported as gauges.
	ClientAppID string `yaml:"client_app_id"`
	// Timeout bounds each identity, route-gate and retrieval call. Default 3s.
	Timeout time.Duration `yaml:"timeout"`
	// Identity is the breaker of session and system-info calls.
	Identity Breaker `yaml:"identity_breaker"`
	// Retrieval is the breaker of /kb/search calls.
	Retrieval Breaker `yaml:"retrieval_breaker"`
}

// Breaker holds one circuit breaker's thresholds.
type Breaker struct {
	// Failures is the number of consecutive failures that opens it. Default 5.
	Failures uint32 `yaml:"failures"`
	// Window resets the closed-state counts. Default 30s.
	Window time.Duration `yaml:"window"`
	// OpenTimeout is how long it stays open before a probe. Default 10s.
	OpenTimeout time.Duration `yaml:"open_timeout"`
	// HalfOpenMax is the number of probes admitted while half-open. Default 1.
	HalfOpenMax uint32 `yaml:"half_open_max"`
}

// Catalog is the read-only SQL view of Core's database.
type Catalog struct {
	// DSN is the go-sql-driver/mysql DSN of a read-only user. Secret: env or
	// DSNFile only. Empty disables the knowledge features.
	DSN string `yaml:"-"`
	// DSNFile is a file holding DSN.
	DSNFile string `yaml:"dsn_file"`
	// MaxOpenConns caps open connections. Default 10.
	MaxOpenConns int `yaml:"max_open_conns"`
	// MaxIdleConns caps idle connections. Default 10, max_open_conns: a
	// request that finds more statements in flight than idle slots would
	// otherwise close a connection on release and the next one open it again
	// (a TCP and MySQL handshake per burst).
	MaxIdleConns int `yaml:"max_idle_conns"`
	// ConnMaxLifetime recycles connections. Default 5m.
	ConnMaxLifetime time.Duration `yaml:"conn_max_lifetime"`
	// QueryTimeout bounds each query. Default 2s.
	QueryTimeout time.Duration `yaml:"query_timeout"`
	// DocCacheEntries sizes the document revision cache (entries). Default 512.
	DocCacheEntries int `yaml:"doc_cache_entries"`
	// DocCacheBytes caps the text the cache holds (bytes); a body over a
	// quarter of it is not cached. Default 67108864 (64 MiB).
	DocCacheBytes int64 `yaml:"doc_cache_bytes"`
	// Breaker is the catalog's circuit breaker.
	Breaker Breaker `yaml:"breaker"`
}

// Signing holds the reference/cursor signing keys.
type Signing struct {
	// Keys is "id1:BASE64SECRET,id2:BASE64SECRET"; the first signs, all
	// verify. Empty: a key derived from core.token. Secret: env or
	// KeysFile.
	Keys string `yaml:"-"`
	// KeysFile is a file holding Keys.
	KeysFile string `yaml:"keys_file"`
}

// Ledger is the turn-mode ledger.
type Ledger struct {
	// Backend is "memory" (one replica) or "redis" (replicas share it).
	// Default "memory"; "redis" when a Redis URL is set.
	Backend string `yaml:"backend"`
	// RedisURL is go-redis's URL of RedisMode: single
	// redis://[user:pass@]host:port/db; cluster
	// redis://[user:pass@]host:port?addr=host2:port2&addr=host3:port3;
	// sentinel redis://[sentinel-user:pass@]host:port?master_name=NAME&addr=host2:port2
	// (the master's credentials as username=…&password=… parameters).
	// rediss:// turns TLS on (at least TLS 1.2) in every mode. Secret: env
	// or RedisURLFile.
	RedisURL string `yaml:"-"`
	// RedisURLFile is a file holding RedisURL.
	RedisURLFile string `yaml:"redis_url_file"`
	// RedisMode is "single" (one node), "cluster" (Redis Cluster or Valkey
	// cluster: the URL's nodes are seeds) or "sentinel" (a primary found
	// and followed through Sentinel). Default "single". Restart-only.
	RedisMode string `yaml:"redis_mode"`
	// RedisCAFile is a PEM file of the CA that signs the Redis servers'
	// certificates (rediss:// only). Default "" (the system roots).
	RedisCAFile string `yaml:"redis_ca_file"`
	// RedisWaitReplicas > 0 sends WAIT n (timeout 500ms) after each turn
	// reservation, so the record is on n replicas before Core sees the
	// turn: a failover then cannot lose it, at the cost of one replication
	// round trip per turn; fewer replicas acknowledging in time answers the
	// turn 503. Default 0 (off).
	RedisWaitReplicas int `yaml:"redis_wait_replicas"`
	// TTL is how long a turn's mode is remembered. Default 24h.
	TTL time.Duration `yaml:"ttl"`
	// MaxEntries bounds the memory backend. Default 100000.
	MaxEntries int `yaml:"max_entries"`
}

// RateLimit is the per-session token bucket of the knowledge endpoints.
type RateLimit struct {
	// Backend is "local" (each replica its own buckets) or "redis" (one
	// GCRA bucket per session on the ledger's Redis, shared by every
	// replica; the local bucket decides while Redis cannot be reached).
	// Default "redis" when a ledger Redis URL is set, else "local".
	Backend string `yaml:"backend"`
	// RPS is the refill rate in requests per second. Default 10.
	RPS float64 `yaml:"rps"`
	// Burst is the bucket size. Default 20.
	Burst int `yaml:"burst"`
}

// Proxy tunes the listener and the pass-through transport.
type Proxy struct {
	// TrustedProxies lists CIDRs or IPs whose X-Forwarded-* headers are kept
	// and appended to. Others' are replaced. Default none.
	TrustedProxies []string `yaml:"trusted_proxies"`
	// PreserveHost forwards the client's Host header (X-Forwarded-Host is set
	// either way). Default true.
	PreserveHost bool `yaml:"preserve_host"`
	// ClientAddressHeadersExtra names headers to add to the built-in list of
	// client-address and original-URL headers (X-Forwarded-*, Forwarded,
	// X-Real-IP, True-Client-IP, … docs/decisions.md) that an untrusted
	// peer's request loses before it reaches Core. Matched in any case and
	// with '_' for '-'; a name ending in '*' is a prefix. Default none.
	ClientAddressHeadersExtra []string `yaml:"client_address_headers_extra"`
	// ReadHeaderTimeout bounds reading request headers (slowloris). Default 10s.
	ReadHeaderTimeout time.Duration `yaml:"read_header_timeout"`
	// IdleTimeout closes idle keep-alive connections. Default 120s.
	IdleTimeout time.Duration `yaml:"idle_timeout"`
	// BodyIdleTimeout ends a request whose body sends no byte for this long
	// (408 if nothing was answered yet; the connection closes), so a slow
	// sender cannot hold a request open. Default 30s.
	BodyIdleTimeout time.Duration `yaml:"body_idle_timeout"`
	// BodyMinRate is the slowest a request body may arrive on average
	// (bytes per second) once BodyMinRateWindow has passed: every byte
	// read earns the body 1/BodyMinRate seconds more, and a body never
	// holds more than BodyMinRateWindow of credit, so a client that trickles
	// (one byte every 29 s) is cut with 408 while an upload that moves data
	// runs as long as it needs. Applies to reading the request body only,
	// never to the response (SSE, WebSockets). 0 turns it off. Default 1024.
	BodyMinRate int64 `yaml:"body_min_rate"`
	// BodyMinRateWindow is the grace a body gets before BodyMinRate applies,
	// and the most credit it can bank by sending fast. Default 20s.
	BodyMinRateWindow time.Duration `yaml:"body_min_rate_window"`
	// BodyTimeout bounds reading a whole request body, however fast it
	// moves (like Envoy's request_timeout, for the body only). 0 = none, the
	// default, so long streaming uploads keep working.
	BodyTimeout time.Duration `yaml:"body_timeout"`
	// MaxHeaderBytes caps the request line plus headers (bytes); larger is
	// answered 431 by net/http before any handler. Core's Node server
	// accepts 16 KiB. Default 32768 (32 KiB).
	MaxHeaderBytes int `yaml:"max_header_bytes"`
	// MaxConnections caps the proxy listener's open client connections
	// (idle keep-alive, in flight and upgraded ones together). A connection
	// over the cap gets a minimal 503 with Retry-After and is closed.
	// Default 1024.
	MaxConnections int `yaml:"max_connections"`
	// MaxInFlight caps the requests the proxy listener handles at once
	// (long-lived SSE and WebSocket requests count while they last); one
	// over it is answered 503 overloaded with Retry-After. Default 512.
	MaxInFlight int `yaml:"max_in_flight"`
	// TurnBodyBudget caps the bytes of turn request bodies buffered for
	// interception at once, all connections together (bytes; a turn counts
	// the buffer its body has filled so far, as its bytes arrive, plus the
	// copy without knowledge_delivery; a caller whose bearer is missing or
	// refused holds none). A turn over the budget is answered 503 overloaded
	// with Retry-After. Default 33554432 (32 MiB).
	TurnBodyBudget int64 `yaml:"turn_body_budget"`
	// MCPAnswerBudget caps the bytes of remote MCP answers in flight, all
	// clients together (bytes; a tool call holds the pages it keeps, its
	// result and the result's encodings until its answer is written). One
	// client address holds at most a quarter of it, but at least 8 MiB. A
	// tool call over it is a tool error overloaded telling the model to
	// retry. Default 33554432 (32 MiB).
	MCPAnswerBudget int64 `yaml:"mcp_answer_budget"`
	// MaxConnectionsPerClient, MaxInFlightPerClient and
	// TurnBodyBudgetPerClient are one client address's share of
	// MaxConnections, MaxInFlight and TurnBodyBudget (connections, requests,
	// bytes): past its share a client is answered like past the cap, while
	// others are served. The client is the peer address for connections
	// (a trusted proxy has no connection share), and the address resolved
	// through trusted_proxies for requests and turn bodies; IPv6 addresses
	// count by /64. Behind a load balancer that is not in trusted_proxies,
	// every request comes from its address: list it, or set -1. 0, the
	// default, is a quarter of the cap; -1 turns the share off. The share
	// applied also shrinks with the clients active at once, to the cap ÷
	// (active clients + 1) (at least 1; a turn body share at least 1 MiB),
	// so clients at their shares leave room for one more.
	MaxConnectionsPerClient int   `yaml:"max_connections_per_client"`
	MaxInFlightPerClient    int   `yaml:"max_in_flight_per_client"`
	TurnBodyBudgetPerClient int64 `yaml:"turn_body_budget_per_client"`
	// MemoryLimit is the Go runtime's soft memory limit (bytes), as
	// GOMEMLIMIT: the garbage collector works harder near it instead of the
	// process growing into an OOM kill. 0, the default, takes 90 % of the
	// container's cgroup memory limit when there is one (else no limit); an
	// explicit GOMEMLIMIT environment variable always wins. Restart-only.
	MemoryLimit int64 `yaml:"memory_limit"`
	// DialTimeout bounds connecting to Core (pass-through and the Core
	// client's identity and search calls alike). Default 5s.
	DialTimeout time.Duration `yaml:"dial_timeout"`
	// ResponseHeaderTimeout bounds waiting for Core's response headers on
	// pass-through traffic (0 = none; streams are not affected once headers
	// arrived). Default 60s.
	ResponseHeaderTimeout time.Duration `yaml:"response_header_timeout"`
	// MaxIdleConnsPerHost sizes the keep-alive pool to Core: the
	// pass-through's, and the Core client's (a pool of its own). Default 256.
	MaxIdleConnsPerHost int `yaml:"max_idle_conns_per_host"`
}

// Shutdown tunes SIGTERM handling.
type Shutdown struct {
	// DrainDelay is how long /readyz reports 503 before the listeners stop
	// accepting, so load balancers notice. Default 5s.
	DrainDelay time.Duration `yaml:"drain_delay"`
	// Timeout bounds waiting for in-flight requests. Default 30s.
	Timeout time.Duration `yaml:"timeout"`
}

// Log configures logging.
type Log struct {
	// Level is debug, info, warn or error. Default info. Hot-reloadable.
	Level string `yaml:"level"`
	// Access writes one info line per proxied request (method, handler,
	// status, duration_ms; never the path's query, a token or a body).
	// Default false. Restart-only.
	Access bool `yaml:"access"`
}

// Reload configures reloading without signals (POST /-/reload on the admin
// listener always works; SIGHUP too).
type Reload struct {
	// Watch re-reads the config file when its content changes (a Kubernetes
	// ConfigMap update, an edit). Default false.
	Watch bool `yaml:"watch"`
	// WatchInterval is how often the file is checked. Default 10s.
	WatchInterval time.Duration `yaml:"watch_interval"`
}

// Defaults returns the documented defaults. A setting a package applies
// takes that package's default (breaker, catalog, corelink, knowledge,
// ledger, native, proxy), written there once; the rest are written here.
func Defaults() Config {
	b := breakerConfig(breaker.DefaultSettings())
	cat := catalog.DefaultOptions()
	return Config{
		Listen:      ":8080",
		AdminListen: "127.0.0.1:9090",
		Core:        Core{Timeout: corelink.Timeout, Identity: b, Retrieval: b},
		Catalog: Catalog{MaxOpenConns: cat.MaxOpenConns, MaxIdleConns: cat.MaxIdleConns, ConnMaxLifetime: cat.ConnMaxLifetime,
			QueryTimeout: cat.QueryTimeout, DocCacheEntries: cat.DocCacheEntries, DocCacheBytes: cat.DocCacheBytes,
			Breaker: breakerConfig(cat.Breaker)},
		Rollout:         "off",
		TurnHints:       true,
		NativeDetection: native.ModeAuto,
		ProbeInterval:   corelink.ProbeInterval,
		Ledger:          Ledger{Backend: "", RedisMode: "single", TTL: ledger.DefaultTTL, MaxEntries: ledger.DefaultMaxEntries},
		RateLimit:       RateLimit{RPS: knowledge.DefaultRateLimit, Burst: knowledge.DefaultRateBurst},
		Proxy: Proxy{
			PreserveHost:          true,
			ReadHeaderTimeout:     10 * time.Second,
			IdleTimeout:           120 * time.Second,
			BodyIdleTimeout:       30 * time.Second,
			BodyMinRate:           proxy.DefaultBodyMinRate,
			BodyMinRateWindow:     proxy.DefaultBodyMinRateWindow,
			MaxHeaderBytes:        32 << 10,
			MaxConnections:        proxy.DefaultMaxConnections,
			MaxInFlight:           proxy.DefaultMaxInFlight,
			TurnBodyBudget:        proxy.DefaultTurnBodyBudget,
			MCPAnswerBudget:       proxy.DefaultMCPAnswerBudget,
			DialTimeout:           corelink.DialTimeout,
			ResponseHeaderTimeout: proxy.DefaultResponseHeaderTimeout,
			MaxIdleConnsPerHost:   corelink.MaxIdleConnsPerHost,
		},
		Shutdown: Shutdown{DrainDelay: 5 * time.Second, Timeout: 30 * time.Second},
		Log:      Log{Level: "info"},
		Reload:   Reload{WatchInterval: 10 * time.Second},
		MCP:      MCP{OAuth: MCPOAuth{DeviceLabel: "MCP host"}},
		Tracing:  Tracing{Enabled: false, TrustInbound: "trusted_proxies"}, // off unless asked for
		Audit:    Audit{Enabled: false, File: "-", OnFailure: AuditContinue},
	}
}

// breakerConfig is a breaker's settings as its config section.
func breakerConfig(s breaker.Settings) Breaker {
	return Breaker{Failures: s.Failures, Window: s.Window, OpenTimeout: s.OpenTimeout, HalfOpenMax: s.HalfOpenMax}
}

// KnowledgeEnabled reports whether the knowledge features can run: they need
// the catalog DSN and a signing secret (explicit keys or the Core token).
// When false the sidecar is a pure pass-through proxy; the reason says why.
func (c *Config) KnowledgeEnabled() (ok bool, reason string) {
	switch {
	case c.Catalog.DSN == "":
		return false, "no catalog DSN (" + secret("catalog.dsn").Env + ") is configured"
	case c.Core.Token == "" && c.Signing.Keys == "":
		return false, "neither a Core service token (" + secret("core.token").Env + ") nor signing keys are configured"
	case c.Core.Token == "":
		return false, "no Core service token (" + secret("core.token").Env + ") is configured for /kb/search"
	}
	return true, ""
}

// LedgerBackend is the effective ledger backend.
func (c *Config) LedgerBackend() string {
	if c.Ledger.Backend != "" {
		return c.Ledger.Backend
	}
	if c.Ledger.RedisURL != "" {
		return "redis"
	}
	return "memory"
}

// RateLimitBackend is the effective rate-limit backend.
func (c *Config) RateLimitBackend() string {
	if c.RateLimit.Backend != "" {
		return c.RateLimit.Backend
	}
	if c.Ledger.RedisURL != "" {
		return "redis"
	}
	return "local"
}
