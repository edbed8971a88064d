package coreclient_test

import (
	"context"
	"errors"
	"net/http"
	"net/netip"
	"strings"
	"testing"

	"github.com/bailinghub/knowledge-sidecar/corefacts"
	"github.com/bailinghub/knowledge-sidecar/internal/fakecore"
)

// TestAgentAuthCalls: Core's answers are relayed with their status; the
// authorization call carries exactly one X-Forwarded-For entry, the client
// given; a 5xx and a dead Core are ErrUnavailable, with nothing of the
// payload in the error.
func TestAgentAuthCalls(t *testing.T) {
	e := newEnv(t, fakecore.Options{}, nil)
	ctx := context.Background()
	st, body, err := e.client.CreateAuthorization(ctx, []byte(`{"client_app_id":"nobody"}`), netip.MustParseAddr("::ffff:203.0.113.7"))
	if err != nil || st != http.StatusBadRequest || !strings.Contains(string(body), "invalid_request") {
		t.Fatalf("create: got %d %s %v; want Core's 400 invalid_request", st, body, err)
	}
	req, _ := e.core.LastRequest("/agent-auth/v1/authorizations")
	if got := req.Header.Values("X-Forwarded-For"); len(got) != 1 || got[0] != "203.0.113.7" {
		t.Errorf("X-Forwarded-For %q; want exactly [203.0.113.7]", got)
	}
	st, body, err = e.client.AgentToken(ctx, []byte(`{"grant_type":"password"}`))
	if err != nil || st != http.StatusBadRequest || !strings.Contains(string(body), "unsupported_grant_type") {
		t.Errorf("token: got %d %s %v; want Core's 400 unsupported_grant_type", st, body, err)
	}
	st, body, err = e.client.AgentRevoke(ctx, []byte(`{}`), aliceAuth)
	if err != nil || st != http.StatusOK {
		t.Errorf("revoke by bearer: got %d %s %v; want 200", st, body, err)
	}
	e.core.SetFault("/agent-auth/v1/token", fakecore.Fault{Status: 503})
	secret := "bhr_secret-refresh-token-0123456789-0123456789"
	_, _, err = e.client.AgentToken(ctx, []byte(`{"refresh_token":"`+secret+`"}`))
	if !errors.Is(err, corefacts.ErrUnavailable) || strings.Contains(err.Error(), secret) {
		t.Errorf("Core 503: got %v; want ErrUnavailable without the payload", err)
	}
}
