package corefacts

// RouteKey is a workspace (route) key as Core matches it:
// ^[a-z0-9][a-z0-9_-]{1,63}$. It is parsed once, at the edge, from the URL's
// route segment ([ParseRouteKey]); the layers below take the value and never
// judge a string again. The zero RouteKey is "no route key": the segment did
// not match, so no workspace has it (Core's router falls through to its 404
// not_found) and no request to Core or query is made for it.
type RouteKey struct{ s string }

// ParseRouteKey is the one copy of Core's route-key pattern. ok is false
// (and the key zero) for anything else: upper case, percent-encoded, too
// short or too long, a leading '_' or '-'.
func ParseRouteKey(s string) (k RouteKey, ok bool) {
	if len(s) < 2 || len(s) > 64 {
		return RouteKey{}, false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
		case (c == '_' || c == '-') && i > 0:
		default:
			return RouteKey{}, false
		}
	}
	return RouteKey{s}, true
}

// MustRouteKey is ParseRouteKey for keys written in code (tests, fixtures);
// it panics on a string that is no route key.
func MustRouteKey(s string) RouteKey {
	k, ok := ParseRouteKey(s)
	if !ok {
		panic("corefacts: not a route key: " + s)
	}
	return k
}

// String is the key as Core spells it ("" for the zero key).
func (k RouteKey) String() string { return k.s }

// IsZero reports whether k is the zero key (the segment was no route key).
func (k RouteKey) IsZero() bool { return k.s == "" }
