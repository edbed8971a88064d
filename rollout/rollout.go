package rollout

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/bailinghub/knowledge-sidecar/corefacts"
)

// Mode values, a closed set usable as a metric label.
const (
	ModeOff     = "off"
	ModeAll     = "all"
	ModeAllow   = "allow"
	ModeDeny    = "deny"
	ModePercent = "percent"
)

// Policy is an immutable rollout decision. The zero Policy is off.
type Policy struct {
	mode    string              // "" means off
	routes  map[string]struct{} // allow/deny
	sorted  []string            // allow/deny, canonical order
	percent int                 // percent
}

// Parse reads a rollout spec (see the package documentation). Errors name
// what is wrong.
func Parse(spec string) (Policy, error) {
	s := strings.TrimSpace(spec)
	switch s {
	case "":
		return Policy{}, fmt.Errorf("rollout: spec is empty; want off, all, allow:<routes>, deny:<routes> or percent:<0-100>")
	case ModeOff:
		return Policy{}, nil
	case ModeAll:
		return Policy{mode: ModeAll}, nil
	}
	kind, arg, ok := strings.Cut(s, ":")
	if !ok {
		return Policy{}, fmt.Errorf("rollout: unknown spec %q; want off, all, allow:<routes>, deny:<routes> or percent:<0-100>", s)
	}
	kind = strings.TrimSpace(kind)
	arg = strings.TrimSpace(arg)
	switch kind {
	case ModeAllow, ModeDeny:
		routes, err := parseRoutes(kind, arg)
		if err != nil {
			return Policy{}, err
		}
		set := make(map[string]struct{}, len(routes))
		for _, r := range routes {
			set[r] = struct{}{}
		}
		sorted := slices.Clone(routes)
		slices.Sort(sorted)
		return Policy{mode: kind, routes: set, sorted: sorted}, nil
	case ModePercent:
		p, err := parsePercent(arg)
		if err != nil {
			return Policy{}, err
		}
		return Policy{mode: ModePercent, percent: p}, nil
	default:
		return Policy{}, fmt.Errorf("rollout: unknown mode %q; want allow, deny or percent before ':'", kind)
	}
}

func parseRoutes(kind, arg string) ([]string, error) {
	if arg == "" {
		return nil, fmt.Errorf("rollout: %s: route list is empty", kind)
	}
	items := strings.Split(arg, ",")
	seen := make(map[string]struct{}, len(items))
	out := make([]string, 0, len(items))
	for i, it := range items {
		r := strings.TrimSpace(it)
		if r == "" {
			return nil, fmt.Errorf("rollout: %s: route %d is empty", kind, i+1)
		}
		if !corefacts.ValidRouteKey(r) {
			return nil, fmt.Errorf("rollout: %s: route %q does not match ^[a-z0-9][a-z0-9_-]{1,63}$", kind, r)
		}
		if _, dup := seen[r]; dup {
			return nil, fmt.Errorf("rollout: %s: route %q is listed twice", kind, r)
		}
		seen[r] = struct{}{}
		out = append(out, r)
	}
	return out, nil
}

func parsePercent(arg string) (int, error) {
	if arg == "" {
		return 0, fmt.Errorf("rollout: percent: value is empty; want an integer 0-100")
	}
	for _, c := range arg {
		if c < '0' || c > '9' {
			return 0, fmt.Errorf("rollout: percent: %q is not an integer 0-100", arg)
		}
	}
	if len(arg) > 3 {
		return 0, fmt.Errorf("rollout: percent: %q is out of range 0-100", arg)
	}
	p, err := strconv.Atoi(arg)
	if err != nil {
		return 0, fmt.Errorf("rollout: percent: %q is not an integer 0-100", arg)
	}
	if p > 100 {
		return 0, fmt.Errorf("rollout: percent: %d is out of range 0-100", p)
	}
	return p, nil
}

// Enabled reports whether the protocol is rolled out for route. Route names
// are compared exactly (route keys are lowercase); validating the route is the
// caller's job.
func (p Policy) Enabled(route string) bool {
	switch p.mode {
	case ModeAll:
		return true
	case ModeAllow:
		_, ok := p.routes[route]
		return ok
	case ModeDeny:
		_, ok := p.routes[route]
		return !ok
	case ModePercent:
		return bucket(route) < uint64(p.percent)*100
	default:
		return false
	}
}

// bucket places a route in one of 10000 stable buckets (see the package
// documentation for the formula).
func bucket(route string) uint64 {
	sum := sha256.Sum256([]byte(route))
	return binary.BigEndian.Uint64(sum[:8]) % 10000
}

// Mode is the policy's kind: "off", "all", "allow", "deny" or "percent".
func (p Policy) Mode() string {
	if p.mode == "" {
		return ModeOff
	}
	return p.mode
}

// EnablesNone reports whether the policy rolls the protocol out for no
// workspace at all ("off", or "percent:0").
func (p Policy) EnablesNone() bool {
	switch p.mode {
	case "":
		return true
	case ModePercent:
		return p.percent == 0
	case ModeAllow:
		return len(p.routes) == 0
	}
	return false
}

// Percent is the percentage of a percent policy (0 for other modes).
func (p Policy) Percent() int { return p.percent }

// Routes lists an allow/deny policy's routes in sorted order (nil otherwise).
func (p Policy) Routes() []string { return slices.Clone(p.sorted) }

// String is the canonical spec: Parse(p.String()) is equal to p. Route lists
// are sorted.
func (p Policy) String() string {
	switch p.mode {
	case ModeAll:
		return ModeAll
	case ModeAllow, ModeDeny:
		return p.mode + ":" + strings.Join(p.sorted, ",")
	case ModePercent:
		return ModePercent + ":" + strconv.Itoa(p.percent)
	default:
		return ModeOff
	}
}
