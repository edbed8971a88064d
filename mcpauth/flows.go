package mcpauth

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"time"
)

var (
	challengePattern = regexp.MustCompile(`^[A-Za-z0-9_-]{43}$`)
	verifierPattern  = regexp.MustCompile(`^[A-Za-z0-9._~-]{43,128}$`)
)

// register is RFC 7591 dynamic registration, stateless: every client is
// the one Core client, its loopback redirect URIs echoed.
func (s *Service) register(r Request, outcome *string) Answer {
	bad := func(code, desc string) Answer {
		*outcome = OutcomeInvalid
		return oauthError(http.StatusBadRequest, code, desc)
	}
	if len(r.Body) > MaxBody {
		*outcome = OutcomeInvalid
		return oauthError(http.StatusRequestEntityTooLarge, "invalid_client_metadata", "The request body is over 16 KiB.")
	}
	var m struct {
		RedirectURIs            []string        `json:"redirect_uris"`
		TokenEndpointAuthMethod *string         `json:"token_endpoint_auth_method"`
		GrantTypes              []string        `json:"grant_types"`
		ResponseTypes           []string        `json:"response_types"`
		ClientName              json.RawMessage `json:"client_name"`
		Scope                   json.RawMessage `json:"scope"`
	}
	if json.Unmarshal(r.Body, &m) != nil {
		return bad("invalid_client_metadata", "The body must be a JSON object of client metadata.")
	}
	if len(m.RedirectURIs) == 0 {
		return bad("invalid_redirect_uri", "redirect_uris must name at least one loopback callback.")
	}
	for _, u := range m.RedirectURIs {
		if _, ok := loopback(u); !ok {
			return bad("invalid_redirect_uri",
				"Only loopback callbacks are accepted: http://127.0.0.1, [::1] or localhost with an explicit port.")
		}
	}
	if m.TokenEndpointAuthMethod != nil && *m.TokenEndpointAuthMethod != "none" {
		return bad("invalid_client_metadata", `token_endpoint_auth_method must be "none" (a public client).`)
	}
	grants := m.GrantTypes
	if grants == nil {
		grants = []string{"authorization_code", "refresh_token"}
	}
	for _, g := range grants {
		if g != "authorization_code" && g != "refresh_token" {
			return bad("invalid_client_metadata", "grant_types may be authorization_code and refresh_token only.")
		}
	}
	responses := m.ResponseTypes
	if responses == nil {
		responses = []string{"code"}
	}
	for _, t := range responses {
		if t != "code" {
			return bad("invalid_client_metadata", `response_types may be "code" only.`)
		}
	}
	out := map[string]any{
		"client_id":                  s.o.ClientAppID,
		"client_id_issued_at":        time.Now().Unix(),
		"token_endpoint_auth_method": "none",
		"grant_types":                grants,
		"response_types":             responses,
		"redirect_uris":              m.RedirectURIs,
	}
	var name string
	if json.Unmarshal(m.ClientName, &name) == nil && name != "" {
		out["client_name"] = name
	}
	b, _ := json.Marshal(out)
	return Answer{Status: http.StatusCreated, JSON: b}
}

