package proxy

import (
	"regexp"
	"strings"
	"testing"
)

// literalIntercepted is the literal form of an intercepted path, written as
// a pattern: the fixed segments exactly, one route segment.
var literalIntercepted = regexp.MustCompile(`^/agent-api/v1/workspaces/([^/]+)/(turns|knowledge/capabilities|knowledge/search|knowledge/read)$`)

// encodedSep matches a percent-encoded '/' or '\'.
var encodedSep = regexp.MustCompile(`(?i)%(2f|5c)`)

// lenientUnescapeRef decodes every well-formed %XX of s and keeps every
// other byte, as a lenient server (PHP's rawurldecode, Python's unquote)
// does: a bad escape elsewhere does not stop the good ones from decoding.
func lenientUnescapeRef(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '%' && i+2 < len(s) && isHexDigit(s[i+1]) && isHexDigit(s[i+2]) {
			b.WriteByte(hexVal(s[i+1])<<4 | hexVal(s[i+2]))
			i += 2
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func isHexDigit(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func hexVal(c byte) byte {
	switch {
	case c <= '9':
		return c - '0'
	case c >= 'a':
		return c - 'a' + 10
	default:
		return c - 'A' + 10
	}
}

// routesTo is the slow model of one server's routing of an already decoded
// path: '\' is a separator, ";params" are dropped, empty and "." segments
// vanish, ".." climbs, and the fixed segments match under Unicode case folding.
func routesTo(p string) bool {
	var segs []string
	for _, s := range strings.FieldsFunc(p, func(r rune) bool { return r == '/' || r == '\\' }) {
		s, _, _ = strings.Cut(s, ";")
		switch s {
		case "", ".":
		case "..":
			if len(segs) > 0 {
				segs = segs[:len(segs)-1]
			}
		default:
			segs = append(segs, s)
		}
	}
	if len(segs) < 5 {
		return false
	}
	joined := strings.Join(append(segs[:3:3], segs[4:]...), "/")
	for _, p := range []string{"agent-api/v1/workspaces/turns", "agent-api/v1/workspaces/knowledge/capabilities",
		"agent-api/v1/workspaces/knowledge/search", "agent-api/v1/workspaces/knowledge/read"} {
		if strings.EqualFold(joined, p) {
			return true
		}
	}
	return false
}

// classifyPathRef is the slow reference of classifyPath: literal by the
// pattern; otherwise non-canonical when any server of a chain — one that
// decodes 0, 1, … maxDecodeRounds times, leniently — routes the path to an
// intercepted one.
func classifyPathRef(raw string) pathVerdict {
	if m := literalIntercepted.FindStringSubmatch(raw); m != nil {
		route := m[1]
		if route != "." && route != ".." && !strings.ContainsAny(route, `\;`) && !encodedSep.MatchString(route) {
			return pathExact
		}
	}
	p := raw
	for range maxDecodeRounds + 1 {
		if routesTo(p) {
			return pathNonCanon
		}
		p = lenientUnescapeRef(p)
	}
	return pathOther
}

// FuzzClassifyPath: the edge's canonical-path decision agrees with the slow
// reference on every target, so no spelling of an intercepted path that
// some server in front of Core would route there passes through (an
// on_demand turn reaching Core unstripped), and a literal path is always
// served by the sidecar itself.
func FuzzClassifyPath(f *testing.F) {
	for _, s := range []string{
		"/agent-api/v1/workspaces/order-assistant/turns", "/agent-api/v1/workspaces/order-assistant/knowledge/search",
		"/agent-api/v1/workspaces/order-assistant/%74urns", "/agent-api/v1/workspaces/order-assistant%2Fturns",
		"/agent-api/v1/workspaces/order-assistant\\turns", "/agent-api/v1/workspaces/a/./turns", "/agent-api/v1/workspaces/a/turns/",
		"/agent-api/v1/workspaces/a/turns;x", "//agent-api/v1/workspaces/a/turns", "/AGENT-API/v1/workspaces/a/TURNS",
		"/agent-api/v1/workspaces/a/%2574urns", "/agent-api/v1/workspaces/x%2F..%2Fy/turns", "/agent-api/v1/workspaces/../turns",
		"/agent-api/v1/workspaces/%252F/%74urns", "/agent-api/v1/workspaces/%zz/%74urns", "/agent-api/v1/workspaces/a/tools/x",
		"/agent-api/v1/workspaces/a/knowledge/read/..", "/files/a%2Fb\\c", "/", "",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		if !strings.HasPrefix(raw, "/") {
			raw = "/" + raw // rawRequestPath never yields anything else
		}
		if got, want := classifyPath(raw), classifyPathRef(raw); got != want {
			t.Fatalf("classifyPath(%q) = %d; the reference says %d", raw, got, want)
		}
	})
}
