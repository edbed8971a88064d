package test

// Adversarial tests of the edge over raw sockets: path spellings that a
// lenient server would route as an intercepted path, half-closed clients,
// bodies that trickle or stall, Expect: 100-continue, malformed request
// lines, JSON nested past what the turn scanner follows, 405 and
// Retry-After, turns on routes the catalog does not know, and the
// request-smuggling corpus.

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bailinghub/knowledge-sidecar/internal/fakecore"
	"github.com/bailinghub/knowledge-sidecar/internal/testkit"
	"github.com/bailinghub/knowledge-sidecar/internal/testkit/testdb"
)

// rawConn is a client connection that writes exact bytes.
type rawConn struct {
	net.Conn
	br *bufio.Reader
}

func dialRaw(t testing.TB, addr string) *rawConn {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	// A bound on the whole exchange, not a synchronization: a test that
	// waits this long has failed.
	conn.SetDeadline(time.Now().Add(20 * time.Second))
	return &rawConn{Conn: conn, br: bufio.NewReader(conn)}
}

func (c *rawConn) send(t testing.TB, s string) {
	t.Helper()
	if _, err := io.WriteString(c, s); err != nil {
		t.Fatalf("write: %v", err)
	}
}

// response reads one response and its body.
func (c *rawConn) response(t testing.TB) (*http.Response, []byte) {
	t.Helper()
	res, err := http.ReadResponse(c.br, nil)
	if err != nil {
		t.Fatalf("read response: %v", err)
	}
	body, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatalf("read body: %v", err)
	}
	res.Body.Close()
	return res, body
}

// closedAfter reports whether the server closed the connection after the
// response just read (EOF on the next read).
func (c *rawConn) closedAfter() bool {
	_, err := c.br.ReadByte()
	return err != nil
}

func postRaw(target, host, token string, body []byte, extra string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n", target, host, len(body))
	if token != "" {
		fmt.Fprintf(&b, "Authorization: Bearer %s\r\n", token)
	}
	b.WriteString(extra)
	b.WriteString("\r\n")
	b.Write(body)
	return b.String()
}

func errorCode(body []byte) string {
	var eb struct {
		Error string `json:"error"`
	}
	_ = json.Unmarshal(body, &eb)
	return eb.Error
}

// encodeAt percent-encodes the byte at index i of s.
func encodeAt(s string, i int) string {
	return s[:i] + fmt.Sprintf("%%%02X", s[i]) + s[i+1:]
}

// pathVariants are spellings of an intercepted path that are not the
// literal one: each letter of "turns" and "knowledge" percent-encoded,
// encoded slashes and backslashes, dot segments, doubled slashes, case
// variants, path parameters, double encoding, encoded route keys.
func pathVariants(route string) []string {
	ws := "/agent-api/v1/workspaces/" + route
	var v []string
	for i := range len("turns") {
		v = append(v, ws+"/"+encodeAt("turns", i))
	}
	for i := range len("knowledge") {
		v = append(v, ws+"/"+encodeAt("knowledge", i)+"/search")
	}
	v = append(v,
		ws+"/knowledge/%73earch",
		ws+"/knowledge/rea%64",
		ws+"/knowledge/capabilitie%73",
		ws+"%2Fturns",
		ws+"%2fturns",
		ws+"%5Cturns",
		ws+`\turns`,
		ws+"%2Fknowledge%2Fsearch",
		"/%61gent-api/v1/workspaces/"+route+"/turns",
		"/agent-api/%761/workspaces/"+route+"/turns",
		"/agent-api/v1/%77orkspaces/"+route+"/turns",
		ws+"/./turns",
		ws+"/x/../turns",
		"/agent-api/v1/workspaces/x/../"+route+"/turns",
		ws+"/%2e/turns",
		ws+"/x/%2E%2E/turns",
		"//agent-api/v1/workspaces/"+route+"/turns",
		"/agent-api//v1/workspaces/"+route+"/turns",
		"/agent-api/v1/workspaces//"+route+"/turns",
		ws+"//turns",
		ws+"/turns/",
		ws+"/turns;x=1",
		ws+";x=1/turns",
		"/AGENT-API/v1/workspaces/"+route+"/turns",
		"/agent-api/V1/workspaces/"+route+"/turns",
		"/agent-api/v1/Workspaces/"+route+"/turns",
		ws+"/TURNS",
		ws+"/Knowledge/Search",
		ws+"/%2574urns",
		ws+"/%25%37%34urns",
	)
	return v
}

