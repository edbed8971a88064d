package corefacts

// ValidRouteKey reports whether s is a workspace (route) key as Core matches
// it: ^[a-z0-9][a-z0-9_-]{1,63}$. Anything else is no workspace: Core's
// router falls through to its 404 not_found. This is the one copy of the
// pattern; every package that judges a route key asks here.
func ValidRouteKey(s string) bool {
	if len(s) < 2 || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
		case (c == '_' || c == '-') && i > 0:
		default:
			return false
		}
	}
	return true
}
