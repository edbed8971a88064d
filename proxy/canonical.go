package proxy

import (
	"net/http"
	"slices"
	"strings"
)

// Paths the sidecar intercepts are decided on the request target as any
// server could route it, not only as echo routes it: Core, or a proxy in
// front of it, may percent-decode the path, take %2F or a backslash as a
// separator, remove dot segments, merge empty segments or match
// case-insensitively. A request whose target is not literally one of the
// intercepted paths but canonicalizes to one would otherwise slip past turn
// interception (an on_demand field reaching Core unstripped, a mode switch
// served with inline knowledge). Such targets are refused before Core sees
// them; every other path passes through byte for byte.
//
// Core itself routes on `new URL(req.url).pathname`, a WHATWG URL parser:
// it trims leading and trailing C0 controls and spaces, removes every tab,
// CR and LF, and ends the path at the first '?' or '#'. Go keeps a raw '#'
// in the path (a request target has no fragment), so `…/turns#x` is no
// intercepted path to echo while Core routes it as the turn. Every depth of
// decoding is judged both as is and as that parser reads it (urlParserPath).

// pathVerdict is what the edge does with a request target under /agent-api/.
type pathVerdict uint8

const (
	pathOther    pathVerdict = iota // not an intercepted path in any spelling: pass through
	pathExact                       // literally an intercepted path (its handler judges the route key: 404)
	pathNonCanon                    // canonicalizes to an intercepted path but is not one literally → 400
)

// pathTable is the intercepted paths, derived from the route table: an
// echo parameter segment (":route") stands for the route key, every other
// segment is fixed. Adding a route row adds its path here, so every
// spelling of it is judged like the others'.
type pathTable []pathPattern

// pathPattern is one route path: its segments, and the fixed text either
// side of its route segment (prefix "/agent-api/v1/workspaces/", suffix
// "/turns"), for the literal check, which every request takes.
type pathPattern struct {
	segs           []string
	prefix, suffix string
	param          bool
}

// intercepted is the route table's paths: the one list canonical judges by.
var intercepted = newPathTable(routes)

func newPathTable(rows []route) pathTable {
	var t pathTable
	for _, rt := range rows {
		if hasUpper(rt.path) {
			// classify's fast path takes a path without upper case and
			// special bytes as its own canonical form.
			panic("proxy: route path " + rt.path + " is not lower case")
		}
		segs := strings.Split(strings.TrimPrefix(rt.path, "/"), "/")
		if slices.ContainsFunc(t, func(p pathPattern) bool { return slices.Equal(p.segs, segs) }) {
			continue // another method on a path already listed
		}
		p := pathPattern{segs: segs, prefix: rt.path}
		if i := slices.IndexFunc(p.segs, isParam); i >= 0 {
			if slices.ContainsFunc(p.segs[i+1:], isParam) {
				panic("proxy: route path " + rt.path + " has more than the route parameter")
			}
			p.param = true
			p.prefix = "/" + strings.Join(p.segs[:i], "/") + "/"
			if i < len(segs)-1 {
				p.suffix = "/" + strings.Join(segs[i+1:], "/")
			}
		}
		t = append(t, p)
	}
	return t
}

func isParam(seg string) bool { return strings.HasPrefix(seg, ":") }

// maxDecodeRounds bounds repeated percent-decoding (%2574 → %74 → t): a
// chain of servers may each decode once, so the path is judged after 0, 1,
// … maxDecodeRounds decodings.
const maxDecodeRounds = 4

// classifyPath judges the raw request path (as sent, before any decoding)
// against the route table's paths.
func classifyPath(raw string) pathVerdict { return intercepted.classify(raw) }

func (t pathTable) classify(raw string) pathVerdict {
	if t.isLiteral(raw) {
		return pathExact
	}
	special := strings.ContainsAny(raw, "%\\;#?") || strings.Contains(raw, "//") || strings.Contains(raw, "/.") || strings.HasSuffix(raw, "/") || hasCtlOrSpace(raw)
	if !special && !hasUpper(raw) {
		// Nothing to decode, merge, remove or fold: the path is its own
		// canonical form, and it is not literally intercepted. The common
		// pass-through path, decided without allocating.
		return pathOther
	}
	// Each server of a chain may decode once more than the one before it,
	// so every depth is a routing a server could make: /%252F/%74urns is
	// /%2F/turns (an intercepted path) after one decoding and /// /turns
	// (none) after two.
	p := raw
	for round := 0; ; round++ {
		if t.matches(canonicalSegments(p)) {
			return pathNonCanon
		}
		if u := urlParserPath(p); u != p && t.matches(canonicalSegments(u)) {
			return pathNonCanon
		}
		if round == maxDecodeRounds || !strings.Contains(p, "%") {
			return pathOther
		}
		d := lenientUnescape(p)
		if d == p {
			return pathOther
		}
		p = d
	}
}

// isLiteral recognizes a path that is, byte for byte, one of the
// intercepted paths: the fixed segments exactly and one route segment that
// is literal (literalRoute). A path that is not literal may still
// canonicalize to one.
func (t pathTable) isLiteral(raw string) bool {
	for _, p := range t {
		if !p.param {
			if raw == p.prefix {
				return true
			}
			continue
		}
		if len(raw) > len(p.prefix)+len(p.suffix) && strings.HasPrefix(raw, p.prefix) && strings.HasSuffix(raw, p.suffix) {
			if seg := raw[len(p.prefix) : len(raw)-len(p.suffix)]; !strings.Contains(seg, "/") && literalRoute(seg) {
				return true
			}
		}
	}
	return false
}