// TestPathSpellingsNeverBypassInterception: no spelling of an intercepted
// path lets a request reach Core as something other than an intercepted
// request: a knowledge_delivery field never reaches Core, and a turn bound
// to one mode is never served in the other.
func TestPathSpellingsNeverBypassInterception(t *testing.T) {
	w := NewWorld(t, WorldOptions{Core: fakecore.Options{SystemInfo: true}})
	tap, side := w.startTapped(t, FeatureOptions{})
	c := newClient(t)
	route := testdb.RouteMulti
	host := side.Addr

	targets := pathVariants(route)
	// Upper-case, encoded and over-long route keys are no workspace: 404
	// after identity, never 503. Encoded ones are never forwarded; a
	// literal one (upper case, too long) without knowledge_delivery is an
	// old client's turn and goes to Core, which answers 404 not_found
	// (SPEC §7; turns_oldclient_test.go).
	badRoutes := []string{"KB-MULTI", "kb%2Dmulti", "%6Bb-multi", strings.Repeat("a", 65)}
	literalBad := map[string]bool{}
	for _, r := range badRoutes {
		targets = append(targets, "/agent-api/v1/workspaces/"+r+"/turns")
		if !strings.Contains(r, "%") {
			literalBad["/agent-api/v1/workspaces/"+r+"/turns"] = true
		}
	}
	if len(targets) < 30 {
		t.Fatalf("only %d variants", len(targets))
	}
	for i, target := range targets {
		for _, mode := range []string{"absent", "on_demand"} {
			t.Run(fmt.Sprintf("%02d_%s_%s", i, mode, target), func(t *testing.T) {
				// A turn bound to the other mode through the literal path.
				ti := newTurn(fmt.Sprintf("bypass-%d-%s", i, mode))
				bound := "on_demand"
				if mode == "on_demand" {
					bound = "inline"
				}
				r := send(t, c, "POST", turnsURL(side, route), w.TokenA, ti.body(modeJSON(bound)), nil)
				if r.Status != 200 {
					t.Fatalf("binding turn: got %d %s", r.Status, r.Body)
				}
				n := tap.count()
				delivery := ""
				if mode == "on_demand" {
					delivery = modeJSON("on_demand")
				}
				conn := dialRaw(t, host)
				conn.send(t, postRaw(target, host, w.TokenA, ti.body(delivery), ""))
				res, body := conn.response(t)
				if res.StatusCode/100 == 2 {
					t.Errorf("mode switch through %q was served: %d %s", target, res.StatusCode, body)
				}
				switch res.StatusCode {
				case 400, 404, 409:
				default:
					t.Errorf("got %d %s; want 400, 404 or 409", res.StatusCode, body)
				}
				for _, e := range tap.since(n) {
					if bytes.Contains(e.ReqBody, []byte("knowledge_delivery")) {
						t.Errorf("Core received a knowledge_delivery field via %q (%s %s)", target, e.Method, e.Path)
					}
					if literalBad[target] && mode == "absent" && e.Path == target && e.Answered && e.Status == 404 {
						continue // Core's own not_found for a segment that is no route key
					}
					if strings.HasSuffix(e.Path, "turns") || strings.Contains(strings.ToLower(e.Path), "knowledge") {
						t.Errorf("an intercepted path spelled %q reached Core as %s %s", target, e.Method, e.Path)
					}
				}
			})
		}
	}

	t.Run("knowledge spellings are refused before Core", func(t *testing.T) {
		for _, target := range pathVariants(route) {
			if !strings.Contains(strings.ToLower(target), "knowledge") && !strings.Contains(target, "%6") && !strings.Contains(target, "%4") {
				continue
			}
			n := tap.count()
			conn := dialRaw(t, host)
			conn.send(t, postRaw(target, host, w.TokenA, []byte(`{"query":"refund","limit":1}`), ""))
			res, body := conn.response(t)
			if res.StatusCode != 400 || errorCode(body) != "invalid_request" {
				t.Errorf("%s: got %d %s; want 400 invalid_request", target, res.StatusCode, body)
			}
			if got := tap.count(); got != n {
				t.Errorf("%s: Core received %d requests; want none", target, got-n)
			}
		}
	})

	t.Run("absolute-form target is intercepted like origin-form", func(t *testing.T) {
		ti := newTurn("absolute-form")
		r := send(t, c, "POST", turnsURL(side, route), w.TokenA, ti.body(modeJSON("on_demand")), nil)
		if r.Status != 200 {
			t.Fatalf("binding turn: got %d %s", r.Status, r.Body)
		}
		n := tap.count()
		conn := dialRaw(t, host)
		conn.send(t, postRaw("http://"+host+turnsPath(route), host, w.TokenA, ti.body(""), ""))
		res, body := conn.response(t)
		if res.StatusCode != http.StatusConflict || string(body) != turnConflictJSON {
			t.Errorf("field-less retry in absolute-form: got %d %s; want 409 turn_conflict", res.StatusCode, body)
		}
		if tap.count() != n {
			t.Errorf("the mode switch reached Core")
		}
		ti2 := newTurn("absolute-form-2")
		conn = dialRaw(t, host)
		conn.send(t, postRaw("http://"+host+turnsPath(route), host, w.TokenA, ti2.body(modeJSON("on_demand")), ""))
		res, body = conn.response(t)
		if res.StatusCode != 200 || !bytes.Contains(body, []byte(`"mode":"on_demand"`)) {
			t.Errorf("on_demand in absolute-form: got %d %s; want the rewritten turn", res.StatusCode, body)
		}
		for _, e := range tap.since(n) {
			if bytes.Contains(e.ReqBody, []byte("knowledge_delivery")) {
				t.Errorf("Core received the knowledge_delivery field")
			}
		}
	})
}

