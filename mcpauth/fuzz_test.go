package mcpauth_test

import (
	"context"
	"net/netip"
	"strings"
	"testing"

	"github.com/bailinghub/knowledge-sidecar/mcpauth"
)

// cannedCore answers every call with Core's 400 invalid_grant (or 201 for
// an authorization), without a network.
type cannedCore struct{}

func (cannedCore) CreateAuthorization(context.Context, []byte, netip.Addr) (int, []byte, error) {
	return 201, []byte(`{"authorization_id":"a","authorization_url":"https://biz.example/consent?authorization_id=a","expires_in":600}`), nil
}
func (cannedCore) AgentToken(context.Context, []byte) (int, []byte, error) {
	return 400, []byte(`{"error":"invalid_grant"}`), nil
}
func (cannedCore) AgentRevoke(context.Context, []byte, string) (int, []byte, error) {
	return 200, []byte(`{"revoked":true}`), nil
}

// FuzzHandle: whatever the query or body, every endpoint answers a defined
// status (never a 5xx but 503 for Core), a redirect only to a loopback
// callback or the business page, and JSON otherwise.
func FuzzHandle(f *testing.F) {
	f.Add("response_type=code&client_id=mcp-hosts&redirect_uri=http%3A%2F%2Flocalhost%3A1%2Fcb&code_challenge_method=S256", "application/json", `{"redirect_uris":["http://127.0.0.1:9/cb"]}`)
	f.Add("redirect_uri=http://[::1]:1/x&client_id=mcp-hosts&state=%ff%fe", "application/x-www-form-urlencoded", "grant_type=refresh_token&refresh_token=bhr_x&client_id=mcp-hosts")
	f.Add("a=%zz;b", "application/json", `{"grant_type":[1],"token":"bha_x"}`)
	svc, err := mcpauth.New(mcpauth.Options{Core: cannedCore{}, ClientAppID: "mcp-hosts", Issuer: "https://kb.example.com",
		Served: func(string) bool { return true }, Rate: 1e9, Burst: 1 << 30})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, query, ct, body string) {
		for _, e := range mcpauth.Endpoints {
			a := svc.Handle(context.Background(), mcpauth.Request{Endpoint: e, RawQuery: query, ContentType: ct, Body: []byte(body)})
			switch {
			case a.Status == 302:
				if !strings.HasPrefix(a.Location, "http://127.0.0.1:") && !strings.HasPrefix(a.Location, "http://localhost:") &&
					!strings.HasPrefix(a.Location, "http://[::1]:") && !strings.HasPrefix(a.Location, "https://biz.example/") {
					t.Fatalf("%s: redirect to %q", e, a.Location)
				}
			case a.Status >= 500 && a.Status != 503, a.Status < 200, len(a.JSON) == 0:
				t.Fatalf("%s: status %d body %q", e, a.Status, a.JSON)
			}
		}
	})
}
