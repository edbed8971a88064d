package mcpauth

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf16"

	lru "github.com/hashicorp/golang-lru/v2"
	"golang.org/x/time/rate"

	"github.com/bailinghub/knowledge-sidecar/corefacts"
)

// Core is what the front needs of Core's Agent Auth (coreclient.Client
// satisfies it). Each call answers Core's status and JSON body; an error
// means Core could not be asked (corefacts.ErrUnavailable).
type Core interface {
	CreateAuthorization(ctx context.Context, payload []byte, client netip.Addr) (int, []byte, error)
	AgentToken(ctx context.Context, payload []byte) (int, []byte, error)
	AgentRevoke(ctx context.Context, payload []byte, authorization string) (int, []byte, error)
}

// Endpoints (the `endpoint` label of oauth_requests_total).
const (
	EndpointMetadata  = "metadata"
	EndpointRegister  = "register"
	EndpointAuthorize = "authorize"
	EndpointToken     = "token"
	EndpointRevoke    = "revoke"
)

// Outcomes (the `outcome` label of oauth_requests_total).
const (
	OutcomeOK          = "ok"
	OutcomeInvalid     = "invalid"      // refused by the sidecar's own checks
	OutcomeRefused     = "core_refused" // Core answered an error (a denied grant, a bad code, …)
	OutcomeRateLimited = "rate_limited"
	OutcomeUnavailable = "unavailable" // Core could not be reached
)

// Endpoints and Outcomes are the closed label sets.
var (
	Endpoints = []string{EndpointMetadata, EndpointRegister, EndpointAuthorize, EndpointToken, EndpointRevoke}
	Outcomes  = []string{OutcomeOK, OutcomeInvalid, OutcomeRefused, OutcomeRateLimited, OutcomeUnavailable}
)

// The front's paths (SPEC §12: the sidecar's choice; none is a path Core serves).
const (
	PathMetadata  = "/.well-known/oauth-authorization-server"
	PathRegister  = "/oauth/register"
	PathAuthorize = "/oauth/authorize"
	PathToken     = "/oauth/token"
	PathRevoke    = "/oauth/revoke"
)

// MaxBody bounds the body of the register, token and revoke requests.
const MaxBody = 16 << 10

// DefaultDeviceLabel is the device_label Core shows the user (config
// mcp.oauth.device_label).
const DefaultDeviceLabel = "MCP host"

// Default per-address limit of the OAuth endpoints.
const (
	DefaultRate  = 2.0
	DefaultBurst = 30
)

// limiterEntries bounds how many client addresses' buckets are kept (the
// least recently seen go first: a forgotten address starts with a full burst).
const limiterEntries = 16384

// Options configure a Service.
type Options struct {
	Core Core
	// ClientAppID is the public Core client MCP hosts sign in as
	// (mcp.oauth.client_app_id).
	ClientAppID string
	// DeviceLabel is what Core's consent shows as the device (default
	// DefaultDeviceLabel).
	DeviceLabel string
	// Issuer is scheme://host[:port] of the sidecar as hosts reach it
	// (mcp.public_url), without a trailing slash.
	Issuer string
	// Served reports whether the sidecar serves the MCP endpoint of a
	// route (rolled out): a resource naming another is invalid_target.
	Served func(route string) bool
	// Rate and Burst are the per-address limit (defaults 2/s, 30).
	Rate  float64
	Burst int
	// Observe, when set, counts each request by endpoint and outcome.
	Observe func(endpoint, outcome string)
}

// Service is the OAuth front. Safe for concurrent use.
type Service struct {
	o        Options
	issuer   *url.URL
	limiters *lru.Cache[netip.Addr, *rate.Limiter]
	metadata []byte
}

// New validates o and builds the front.
func New(o Options) (*Service, error) {
	if o.Core == nil || o.Served == nil {
		return nil, errors.New("mcpauth: core and served are required")
	}
	if !validKey(o.ClientAppID) {
		return nil, errors.New("mcpauth: client app id must be a Core client id")
	}
	iss, err := url.Parse(strings.TrimSuffix(o.Issuer, "/"))
	if err != nil || (iss.Scheme != "http" && iss.Scheme != "https") || iss.Host == "" || iss.User != nil ||
		(iss.Path != "" && iss.Path != "/") || iss.RawQuery != "" || iss.Fragment != "" {
		return nil, errors.New("mcpauth: issuer must be an absolute http(s) URL with no path")
	}
	iss.Path = ""
	if o.DeviceLabel == "" {
		o.DeviceLabel = DefaultDeviceLabel
	}
	if o.Rate <= 0 {
		o.Rate = DefaultRate
	}
	if o.Burst <= 0 {
		o.Burst = DefaultBurst
	}
	if o.Observe == nil {
		o.Observe = func(string, string) {}
	}
	s := &Service{o: o, issuer: iss}
	s.limiters, _ = lru.New[netip.Addr, *rate.Limiter](limiterEntries)
	s.metadata, _ = json.Marshal(metadata{
		Issuer:                            iss.String(),
		AuthorizationEndpoint:             iss.String() + PathAuthorize,
		TokenEndpoint:                     iss.String() + PathToken,
		RegistrationEndpoint:              iss.String() + PathRegister,
		RevocationEndpoint:                iss.String() + PathRevoke,
		ResponseTypesSupported:            []string{"code"},
		GrantTypesSupported:               []string{"authorization_code", "refresh_token"},
		CodeChallengeMethodsSupported:     []string{"S256"},
		TokenEndpointAuthMethodsSupported: []string{"none"},
		RevocationEndpointAuthMethods:     []string{"none"},
	})
	return s, nil
}