// TestPassThroughPathBytesKept: paths the sidecar does not intercept reach
// Core byte for byte, a backslash and odd escapes included.
func TestPassThroughPathBytesKept(t *testing.T) {
	got := make(chan string, 1)
	u := startUpstream(t, func(u *upstream, w http.ResponseWriter, r *http.Request) {
		got <- r.RequestURI
	})
	w := NewWorld(t, WorldOptions{})
	sc := StartSidecar(t, SidecarOptions{CoreURL: u.URL, Features: w.Features(t, FeatureOptions{})})
	for _, target := range []string{
		`/files/a\b`,
		`/files/%5Cx%2Fy?q=%5C`,
		`/agent-api/v1/workspaces/kb-multi/tools/a%2Fb`,
		`/agent-api/v1/workspaces/kb-multi/runs/%41`,
	} {
		res, body := rawRequest(t, sc.Addr, "GET "+target+" HTTP/1.1\r\nHost: ks.example\r\nConnection: close\r\n\r\n")
		if res.StatusCode != 200 {
			t.Fatalf("%s: got %d %s", target, res.StatusCode, body)
		}
		if uri := waitFor(t, got, "Core's request"); uri != target {
			t.Errorf("Core's request target: got %q; want %q", uri, target)
		}
	}
}

// TestHalfClosedClient: a client that sends a complete request and then
// half-closes its side gets Core's answer or a 502, never an empty 200, and
// the metrics record the status sent.
func TestHalfClosedClient(t *testing.T) {
	release := make(chan struct{})
	u := startUpstream(t, func(u *upstream, w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			select {
			case <-r.Context().Done():
			case <-release:
			}
			return
		}
		io.WriteString(w, `{"from":"core"}`)
	})
	defer close(release)
	sc := StartSidecar(t, SidecarOptions{CoreURL: u.URL})
	for _, path := range []string{"/slow", "/fast"} {
		t.Run(path, func(t *testing.T) {
			before := map[int]float64{}
			for _, code := range []int{200, 502} {
				before[code] = testkit.Metric(t, sc.Registry, "knowledge_sidecar_http_requests_total", map[string]string{"handler": "passthrough", "code": strconv.Itoa(code)})
			}
			conn := dialRaw(t, sc.Addr)
			conn.send(t, "POST "+path+" HTTP/1.1\r\nHost: ks.example\r\nContent-Length: 2\r\n\r\n{}")
			if err := conn.Conn.(*net.TCPConn).CloseWrite(); err != nil {
				t.Fatal(err)
			}
			res, body := conn.response(t)
			switch {
			case res.StatusCode == 200 && string(body) == `{"from":"core"}`:
			case res.StatusCode == 502 && errorCode(body) == "upstream_unavailable":
			default:
				t.Fatalf("got %d %q; want Core's answer or 502 upstream_unavailable", res.StatusCode, body)
			}
			labels := map[string]string{"handler": "passthrough", "code": strconv.Itoa(res.StatusCode)}
			testkit.WaitMetric(t, sc.Registry, "knowledge_sidecar_http_requests_total", labels, before[res.StatusCode]+1)
			if path == "/slow" && res.StatusCode != 502 {
				t.Errorf("/slow: got %d; Core never answered, want 502", res.StatusCode)
			}
		})
	}
}

