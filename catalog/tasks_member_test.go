package catalog

import (
	"database/sql"
	"testing"
	"time"

	"github.com/bailinghub/knowledge-sidecar/corefacts"
)

// A member read from its rows and decided at now (memberRows.member, then
// corefacts.TaskMember.Valid), one rule per row (Core's verifyMembers, TASK_CONTROL.md §2).
func TestTaskMemberValid(t *testing.T) {
	now := time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC)
	good := func() memberRows {
		return memberRows{
			TaskMember: corefacts.TaskMember{SessionID: "s-1", ClientAppID: "app-1", RouteKey: "orders", Conversation: "c-1"},
			session: &memberSession{id: "s-1", clientAppID: "app-1",
				principal:      []byte(`{"id":"u-1","roles":["agent"],"tenant":"t-1"}`),
				onBehalfOf:     "u-1",
				allowedRoutes:  []byte(`["orders"]`),
				refreshExpires: sql.NullTime{Time: now.Add(time.Hour), Valid: true}},
			client: &memberClient{id: "app-1", enabled: true, allowedRoutes: []byte(`["*"]`), authorizeURL: "https://a.example/authorize"},
			route:  &memberRoute{key: "orders", enabled: true, tools: []byte(`{"agent_direct":{"enabled":true}}`)},
		}
	}
	cases := []struct {
		name   string
		change func(m *memberRows)
		want   bool
	}{
		{"all rows valid", func(*memberRows) {}, true},
		{"session row missing", func(m *memberRows) { m.session = nil }, false},
		{"client row missing", func(m *memberRows) { m.client = nil }, false},
		{"route row missing", func(m *memberRows) { m.route = nil }, false},
		{"session id differs in case", func(m *memberRows) { m.session.id = "S-1" }, false},
		{"session of another client", func(m *memberRows) { m.session.clientAppID = "app-2" }, false},
		{"client id differs in case", func(m *memberRows) { m.client.id = "App-1" }, false},
		{"client disabled", func(m *memberRows) { m.client.enabled = false }, false},
		{"route disabled", func(m *memberRows) { m.route.enabled = false }, false},
		{"session revoked", func(m *memberRows) { m.session.revoked = sql.NullTime{Time: now, Valid: true} }, false},
		{"refresh expiry now", func(m *memberRows) { m.session.refreshExpires.Time = now }, false},
		{"no authorize URL", func(m *memberRows) { m.client.authorizeURL = " " }, false},
		{"principal id not a string", func(m *memberRows) { m.session.principal = []byte(`{"id":7,"roles":[]}`) }, false},
		{"roles not a string array", func(m *memberRows) { m.session.principal = []byte(`{"id":"u-1","roles":["a",1]}`) }, false},
		{"roles missing", func(m *memberRows) { m.session.principal = []byte(`{"id":"u-1"}`) }, false},
		{"session routes NULL", func(m *memberRows) { m.session.allowedRoutes = nil }, false},
		{"session routes not strings", func(m *memberRows) { m.session.allowedRoutes = []byte(`["orders",1]`) }, false},
		{"route not in session routes", func(m *memberRows) { m.session.allowedRoutes = []byte(`["billing"]`) }, false},
		{"session wildcard", func(m *memberRows) { m.session.allowedRoutes = []byte(`["*"]`) }, true},
		{"route not in client routes", func(m *memberRows) { m.client.allowedRoutes = []byte(`["billing"]`) }, false},
		{"client routes NULL", func(m *memberRows) { m.client.allowedRoutes = nil }, false},
		{"tools NULL", func(m *memberRows) { m.route.tools = nil }, false},
		{"direct tools off", func(m *memberRows) { m.route.tools = []byte(`{"agent_direct":{"enabled":false}}`) }, false},
		{"direct tools enabled as a string", func(m *memberRows) { m.route.tools = []byte(`{"agent_direct":{"enabled":"true"}}`) }, false},
		{"agent client off", func(m *memberRows) { m.route.agent = []byte(`{"enabled":false}`) }, false},
		{"agent client on", func(m *memberRows) { m.route.agent = []byte(`{"enabled":true}`) }, true},
		{"audience allows the tenant", func(m *memberRows) { m.route.audience = []byte(`{"tenants":["t-1"]}`) }, true},
		{"audience refuses the principal", func(m *memberRows) { m.route.audience = []byte(`{"principals":["u-2"]}`) }, false},
		{"audience by the member's client", func(m *memberRows) { m.route.audience = []byte(`{"clients":["app-1"]}`) }, true},
		{"audience channel defaults to agent:<client>", func(m *memberRows) { m.route.audience = []byte(`{"channels":["agent:app-1"]}`) }, true},
		{"audience channel from the principal", func(m *memberRows) {
			m.session.principal = []byte(`{"id":"u-1","roles":[],"channel":"web"}`)
			m.route.audience = []byte(`{"channels":["agent:app-1"]}`)
		}, false},
		{"audience malformed", func(m *memberRows) { m.route.audience = []byte(`{`) }, false},
	}
	for _, tc := range cases {
		m := good()
		tc.change(&m)
		if got := m.member().Valid(now); got != tc.want {
			t.Errorf("%s: got %v; want %v", tc.name, got, tc.want)
		}
	}
}