// Issuer is the authorization server's issuer (the RFC 9728 document's
// authorization_servers entry).
func (s *Service) Issuer() string { return s.issuer.String() }

// metadata is the RFC 8414 document: only what the front supports. Its own
// type, not the go-sdk's oauthex.AuthServerMeta, which writes jwks_uri
// without omitempty ("jwks_uri":"" is not a URL; the sidecar signs nothing).
type metadata struct {
	Issuer                            string   `json:"issuer"`
	AuthorizationEndpoint             string   `json:"authorization_endpoint"`
	TokenEndpoint                     string   `json:"token_endpoint"`
	RegistrationEndpoint              string   `json:"registration_endpoint"`
	RevocationEndpoint                string   `json:"revocation_endpoint"`
	ResponseTypesSupported            []string `json:"response_types_supported"`
	GrantTypesSupported               []string `json:"grant_types_supported"`
	CodeChallengeMethodsSupported     []string `json:"code_challenge_methods_supported"`
	TokenEndpointAuthMethodsSupported []string `json:"token_endpoint_auth_methods_supported"`
	RevocationEndpointAuthMethods     []string `json:"revocation_endpoint_auth_methods_supported"`
}

// Request is one request to the front, in plain values.
type Request struct {
	Endpoint string // one of Endpoints
	// RawQuery is the request's query (authorize).
	RawQuery string
	// ContentType is the request's Content-Type; Body its body, read by
	// the edge up to MaxBody+1 bytes.
	ContentType string
	Body        []byte
	// Client is the host's resolved address (the zero Addr when unknown).
	Client netip.Addr
}

// Answer is what the edge writes: a redirect (Location, 302), or a JSON
// body with Status. Every answer is no-store; NoCache adds Pragma:
// no-cache (the token endpoint's).
type Answer struct {
	Status     int
	Location   string
	JSON       []byte
	NoCache    bool
	RetryAfter int // seconds, for a 429
}

// Handle answers one request.
func (s *Service) Handle(ctx context.Context, r Request) Answer {
	outcome := OutcomeOK
	a := s.handle(ctx, r, &outcome)
	s.o.Observe(r.Endpoint, outcome)
	return a
}

func (s *Service) handle(ctx context.Context, r Request, outcome *string) Answer {
	if r.Endpoint != EndpointMetadata {
		if ok, retry := s.allow(r.Client); !ok {
			*outcome = OutcomeRateLimited
			a := oauthError(429, "rate_limited", "Too many sign-in requests from this address; retry later.")
			a.RetryAfter = retry
			return a
		}
	}
	switch r.Endpoint {
	case EndpointMetadata:
		return Answer{Status: 200, JSON: s.metadata}
	case EndpointRegister:
		return s.register(r, outcome)
	case EndpointAuthorize:
		return s.authorize(ctx, r, outcome)
	case EndpointToken:
		a := s.token(ctx, r, outcome)
		a.NoCache = true
		return a
	case EndpointRevoke:
		return s.revoke(ctx, r, outcome)
	}
	*outcome = OutcomeInvalid
	return oauthError(404, "not_found", "No such endpoint.")
}

// allow takes a token from client's bucket; retry is the whole seconds
// until one is back.
func (s *Service) allow(client netip.Addr) (ok bool, retry int) {
	key := client.Unmap().WithZone("")
	if key.Is6() {
		if p, err := key.Prefix(64); err == nil {
			key = p.Addr() // one host commonly holds a whole /64
		}
	}
	lim, found := s.limiters.Get(key)
	if !found {
		lim = rate.NewLimiter(rate.Limit(s.o.Rate), s.o.Burst)
		if prev, ok, _ := s.limiters.PeekOrAdd(key, lim); ok {
			lim = prev
		}
	}
	res := lim.Reserve()
	if d := res.Delay(); d > 0 {
		res.Cancel()
		return false, max(1, int((d+time.Second-1)/time.Second))
	}
	return true, 0
}

type errorBody struct {
	Error       string `json:"error"`
	Description string `json:"error_description,omitempty"`
}

func oauthError(status int, code, description string) Answer {
	b, _ := json.Marshal(errorBody{Error: code, Description: description})
	return Answer{Status: status, JSON: b}
}