// TestStalledBodies: identity is decided before the body is read, so an
// unauthenticated caller gets 401 at once however slowly its body comes;
// an authenticated body that stalls ends after proxy.body_idle_timeout with
// 408 and a closed connection, on every path.
func TestStalledBodies(t *testing.T) {
	w := NewWorld(t, WorldOptions{Core: fakecore.Options{SystemInfo: true}})
	tap := newCoreTap(t, w.Core)
	const idle = 300 * time.Millisecond
	side := StartSidecar(t, SidecarOptions{CoreURL: tap.URL, Features: w.Features(t, FeatureOptions{}), BodyIdleTimeout: idle})
	route := testdb.RouteMulti
	host := side.Addr
	head := func(path, token string, length int, extra string) string {
		s := fmt.Sprintf("POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n", path, host, length)
		if token != "" {
			s += "Authorization: Bearer " + token + "\r\n"
		}
		return s + extra + "\r\n"
	}
	paths := map[string]string{
		"search": "/agent-api/v1/workspaces/" + route + "/knowledge/search",
		"read":   "/agent-api/v1/workspaces/" + route + "/knowledge/read",
		"turns":  turnsPath(route),
		"mcp":    "/agent-api/v1/workspaces/" + route + "/knowledge/mcp",
	}
	for name, path := range paths {
		t.Run("unauthenticated_"+name, func(t *testing.T) {
			t.Parallel() // each on its own connection: the waits overlap
			conn := dialRaw(t, host)
			// A body announced at 8000 bytes of which a few ever come; the
			// idle timeout is made long so that only an early answer passes.
			// (An unauthenticated turn is not the sidecar's to read at all:
			// it streams to Core, and a stalled one ends at the edge's body
			// deadline like any pass-through upload, holding nothing of the
			// turn body budget — turns_oldclient_test.go.)
			start := `{"query":"`
			want, code := 401, "unauthorized"
			if name == "turns" {
				start = `{"knowledge_delivery":"on_demand","user_input":"`
				want, code = http.StatusRequestTimeout, "request_timeout"
			}
			conn.send(t, head(path, fakecore.Token("nobody"), 8000, "")+start)
			res, body := conn.response(t)
			if res.StatusCode != want || errorCode(body) != code {
				t.Fatalf("got %d %s; want %d %s", res.StatusCode, body, want, code)
			}
			if !res.Close || !conn.closedAfter() {
				t.Errorf("connection kept after an early answer to an unread body")
			}
		})
		t.Run("authenticated_stall_"+name, func(t *testing.T) {
			t.Parallel()
			conn := dialRaw(t, host)
			conn.send(t, head(path, w.TokenA, 8000, "")+`{"query":"`)
			res, body := conn.response(t)
			if res.StatusCode != http.StatusRequestTimeout || errorCode(body) != "request_timeout" {
				t.Fatalf("got %d %s; want 408 request_timeout", res.StatusCode, body)
			}
			if !conn.closedAfter() {
				t.Errorf("connection kept after a stalled body")
			}
			stalls := 1.0
			if name == "turns" {
				stalls = 2 // the unauthenticated one's too (run beside this one)
			}
			testkit.WaitMetric(t, side.Registry, "knowledge_sidecar_http_requests_total", map[string]string{"handler": name, "code": "408"}, stalls)
		})
	}
	t.Run("pass-through stall", func(t *testing.T) {
		t.Parallel()
		n := tap.count()
		conn := dialRaw(t, host)
		conn.send(t, head("/agent-api/v1/workspaces/"+route+"/tools/x", w.TokenA, 8000, "")+"partial")
		res, body := conn.response(t)
		if res.StatusCode != http.StatusRequestTimeout || errorCode(body) != "request_timeout" {
			t.Fatalf("got %d %s; want 408 request_timeout", res.StatusCode, body)
		}
		if !conn.closedAfter() {
			t.Errorf("connection kept after a stalled body")
		}
		_ = n
	})
	t.Run("trickle that keeps coming is not cut", func(t *testing.T) {
		t.Parallel()
		conn := dialRaw(t, host)
		body := []byte(`{"query":"refund window","limit":1}`)
		conn.send(t, head(paths["search"], w.TokenA, len(body), ""))
		for _, b := range body {
			conn.send(t, string(b)) // byte by byte, each well within the idle timeout
		}
		res, got := conn.response(t)
		if res.StatusCode != 200 {
			t.Fatalf("got %d %s; want 200", res.StatusCode, got)
		}
	})
}

// TestExpectContinue: a request refused before its body is needed gets the
// final answer without 100 Continue; an admitted one gets 100 and then its
// answer.
func TestExpectContinue(t *testing.T) {
	w := NewWorld(t, WorldOptions{Core: fakecore.Options{SystemInfo: true}})
	side := StartSidecar(t, SidecarOptions{CoreURL: w.CoreURL, Features: w.Features(t, FeatureOptions{})})
	path := side.WS(testdb.RouteMulti)[len(side.URL):] + "/knowledge/search"
	body := `{"query":"refund window","limit":1}`
	for _, tc := range []struct {
		name, token string
		want        int
	}{
		{"unauthenticated", fakecore.Token("nobody"), 401},
		{"authenticated", w.TokenA, 200},
	} {
		t.Run(tc.name, func(t *testing.T) {
			conn := dialRaw(t, side.Addr)
			conn.send(t, fmt.Sprintf("POST %s HTTP/1.1\r\nHost: ks\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\nExpect: 100-continue\r\n\r\n", path, tc.token, len(body)))
			line, err := conn.br.ReadString('\n')
			if err != nil {
				t.Fatal(err)
			}
			if tc.want != 200 {
				if !strings.HasPrefix(line, "HTTP/1.1 401 ") {
					t.Fatalf("first status line: got %q; want the final 401 without 100 Continue", line)
				}
				return
			}
			if !strings.HasPrefix(line, "HTTP/1.1 100 ") {
				t.Fatalf("first status line: got %q; want 100 Continue", line)
			}
			if _, err := conn.br.ReadString('\n'); err != nil { // blank line after 100
				t.Fatal(err)
			}
			conn.send(t, body)
			res, got := conn.response(t)
			if res.StatusCode != 200 {
				t.Fatalf("got %d %s; want 200", res.StatusCode, got)
			}
		})
	}
}

// TestMalformedRequestLine: a request line the HTTP/1 listener cannot
// serve (an HTTP/2 preface, an unknown protocol version) is answered 400,
// and that is what the metrics record.
func TestMalformedRequestLine(t *testing.T) {
	u := startUpstream(t, func(u *upstream, w http.ResponseWriter, r *http.Request) { u.readAndRecord(r) })
	sc := StartSidecar(t, SidecarOptions{CoreURL: u.URL})
	for _, tc := range []struct{ raw, status string }{
		{"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", "400"},
		{"GET * HTTP/1.1\r\nHost: ks\r\n\r\n", "400"},
		// net/http refuses this version itself, before any handler.
		{"GET / HTTP/2.0\r\nHost: ks\r\n\r\n", "505"},
	} {
		conn := dialRaw(t, sc.Addr)
		conn.send(t, tc.raw)
		line, err := conn.br.ReadString('\n')
		if err != nil {
			t.Fatalf("%q: %v", tc.raw, err)
		}
		if !strings.HasPrefix(line, "HTTP/1.1 "+tc.status+" ") {
			t.Errorf("%q: got %q; want %s", tc.raw, line, tc.status)
		}
	}
	if u.count() != 0 {
		t.Errorf("Core received %d requests; want none", u.count())
	}
	// What is recorded is what was sent: two 400s, nothing else.
	testkit.WaitMetric(t, sc.Registry, "knowledge_sidecar_http_requests_total", map[string]string{"handler": "passthrough", "code": "400"}, 2)
	for _, code := range []string{"200", "502"} {
		if got := testkit.Metric(t, sc.Registry, "knowledge_sidecar_http_requests_total", map[string]string{"handler": "passthrough", "code": code}); got != 0 {
			t.Errorf("requests recorded with code %s: %v; want 0", code, got)
		}
	}
}

