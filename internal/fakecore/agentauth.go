package fakecore

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/bailinghub/knowledge-sidecar/corefacts"
)

// Agent Auth's authorization flow (CORE_FACTS Addendum 4): a local agent
// creates an authorization, the business system's consent page approves or
// denies it with its Client Token, the agent exchanges the code and
// refreshes with rotation. Codes and tokens are kept only as SHA-256
// hashes, as Core keeps them.

// AuthClient is a Core client (a bz_clients row) as Agent Auth sees it.
type AuthClient struct {
	AppID string
	// AuthorizeURL is the client's agent_authorize_url (the business
	// system's consent page): https, or loopback http with an explicit
	// port. "" or anything else: the client cannot authorize
	// (invalid_client) and its sessions do not authenticate.
	AuthorizeURL string
	// AllowedRoutes is the client's allowlist.
	AllowedRoutes []string
	// Token is the Client Token the business page calls Core with.
	Token    string
	Disabled bool
}

// Agent Auth's lifetimes (CORE_FACTS §1.1, Addendum 4). The access TTL is
// Options.AccessTTL (default 15 minutes).
const (
	authorizationTTL = 10 * time.Minute
	authCodeTTL      = 2 * time.Minute
	refreshTTL       = 30 * 24 * time.Hour
	defaultAccessTTL = 15 * time.Minute
	authorizeLimit   = 10 // per minute per client and IP
)

type authorization struct {
	id, clientID, redirectURI, state, device string
	routes                                   []string
	challenge                                string
	expires                                  time.Time
	status                                   string // pending, approved, denied
	codeHash                                 string
	codeExpires                              time.Time
	codeUsed                                 bool
	principal                                corefacts.Principal
	onBehalfOf                               string
	allowed                                  []string
}

// authSession is one Agent Session created by a code exchange.
type authSession struct {
	session        corefacts.Session
	access         string // current access token (key of Core.sessions)
	refreshHash    string // current refresh token's hash
	refreshExpires time.Time
	revoked        bool
}

type authState struct {
	clients   map[string]AuthClient
	auths     map[string]*authorization
	codes     map[string]string // code hash → authorization id
	refreshes map[string]*authSession
	// rotated: hashes of refresh tokens already rotated away (replay
	// revokes the session).
	rotated map[string]*authSession
	rate    map[string][]time.Time // client|ip → creation times in the last minute
}

func (c *Core) auth() *authState {
	if c.authSt == nil {
		c.authSt = &authState{clients: map[string]AuthClient{}, auths: map[string]*authorization{},
			codes: map[string]string{}, refreshes: map[string]*authSession{}, rotated: map[string]*authSession{},
			rate: map[string][]time.Time{}}
	}
	return c.authSt
}

// AddAuthClient declares (or replaces) a Core client for Agent Auth.
func (c *Core) AddAuthClient(cl AuthClient) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.auth().clients[cl.AppID] = cl
}

func (c *Core) accessTTL() time.Duration {
	if c.opts.AccessTTL > 0 {
		return c.opts.AccessTTL
	}
	return defaultAccessTTL
}

