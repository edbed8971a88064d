package proxy

import (
	"path"
	"regexp"
	"strings"
	"testing"
)

// literalPattern is the literal form of the route table's paths as one
// pattern: the fixed segments exactly, the route segment captured. The
// oracle takes the same table as classifyPath (the list is data, not the
// logic under test), read its own way.
func literalPattern(rows []route) *regexp.Regexp {
	var alts []string
	for _, rt := range rows {
		alts = append(alts, strings.ReplaceAll(regexp.QuoteMeta(rt.path), ":route", "([^/]+)"))
	}
	return regexp.MustCompile("^(?:" + strings.Join(alts, "|") + ")$")
}

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

// ctlOrSpace matches a C0 control, a space or DEL.
var ctlOrSpace = regexp.MustCompile(`[\x00-\x20\x7f]`)

// whatwgPathRef models the WHATWG URL parser on a path (Core's
// new URL(req.url).pathname): C0 controls and spaces trimmed at both
// ends, tabs and newlines removed anywhere, the path cut at a query or
// fragment.
func whatwgPathRef(p string) string {
	for p != "" && p[0] <= ' ' {
		p = p[1:]
	}
	for p != "" && p[len(p)-1] <= ' ' {
		p = p[:len(p)-1]
	}
	p = regexp.MustCompile(`[\t\r\n]`).ReplaceAllString(p, "")
	if i := regexp.MustCompile(`[?#]`).FindStringIndex(p); i != nil {
		p = p[:i[0]]
	}
	return p
}

// routesTo is the slow model of one server's routing of an already decoded
// path to one of rows' paths: '\' is a separator, ";params" are dropped,
// empty and "." segments vanish, ".." climbs, and the fixed segments match
// under Unicode case folding.
func routesTo(rows []route, p string) bool {
	var kept []string
	for _, s := range strings.FieldsFunc(p, func(r rune) bool { return r == '/' || r == '\\' }) {
		s, _, _ = strings.Cut(s, ";")
		kept = append(kept, s)
	}
	// path.Clean drops the empty and "." segments and resolves "..", never
	// above the root.
	segs := strings.FieldsFunc(path.Clean("/"+strings.Join(kept, "/")), func(r rune) bool { return r == '/' })
	for _, rt := range rows {
		want := strings.Split(rt.path[1:], "/")
		if len(want) != len(segs) {
			continue
		}
		match := true
		for i := range want {
			match = match && (want[i] == ":route" || strings.EqualFold(want[i], segs[i]))
		}
		if match {
			return true
		}
	}
	return false
}

// pathRef is the slow reference of classifyPath: literal by the
// pattern; otherwise non-canonical when any server of a chain — one that
// decodes 0, 1, … maxDecodeRounds times, leniently — routes the path to an
// intercepted one.
type pathRef struct {
	rows    []route
	literal *regexp.Regexp
}

func newPathRef(rows []route) pathRef { return pathRef{rows, literalPattern(rows)} }

func (ref pathRef) classify(raw string) pathVerdict {
	rows := ref.rows
	if m := ref.literal.FindStringSubmatch(raw); m != nil {
		var route string
		for _, g := range m[1:] {
			route += g // the one alternative that matched
		}
		if route != "." && route != ".." && !strings.ContainsAny(route, `\;#?`) && !encodedSep.MatchString(route) && !ctlOrSpace.MatchString(route) {
			return pathExact
		}
	}
	p := raw
	for range maxDecodeRounds + 1 {
		if routesTo(rows, p) || routesTo(rows, whatwgPathRef(p)) {
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
		"/agent-api/v1/workspaces/a/turns#x", "/agent-api/v1/workspaces/a/turns%23x", "/agent-api/v1/workspaces/a/turns%253Fx",
		"/agent-api/v1/workspaces/a/tu%09rns", "/agent-api/v1/workspaces/a/turns%20", "/agent-api/v1/workspaces/a#/turns",
	} {
		f.Add(s)
	}
	ref := newPathRef(routes)
	f.Fuzz(func(t *testing.T, raw string) {
		if !strings.HasPrefix(raw, "/") {
			raw = "/" + raw // rawRequestPath never yields anything else
		}
		if got, want := classifyPath(raw), ref.classify(raw); got != want {
			t.Fatalf("classifyPath(%q) = %d; the reference says %d", raw, got, want)
		}
	})
}
