package coreclient

import (
	"bytes"
	"context"
	"net/http"
	"net/netip"
)

// Core's Agent Auth flow (CORE_FACTS Addendum 4), for the OAuth front of
// SPEC §12: creating an authorization, the token endpoint's two grants and
// revocation. These calls carry no bearer of a caller's session and go
// through no breaker: each is one user's sign-in, and a refusal or an
// outage is answered to that host as it is (a breaker opened by sign-ins
// would also refuse nothing the knowledge endpoints need).

// Each call answers Core's status and JSON body (at most 64 KiB), relayed
// for the caller to read.

// CreateAuthorization sends payload (the JSON object of
// POST /agent-auth/v1/authorizations) with exactly one X-Forwarded-For
// entry, client: Core rate-limits authorizations per client and IP, its IP
// being that first entry. An invalid client address sends none. Errors are
// ErrUnavailable (Core unreachable, no answer in time, an answer too large).
func (c *Client) CreateAuthorization(ctx context.Context, payload []byte, client netip.Addr) (status int, body []byte, err error) {
	return c.agentAuth(ctx, "/agent-auth/v1/authorizations", payload, func(req *http.Request) {
		if client.IsValid() {
			req.Header.Set("X-Forwarded-For", client.Unmap().WithZone("").String())
		}
	})
}

// AgentToken sends payload (the JSON object of POST /agent-auth/v1/token:
// an authorization_code or refresh_token grant).
func (c *Client) AgentToken(ctx context.Context, payload []byte) (status int, body []byte, err error) {
	return c.agentAuth(ctx, "/agent-auth/v1/token", payload, nil)
}

// AgentRevoke sends POST /agent-auth/v1/revoke: with authorization (an
// access bearer's whole header) and an empty object, or with payload
// {"client_app_id","refresh_token"} and authorization "".
func (c *Client) AgentRevoke(ctx context.Context, payload []byte, authorization string) (status int, body []byte, err error) {
	if authorization != "" && !headerValueOK(authorization) {
		return http.StatusUnauthorized, []byte(`{"error":"unauthorized"}`), nil
	}
	return c.agentAuth(ctx, "/agent-auth/v1/revoke", payload, func(req *http.Request) {
		if authorization != "" {
			req.Header.Set("Authorization", authorization)
		}
	})
}

func (c *Client) agentAuth(ctx context.Context, path string, payload []byte, prepare func(*http.Request)) (status int, body []byte, err error) {
	err = c.call(ctx, nil, OpAgentAuth, func(ctx context.Context) error {
		req, err := c.newRequest(ctx, http.MethodPost, path, bytes.NewReader(payload))
		if err != nil {
			return err
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json")
		if prepare != nil {
			prepare(req)
		}
		status, body, err = c.do(req, identityBodyLimit)
		if err != nil {
			return err
		}
		if status >= 500 {
			return statusUnavailable(status)
		}
		return nil
	})
	if err != nil {
		return 0, nil, err
	}
	return status, body, nil
}