var (
	routeKeyPattern  = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{1,63}$`)
	challengePattern = regexp.MustCompile(`^[A-Za-z0-9_-]{43}$`)
	verifierPattern  = regexp.MustCompile(`^[A-Za-z0-9._~-]{43,128}$`)
)

// loopbackCallback is Core's redirect_uri rule: http, host exactly
// 127.0.0.1 or [::1], an explicit port 1–65535, no user info, no fragment,
// at most 2048 characters.
func loopbackCallback(s string) bool {
	if s == "" || len(s) > 2048 {
		return false
	}
	u, err := url.Parse(s)
	if err != nil || u.Scheme != "http" || u.User != nil || u.Fragment != "" || strings.Contains(s, "#") {
		return false
	}
	host, port, err := net.SplitHostPort(u.Host)
	if err != nil || (host != "127.0.0.1" && host != "::1") || (host == "::1" && !strings.HasPrefix(u.Host, "[")) {
		return false
	}
	n, err := strconv.Atoi(port)
	return err == nil && n >= 1 && n <= 65535
}

// validAuthorizeURL is Core's check of agent_authorize_url.
func validAuthorizeURL(s string) bool {
	u, err := url.Parse(s)
	if err != nil || u.Host == "" {
		return false
	}
	if u.Scheme == "https" {
		return true
	}
	host, port, err := net.SplitHostPort(u.Host)
	return u.Scheme == "http" && err == nil && port != "" && net.ParseIP(host) != nil && net.ParseIP(host).IsLoopback()
}

func hashHex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

func randomToken(prefix string) string {
	var b [32]byte
	_, _ = rand.Read(b[:])
	return prefix + base64.RawURLEncoding.EncodeToString(b[:])
}

// decodeExact decodes body into dst, a JSON object with exactly the known
// fields (any other field, a wrong type, trailing data → false).
func decodeExact(body []byte, dst any) bool {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if dec.Decode(dst) != nil {
		return false
	}
	_, err := dec.Token()
	return err != nil // only EOF may follow
}

// ipOf is Core's client address: the first X-Forwarded-For entry, else the peer.
func ipOf(r *http.Request) string {
	if xff := r.Header.Get("X-Forwarded-For"); xff != "" {
		first, _, _ := strings.Cut(xff, ",")
		return strings.TrimSpace(first)
	}
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

func authErr(w http.ResponseWriter, status int, code string) {
	writeJSON(w, status, errBody{Error: code})
}

// serveAgentAuth answers /agent-auth/v1/* other than /session.
func (c *Core) serveAgentAuth(w http.ResponseWriter, r *http.Request, body []byte) {
	path := strings.TrimPrefix(r.URL.Path, "/agent-auth/v1/")
	switch {
	case path == "authorizations" && r.Method == http.MethodPost:
		c.createAuthorization(w, r, body)
	case path == "token" && r.Method == http.MethodPost:
		w.Header().Set("Pragma", "no-cache")
		c.token(w, body)
	case path == "revoke" && r.Method == http.MethodPost:
		c.revoke(w, r, body)
	case strings.HasPrefix(path, "authorizations/"):
		c.businessCall(w, r, strings.TrimPrefix(path, "authorizations/"), body)
	default:
		authErr(w, http.StatusNotFound, "not_found")
	}
}

func (c *Core) createAuthorization(w http.ResponseWriter, r *http.Request, body []byte) {
	var in struct {
		ClientAppID         *string   `json:"client_app_id"`
		RedirectURI         *string   `json:"redirect_uri"`
		State               *string   `json:"state"`
		RequestedRoutes     *[]string `json:"requested_routes"`
		DeviceLabel         *string   `json:"device_label"`
		CodeChallenge       *string   `json:"code_challenge"`
		CodeChallengeMethod *string   `json:"code_challenge_method"`
	}
	if !decodeExact(body, &in) || in.ClientAppID == nil || in.RedirectURI == nil || in.State == nil ||
		in.RequestedRoutes == nil || in.DeviceLabel == nil || in.CodeChallenge == nil || in.CodeChallengeMethod == nil {
		authErr(w, http.StatusBadRequest, "invalid_request")
		return
	}
	routes := *in.RequestedRoutes
	n := utf8.RuneCountInString(*in.State)
	label := strings.TrimSpace(*in.DeviceLabel)
	ok := routeKeyPattern.MatchString(*in.ClientAppID) && loopbackCallback(*in.RedirectURI) &&
		n >= 8 && n <= 512 && len(routes) >= 1 && len(routes) <= 64 &&
		label != "" && utf8.RuneCountInString(label) <= 128 &&
		challengePattern.MatchString(*in.CodeChallenge) && *in.CodeChallengeMethod == "S256"
	seen := map[string]bool{}
	for _, rt := range routes {
		if !routeKeyPattern.MatchString(rt) || rt == "auto" || seen[rt] {
			ok = false
		}
		seen[rt] = true
	}
	if !ok {
		authErr(w, http.StatusBadRequest, "invalid_request")
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	st := c.auth()
	cl, known := st.clients[*in.ClientAppID]
	if !known || cl.Disabled || !validAuthorizeURL(cl.AuthorizeURL) {
		authErr(w, http.StatusBadRequest, "invalid_client")
		return
	}
	for _, rt := range routes {
		if !slices.Contains(cl.AllowedRoutes, rt) {
			authErr(w, http.StatusBadRequest, "invalid_client")
			return
		}
	}
	now := c.opts.Now()
	key := cl.AppID + "|" + ipOf(r)
	recent := slices.DeleteFunc(st.rate[key], func(t time.Time) bool { return now.Sub(t) >= time.Minute })
	if len(recent) >= authorizeLimit {
		st.rate[key] = recent
		authErr(w, http.StatusTooManyRequests, "rate_limited")
		return
	}
	st.rate[key] = append(recent, now)
	a := &authorization{id: newUUID(), clientID: cl.AppID, redirectURI: *in.RedirectURI, state: *in.State,
		device: label, routes: slices.Clone(routes), challenge: *in.CodeChallenge,
		expires: now.Add(authorizationTTL), status: "pending"}
	st.auths[a.id] = a
	u, _ := url.Parse(cl.AuthorizeURL)
	q := u.Query()
	q.Set("authorization_id", a.id)
	u.RawQuery = q.Encode()
	writeJSON(w, http.StatusCreated, struct {
		AuthorizationID  string `json:"authorization_id"`
		AuthorizationURL string `json:"authorization_url"`
		ExpiresIn        int    `json:"expires_in"`
	}{a.id, u.String(), int(authorizationTTL / time.Second)})
}

// businessCall is the business page's side: GET …/{id}, POST …/{id}/approve
// or …/deny, with the client's Client Token.
func (c *Core) businessCall(w http.ResponseWriter, r *http.Request, rest string, body []byte) {
	id, action, _ := strings.Cut(rest, "/")
	m := bearerPattern.FindStringSubmatch(r.Header.Get("Authorization"))
	c.mu.Lock()
	defer c.mu.Unlock()
	st := c.auth()
	a, ok := st.auths[id]
	var cl AuthClient
	if ok {
		cl = st.clients[a.clientID]
	}
	if m == nil || !ok || cl.Token == "" || m[1] != cl.Token {
		authErr(w, http.StatusUnauthorized, "unauthorized")
		return
	}
	now := c.opts.Now()
	switch {
	case action == "" && r.Method == http.MethodGet:
		writeJSON(w, http.StatusOK, map[string]any{
			"authorization_id": a.id, "client_app_id": a.clientID, "device_label": a.device,
			"requested_routes": a.routes, "status": a.status, "expires_at": isoTime(a.expires),
		})
		return
	case (action == "approve" || action == "deny") && r.Method == http.MethodPost:
	default:
		authErr(w, http.StatusNotFound, "not_found")
		return
	}
	if a.status != "pending" {
		authErr(w, http.StatusConflict, "authorization_processed")
		return
	}
	if !now.Before(a.expires) {
		authErr(w, http.StatusGone, "authorization_expired")
		return
	}
	cb, _ := url.Parse(a.redirectURI)
	q := cb.Query()
	if action == "deny" {
		var in struct{}
		if !decodeExact(body, &in) {
			authErr(w, http.StatusBadRequest, "invalid_request")
			return
		}
		a.status = "denied"
		q.Set("error", "access_denied")
	} else {
		var in struct {
			Principal     principalJSON `json:"principal"`
			OnBehalfOf    string        `json:"on_behalf_of"`
			AllowedRoutes []string      `json:"allowed_routes"`
		}
		if !decodeExact(body, &in) || in.Principal.ID == "" || len(in.AllowedRoutes) == 0 {
			authErr(w, http.StatusBadRequest, "invalid_request")
			return
		}
		for _, rt := range in.AllowedRoutes {
			if !slices.Contains(a.routes, rt) || !slices.Contains(cl.AllowedRoutes, rt) {
				authErr(w, http.StatusForbidden, "route_not_allowed")
				return
			}
		}
		code := randomToken("bhc_")
		a.status, a.codeHash, a.codeExpires = "approved", hashHex(code), now.Add(authCodeTTL)
		a.principal = corefacts.Principal{ID: in.Principal.ID, Tenant: in.Principal.Tenant, Roles: in.Principal.Roles,
			Audience: in.Principal.Audience, Channel: in.Principal.Channel}
		a.onBehalfOf, a.allowed = in.OnBehalfOf, slices.Clone(in.AllowedRoutes)
		st.codes[a.codeHash] = a.id
		q.Set("code", code)
	}
	q.Set("state", a.state)
	cb.RawQuery = q.Encode()
	writeJSON(w, http.StatusOK, struct {
		RedirectURI string `json:"redirect_uri"`
	}{cb.String()})
}

type tokenAnswer struct {
	TokenType        string `json:"token_type"`
	AccessToken      string `json:"access_token"`
	ExpiresIn        int    `json:"expires_in"`
	RefreshToken     string `json:"refresh_token"`
	RefreshExpiresIn int    `json:"refresh_expires_in"`
	SessionID        string `json:"session_id"`
	ClientAppID      string `json:"client_app_id"`
}

func (c *Core) token(w http.ResponseWriter, body []byte) {
	var probe struct {
		GrantType string `json:"grant_type"`
	}
	if json.Unmarshal(body, &probe) != nil {
		authErr(w, http.StatusBadRequest, "invalid_request")
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	st := c.auth()
	now := c.opts.Now()
	switch probe.GrantType {
	case "authorization_code":
		var in struct {
			GrantType, ClientAppID, Code, RedirectURI, CodeVerifier string
		}
		var raw struct {
			GrantType    *string `json:"grant_type"`
			ClientAppID  *string `json:"client_app_id"`
			Code         *string `json:"code"`
			RedirectURI  *string `json:"redirect_uri"`
			CodeVerifier *string `json:"code_verifier"`
		}
		if !decodeExact(body, &raw) || raw.ClientAppID == nil || raw.Code == nil || raw.RedirectURI == nil || raw.CodeVerifier == nil {
			authErr(w, http.StatusBadRequest, "invalid_request")
			return
		}
		in.ClientAppID, in.Code, in.RedirectURI, in.CodeVerifier = *raw.ClientAppID, *raw.Code, *raw.RedirectURI, *raw.CodeVerifier
		id, found := st.codes[hashHex(in.Code)]
		a := st.auths[id]
		if !found || !strings.HasPrefix(in.Code, "bhc_") || len(in.Code) < 40 || a.codeUsed || !now.Before(a.codeExpires) ||
			a.clientID != in.ClientAppID || a.redirectURI != in.RedirectURI || !verifierPattern.MatchString(in.CodeVerifier) {
			authErr(w, http.StatusBadRequest, "invalid_grant")
			return
		}
		sum := sha256.Sum256([]byte(in.CodeVerifier))
		if base64.RawURLEncoding.EncodeToString(sum[:]) != a.challenge {
			authErr(w, http.StatusBadRequest, "invalid_grant")
			return
		}
		cl := st.clients[a.clientID]
		if cl.Disabled {
			authErr(w, http.StatusBadRequest, "invalid_grant")
			return
		}
		a.codeUsed = true
		as := &authSession{session: corefacts.Session{SessionID: newUUID(), ClientAppID: a.clientID, Principal: a.principal,
			OnBehalfOf: a.onBehalfOf, AllowedRoutes: a.allowed}, refreshExpires: now.Add(refreshTTL)}
		c.issue(w, st, as, now)
	case "refresh_token":
		var raw struct {
			GrantType    *string `json:"grant_type"`
			ClientAppID  *string `json:"client_app_id"`
			RefreshToken *string `json:"refresh_token"`
		}
		if !decodeExact(body, &raw) || raw.ClientAppID == nil || raw.RefreshToken == nil {
			authErr(w, http.StatusBadRequest, "invalid_request")
			return
		}
		h := hashHex(*raw.RefreshToken)
		if old, replay := st.rotated[h]; replay {
			c.revokeSession(st, old) // replaying a rotated refresh token revokes the session
			authErr(w, http.StatusBadRequest, "invalid_grant")
			return
		}
		as, found := st.refreshes[h]
		if !found || !strings.HasPrefix(*raw.RefreshToken, "bhr_") || len(*raw.RefreshToken) < 40 || as.revoked ||
			!now.Before(as.refreshExpires) || as.session.ClientAppID != *raw.ClientAppID || st.clients[as.session.ClientAppID].Disabled {
			authErr(w, http.StatusBadRequest, "invalid_grant")
			return
		}
		delete(st.refreshes, h)
		st.rotated[h] = as
		delete(c.sessions, as.access) // the previous access token stops working at once
		c.issue(w, st, as, now)
	default:
		authErr(w, http.StatusBadRequest, "unsupported_grant_type")
	}
}

// issue gives as a new access and refresh token and answers them. Caller holds mu.
func (c *Core) issue(w http.ResponseWriter, st *authState, as *authSession, now time.Time) {
	access, refresh := randomToken("bha_"), randomToken("bhr_")
	as.access, as.refreshHash = access, hashHex(refresh)
	st.refreshes[as.refreshHash] = as
	s := as.session
	s.ExpiresAt = now.Add(c.accessTTL())
	c.sessions[access] = s
	writeJSON(w, http.StatusOK, tokenAnswer{TokenType: "Bearer", AccessToken: access, ExpiresIn: int(c.accessTTL() / time.Second),
		RefreshToken: refresh, RefreshExpiresIn: int(as.refreshExpires.Sub(now) / time.Second),
		SessionID: s.SessionID, ClientAppID: s.ClientAppID})
}

// revokeSession ends as: its access and refresh tokens. Caller holds mu.
func (c *Core) revokeSession(st *authState, as *authSession) {
	as.revoked = true
	delete(c.sessions, as.access)
	delete(st.refreshes, as.refreshHash)
}

// revoke is POST /agent-auth/v1/revoke: with the access bearer, or with
// {"client_app_id","refresh_token"}; 200 {"revoked": true}.
func (c *Core) revoke(w http.ResponseWriter, r *http.Request, body []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	st := c.auth()
	if m := bearerPattern.FindStringSubmatch(r.Header.Get("Authorization")); m != nil {
		if _, ok := c.sessions[m[1]]; !ok {
			authErr(w, http.StatusUnauthorized, "unauthorized")
			return
		}
		for _, as := range st.refreshes {
			if as.access == m[1] {
				c.revokeSession(st, as)
			}
		}
		delete(c.sessions, m[1])
		writeJSON(w, http.StatusOK, map[string]bool{"revoked": true})
		return
	}
	var raw struct {
		ClientAppID  *string `json:"client_app_id"`
		RefreshToken *string `json:"refresh_token"`
	}
	if !decodeExact(body, &raw) || raw.ClientAppID == nil || raw.RefreshToken == nil {
		authErr(w, http.StatusBadRequest, "invalid_request")
		return
	}
	if as, ok := st.refreshes[hashHex(*raw.RefreshToken)]; ok && as.session.ClientAppID == *raw.ClientAppID {
		c.revokeSession(st, as)
	}
	writeJSON(w, http.StatusOK, map[string]bool{"revoked": true})
}

// PendingAuthorizations is how many authorizations await the business page.
func (c *Core) PendingAuthorizations() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, a := range c.auth().auths {
		if a.status == "pending" {
			n++
		}
	}
	return n
}

// ExpireAccessTokens makes every access token issued by /agent-auth/v1/token
// expired now (401 from then on), as the passing of Options.AccessTTL would:
// a test's clock for hosts that must refresh by themselves.
func (c *Core) ExpireAccessTokens() {
	c.mu.Lock()
	defer c.mu.Unlock()
	past := c.opts.Now().Add(-time.Second)
	for _, as := range c.auth().refreshes {
		if s, ok := c.sessions[as.access]; ok {
			s.ExpiresAt = past
			c.sessions[as.access] = s
		}
	}
}
