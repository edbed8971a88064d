package fakecore

import (
	"net/http"
	"regexp"
	"time"

	"github.com/bailinghub/knowledge-sidecar/corefacts"
)

var bearerPattern = regexp.MustCompile(`(?i)^Bearer ([^\s]+)$`)

// authenticate is Core's authenticateAgentAccess: a well-formed bearer with a
// bha_ token of a known, unexpired session.
func (c *Core) authenticate(r *http.Request) (corefacts.Session, bool) {
	m := bearerPattern.FindStringSubmatch(r.Header.Get("Authorization"))
	if m == nil || !ValidAccessToken(m[1]) {
		return corefacts.Session{}, false
	}
	c.mu.Lock()
	s, ok := c.sessions[m[1]]
	c.mu.Unlock()
	if !ok || (!s.ExpiresAt.IsZero() && s.ExpiresAt.Before(c.opts.Now())) {
		return corefacts.Session{}, false
	}
	return s, true
}

// principalJSON is a session's principal as Core writes it (CORE_FACTS
// §1.2), and as the business's consent approval sends it to Agent Auth.
type principalJSON struct {
	ID       string   `json:"id"`
	Tenant   string   `json:"tenant,omitempty"`
	Roles    []string `json:"roles"`
	Audience string   `json:"audience,omitempty"`
	Channel  string   `json:"channel,omitempty"`
}

type sessionJSON struct {
	SessionID        string        `json:"session_id"`
	ClientAppID      string        `json:"client_app_id"`
	DeviceLabel      string        `json:"device_label"`
	Principal        principalJSON `json:"principal"`
	OnBehalfOf       string        `json:"on_behalf_of"`
	AllowedRoutes    []string      `json:"allowed_routes"`
	CreatedAt        string        `json:"created_at"`
	ExpiresAt        string        `json:"expires_at"`
	RefreshExpiresAt string        `json:"refresh_expires_at"`
}

// isoTime formats like JavaScript's Date.prototype.toISOString.
func isoTime(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000Z") }

// serveSession is GET /agent-auth/v1/session (CORE_FACTS §1.2).
func (c *Core) serveSession(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		writeJSON(w, http.StatusMethodNotAllowed, errBody{Error: "method_not_allowed"})
		return
	}
	s, ok := c.authenticate(r)
	if !ok {
		writeJSON(w, http.StatusUnauthorized, errBody{Error: "unauthorized"})
		return
	}
	now := c.opts.Now()
	exp := s.ExpiresAt
	if exp.IsZero() {
		exp = now.Add(15 * time.Minute)
	}
	roles := s.Principal.Roles
	if roles == nil {
		roles = []string{}
	}
	routes := s.AllowedRoutes
	if routes == nil {
		routes = []string{}
	}
	writeJSON(w, http.StatusOK, sessionJSON{
		SessionID:   s.SessionID,
		ClientAppID: s.ClientAppID,
		DeviceLabel: "fake device",
		Principal: principalJSON{
			ID: s.Principal.ID, Tenant: s.Principal.Tenant, Roles: roles,
			Audience: s.Principal.Audience, Channel: s.Principal.Channel,
		},
		OnBehalfOf:       s.OnBehalfOf,
		AllowedRoutes:    routes,
		CreatedAt:        isoTime(now.Add(-time.Minute)),
		ExpiresAt:        isoTime(exp),
		RefreshExpiresAt: isoTime(now.Add(30 * 24 * time.Hour)),
	})
}
