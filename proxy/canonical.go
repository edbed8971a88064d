package proxy

import (
	"net/http"
	"net/url"
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

// pathVerdict is what the edge does with a request target under /agent-api/.
type pathVerdict uint8

const (
	pathOther    pathVerdict = iota // not an intercepted path in any spelling: pass through
	pathExact                       // literally an intercepted path with a valid route key
	pathBadRoute                    // literally an intercepted path, route segment not a route key → 404
	pathNonCanon                    // canonicalizes to an intercepted path but is not one literally → 400
)

// interceptedTails are the segments after /agent-api/v1/workspaces/{route}/.
var interceptedTails = [][]string{
	{"turns"},
	{"knowledge", "capabilities"},
	{"knowledge", "search"},
	{"knowledge", "read"},
}

var interceptedHead = []string{"agent-api", "v1", "workspaces"}

// maxDecodeRounds bounds repeated percent-decoding (%2574 → %74 → t): a
// chain of servers may each decode once.
const maxDecodeRounds = 4

// classifyPath judges the raw request path (as sent, before any decoding).
func classifyPath(raw string) pathVerdict {
	if v, ok := literalVerdict(raw); ok {
		return v
	}
	special := strings.ContainsAny(raw, "%\\;") || strings.Contains(raw, "//") || strings.Contains(raw, "/.") || strings.HasSuffix(raw, "/")
	if !special && !hasUpper(raw) {
		// Nothing to decode, merge, remove or fold: the path is its own
		// canonical form, and it is not literally intercepted. The common
		// pass-through path, decided without allocating.
		return pathOther
	}
	segs := canonicalSegments(raw)
	if matchesIntercepted(segs, true) {
		return pathNonCanon
	}
	return pathOther
}

// literalVerdict recognizes a path that is, byte for byte, one of the
// intercepted paths: the fixed segments exactly and one route segment that
// is neither empty nor a dot segment nor holds a separator. ok is false when
// the path is not literally of that shape (it may still canonicalize to one).
func literalVerdict(raw string) (pathVerdict, bool) {
	const prefix = "/agent-api/v1/workspaces/"
	if !strings.HasPrefix(raw, prefix) {
		return pathOther, false
	}
	rest := raw[len(prefix):]
	slash := strings.IndexByte(rest, '/')
	if slash < 0 {
		return pathOther, false
	}
	route, tail := rest[:slash], rest[slash+1:]
	switch tail {
	case "turns", "knowledge/capabilities", "knowledge/search", "knowledge/read":
	default:
		return pathOther, false
	}
	if route == "" || route == "." || route == ".." {
		return pathOther, false
	}
	if strings.ContainsAny(route, "\\;") || strings.Contains(strings.ToLower(route), "%2f") || strings.Contains(strings.ToLower(route), "%5c") {
		return pathOther, false
	}
	return pathExact, true
}

// canonicalSegments is the path as a lenient server could route it:
// percent-decoded (repeatedly), backslashes as separators, ";params"
// dropped, empty and "." segments removed, ".." resolved.
func canonicalSegments(raw string) []string {
	p := raw
	for range maxDecodeRounds {
		if !strings.Contains(p, "%") {
			break
		}
		d, err := url.PathUnescape(p)
		if err != nil || d == p {
			break
		}
		p = d
	}
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

// matchesIntercepted reports whether segs are /agent-api/v1/workspaces/
// {any}/{an intercepted tail}, the fixed segments compared ignoring case
// when fold is set.
func matchesIntercepted(segs []string, fold bool) bool {
	eq := func(a, b string) bool {
		if fold {
			return strings.EqualFold(a, b)
		}
		return a == b
	}
	if len(segs) < len(interceptedHead)+2 {
		return false
	}
	for i, h := range interceptedHead {
		if !eq(segs[i], h) {
			return false
		}
	}
	tail := segs[len(interceptedHead)+1:]
	for _, want := range interceptedTails {
		if len(tail) != len(want) {
			continue
		}
		ok := true
		for i := range want {
			if !eq(tail[i], want[i]) {
				ok = false
				break
			}
		}
		if ok {
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
