package coreclient

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/bailinghub/knowledge-sidecar/corefacts"
)

// Errors of the operator probes (check-config --probe).
var (
	// ErrNotACore: something answered, but not the way a BailingHub Core does.
	ErrNotACore = errors.New("the server does not answer like a BailingHub Core")
	// ErrTokenRefused: Core refused the service token on /kb/search (401),
	// or it is an executor token (403).
	ErrTokenRefused = errors.New("core refused the service token")
	// ErrTokenRateLimited: Core accepted the service token on the probe but its
	// per-client rate limit is exhausted (429).
	ErrTokenRateLimited = errors.New("core rate-limits the service token")
)

// probeKB is a knowledge base id no Core has: /kb/search then answers 400
// 知识库不可用 after authenticating, so the probe costs no embedding call.
const probeKB = "ks-probe-no-such-kb"

// ProbeCore asks GET /agent-auth/v1/session without a credential. A Core
// answers 401 {"error":"unauthorized"} (CORE_FACTS §1.3); anything else is
// ErrNotACore, a transport failure ErrUnavailable. No breaker, no retry.
func (c *Client) ProbeCore(ctx context.Context) error {
	return c.call(ctx, nil, OpProbe, func(ctx context.Context) error {
		status, body, err := c.get(ctx, "/agent-auth/v1/session", "", identityBodyLimit)
		if err != nil {
			return err
		}
		var e agentError
		if status != http.StatusUnauthorized || json.Unmarshal(body, &e) != nil || e.Error != "unauthorized" {
			return fmt.Errorf("%w (status %d on /agent-auth/v1/session without a token; want 401 unauthorized)", ErrNotACore, status)
		}
		return nil
	})
}

// ProbeServiceToken sends the service token to POST /kb/search for a
// knowledge base that does not exist: 400 知识库不可用 (or a 200) means the
// token was accepted; 401/403 ErrTokenRefused; 429 ErrTokenRateLimited.
func (c *Client) ProbeServiceToken(ctx context.Context) error {
	if c.serviceToken == "" {
		return fmt.Errorf("%w: no service token is configured", ErrTokenRefused)
	}
	payload, _ := json.Marshal(searchRequest{KBIDs: []string{probeKB}, Query: "probe", TopK: 1, MinScore: 1})
	return c.call(ctx, nil, OpProbe, func(ctx context.Context) error {
		status, body, err := c.postKBSearch(ctx, payload)
		if err != nil {
			return err
		}
		switch status {
		case http.StatusOK:
			return nil
		case http.StatusBadRequest:
			if kbUnavailable(body) {
				return nil
			}
			return fmt.Errorf("%w (status 400 from /kb/search)", ErrNotACore)
		case http.StatusUnauthorized, http.StatusForbidden:
			return fmt.Errorf("%w (status %d)", ErrTokenRefused, status)
		case http.StatusTooManyRequests:
			return ErrTokenRateLimited
		default:
			return statusUnavailable(status)
		}
	})
}

// ProbeSystemInfo says whether Core has GET …/system-info (Core ≥ 0.7),
// using an Agent access token (authorization, "Bearer bha_…") and the first
// route its session allows. ErrUnauthorized when Core refuses the token.
func (c *Client) ProbeSystemInfo(ctx context.Context, authorization string) (present bool, err error) {
	s, err := c.Session(ctx, authorization)
	if err != nil {
		return false, err
	}
	if len(s.AllowedRoutes) == 0 {
		return false, fmt.Errorf("%w: the session allows no route", ErrNotACore)
	}
	route, _ := corefacts.ParseRouteKey(s.AllowedRoutes[0]) // "*" is no key: answered without a call
	err = c.SystemInfo(ctx, authorization, route)
	var ce *corefacts.CoreError
	switch {
	case err == nil, errors.As(err, &ce): // allowed, or Core's own gate answered
		return true, nil
	case errors.Is(err, corefacts.ErrEndpointAbsent):
		return false, nil
	default:
		return false, err
	}
}