// authorize is the authorization endpoint: the request is checked, Core's
// authorization is created and the browser is sent to the business page.
func (s *Service) authorize(ctx context.Context, r Request, outcome *string) Answer {
	q, err := url.ParseQuery(r.RawQuery)
	page := func(code, desc string) Answer { // never a redirect
		*outcome = OutcomeInvalid
		return oauthError(http.StatusBadRequest, code, desc)
	}
	if err != nil {
		return page("invalid_request", "The query is malformed.")
	}
	if len(q["client_id"]) != 1 || q.Get("client_id") != s.o.ClientAppID {
		return page("invalid_client", "Unknown client_id: register first (the registration endpoint names it).")
	}
	if len(q["redirect_uri"]) != 1 {
		return page("invalid_request", "redirect_uri is missing or given more than once.")
	}
	callback := q.Get("redirect_uri")
	coreCallback, ok := loopback(callback)
	if !ok {
		return page("invalid_request", "redirect_uri must be a loopback callback with an explicit port.")
	}
	// From here on every error goes back to the host's callback.
	hostState, hasState := q.Get("state"), q.Get("state") != ""
	back := func(out, code, desc string) Answer {
		*outcome = out
		u, _ := url.Parse(callback)
		v := u.Query()
		v.Set("error", code)
		if desc != "" {
			v.Set("error_description", desc)
		}
		if hasState {
			v.Set("state", hostState)
		}
		v.Set("iss", s.issuer.String())
		u.RawQuery = v.Encode()
		return Answer{Status: http.StatusFound, Location: u.String()}
	}
	if _, err := fromValues(q); err != nil {
		return back(OutcomeInvalid, "invalid_request", "A parameter is given more than once.")
	}
	switch rt := q.Get("response_type"); {
	case rt == "":
		return back(OutcomeInvalid, "invalid_request", "response_type is missing.")
	case rt != "code":
		return back(OutcomeInvalid, "unsupported_response_type", `Only response_type "code" is supported.`)
	}
	if q.Get("code_challenge_method") != "S256" || !challengePattern.MatchString(q.Get("code_challenge")) {
		return back(OutcomeInvalid, "invalid_request", "PKCE with code_challenge_method S256 is required.")
	}
	state := hostState
	if !hasState {
		state = randomState()
	} else if n := stateLen(state); n < 8 || n > 512 {
		return back(OutcomeInvalid, "invalid_request", "state must be 8 to 512 characters.")
	}
	route := s.resourceRoute(q.Get("resource"))
	if route == "" {
		return back(OutcomeInvalid, "invalid_target", "resource must be this server's MCP URL of a served workspace.")
	}
	payload, _ := json.Marshal(struct {
		ClientAppID         string   `json:"client_app_id"`
		RedirectURI         string   `json:"redirect_uri"`
		State               string   `json:"state"`
		RequestedRoutes     []string `json:"requested_routes"`
		DeviceLabel         string   `json:"device_label"`
		CodeChallenge       string   `json:"code_challenge"`
		CodeChallengeMethod string   `json:"code_challenge_method"`
	}{s.o.ClientAppID, coreCallback, state, []string{route}, s.o.DeviceLabel, q.Get("code_challenge"), "S256"})
	status, body, err := s.o.Core.CreateAuthorization(ctx, payload, r.Client)
	switch {
	case err != nil:
		return back(OutcomeUnavailable, "temporarily_unavailable", "The sign-in service cannot be reached; try again shortly.")
	case status == http.StatusTooManyRequests:
		return back(OutcomeRefused, "temporarily_unavailable", "Too many sign-ins from this address; try again in a minute.")
	case status != http.StatusCreated:
		code := coreError(body)
		if code == "" || status >= 500 {
			return back(OutcomeUnavailable, "temporarily_unavailable", "The sign-in service could not start the sign-in.")
		}
		return back(OutcomeRefused, code, "The sign-in service refused the request.")
	}
	var created struct {
		AuthorizationURL string `json:"authorization_url"`
	}
	if json.Unmarshal(body, &created) != nil {
		return back(OutcomeUnavailable, "temporarily_unavailable", "The sign-in service gave an unusable answer.")
	}
	to, err := url.Parse(created.AuthorizationURL)
	if err != nil || (to.Scheme != "https" && to.Scheme != "http") || to.Host == "" {
		return back(OutcomeUnavailable, "temporarily_unavailable", "The sign-in service gave an unusable answer.")
	}
	return Answer{Status: http.StatusFound, Location: to.String()}
}

// tokenAnswer is RFC 6749 §5.1.
type tokenAnswer struct {
	AccessToken  string `json:"access_token"`
	TokenType    string `json:"token_type"`
	ExpiresIn    int    `json:"expires_in"`
	RefreshToken string `json:"refresh_token,omitempty"`
}