// TestTurnTooDeep: a turn body nested past what the scanner follows cannot
// be checked for knowledge_delivery, so it is refused, never forwarded
// with a field that might be there.
func TestTurnTooDeep(t *testing.T) {
	w, tap, side, c := tappedWorld(t)
	deep := strings.Repeat("[", 10001) + strings.Repeat("]", 10001)
	ti := newTurn("deep")
	body := []byte(`{"page_context":` + deep + `,` + string(ti.body(modeJSON("on_demand"))[1:]))
	n := tap.count()
	r := send(t, c, "POST", turnsURL(side, testdb.RouteMulti), w.TokenA, body, nil)
	checkErrorJSON(t, r, http.StatusBadRequest, "invalid_request")
	if tap.count() != n {
		t.Errorf("Core received the deep turn")
	}
}

// TestTurnOnUnknownRoute: a turn on a route the catalog does not know or
// has disabled is forwarded with the field stripped and Core's own answer
// relayed (its 404), never a 503.
func TestTurnOnUnknownRoute(t *testing.T) {
	w, tap, side, c := tappedWorld(t)
	for _, route := range []string{"no-such-route", testdb.RouteDisabled} {
		for _, mode := range []string{"inline", "on_demand"} {
			t.Run(route+"/"+mode, func(t *testing.T) {
				ti := newTurn(route + "-" + mode)
				r, e := tap.post(t, c, turnsURL(side, route), w.TokenA, ti.body(modeJSON(mode)), nil)
				if bytes.Contains(e.ReqBody, []byte("knowledge_delivery")) {
					t.Errorf("Core received the field: %s", e.ReqBody)
				}
				if r.Status != e.Status || !bytes.Equal(r.Body, e.RespBody) {
					t.Errorf("got %d %s; want Core's answer %d %s", r.Status, r.Body, e.Status, e.RespBody)
				}
				if r.Status/100 != 4 || route == "no-such-route" && r.Status != 404 {
					t.Errorf("Core answered %d; want its refusal (404 for an unknown route)", r.Status)
				}
			})
		}
	}
}

// TestMethodNotAllowed: another method on a knowledge path of a rolled-out
// workspace is 405 with Allow; on a workspace not rolled out it passes
// through to Core.
func TestMethodNotAllowed(t *testing.T) {
	w := NewWorld(t, WorldOptions{})
	tap, side := w.startTapped(t, FeatureOptions{Rollout: "allow:" + testdb.RouteMulti})
	c := newClient(t)
	for _, tc := range []struct{ method, path, allow string }{
		{"GET", "/knowledge/search", "POST"},
		{"PUT", "/knowledge/read", "POST"},
		{"POST", "/knowledge/capabilities", "GET"},
		{"DELETE", "/knowledge/capabilities", "GET"},
	} {
		n := tap.count()
		r := send(t, c, tc.method, side.WS(testdb.RouteMulti)+tc.path, w.TokenA, nil, nil)
		checkErrorJSON(t, r, http.StatusMethodNotAllowed, "method_not_allowed")
		if got := r.Header.Get("Allow"); got != tc.allow {
			t.Errorf("%s %s: Allow %q; want %q", tc.method, tc.path, got, tc.allow)
		}
		if tap.count() != n {
			t.Errorf("%s %s reached Core", tc.method, tc.path)
		}
		// Not rolled out: Core's own answer.
		n = tap.count()
		r = send(t, c, tc.method, side.WS(testdb.RouteLegacy)+tc.path, w.TokenA, nil, nil)
		if tap.count() != n+1 || r.Status == http.StatusMethodNotAllowed && r.Header.Get("Allow") != "" {
			t.Errorf("%s %s on a workspace not rolled out: got %d; want it passed to Core", tc.method, tc.path, r.Status)
		}
	}
}