// literalRoute: a route segment as one server routes it whatever its
// decoding: neither empty nor a dot segment, no separator in it (encoded
// or not), and nothing a URL parser ends or edits a path at ('#', '?',
// controls, spaces). It may still be no route key (upper case, too long, or
// percent-encoded: see encodedRoute); its handler judges that.
func literalRoute(seg string) bool {
	return seg != "" && seg != "." && seg != ".." &&
		!strings.ContainsAny(seg, "\\;#?") && !hasEncodedSeparator(seg) && !hasCtlOrSpace(seg)
}

// hasCtlOrSpace reports a C0 control, a space or DEL in s (net/http refuses
// them in a request target; a decoding can produce them).
func hasCtlOrSpace(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] <= ' ' || s[i] == 0x7f {
			return true
		}
	}
	return false
}

// urlParserPath is p's path as a WHATWG URL parser (Core's
// `new URL(req.url).pathname`) reads it: leading and trailing C0 controls
// and spaces trimmed, every tab, CR and LF removed, and the path ended at
// the first '?' (query) or '#' (fragment).
func urlParserPath(p string) string {
	p = strings.TrimFunc(p, func(r rune) bool { return r <= ' ' })
	if strings.ContainsAny(p, "\t\r\n") {
		p = strings.Map(func(r rune) rune {
			if r == '\t' || r == '\r' || r == '\n' {
				return -1
			}
			return r
		}, p)
	}
	if i := strings.IndexAny(p, "?#"); i >= 0 {
		p = p[:i]
	}
	return p
}

// encodedRoute reports a literal path's route segment spelled with
// percent-encoding (kb%2Dmulti). The path is literal, so its handler runs
// and identity is asked first (401 before 404), but Core may decode the
// segment into a route key, so a turn through it never goes to Core, not
// even an old client's field-less one: it is answered 404
// route_unavailable after identity (SPEC §7), where a literal segment that
// is no route key (upper case) goes to Core. This is the turn handler's
// rule and not a classifyPath verdict because the middleware's 400 would
// come before identity.
func encodedRoute(seg string) bool { return strings.Contains(seg, "%") }

// hasEncodedSeparator reports %2F or %5C (either case) in s.
func hasEncodedSeparator(s string) bool {
	for i := strings.IndexByte(s, '%'); i >= 0 && i+2 < len(s); {
		if e := s[i+1 : i+3]; strings.EqualFold(e, "2f") || strings.EqualFold(e, "5c") {
			return true
		}
		j := strings.IndexByte(s[i+1:], '%')
		if j < 0 {
			break
		}
		i += 1 + j
	}
	return false
}

// canonicalSegments is the already decoded path p as a lenient server
// could route it: backslashes as separators, ";params" dropped, empty and
// "." segments removed, ".." resolved.
func canonicalSegments(p string) []string {
	p = strings.ReplaceAll(p, "\\", "/")
	var segs []string
	for _, s := range strings.Split(p, "/") {
		if i := strings.IndexByte(s, ';'); i >= 0 {
			s = s[:i]
		}
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
	return segs
}

// lenientUnescape decodes every well-formed %XX of s and keeps all other
// bytes, the way lenient decoders (PHP's rawurldecode, Python's unquote)
// do: url.PathUnescape refuses the whole path for one bad escape, so
// /%zz/%74urns would stay undecoded here while such a server routes it to
// /%zz/turns.
func lenientUnescape(s string) string {
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); i++ {
		if s[i] == '%' && i+2 < len(s) {
			if hi, ok := unhex(s[i+1]); ok {
				if lo, ok := unhex(s[i+2]); ok {
					b.WriteByte(hi<<4 | lo)
					i += 2
					continue
				}
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func unhex(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

// matches reports whether segs (already canonical) are one of the
// intercepted paths with any route segment, the fixed segments compared
// ignoring case.
func (t pathTable) matches(segs []string) bool {
	for _, p := range t {
		if len(segs) == len(p.segs) && slices.EqualFunc(segs, p.segs, func(seg, want string) bool {
			return isParam(want) || strings.EqualFold(seg, want)
		}) {
			return true
		}
	}
	return false
}

// rawRequestPath is the path of the request target exactly as the client
// sent it: origin-form up to '?', or the path of an absolute-form target.
// ok is false for targets without a path ("*", authority-form).
func rawRequestPath(r *http.Request) (string, bool) {
	uri := r.RequestURI
	if uri == "" {
		return r.URL.EscapedPath(), true
	}
	if !strings.HasPrefix(uri, "/") {
		// absolute-form: scheme://authority/path?query
		i := strings.Index(uri, "://")
		if i < 0 {
			return "", false
		}
		rest := uri[i+3:]
		j := strings.IndexByte(rest, '/')
		if j < 0 {
			return "/", true
		}
		uri = rest[j:]
	}
	if q := strings.IndexByte(uri, '?'); q >= 0 {
		uri = uri[:q]
	}
	return uri, true
}

func hasUpper(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= 'A' && s[i] <= 'Z' {
			return true
		}
	}
	return false
}
