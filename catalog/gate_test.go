package catalog

import (
	"errors"
	"net/http"
	"testing"

	"github.com/bailinghub/knowledge-sidecar/corefacts"
)

func TestDecideGate(t *testing.T) {
	const route = "order-assistant"
	okRoute := &gateRoute{Enabled: true}
	okClient := &gateClient{Enabled: true, AllowedRoutes: []byte(`["order-assistant"]`), AuthorizeURL: "https://app.example/authorize"}
	session := corefacts.Session{
		SessionID:     "s-1",
		ClientAppID:   "app-a",
		Principal:     corefacts.Principal{ID: "user-42", Tenant: "tenant-7", Roles: []string{"clerk", "manager"}, Audience: "internal", Channel: "web"},
		AllowedRoutes: []string{route},
	}
	withSession := func(f func(*corefacts.Session)) corefacts.Session {
		s := session
		s.Principal.Roles = append([]string(nil), session.Principal.Roles...)
		f(&s)
		return s
	}
	aud := func(policy string) *gateRoute { return &gateRoute{Enabled: true, Audience: []byte(policy)} }

	const (
		allowed   = ""
		unavail   = CodeRouteUnavailable
		notAllow  = CodeRouteNotAllowed
		audNotAll = CodeAudienceNotAllowed
	)
	cases := []struct {
		name   string
		route  *gateRoute
		client *gateClient
		s      corefacts.Session
		want   string
	}{
		{"allowed", okRoute, okClient, session, allowed},
		{"route missing", nil, okClient, session, unavail},
		{"route missing beats missing client", nil, nil, session, unavail},
		{"route disabled", &gateRoute{Enabled: false}, okClient, session, unavail},
		{"disabled route not in allow-list answers 403 first, as Core does", &gateRoute{Enabled: false}, okClient,
			withSession(func(s *corefacts.Session) { s.AllowedRoutes = []string{"other"} }), notAllow},

		// client row
		{"client missing", okRoute, nil, session, notAllow},
		{"client disabled", okRoute, &gateClient{AllowedRoutes: []byte(`["*"]`), AuthorizeURL: "https://x"}, session, notAllow},
		{"client without authorize url", okRoute, &gateClient{Enabled: true, AllowedRoutes: []byte(`["*"]`)}, session, notAllow},
		{"client with blank authorize url", okRoute, &gateClient{Enabled: true, AllowedRoutes: []byte(`["*"]`), AuthorizeURL: "  "}, session, notAllow},
		{"client allowed_routes NULL", okRoute, &gateClient{Enabled: true, AuthorizeURL: "https://x"}, session, notAllow},
		{"client allowed_routes empty", okRoute, &gateClient{Enabled: true, AllowedRoutes: []byte(`[]`), AuthorizeURL: "https://x"}, session, notAllow},
		{"client allowed_routes other", okRoute, &gateClient{Enabled: true, AllowedRoutes: []byte(`["other"]`), AuthorizeURL: "https://x"}, session, notAllow},
		{"client allowed_routes is case-sensitive", okRoute, &gateClient{Enabled: true, AllowedRoutes: []byte(`["Order-Assistant"]`), AuthorizeURL: "https://x"}, session, notAllow},
		{"client allowed_routes wildcard", okRoute, &gateClient{Enabled: true, AllowedRoutes: []byte(`["other","*"]`), AuthorizeURL: "https://x"}, session, allowed},
		{"client allowed_routes not an array", okRoute, &gateClient{Enabled: true, AllowedRoutes: []byte(`"*"`), AuthorizeURL: "https://x"}, session, notAllow},

		// session allow-list
		{"session allow-list lacks route", okRoute, okClient, withSession(func(s *corefacts.Session) { s.AllowedRoutes = []string{"other"} }), notAllow},
		{"session allow-list empty", okRoute, okClient, withSession(func(s *corefacts.Session) { s.AllowedRoutes = nil }), notAllow},
		{"session allow-list wildcard", okRoute, okClient, withSession(func(s *corefacts.Session) { s.AllowedRoutes = []string{"*"} }), allowed},

		// audience (normalizeAudiencePolicy / audienceAllows)
		{"audience {} allows", aud(`{}`), okClient, session, allowed},
		{"audience null allows", aud(`null`), okClient, session, allowed},
		{"audience enabled false allows", aud(`{"enabled":false,"roles":["nobody"]}`), okClient, session, allowed},
		{"audience enabled 0 still applies", aud(`{"enabled":0,"roles":["nobody"]}`), okClient, session, audNotAll},
		{"audience empty lists allow", aud(`{"roles":[],"tenants":""}`), okClient, session, allowed},
		{"audience star allows", aud(`{"roles":["*"],"tenants":"*"}`), okClient, session, allowed},
		{"audience any role", aud(`{"roles":["manager"]}`), okClient, session, allowed},
		{"audience no role", aud(`{"roles":["admin"]}`), okClient, session, audNotAll},
		{"audience roles comma string", aud(`{"roles":"admin, manager"}`), okClient, session, allowed},
		{"audience client", aud(`{"clients":["app-a"]}`), okClient, session, allowed},
		{"audience other client", aud(`{"clients":["app-b"]}`), okClient, session, audNotAll},
		{"audience channel", aud(`{"channels":["web"]}`), okClient, session, allowed},
		{"audience other channel", aud(`{"channels":["wecom"]}`), okClient, session, audNotAll},
		{"audience tenant", aud(`{"tenants":["tenant-7"]}`), okClient, session, allowed},
		{"audience other tenant", aud(`{"tenants":["tenant-8"]}`), okClient, session, audNotAll},
		{"audience principal", aud(`{"principals":["user-42"]}`), okClient, session, allowed},
		{"audience other principal", aud(`{"principals":["user-7"]}`), okClient, session, audNotAll},
		{"audience numeric principal entries", aud(`{"principals":[42]}`),
			okClient, withSession(func(s *corefacts.Session) { s.Principal.ID = "42" }), allowed},
		{"audience audiences", aud(`{"audiences":["internal"]}`), okClient, session, allowed},
		{"audience other audience", aud(`{"audiences":["public"]}`), okClient, session, audNotAll},
		{"audience is case-sensitive", aud(`{"audiences":["Internal"]}`), okClient, session, audNotAll},
		{"audience missing tenant never matches a list", aud(`{"tenants":["tenant-7"]}`), okClient,
			withSession(func(s *corefacts.Session) { s.Principal.Tenant = "" }), audNotAll},
		{"audience all lists must match", aud(`{"roles":["manager"],"tenants":["tenant-8"]}`), okClient, session, audNotAll},
		{"audience keywords ignored", aud(`{"keywords":["refund"]}`), okClient, session, allowed},
		{"audience no principal denied", aud(`{"roles":["manager"]}`), okClient,
			withSession(func(s *corefacts.Session) { s.Principal = corefacts.Principal{} }), audNotAll},
		{"audience no principal anonymous", aud(`{"anonymous":true,"roles":["manager"]}`), okClient,
			withSession(func(s *corefacts.Session) { s.Principal = corefacts.Principal{} }), allowed},
		{"no audience, no principal", okRoute, okClient, withSession(func(s *corefacts.Session) { s.Principal = corefacts.Principal{} }), allowed},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := decideGate(route, tc.route, tc.client, tc.s)
			if tc.want == allowed {
				if err != nil {
					t.Fatalf("got %v; want allowed", err)
				}
				return
			}
			var ce *corefacts.CoreError
			if !errors.As(err, &ce) {
				t.Fatalf("got %v; want *CoreError %s", err, tc.want)
			}
			if ce.Code != tc.want {
				t.Errorf("got code %s; want %s", ce.Code, tc.want)
			}
			wantStatus, wantMsg := http.StatusForbidden, msgRouteNotAllowed
			switch tc.want {
			case unavail:
				wantStatus, wantMsg = http.StatusNotFound, msgRouteUnavailable
			case audNotAll:
				wantMsg = msgAudienceNotAllowed
			}
			if ce.Status != wantStatus || ce.Message != wantMsg {
				t.Errorf("got %d %q; want %d %q", ce.Status, ce.Message, wantStatus, wantMsg)
			}
		})
	}
}