// TestRateLimitedRetryAfter: a 429 carries Retry-After in whole seconds.
func TestRateLimitedRetryAfter(t *testing.T) {
	w := NewWorld(t, WorldOptions{Core: fakecore.Options{SystemInfo: true}})
	side := w.StartSidecar(t, FeatureOptions{RateLimit: 0.1, RateBurst: 1})
	c := newClient(t)
	url := side.WS(testdb.RouteMulti) + "/knowledge/capabilities"
	if code, _, body := Call(t, c, "GET", url, w.TokenA, nil); code != 200 {
		t.Fatalf("first: got %d %s", code, body)
	}
	code, h, body := Call(t, c, "GET", url, w.TokenA, nil)
	if code != 429 || errorCode(body) != "rate_limited" {
		t.Fatalf("second: got %d %s; want 429 rate_limited", code, body)
	}
	// One token every 10 s: the wait is 1 to 10 whole seconds depending on
	// how much has refilled since the first request (exact values are
	// checked with an injected clock in knowledge's TestRetryAfter).
	if ra, err := strconv.Atoi(h.Get("Retry-After")); err != nil || ra < 1 || ra > 10 {
		t.Errorf("Retry-After: got %q; want whole seconds from 1 to 10", h.Get("Retry-After"))
	}
}

// The request-smuggling corpus: ambiguous or malformed framing sent over a
// raw socket. Every case must be refused by the sidecar (a 4xx, or 501 for a
// transfer coding it does not implement, and the connection closed) or reach
// Core as exactly the well-framed request(s) the sidecar itself parsed — the
// client gets one answer per request Core saw, so the two never disagree
// about where a request ends.

// smuggleUpstream records each request with whether its body arrived whole.
type smuggleUpstream struct {
	mu   sync.Mutex
	seen []smuggleSeen
}

type smuggleSeen struct {
	method, uri, body string
	complete          bool
	header            http.Header
}

func (s *smuggleUpstream) handler(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/early" {
		// Answers before reading the body, as Core does for a refused turn.
		s.mu.Lock()
		n := len(s.seen)
		s.seen = append(s.seen, smuggleSeen{method: r.Method, uri: r.RequestURI, complete: true, header: r.Header.Clone()})
		s.mu.Unlock()
		rc := http.NewResponseController(w)
		rc.EnableFullDuplex()
		w.Header().Set("X-Seq", strconv.Itoa(n))
		w.Header().Set("Content-Length", "5")
		io.WriteString(w, "early")
		rc.Flush()
		return
	}
	b, err := io.ReadAll(r.Body)
	s.mu.Lock()
	n := len(s.seen)
	s.seen = append(s.seen, smuggleSeen{method: r.Method, uri: r.RequestURI, body: string(b), complete: err == nil, header: r.Header.Clone()})
	s.mu.Unlock()
	w.Header().Set("X-Seq", strconv.Itoa(n))
	io.WriteString(w, "ok")
}

func (s *smuggleUpstream) take() []smuggleSeen {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := s.seen
	s.seen = nil
	return out
}

type wantReq struct{ method, uri, body string }

const sentinel = "GET /sentinel HTTP/1.1\r\nHost: ks.example\r\nConnection: close\r\n\r\n"