// token is the token endpoint: both grants become Core's JSON calls.
func (s *Service) token(ctx context.Context, r Request, outcome *string) Answer {
	bad := func(code, desc string) Answer {
		*outcome = OutcomeInvalid
		return oauthError(http.StatusBadRequest, code, desc)
	}
	if len(r.Body) > MaxBody {
		*outcome = OutcomeInvalid
		return oauthError(http.StatusRequestEntityTooLarge, "invalid_request", "The request body is over 16 KiB.")
	}
	p, err := bodyParams(r)
	if err != nil {
		return bad("invalid_request", upperFirst(err.Error())+".")
	}
	if rs, ok := p["resource"]; ok && s.resourceRoute(rs) == "" {
		return bad("invalid_target", "resource must be this server's MCP URL of a served workspace.")
	}
	var payload any
	switch p["grant_type"] {
	case "":
		return bad("invalid_request", "grant_type is missing.")
	case "authorization_code":
		if missing := absent(p, "code", "redirect_uri", "code_verifier", "client_id"); missing != "" {
			return bad("invalid_request", missing+" is missing.")
		}
		if p["client_id"] != s.o.ClientAppID {
			return bad("invalid_client", "Unknown client_id.")
		}
		cb, ok := loopback(p["redirect_uri"])
		if !ok {
			return bad("invalid_grant", "redirect_uri is not the callback of the authorization.")
		}
		if !verifierPattern.MatchString(p["code_verifier"]) {
			return bad("invalid_grant", "code_verifier is not a PKCE verifier.")
		}
		payload = struct {
			GrantType    string `json:"grant_type"`
			ClientAppID  string `json:"client_app_id"`
			Code         string `json:"code"`
			RedirectURI  string `json:"redirect_uri"`
			CodeVerifier string `json:"code_verifier"`
		}{"authorization_code", s.o.ClientAppID, p["code"], cb, p["code_verifier"]}
	case "refresh_token":
		if missing := absent(p, "refresh_token", "client_id"); missing != "" {
			return bad("invalid_request", missing+" is missing.")
		}
		if p["client_id"] != s.o.ClientAppID {
			return bad("invalid_client", "Unknown client_id.")
		}
		payload = struct {
			GrantType    string `json:"grant_type"`
			ClientAppID  string `json:"client_app_id"`
			RefreshToken string `json:"refresh_token"`
		}{"refresh_token", s.o.ClientAppID, p["refresh_token"]}
	default:
		return bad("unsupported_grant_type", "grant_type must be authorization_code or refresh_token.")
	}
	b, _ := json.Marshal(payload)
	status, body, err := s.o.Core.AgentToken(ctx, b)
	unavailable := func() Answer {
		*outcome = OutcomeUnavailable
		a := oauthError(http.StatusServiceUnavailable, "temporarily_unavailable", "The sign-in service cannot be reached; try again shortly.")
		a.RetryAfter = 1
		return a
	}
	switch {
	case err != nil:
		return unavailable()
	case status == http.StatusOK:
		var t tokenAnswer
		if json.Unmarshal(body, &t) != nil || t.AccessToken == "" || !strings.EqualFold(t.TokenType, "Bearer") || t.ExpiresIn <= 0 {
			return unavailable()
		}
		t.TokenType = "Bearer"
		out, _ := json.Marshal(t)
		return Answer{Status: http.StatusOK, JSON: out}
	case status >= 400 && status < 500 && status != http.StatusTooManyRequests && coreError(body) != "":
		*outcome = OutcomeRefused
		code := coreError(body)
		desc := map[string]string{
			"invalid_grant": "The code or refresh token is invalid, expired, already used or revoked; sign in again.",
		}[code]
		return oauthError(http.StatusBadRequest, code, desc)
	}
	return unavailable()
}

// revoke is RFC 7009: the token is revoked at Core; 200 whether or not it
// was valid.
func (s *Service) revoke(ctx context.Context, r Request, outcome *string) Answer {
	if len(r.Body) > MaxBody {
		*outcome = OutcomeInvalid
		return oauthError(http.StatusRequestEntityTooLarge, "invalid_request", "The request body is over 16 KiB.")
	}
	p, err := bodyParams(r)
	if err != nil {
		*outcome = OutcomeInvalid
		return oauthError(http.StatusBadRequest, "invalid_request", upperFirst(err.Error())+".")
	}
	tok := p["token"]
	if tok == "" {
		*outcome = OutcomeInvalid
		return oauthError(http.StatusBadRequest, "invalid_request", "token is missing.")
	}
	if id, ok := p["client_id"]; ok && id != s.o.ClientAppID {
		*outcome = OutcomeInvalid
		return oauthError(http.StatusBadRequest, "invalid_client", "Unknown client_id.")
	}
	var err2 error
	switch {
	case strings.HasPrefix(tok, "bhr_"):
		b, _ := json.Marshal(map[string]string{"client_app_id": s.o.ClientAppID, "refresh_token": tok})
		_, _, err2 = s.o.Core.AgentRevoke(ctx, b, "")
	case strings.HasPrefix(tok, "bha_") && !strings.ContainsAny(tok, " \t\r\n"):
		_, _, err2 = s.o.Core.AgentRevoke(ctx, []byte(`{}`), "Bearer "+tok)
	default:
		// Not a token Core issues: nothing to revoke (RFC 7009 §2.2).
	}
	if err2 != nil {
		*outcome = OutcomeUnavailable
		a := oauthError(http.StatusServiceUnavailable, "temporarily_unavailable", "The sign-in service cannot be reached; try again shortly.")
		a.RetryAfter = 1
		return a
	}
	return Answer{Status: http.StatusOK, JSON: []byte(`{}`)}
}

// absent is the first of names p lacks (or has empty), or "".
func absent(p params, names ...string) string {
	if i := slices.IndexFunc(names, func(n string) bool { return p[n] == "" }); i >= 0 {
		return names[i]
	}
	return ""
}

func upperFirst(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}