// knownParams are the token and revocation endpoints' parameters.
var knownParams = map[string]bool{"grant_type": true, "code": true, "redirect_uri": true, "code_verifier": true,
	"client_id": true, "refresh_token": true, "resource": true, "token": true, "token_type_hint": true}

// params are a request's parameters: the query, or a form or JSON body.
type params map[string]string

// errDuplicate: a parameter given twice (RFC 6749 §3.1, §3.2).
var errDuplicate = errors.New("a parameter is given more than once")

func fromValues(v url.Values) (params, error) {
	p := params{}
	for k, vs := range v {
		if len(vs) > 1 {
			return nil, errDuplicate
		}
		p[k] = vs[0]
	}
	return p, nil
}

// bodyParams reads a form-encoded body, or a JSON object of strings.
func bodyParams(r Request) (params, error) {
	ct := strings.ToLower(strings.TrimSpace(strings.Split(r.ContentType, ";")[0]))
	switch ct {
	case "application/json":
		var m map[string]any
		if err := json.Unmarshal(r.Body, &m); err != nil || m == nil {
			return nil, errors.New("the body is not a JSON object")
		}
		p := params{}
		for k, v := range m {
			switch v := v.(type) {
			case string:
				p[k] = v
			case nil:
			default:
				if knownParams[k] { // any other parameter is ignored (RFC 6749 §3.2)
					return nil, errors.New("parameter " + strconv.Quote(k) + " must be a string")
				}
			}
		}
		return p, nil
	case "application/x-www-form-urlencoded":
		v, err := url.ParseQuery(string(r.Body))
		if err != nil {
			return nil, errors.New("the body is not valid form encoding")
		}
		return fromValues(v)
	}
	return nil, errors.New("the body must be application/x-www-form-urlencoded or application/json")
}

// loopback parses a host's callback the way Core will judge it after
// translation: http, host 127.0.0.1, [::1] or localhost, an explicit port
// 1–65535, no user info, no fragment. core is the callback as Core is
// given it (localhost → 127.0.0.1, same port and path), at most 2048
// characters.
func loopback(raw string) (core string, ok bool) {
	if raw == "" || len(raw) > 2048 || strings.Contains(raw, "#") {
		return "", false
	}
	u, err := url.Parse(raw)
	if err != nil || u.Scheme != "http" || u.User != nil || u.Opaque != "" {
		return "", false
	}
	host, port, err := net.SplitHostPort(u.Host)
	if err != nil {
		return "", false
	}
	n, err := strconv.Atoi(port)
	if err != nil || n < 1 || n > 65535 || strconv.Itoa(n) != port {
		return "", false
	}
	switch {
	case host == "127.0.0.1", host == "::1" && strings.HasPrefix(u.Host, "["):
	case strings.EqualFold(host, "localhost"):
		u.Host = "127.0.0.1:" + port
	default:
		return "", false
	}
	core = u.String()
	if len(core) > 2048 {
		return "", false
	}
	return core, true
}

// resourceRoute is the route of a resource that is this sidecar's MCP URL
// of a route it serves, or "".
func (s *Service) resourceRoute(resource string) string {
	u, err := url.Parse(resource)
	if err != nil || !strings.EqualFold(u.Scheme, s.issuer.Scheme) || !strings.EqualFold(u.Host, s.issuer.Host) ||
		u.User != nil || u.Fragment != "" || u.RawPath != "" {
		return ""
	}
	const prefix, suffix = "/agent-api/v1/workspaces/", "/knowledge/mcp"
	route, ok := strings.CutPrefix(u.Path, prefix)
	if !ok {
		return ""
	}
	route, ok = strings.CutSuffix(route, suffix)
	if !ok || !validKey(route) || !s.o.Served(route) {
		return ""
	}
	return route
}

// stateLen is a state's length as Core counts it (JavaScript string length).
func stateLen(s string) int { return len(utf16.Encode([]rune(s))) }

// randomState is a state for a host that sent none (Core requires 8–512).
func randomState() string {
	var b [24]byte
	_, _ = rand.Read(b[:])
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// coreError is the code of Core's flat error body, or "".
func coreError(body []byte) string {
	var e struct {
		Error string `json:"error"`
	}
	if json.Unmarshal(body, &e) != nil || !oauthCode(e.Error) {
		return ""
	}
	return e.Error
}

// oauthCode reports whether c can be relayed as an OAuth error code
// (RFC 6749 §5.2: printable ASCII without '"' and '\').
func oauthCode(c string) bool {
	if c == "" || len(c) > 64 {
		return false
	}
	for i := 0; i < len(c); i++ {
		if b := c[i]; b < 0x20 || b > 0x7e || b == '"' || b == '\\' {
			return false
		}
	}
	return true
}

// validKey reports whether s matches Core's key pattern (client ids and
// routes alike: ^[a-z0-9][a-z0-9_-]{1,63}$).
func validKey(s string) bool {
	_, ok := corefacts.ParseRouteKey(s)
	return ok
}