func TestRequestSmuggling(t *testing.T) {
	up := &smuggleUpstream{}
	u := startUpstream(t, func(_ *upstream, w http.ResponseWriter, r *http.Request) { up.handler(w, r) })
	sc := StartSidecar(t, SidecarOptions{CoreURL: u.URL})

	const h = "Host: ks.example\r\n"
	cases := []struct {
		name string
		raw  string
		want []wantReq // nil: refused
		// closes: RFC 9112 §6.1, the connection ends after the answer to
		// the last wanted request; nothing after it (the sentinel) is read.
		closes bool
	}{
		{name: "CL+TE: chunked wins, Content-Length dropped, connection closed",
			raw:  "POST /t HTTP/1.1\r\n" + h + "Content-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
			want: []wantReq{{"POST", "/t", "hello"}}, closes: true},
		{name: "TE+CL with a hidden prefix: only the chunked request, then closed",
			raw: "POST /t HTTP/1.1\r\n" + h + "Transfer-Encoding: chunked\r\nContent-Length: 48\r\n\r\n0\r\n\r\n" +
				"GET /second HTTP/1.1\r\n" + h + "\r\n",
			want: []wantReq{{"POST", "/t", ""}}, closes: true},
		{name: "CL+TE in lower case, closed",
			raw:  "POST /t HTTP/1.1\r\n" + h + "content-length: 3\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
			want: []wantReq{{"POST", "/t", "hello"}}, closes: true},
		// The edge sees framing as it arrives, not per request: an ambiguous
		// request already on the wire behind a clean one ends the
		// connection after the clean one's answer (the client re-sends).
		{name: "CL+TE pipelined behind a clean request: the clean one is answered, then closed",
			raw: "GET /first HTTP/1.1\r\n" + h + "\r\n" +
				"POST /t HTTP/1.1\r\n" + h + "Content-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
			want: []wantReq{{"GET", "/first", ""}}, closes: true},
		{name: "conflicting Content-Length",
			raw: "POST /t HTTP/1.1\r\n" + h + "Content-Length: 5\r\nContent-Length: 6\r\n\r\nhello!"},
		{name: "Content-Length list",
			raw: "POST /t HTTP/1.1\r\n" + h + "Content-Length: 5, 6\r\n\r\nhello!"},
		{name: "Content-Length with sign",
			raw: "POST /t HTTP/1.1\r\n" + h + "Content-Length: +5\r\n\r\nhello"},
		{name: "identical duplicate Content-Length is one",
			raw:  "POST /t HTTP/1.1\r\n" + h + "Content-Length: 5\r\nContent-Length: 5\r\n\r\nhello",
			want: []wantReq{{"POST", "/t", "hello"}}},
		{name: "obs-fold hiding Transfer-Encoding is unfolded into the value",
			raw:  "POST /t HTTP/1.1\r\n" + h + "Content-Length: 5\r\nX-Pad: a\r\n Transfer-Encoding: chunked\r\n\r\nhello",
			want: []wantReq{{"POST", "/t", "hello"}}},
		{name: "obs-fold continuing Transfer-Encoding",
			raw: "POST /t HTTP/1.1\r\n" + h + "Transfer-Encoding:\r\n chunked\r\nContent-Length: 5\r\n\r\nhello"},
		{name: "bare LF after chunk size",
			raw: "POST /t HTTP/1.1\r\n" + h + "Transfer-Encoding: chunked\r\n\r\n5\nhello\r\n0\r\n\r\n"},
		{name: "chunk size with junk",
			raw: "POST /t HTTP/1.1\r\n" + h + "Transfer-Encoding: chunked\r\n\r\n5x\r\nhello\r\n0\r\n\r\n"},
		{name: "chunk size overflow",
			raw: "POST /t HTTP/1.1\r\n" + h + "Transfer-Encoding: chunked\r\n\r\nfffffffffffffffff\r\nhello\r\n0\r\n\r\n"},
		{name: "space before the colon",
			raw: "POST /t HTTP/1.1\r\n" + h + "Transfer-Encoding : chunked\r\nContent-Length: 5\r\n\r\nhello"},
		{name: "chunked, identity",
			raw: "POST /t HTTP/1.1\r\n" + h + "Transfer-Encoding: chunked, identity\r\n\r\n5\r\nhello\r\n0\r\n\r\n"},
		{name: "identity, chunked",
			raw: "POST /t HTTP/1.1\r\n" + h + "Transfer-Encoding: identity, chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"},
		{name: "two Transfer-Encoding fields",
			raw: "POST /t HTTP/1.1\r\n" + h + "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"},
		{name: "xchunked",
			raw: "POST /t HTTP/1.1\r\n" + h + "Transfer-Encoding: xchunked\r\nContent-Length: 5\r\n\r\nhello"},
		{name: "NUL in a header value",
			raw: "GET /t HTTP/1.1\r\n" + h + "X-A: a\x00b\r\n\r\n"},
		{name: "bare CR in a header value",
			raw: "GET /t HTTP/1.1\r\n" + h + "X-A: a\rTransfer-Encoding: chunked\r\n\r\n"},
		{name: "two Host fields",
			raw: "GET /t HTTP/1.1\r\n" + h + "Host: other.example\r\n\r\n"},
		{name: "HTTP/1.0 ignores Transfer-Encoding, and the connection closes",
			raw:  "POST /t HTTP/1.0\r\n" + h + "Connection: keep-alive\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\nhello",
			want: []wantReq{{"POST", "/t", "hello"}}, closes: true},
		{name: "HTTP/1.0 with Transfer-Encoding only: the chunks are never parsed as a request",
			raw:  "POST /t HTTP/1.0\r\n" + h + "Connection: keep-alive\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
			want: []wantReq{{"POST", "/t", ""}}, closes: true},
		{name: "HTTP/1.0 keep-alive without Transfer-Encoding stays open",
			raw:  "POST /t HTTP/1.0\r\n" + h + "Connection: keep-alive\r\nContent-Length: 5\r\n\r\nhello",
			want: []wantReq{{"POST", "/t", "hello"}}},
		{name: "pipelined requests stay separate",
			raw: "GET /p1 HTTP/1.1\r\n" + h + "\r\n" +
				"POST /p2 HTTP/1.1\r\n" + h + "Content-Length: 5\r\n\r\nhello" +
				"POST /p3 HTTP/1.1\r\n" + h + "Transfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n" +
				"DELETE /p4 HTTP/1.1\r\n" + h + "\r\n",
			want: []wantReq{{"GET", "/p1", ""}, {"POST", "/p2", "hello"}, {"POST", "/p3", "abc"}, {"DELETE", "/p4", ""}}},
	}
	t.Run("malformed body after an early answer", func(t *testing.T) {
		// Core answers before the body is complete; the body then breaks.
		// The bytes after the break must not become a request of their own.
		up.take()
		conn, err := net.Dial("tcp", sc.Addr)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		conn.SetDeadline(time.Now().Add(15 * time.Second))
		io.WriteString(conn, "POST /early HTTP/1.1\r\n"+h+"Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n")
		br := bufio.NewReader(conn)
		readOK(t, br, "early answer")
		io.WriteString(conn, "zz\r\nGET /smuggled HTTP/1.1\r\n"+h+"\r\n"+sentinel)
		var more []int
		for {
			res, err := http.ReadResponse(br, nil)
			if err != nil {
				break
			}
			drainClose(res.Body)
			more = append(more, res.StatusCode)
		}
		for _, s := range up.take() {
			if s.uri != "/early" {
				t.Errorf("Core received %s %s after a malformed body; want the connection closed", s.method, s.uri)
			}
		}
		if len(more) != 0 {
			t.Errorf("answers after the malformed body: got %v; want none (connection closed)", more)
		}
	})
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			// Each case's /t carries its own tag, so a request an earlier
			// case left in flight (a refused request's headers already
			// streamed to Core, its body cut short) and recorded late is
			// told apart from this case's requests rather than taken as one.
			tag := "/t?case=" + strconv.Itoa(i)
			up.take()
			responses, err := exchangeRaw(sc.Addr, strings.ReplaceAll(c.raw, " /t ", " "+tag+" ")+sentinel)
			var seen []smuggleSeen
			for _, s := range up.take() {
				if strings.HasPrefix(s.uri, "/t?case=") && s.uri != tag {
					continue // an earlier case's straggler
				}
				seen = append(seen, s)
			}
			if err != nil {
				t.Fatalf("%v (responses %v)", err, statuses(responses))
			}
			// No desync: the client got an answer for every complete request
			// Core saw. (A request whose body turns out malformed has its
			// headers streamed to Core already; Core then sees the body cut
			// short, exactly as when a client hangs up mid-upload.)
			fromCore, complete := 0, 0
			for _, r := range responses {
				if r.Header.Get("X-Seq") != "" {
					fromCore++
				}
			}
			for _, s := range seen {
				if s.complete {
					complete++
				}
			}
			if fromCore != complete {
				t.Fatalf("Core saw %d complete requests (%v) but the client got %d answers from Core (%v)", complete, uris(seen), fromCore, statuses(responses))
			}
			if c.want == nil {
				if len(responses) == 0 {
					t.Fatal("no response; want a refusal")
				}
				if st := responses[0].StatusCode; !(st >= 400 && st < 500 || st == http.StatusNotImplemented) {
					t.Errorf("status: got %d; want a 4xx or 501 refusal", st)
				}
				for _, s := range seen {
					if s.complete {
						t.Errorf("Core received a complete request %s %s %q; want none", s.method, s.uri, s.body)
					}
				}
				if len(responses) != 1 {
					t.Errorf("responses: got %v; want the refusal only and the connection closed", statuses(responses))
				}
				return
			}
			want := append([]wantReq(nil), c.want...)
			if !c.closes {
				want = append(want, wantReq{"GET", "/sentinel", ""})
			}
			for j := range want {
				if want[j].uri == "/t" {
					want[j].uri = tag
				}
			}
			if len(seen) != len(want) {
				t.Fatalf("Core saw %v; want %v", uris(seen), want)
			}
			for i, w := range want {
				s := seen[i]
				if s.method != w.method || s.uri != w.uri || s.body != w.body || !s.complete {
					t.Errorf("request %d: got %s %s %q (complete %v); want %s %s %q", i, s.method, s.uri, s.body, s.complete, w.method, w.uri, w.body)
				}
				if s.header.Get("Content-Length") != "" && s.header.Get("Transfer-Encoding") != "" {
					t.Errorf("request %d reached Core with both Content-Length and Transfer-Encoding", i)
				}
				if v := s.header.Values("X-Pad"); len(v) > 0 && (len(v) != 1 || strings.ContainsAny(v[0], "\r\n")) {
					t.Errorf("request %d: folded header reached Core as %q", i, v)
				}
			}
			for i, r := range responses {
				if r.StatusCode != http.StatusOK {
					t.Errorf("response %d: got %d; want 200", i, r.StatusCode)
				}
			}
			if c.closes {
				if len(responses) != len(c.want) {
					t.Errorf("responses: got %v; want %d and the connection closed", statuses(responses), len(c.want))
				} else if last := responses[len(responses)-1]; !last.Close {
					t.Errorf("last answer lacks Connection: close")
				}
			}
		})
	}
	// Malformed client framing is the client's fault, never Core's.
	if n := upstreamErrors(t, sc.Registry); n != 0 {
		t.Errorf("upstream_errors_total: got %v; want 0", n)
	}
}