func TestDecideGateMalformedJSONFailsClosed(t *testing.T) {
	s := corefacts.Session{ClientAppID: "app", Principal: corefacts.Principal{ID: "u"}, AllowedRoutes: []string{"*"}}
	client := &gateClient{Enabled: true, AllowedRoutes: []byte(`["*"]`), AuthorizeURL: "https://x"}
	cases := []struct {
		name   string
		route  *gateRoute
		client *gateClient
	}{
		{"audience", &gateRoute{Enabled: true, Audience: []byte(`{"roles":`)}, client},
		{"client allowed_routes", &gateRoute{Enabled: true}, &gateClient{Enabled: true, AllowedRoutes: []byte(`[`), AuthorizeURL: "https://x"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := decideGate("r", tc.route, tc.client, s)
			if !errors.Is(err, corefacts.ErrUnavailable) || !errors.Is(err, ErrMalformedJSON) {
				t.Errorf("got %v; want ErrUnavailable and ErrMalformedJSON", err)
			}
		})
	}
}

func TestAudienceListCap(t *testing.T) {
	list := `[`
	for i := range 150 {
		if i > 0 {
			list += ","
		}
		list += `"r` + string(rune('0'+i%10)) + `"`
	}
	list += `,"manager"]`
	p, err := normalizeAudience([]byte(`{"roles":` + list + `}`))
	if err != nil {
		t.Fatal(err)
	}
	if got := len(p.lists["roles"]); got != 100 {
		t.Errorf("roles kept: got %d; want 100", got)
	}
	if p.allows(&audiencePrincipal{id: "u", roles: []string{"manager"}}) {
		t.Errorf("got allowed; want denied (entry 151 is beyond the 100-entry cap)")
	}
}
