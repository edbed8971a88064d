package catalog

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/bailinghub/knowledge-sidecar/corefacts"
)

// Core's gate answers (CORE_FACTS §2, bootstrap error table), relayed as is.
const (
	CodeRouteUnavailable   = "route_unavailable"
	CodeRouteNotAllowed    = "route_not_allowed"
	CodeAudienceNotAllowed = "audience_not_allowed"

	msgRouteUnavailable   = "The configured route is unavailable."
	msgRouteNotAllowed    = "The Agent Session is not allowed to use this route."
	msgAudienceNotAllowed = "The business identity is not allowed to use this route."
)

func errRouteUnavailable() error {
	return &corefacts.CoreError{Status: http.StatusNotFound, Code: CodeRouteUnavailable, Message: msgRouteUnavailable}
}

func errRouteNotAllowed() error {
	return &corefacts.CoreError{Status: http.StatusForbidden, Code: CodeRouteNotAllowed, Message: msgRouteNotAllowed}
}

func errAudienceNotAllowed() error {
	return &corefacts.CoreError{Status: http.StatusForbidden, Code: CodeAudienceNotAllowed, Message: msgAudienceNotAllowed}
}

// gateRoute is what the gate needs from a bz_routes row (Q1).
type gateRoute struct {
	Enabled  bool
	Audience []byte // JSON, nil when NULL
}

// gateClient is what the gate needs from a bz_clients row (Q7).
type gateClient struct {
	Enabled       bool
	AllowedRoutes []byte // JSON array, nil when NULL (= [])
	AuthorizeURL  string
}

// decideGate is the route gate for Cores without system-info, shared by the
// SQL and in-memory catalogs. route is the requested route key; r and c are
// nil when their row does not exist. The checks follow Core's own order
// (CORE_FACTS §2): route missing → 404; client (enabled, authorize URL,
// allowed_routes) and session allow-lists → 403 route_not_allowed; route
// disabled → 404; audience policy → 403 audience_not_allowed. Neither
// tools.agent_direct nor agent_client is consulted: knowledge endpoints do not
// require them. Allow-list entries are compared exactly, as Core's JavaScript
// includes() does, with "*" as a wildcard.
//
// A malformed JSON column gives an error wrapping ErrUnavailable and
// ErrMalformedJSON (fail closed, 503); every decision is a *CoreError.
func decideGate(route string, r *gateRoute, c *gateClient, s corefacts.Session) error {
	if r == nil {
		return errRouteUnavailable()
	}
	if c == nil || !c.Enabled || strings.TrimSpace(c.AuthorizeURL) == "" {
		return errRouteNotAllowed()
	}
	clientRoutes, err := stringList(c.AllowedRoutes)
	if err != nil {
		return fmt.Errorf("%w: client allowed_routes: %w", corefacts.ErrUnavailable, err)
	}
	if !routeListed(clientRoutes, route) || !routeListed(s.AllowedRoutes, route) {
		return errRouteNotAllowed()
	}
	if !r.Enabled {
		return errRouteUnavailable()
	}
	policy, err := normalizeAudience(r.Audience)
	if err != nil {
		return fmt.Errorf("%w: route audience: %w", corefacts.ErrUnavailable, err)
	}
	if !policy.allows(principalOf(s)) {
		return errAudienceNotAllowed()
	}
	return nil
}

func routeListed(list []string, route string) bool {
	return slices.Contains(list, "*") || slices.Contains(list, route)
}

// stringList decodes a JSON array column, keeping its string entries. NULL,
// JSON null and non-arrays are the empty list (Core's rowClient decodes a NULL
// allowed_routes as []).
func stringList(raw []byte) ([]string, error) {
	v, err := decodeJSON(raw)
	if err != nil {
		return nil, err
	}
	arr, _ := v.([]any)
	out := make([]string, 0, len(arr))
	for _, e := range arr {
		if s, ok := e.(string); ok {
			out = append(out, s)
		}
	}
	return out, nil
}

// audiencePolicy is Core's normalized AudiencePolicy (normalizeAudiencePolicy),
// reduced to what audienceAllows reads. A nil policy allows everyone.
type audiencePolicy struct {
	disabled  bool // enabled === false
	anonymous bool
	lists     map[string][]string // clients, channels, tenants, roles, principals, audiences
}

// audience principal: Core's NormalizedPrincipal for an Agent Session.
type audiencePrincipal struct {
	id, tenant, audience, channel, clientAppID string
	roles                                      []string
}

func principalOf(s corefacts.Session) *audiencePrincipal {
	if s.Principal.ID == "" {
		return nil
	}
	return &audiencePrincipal{
		id:          s.Principal.ID,
		tenant:      s.Principal.Tenant,
		audience:    s.Principal.Audience,
		channel:     s.Principal.Channel,
		clientAppID: s.ClientAppID,
		roles:       s.Principal.Roles,
	}
}

var audienceListKeys = []string{"clients", "channels", "tenants", "roles", "principals", "audiences"}

// normalizeAudience mirrors normalizeAudiencePolicy: not an object or {} →
// no policy; lists are arrays (entries that are strings or numbers, trimmed,
// empties dropped) or comma-separated strings, at most 100 entries.
func normalizeAudience(raw []byte) (*audiencePolicy, error) {
	obj, err := decodeObject(raw)
	if err != nil || obj == nil {
		return nil, err
	}
	p := &audiencePolicy{lists: map[string][]string{}}
	if v, ok := obj["enabled"]; ok {
		p.disabled = v == false
	}
	p.anonymous = obj["anonymous"] == true
	for _, k := range audienceListKeys {
		if xs := audienceList(obj[k]); len(xs) > 0 {
			p.lists[k] = xs[:min(len(xs), 100)]
		}
	}
	return p, nil
}

// audienceList is identity-runtime's list(): arrays keep string/number
// entries, a string or number is split on commas.
func audienceList(v any) []string {
	var out []string
	if arr, ok := v.([]any); ok {
		for _, e := range arr {
			if s := audienceClean(e); s != "" {
				out = append(out, s)
			}
		}
		return out
	}
	s := audienceClean(v)
	if s == "" {
		return nil
	}
	for _, part := range strings.Split(s, ",") {
		if part = jsTrim(part); part != "" {
			out = append(out, part)
		}
	}
	return out
}

func audienceClean(v any) string {
	switch v.(type) {
	case string, json.Number:
		return jsTrim(jsString(v))
	}
	return ""
}

// allows is audienceAllows.
func (p *audiencePolicy) allows(pr *audiencePrincipal) bool {
	if p == nil || p.disabled {
		return true
	}
	if pr == nil {
		return p.anonymous
	}
	return hasAny(p.lists["clients"], pr.clientAppID) &&
		hasAny(p.lists["channels"], pr.channel) &&
		hasAny(p.lists["tenants"], pr.tenant) &&
		hasAny(p.lists["roles"], pr.roles...) &&
		hasAny(p.lists["principals"], pr.id) &&
		hasAny(p.lists["audiences"], pr.audience)
}

// hasAny: an empty list or "*" allows all; otherwise one non-empty actual
// value must be listed exactly.
func hasAny(allowed []string, actual ...string) bool {
	if len(allowed) == 0 || slices.Contains(allowed, "*") {
		return true
	}
	for _, a := range actual {
		if a != "" && slices.Contains(allowed, a) {
			return true
		}
	}
	return false
}
