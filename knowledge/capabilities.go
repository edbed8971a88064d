package knowledge

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/bailinghub/knowledge-sidecar/coreclient"
)

// Delivery statuses (SPEC §4).
const (
	StatusOK          = "ok"
	StatusPartial     = "partial"
	StatusUnavailable = "unavailable"
	StatusDisabled    = "disabled"
)

// Capabilities answers GET …/knowledge/capabilities (SPEC §3).
//
// enabled is true iff the route has at least one knowledge base and the
// catalog and Core retrieval are usable now. When the catalog cannot be
// reached, the last configuration this process saw for the route (a small
// bounded in-memory cache; configuration only, never identity or gate
// decisions) answers with enabled:false; without one the answer is 503
// knowledge_unavailable.
func (s *Service) Capabilities(ctx context.Context, authorization, route string) (body []byte, err error) {
	start := time.Now()
	defer func() { s.m.observe("capabilities", err, time.Since(start).Seconds()) }()

	a, err := s.admit(ctx, authorization, route, true)
	if err != nil {
		return nil, err
	}
	enabled := a.route.Knowledge != nil && !a.stale && s.catalog.Usable() && s.retriever.Usable()
	return capabilitiesBody(a.route.Key, enabled, ScopeRevision(a.route.Key, a.route.Knowledge)), nil
}

func capabilitiesBody(route string, enabled bool, scope string) []byte {
	b := make([]byte, 0, 512)
	b = append(b, `{"schema_version":"bailing.agent-knowledge-capabilities.v1","protocol":`...)
	b = AppendJSONString(b, Protocol)
	b = append(b, `,"supported":true,"route":`...)
	b = AppendJSONString(b, route)
	b = append(b, `,"enabled":`...)
	b = appendBool(b, enabled)
	b = append(b, `,"knowledge_scope_revision":`...)
	b = AppendJSONString(b, scope)
	b = append(b, `,"delivery_modes":["inline","on_demand"],"limits":{"search_max_results":`...)
	b = strconv.AppendInt(b, SearchMaxResults, 10)
	b = append(b, `,"search_max_bytes":`...)
	b = strconv.AppendInt(b, SearchMaxBytes, 10)
	b = append(b, `,"read_default_bytes":`...)
	b = strconv.AppendInt(b, ReadDefaultBytes, 10)
	b = append(b, `,"read_max_bytes":`...)
	b = strconv.AppendInt(b, ReadMaxBytes, 10)
	b = append(b, `,"reference_ttl_seconds":`...)
	b = strconv.AppendInt(b, int64(ReferenceTTL/time.Second), 10)
	b = append(b, `,"read_chain_max_bytes":`...)
	b = strconv.AppendInt(b, ReadChainMaxBytes, 10)
	return append(b, "}}"...)
}

// DeliveryMode is how a turn carries knowledge (SPEC §7): Core's bounded
// inline knowledge, or on demand through search and read.
type DeliveryMode string

// The two delivery modes; a turn request naming any other is refused.
const (
	DeliveryInline   DeliveryMode = "inline"
	DeliveryOnDemand DeliveryMode = "on_demand"
)

// Valid reports whether m is one of the two modes.
func (m DeliveryMode) Valid() bool { return m == DeliveryInline || m == DeliveryOnDemand }

// DeliveryStatus is the §4 status of the route right now plus its scope
// revision, for the turn interception block (SPEC §7). It makes no Core
// search call: "disabled" when the route has no knowledge; "unavailable"
// when the retrieval breaker or the catalog is not usable or no configured
// KB is enabled; "partial" when some configured KBs are disabled or
// missing; "ok" otherwise.
//
// An unknown or disabled route is a 404 route_unavailable *Error. When the
// catalog cannot be reached, the last configuration seen for the route gives
// ("unavailable", its revision); without one the answer is a 503
// knowledge_unavailable *Error.
func (s *Service) DeliveryStatus(ctx context.Context, route string) (status, scopeRevision string, err error) {
	d, err := s.Delivery(ctx, route)
	return d.Status, d.ScopeRevision, err
}

// Delivery is the route's knowledge state taken before a turn is
// forwarded: DeliveryStatus's status and scope revision, plus what the
// catalog said of the route and its knowledge bases, so that the turn's
// same-run hints (TurnHintsFor) do not ask again milliseconds later.
type Delivery struct {
	Status, ScopeRevision string
	route                 *coreclient.Route // nil unless read from the catalog now
	flags                 map[string]bool   // nil unless the KB flags were read
}

// Delivery is DeliveryStatus with the state it read (see the type).
func (s *Service) Delivery(ctx context.Context, route string) (Delivery, error) {
	if !coreclient.ValidRouteKey(route) {
		return Delivery{}, errRouteUnavailable(nil)
	}
	r, err := s.catalog.Route(ctx, route)
	if err != nil {
		if errors.Is(err, coreclient.ErrNotFound) {
			return Delivery{}, errRouteUnavailable(err)
		}
		if last, ok := s.routes.Get(route); ok {
			if last.Knowledge == nil {
				return Delivery{Status: StatusDisabled, ScopeRevision: ScopeRevision(route, nil)}, nil
			}
			return Delivery{Status: StatusUnavailable, ScopeRevision: ScopeRevision(route, last.Knowledge)}, nil
		}
		return Delivery{}, errUnavailable(err)
	}
	if r.Key == "" {
		r.Key = route
	}
	if !r.Enabled || r.Key != route {
		return Delivery{}, errRouteUnavailable(nil)
	}
	s.routes.Add(route, r)
	scope := ScopeRevision(route, r.Knowledge)
	if r.Knowledge == nil {
		return Delivery{Status: StatusDisabled, ScopeRevision: scope, route: &r}, nil
	}
	if !s.retriever.Usable() || !s.catalog.Usable() {
		return Delivery{Status: StatusUnavailable, ScopeRevision: scope, route: &r}, nil
	}
	flags, err := s.catalog.KBEnabled(ctx, r.Knowledge.KBIDs)
	if err != nil {
		return Delivery{Status: StatusUnavailable, ScopeRevision: scope, route: &r}, nil
	}
	on := 0
	for _, id := range r.Knowledge.KBIDs {
		if flags[id] {
			on++
		}
	}
	switch {
	case on == 0:
		return Delivery{Status: StatusUnavailable, ScopeRevision: scope, route: &r}, nil
	case on < len(r.Knowledge.KBIDs):
		return Delivery{Status: StatusPartial, ScopeRevision: scope, route: &r, flags: flags}, nil
	default:
		return Delivery{Status: StatusOK, ScopeRevision: scope, route: &r, flags: flags}, nil
	}
}
