package knowledge

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/bailinghub/knowledge-sidecar/corefacts"
	"github.com/bailinghub/knowledge-sidecar/protocol"
)

// Capabilities answers GET …/knowledge/capabilities (SPEC §3).
//
// enabled is true iff the route has at least one knowledge base and the
// catalog and Core retrieval are usable now. When the catalog cannot be
// reached, the last configuration this process saw for the route (a small
// bounded in-memory cache; configuration only, never identity or gate
// decisions) answers with enabled:false; without one the answer is 503
// knowledge_unavailable.
func (s *Service) Capabilities(ctx context.Context, authorization string, route corefacts.RouteKey) (body []byte, err error) {
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
	b = append(b, `{"schema_version":"`+protocol.CapabilitiesSchema+`","protocol":`...)
	b = AppendJSONString(b, protocol.Name)
	b = appendStringMember(b, `,"supported":true,"route":`, route)
	b = append(b, `,"enabled":`...)
	b = appendBool(b, enabled)
	b = appendStringMember(b, `,"knowledge_scope_revision":`, scope)
	b = append(b, `,"delivery_modes":["`+protocol.DeliveryInline+`","`+protocol.DeliveryOnDemand+`"],"limits":{"search_max_results":`...)
	b = strconv.AppendInt(b, protocol.SearchMaxResults, 10)
	b = append(b, `,"search_max_bytes":`...)
	b = strconv.AppendInt(b, protocol.SearchMaxBytes, 10)
	b = append(b, `,"read_default_bytes":`...)
	b = strconv.AppendInt(b, protocol.ReadDefaultBytes, 10)
	b = append(b, `,"read_max_bytes":`...)
	b = strconv.AppendInt(b, protocol.ReadMaxBytes, 10)
	b = append(b, `,"reference_ttl_seconds":`...)
	b = strconv.AppendInt(b, protocol.ReferenceTTLSeconds, 10)
	b = append(b, `,"read_chain_max_bytes":`...)
	b = strconv.AppendInt(b, protocol.ReadChainMaxBytes, 10)
	return append(b, "}}"...)
}

// Delivery is the route's knowledge state for an intercepted turn, taken
// before the turn is forwarded (SPEC §7): the status and scope revision its
// knowledge_delivery block carries, plus what the catalog said of the route
// and its knowledge bases, so that the turn's same-run hints (TurnHintsFor)
// do not ask again milliseconds later.
type Delivery struct {
	Status, ScopeRevision string
	route                 *corefacts.Route // nil unless read from the catalog now
	flags                 map[string]bool  // nil unless the KB flags were read
	key                   string           // the route of the turn's path (the audit's)
}

// Delivery is the final word on the route's delivery status (§4) and scope
// revision for a turn. It makes no Core search call: "disabled" when the
// route has no knowledge, and also when the catalog does not know the route
// or has disabled it (the revision of an empty configuration: the turn is
// forwarded and Core's own answer, its 404, relayed); "unavailable" when the
// retrieval breaker or the catalog is not usable or no configured KB is
// enabled; "partial" when some configured KBs are disabled or missing; "ok"
// otherwise. When the catalog cannot be reached, the last configuration seen
// for the route gives "unavailable" (or "disabled") with its revision.
//
// The only error is a 503 knowledge_unavailable *Error: no revision can be
// had (the catalog is down and the route was never seen), so the turn is not
// forwarded and no run exists the host could not be told about.
func (s *Service) Delivery(ctx context.Context, route corefacts.RouteKey) (Delivery, error) {
	d, err := s.delivery(ctx, route)
	d.key = route.String()
	return d, err
}

func (s *Service) delivery(ctx context.Context, route corefacts.RouteKey) (Delivery, error) {
	if route.IsZero() {
		return noKnowledge(route), nil
	}
	r, ok, err := s.routeRow(ctx, route)
	if err != nil {
		if errors.Is(err, corefacts.ErrNotFound) {
			return noKnowledge(route), nil
		}
		if last, ok := s.routes.Get(route); ok {
			if last.Knowledge == nil {
				return noKnowledge(route), nil
			}
			return Delivery{Status: protocol.StatusUnavailable, ScopeRevision: ScopeRevision(route.String(), last.Knowledge)}, nil
		}
		return Delivery{}, errUnavailable(err)
	}
	if !ok {
		return noKnowledge(route), nil
	}
	scope := ScopeRevision(r.Key, r.Knowledge)
	if r.Knowledge == nil {
		return Delivery{Status: protocol.StatusDisabled, ScopeRevision: scope, route: &r}, nil
	}
	if !s.retriever.Usable() || !s.catalog.Usable() {
		return Delivery{Status: protocol.StatusUnavailable, ScopeRevision: scope, route: &r}, nil
	}
	flags, err := s.catalog.KBEnabled(ctx, r.Knowledge.KBIDs)
	if err != nil {
		return Delivery{Status: protocol.StatusUnavailable, ScopeRevision: scope, route: &r}, nil
	}
	on := 0
	for _, id := range r.Knowledge.KBIDs {
		if flags[id] {
			on++
		}
	}
	switch {
	case on == 0:
		return Delivery{Status: protocol.StatusUnavailable, ScopeRevision: scope, route: &r}, nil
	case on < len(r.Knowledge.KBIDs):
		return Delivery{Status: protocol.StatusPartial, ScopeRevision: scope, route: &r, flags: flags}, nil
	default:
		return Delivery{Status: protocol.StatusOK, ScopeRevision: scope, route: &r, flags: flags}, nil
	}
}

// noKnowledge is the delivery of a route without knowledge: "disabled",
// with the scope revision of an empty configuration.
func noKnowledge(route corefacts.RouteKey) Delivery {
	return Delivery{Status: protocol.StatusDisabled, ScopeRevision: ScopeRevision(route.String(), nil)}
}