// exchangeRaw writes raw on a fresh connection and reads responses until the
// server closes it. It never half-closes: net/http reads a client's EOF as
// "gone" and would cancel the request under test.
func exchangeRaw(addr, raw string) ([]*http.Response, error) {
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(15 * time.Second))
	if _, err := io.WriteString(conn, raw); err != nil {
		return nil, err
	}
	br := bufio.NewReader(conn)
	var out []*http.Response
	for {
		res, err := http.ReadResponse(br, nil)
		if err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) || isReset(err) {
				return out, nil
			}
			return out, fmt.Errorf("reading response %d: %w", len(out)+1, err)
		}
		body, err := io.ReadAll(res.Body)
		res.Body.Close()
		if err != nil {
			return out, fmt.Errorf("reading body %d: %w", len(out)+1, err)
		}
		res.Body = io.NopCloser(strings.NewReader(string(body)))
		out = append(out, res)
	}
}

func isReset(err error) bool {
	var oe *net.OpError
	return errors.As(err, &oe) && !oe.Timeout()
}

func statuses(rs []*http.Response) []int {
	var out []int
	for _, r := range rs {
		out = append(out, r.StatusCode)
	}
	return out
}

func uris(ss []smuggleSeen) []string {
	var out []string
	for _, s := range ss {
		out = append(out, fmt.Sprintf("%s %s complete=%v", s.method, s.uri, s.complete))
	}
	return out
}
