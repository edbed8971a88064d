package test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/netip"
	"net/textproto"
	"net/url"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bailinghub/knowledge-sidecar/internal/testkit"
	"github.com/bailinghub/knowledge-sidecar/internal/testkit/testdb"
	"github.com/bailinghub/knowledge-sidecar/proxy"
)

// Every test here talks to real sockets: an httptest upstream standing in
// for Core, and the sidecar started by StartSidecar in front of it.

// target is one way to reach the upstream: directly, or through the sidecar.
type target struct {
	name string
	url  string // base URL
	addr string // host:port
}

// bothTargets starts a sidecar in front of u and returns the direct and the
// proxied way to reach it.
func bothTargets(t *testing.T, u *upstream, o SidecarOptions) (direct, viaSidecar target, sc *Sidecar) {
	t.Helper()
	o.CoreURL = u.URL
	sc = StartSidecar(t, o)
	return target{"direct", u.URL, u.Listener.Addr().String()}, target{"sidecar", sc.URL, sc.Addr}, sc
}

// patterned returns n deterministic, non-repeating-looking bytes.
func patterned(n int) []byte {
	b := make([]byte, n)
	var x uint32 = 2463534242
	for i := range b {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		b[i] = byte(x)
	}
	return b
}

// diffUpstream answers by path; every branch records what it received.
func diffUpstream(t *testing.T) (*upstream, []byte) {
	gz := gzipBytes(t, bytes.Repeat([]byte("knowledge sidecar passes gzip through. "), 200))
	big := patterned(3<<19 + 7) // 1.5 MiB + 7
	u := startUpstream(t, func(u *upstream, w http.ResponseWriter, r *http.Request) {
		body := u.readAndRecord(r)
		h := w.Header()
		switch {
		case strings.HasPrefix(r.URL.Path, "/status/"):
			code, _ := strconv.Atoi(strings.TrimPrefix(r.URL.Path, "/status/"))
			h.Set("ETag", `"v1"`)
			h.Set("Cache-Control", "max-age=60")
			w.WriteHeader(code)
			if code != http.StatusNoContent && code != http.StatusNotModified {
				fmt.Fprintf(w, `{"error":"status_%d"}`, code)
			}
		case r.URL.Path == "/head":
			h.Set("Content-Type", "text/plain")
			h.Set("Content-Length", "11")
			if r.Method != http.MethodHead {
				io.WriteString(w, "hello world")
			}
		case r.URL.Path == "/options":
			h.Set("Allow", "GET, HEAD, OPTIONS, PURGE, PROPFIND")
			h.Set("Content-Length", "0")
			w.WriteHeader(http.StatusNoContent)
		case r.URL.Path == "/chunked":
			h.Set("Content-Type", "text/plain")
			for i := range 3 {
				fmt.Fprintf(w, "part %d;", i)
				http.NewResponseController(w).Flush()
			}
		case r.URL.Path == "/gzip":
			h.Set("Content-Type", "text/plain")
			h.Set("Content-Encoding", "gzip")
			h.Set("Vary", "Accept-Encoding")
			h.Set("Content-Length", strconv.Itoa(len(gz)))
			w.Write(gz)
		case r.URL.Path == "/early":
			h.Add("Link", "</app.css>; rel=preload; as=style")
			h.Add("Link", "</app.js>; rel=preload; as=script")
			w.WriteHeader(http.StatusEarlyHints)
			h.Del("Link")
			h.Set("Content-Type", "application/json")
			h.Set("Location", "/things/1")
			w.WriteHeader(http.StatusCreated)
			io.WriteString(w, `{"id":1}`)
		case r.URL.Path == "/early-404":
			h.Set("Link", "</missing.css>; rel=preload; as=style")
			w.WriteHeader(http.StatusEarlyHints)
			h.Del("Link")
			w.WriteHeader(http.StatusNotFound)
		case r.URL.Path == "/trailers":
			h.Set("Trailer", "X-Checksum, X-Count")
			h.Set("Content-Type", "text/plain")
			io.WriteString(w, "body with trailers")
			http.NewResponseController(w).Flush()
			h.Set("X-Checksum", "abc123")
			h.Set("X-Count", "18")
			h.Set(http.TrailerPrefix+"X-Undeclared", "late")
		case r.URL.Path == "/big":
			h.Set("Content-Type", "application/octet-stream")
			w.Write(big)
		default: // echo
			h.Add("X-Dup", "one")
			h.Add("X-Dup", "two")
			h.Add("Set-Cookie", "a=1; Path=/")
			h.Add("Set-Cookie", "b=2; Path=/; HttpOnly")
			h.Set("X-Seen-Method", r.Method)
			h.Set("X-Seen-Uri", r.RequestURI)
			h.Set("Content-Type", "application/octet-stream")
			if r.Method == http.MethodHead {
				h.Set("Content-Length", strconv.Itoa(len(body)))
				return
			}
			w.Write(body)
		}
	})
	return u, gz
}

// exchange is everything a client observes of one request.
type exchange struct {
	status        int
	header        http.Header
	body          []byte
	trailer       http.Header
	informational []string // "103 Link=[...]" etc.
}

type diffCase struct {
	name   string
	method string
	target string // path and raw query, sent byte-for-byte
	header http.Header
	body   []byte
	check  func(t *testing.T, got exchange, seen seenRequest)
}

func (c diffCase) do(t *testing.T, cl *http.Client, base string) exchange {
	t.Helper()
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	// Opaque keeps the request-target exactly as written.
	u.Opaque = strings.SplitN(c.target, "?", 2)[0]
	if i := strings.IndexByte(c.target, '?'); i >= 0 {
		u.RawQuery = c.target[i+1:]
	}
	var body io.Reader
	if c.body != nil {
		body = bytes.NewReader(c.body)
	}
	var ex exchange
	trace := &httptrace.ClientTrace{Got1xxResponse: func(code int, h textproto.MIMEHeader) error {
		ex.informational = append(ex.informational, fmt.Sprintf("%d %v", code, endToEnd(http.Header(h))))
		return nil
	}}
	req, err := http.NewRequestWithContext(httptrace.WithClientTrace(context.Background(), trace), c.method, u.String(), body)
	if err != nil {
		t.Fatal(err)
	}
	req.URL = u
	req.Host = "ks.example"
	for k, v := range c.header {
		req.Header[k] = v
	}
	res, err := cl.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", c.method, c.target, err)
	}
	defer res.Body.Close()
	ex.body, err = io.ReadAll(res.Body)
	if err != nil {
		t.Fatalf("read body: %v", err)
	}
	ex.status = res.StatusCode
	ex.header = endToEnd(res.Header)
	ex.trailer = endToEnd(res.Trailer)
	return ex
}

// TestDifferential sends the same requests directly to the upstream and
// through the sidecar and requires identical results on both ends: what the
// client gets (status, body bytes, end-to-end headers, trailers, 1xx) and
// what the upstream receives (method, request-target, Host, headers, body).
func TestDifferential(t *testing.T) {
	u, gz := diffUpstream(t)
	direct, via, _ := bothTargets(t, u, SidecarOptions{})
	cl := newClient(t)
	bigBody := patterned(1<<20 + 513)

	cases := []diffCase{
		{name: "GET", method: "GET", target: "/agent-api/v1/workspaces/r1/sessions"},
		{name: "HEAD", method: "HEAD", target: "/head"},
		{name: "HEAD echo", method: "HEAD", target: "/echo"},
		{name: "OPTIONS", method: "OPTIONS", target: "/options", header: http.Header{"Origin": {"https://app.example"}, "Access-Control-Request-Method": {"POST"}}},
		{name: "PURGE", method: "PURGE", target: "/cache/item"},
		{name: "PROPFIND", method: "PROPFIND", target: "/dav/", header: http.Header{"Depth": {"1"}, "Content-Type": {"application/xml"}},
			body: []byte(`<?xml version="1.0"?><propfind xmlns="DAV:"><allprop/></propfind>`)},
		{name: "DELETE", method: "DELETE", target: "/things/1"},
		{name: "PATCH", method: "PATCH", target: "/things/1", body: []byte(`{"a":1}`), header: http.Header{"Content-Type": {"application/merge-patch+json"}}},
		{name: "encoded slash", method: "GET", target: "/files/a%2Fb/c"},
		{name: "encoded percent", method: "GET", target: "/files/100%25/x"},
		{name: "encoded space", method: "GET", target: "/files/a%20b"},
		{name: "lowercase and needless escapes", method: "GET", target: "/files/a%2fb/%41%7e"},
		{name: "repeated query keys", method: "GET", target: "/q?a=1&a=2&b=&a=3"},
		{name: "raw query byte for byte", method: "GET", target: "/q?z=1&a=%2F%2f&sp=a+b%20c&empty&=v&%E4%BD%A0=%E5%A5%BD"},
		{name: "query with semicolon", method: "GET", target: "/q?a=1;b=2&c=3"},
		{name: "query with bad escape", method: "GET", target: "/q?token=abc&p=100%&x=%zz"},
		{name: "duplicate request headers", method: "GET", target: "/echo",
			header: http.Header{"X-Multi": {"a", "b"}, "Accept": {"text/plain", "application/json"}, "Authorization": {"Bearer client-token"}, "Cookie": {"s=1; t=2"}}},
		{name: "expect 100-continue", method: "POST", target: "/echo", body: []byte("continued"), header: http.Header{"Expect": {"100-continue"}}},
		{name: "1 MiB body", method: "POST", target: "/echo", body: bigBody, header: http.Header{"Content-Type": {"application/octet-stream"}}},
		{name: "1.5 MiB response", method: "GET", target: "/big"},
		{name: "chunked without content-length", method: "GET", target: "/chunked"},
		{name: "gzip passes through compressed", method: "GET", target: "/gzip", check: func(t *testing.T, got exchange, seen seenRequest) {
			if !bytes.Equal(got.body, gz) {
				t.Errorf("body: got %d bytes, not the upstream's %d gzip bytes", len(got.body), len(gz))
			}
			if ce := got.header.Get("Content-Encoding"); ce != "gzip" {
				t.Errorf("Content-Encoding: got %q; want gzip", ce)
			}
			if ae := seen.Header.Values("Accept-Encoding"); len(ae) != 0 {
				t.Errorf("upstream got Accept-Encoding %q; want none (the client sent none)", ae)
			}
		}},
		{name: "gzip with client accept-encoding", method: "GET", target: "/gzip", header: http.Header{"Accept-Encoding": {"gzip, br"}}},
		{name: "204", method: "GET", target: "/status/204"},
		{name: "304", method: "GET", target: "/status/304", header: http.Header{"If-None-Match": {`"v1"`}}},
		{name: "404", method: "GET", target: "/status/404"},
		{name: "500", method: "POST", target: "/status/500", body: []byte("x")},
		{name: "103 early hints then 201", method: "GET", target: "/early", check: func(t *testing.T, got exchange, _ seenRequest) {
			if got.status != http.StatusCreated {
				t.Errorf("status: got %d; want 201", got.status)
			}
			if len(got.informational) != 1 || !strings.HasPrefix(got.informational[0], "103 ") {
				t.Errorf("1xx: got %q; want one 103", got.informational)
			}
		}},
		{name: "103 early hints then 404 without body", method: "GET", target: "/early-404", check: func(t *testing.T, got exchange, _ seenRequest) {
			if got.status != http.StatusNotFound {
				t.Errorf("status: got %d; want 404", got.status)
			}
		}},
		{name: "response trailers", method: "GET", target: "/trailers", header: http.Header{"Te": {"trailers"}}, check: func(t *testing.T, got exchange, _ seenRequest) {
			if got.trailer.Get("X-Checksum") != "abc123" || got.trailer.Get("X-Undeclared") != "late" {
				t.Errorf("trailers: got %v; want X-Checksum and X-Undeclared", got.trailer)
			}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			u.reset()
			want := c.do(t, cl, direct.url)
			wantSeen := u.last(t)
			u.reset()
			got := c.do(t, cl, via.url)
			gotSeen := u.last(t)

			if got.status != want.status {
				t.Errorf("status: got %d; want %d", got.status, want.status)
			}
			if !bytes.Equal(got.body, want.body) {
				t.Errorf("body: got %d bytes %.60q; want %d bytes %.60q", len(got.body), got.body, len(want.body), want.body)
			}
			if d := headerDiff(got.header, want.header); d != "" {
				t.Errorf("response headers differ:%s", d)
			}
			if d := headerDiff(got.trailer, want.trailer); d != "" {
				t.Errorf("trailers differ:%s", d)
			}
			if !reflect.DeepEqual(got.informational, want.informational) {
				t.Errorf("1xx: got %q; want %q", got.informational, want.informational)
			}

			if gotSeen.Method != wantSeen.Method {
				t.Errorf("upstream method: got %q; want %q", gotSeen.Method, wantSeen.Method)
			}
			if gotSeen.RequestURI != wantSeen.RequestURI {
				t.Errorf("upstream request-target: got %q; want %q", gotSeen.RequestURI, wantSeen.RequestURI)
			}
			if gotSeen.Host != wantSeen.Host {
				t.Errorf("upstream Host: got %q; want %q", gotSeen.Host, wantSeen.Host)
			}
			if !bytes.Equal(gotSeen.Body, wantSeen.Body) {
				t.Errorf("upstream body: got %d bytes; want %d", len(gotSeen.Body), len(wantSeen.Body))
			}
			fwd := []string{"X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto"}
			if d := headerDiff(endToEnd(gotSeen.Header, fwd...), endToEnd(wantSeen.Header, fwd...)); d != "" {
				t.Errorf("upstream request headers differ:%s", d)
			}
			if c.check != nil {
				c.check(t, got, gotSeen)
			}
		})
	}
}

// TestRequestTrailers: trailers a client sends after a chunked body reach
// Core like the body does.
func TestRequestTrailers(t *testing.T) {
	u := startUpstream(t, func(u *upstream, w http.ResponseWriter, r *http.Request) {
		u.readAndRecord(r)
	})
	direct, via, _ := bothTargets(t, u, SidecarOptions{})
	for _, tg := range []target{direct, via} {
		t.Run(tg.name, func(t *testing.T) {
			u.reset()
			conn, err := net.Dial("tcp", tg.addr)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			io.WriteString(conn, "POST /upload HTTP/1.1\r\nHost: ks.example\r\nTransfer-Encoding: chunked\r\nTrailer: X-Digest\r\n\r\n"+
				"5\r\nhello\r\n0\r\nX-Digest: sha-256=abc\r\n\r\n")
			res, err := http.ReadResponse(bufio.NewReader(conn), nil)
			if err != nil {
				t.Fatal(err)
			}
			drainClose(res.Body)
			seen := u.last(t)
			if string(seen.Body) != "hello" {
				t.Errorf("body: got %q; want hello", seen.Body)
			}
			if got := seen.Trailer.Get("X-Digest"); got != "sha-256=abc" {
				t.Errorf("trailer X-Digest: got %q; want sha-256=abc", got)
			}
		})
	}
}

// TestStreamingRequestBody: the upstream starts receiving a 1 MiB+ upload
// before the client has finished sending it.
func TestStreamingRequestBody(t *testing.T) {
	const first = 64 << 10
	payload := patterned(1<<20 + 4096)
	sum := sha256.Sum256(payload)
	gotFirst := make(chan struct{}, 1)
	u := startUpstream(t, func(u *upstream, w http.ResponseWriter, r *http.Request) {
		buf := make([]byte, first)
		if _, err := io.ReadFull(r.Body, buf); err != nil {
			http.Error(w, "short", http.StatusBadRequest)
			return
		}
		gotFirst <- struct{}{}
		rest, _ := io.ReadAll(r.Body)
		all := append(buf, rest...)
		u.record(r, nil)
		s := sha256.Sum256(all)
		fmt.Fprintf(w, "%d %s", len(all), hex.EncodeToString(s[:]))
	})
	direct, via, _ := bothTargets(t, u, SidecarOptions{})
	cl := newClient(t)
	for _, tg := range []target{direct, via} {
		t.Run(tg.name, func(t *testing.T) {
			pr, pw := io.Pipe()
			writeErr := make(chan error, 1)
			go func() {
				if _, err := pw.Write(payload[:first]); err != nil {
					writeErr <- err
					return
				}
				select {
				case <-gotFirst:
				case <-time.After(15 * time.Second):
					err := errors.New("upstream did not start receiving before the client finished sending")
					pw.CloseWithError(err)
					writeErr <- err
					return
				}
				_, err := pw.Write(payload[first:])
				pw.CloseWithError(err)
				writeErr <- err
			}()
			req, _ := http.NewRequest(http.MethodPut, tg.url+"/upload", pr)
			res, err := cl.Do(req)
			if err != nil {
				t.Fatalf("PUT: %v", err)
			}
			b, _ := io.ReadAll(res.Body)
			res.Body.Close()
			if err := waitFor(t, writeErr, "client writer"); err != nil {
				t.Fatal(err)
			}
			want := fmt.Sprintf("%d %s", len(payload), hex.EncodeToString(sum[:]))
			if res.StatusCode != http.StatusOK || string(b) != want {
				t.Errorf("got %d %q; want 200 %q", res.StatusCode, b, want)
			}
		})
	}
}

// TestStreamingResponseBody: the client receives the first part of a 1 MiB+
// download before the upstream writes the rest, with and without a
// Content-Length.
func TestStreamingResponseBody(t *testing.T) {
	const first = 64 << 10
	payload := patterned(1<<20 + 333)
	clientGotFirst := make(chan struct{}, 1)
	upstreamTimedOut := make(chan struct{}, 4)
	u := startUpstream(t, func(u *upstream, w http.ResponseWriter, r *http.Request) {
		u.readAndRecord(r)
		if r.URL.Query().Get("cl") == "1" {
			w.Header().Set("Content-Length", strconv.Itoa(len(payload)))
		}
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Write(payload[:first])
		http.NewResponseController(w).Flush()
		select {
		case <-clientGotFirst:
		case <-r.Context().Done():
			return
		case <-time.After(15 * time.Second):
			upstreamTimedOut <- struct{}{}
		}
		w.Write(payload[first:])
	})
	direct, via, _ := bothTargets(t, u, SidecarOptions{})
	cl := newClient(t)
	for _, tg := range []target{direct, via} {
		for _, withCL := range []string{"0", "1"} {
			t.Run(tg.name+"/content-length="+withCL, func(t *testing.T) {
				res, err := cl.Get(tg.url + "/download?cl=" + withCL)
				if err != nil {
					t.Fatal(err)
				}
				defer res.Body.Close()
				buf := make([]byte, first)
				if _, err := io.ReadFull(res.Body, buf); err != nil {
					t.Fatalf("read first part: %v", err)
				}
				clientGotFirst <- struct{}{}
				rest, err := io.ReadAll(res.Body)
				if err != nil {
					t.Fatalf("read rest: %v", err)
				}
				select {
				case <-upstreamTimedOut:
					t.Fatal("the client did not get the first part before the upstream wrote the rest")
				default:
				}
				if got := append(buf, rest...); !bytes.Equal(got, payload) {
					t.Errorf("body: got %d bytes; want the %d bytes sent", len(got), len(payload))
				}
			})
		}
	}
}

// TestSSEPerEvent: each event reaches the client before the upstream sends
// the next one.
func TestSSEPerEvent(t *testing.T) {
	const events = 3
	acks := make(chan int)
	failures := make(chan string, events)
	u := startUpstream(t, func(u *upstream, w http.ResponseWriter, r *http.Request) {
		u.readAndRecord(r)
		w.Header().Set("Content-Type", "text/event-stream")
		w.Header().Set("Cache-Control", "no-cache")
		w.WriteHeader(http.StatusOK)
		for i := range events {
			fmt.Fprintf(w, "id: %d\nevent: tick\ndata: {\"n\":%d}\n\n", i, i)
			http.NewResponseController(w).Flush()
			select {
			case n := <-acks:
				if n != i {
					failures <- fmt.Sprintf("ack %d for event %d", n, i)
					return
				}
			case <-r.Context().Done():
				return
			case <-time.After(15 * time.Second):
				failures <- fmt.Sprintf("event %d never reached the client", i)
				return
			}
		}
	})
	direct, via, _ := bothTargets(t, u, SidecarOptions{})
	cl := newClient(t)
	for _, tg := range []target{direct, via} {
		t.Run(tg.name, func(t *testing.T) {
			res, err := cl.Get(tg.url + "/agent-api/v1/workspaces/r1/events")
			if err != nil {
				t.Fatal(err)
			}
			defer res.Body.Close()
			if ct := res.Header.Get("Content-Type"); ct != "text/event-stream" {
				t.Errorf("Content-Type: got %q; want text/event-stream", ct)
			}
			br := bufio.NewReader(res.Body)
			for i := range events {
				var ev []string
				for {
					line, err := br.ReadString('\n')
					if err != nil {
						t.Fatalf("event %d: %v (failures: %v)", i, err, drainStrings(failures))
					}
					if line == "\n" {
						break
					}
					ev = append(ev, strings.TrimSuffix(line, "\n"))
				}
				want := []string{"id: " + strconv.Itoa(i), "event: tick", fmt.Sprintf(`data: {"n":%d}`, i)}
				if !reflect.DeepEqual(ev, want) {
					t.Fatalf("event %d: got %q; want %q", i, ev, want)
				}
				acks <- i
			}
			if rest, _ := io.ReadAll(br); len(rest) != 0 {
				t.Errorf("trailing bytes after the last event: %q", rest)
			}
			if f := drainStrings(failures); len(f) > 0 {
				t.Errorf("upstream: %v", f)
			}
		})
	}
}

func drainStrings(ch chan string) []string {
	var out []string
	for {
		select {
		case s := <-ch:
			out = append(out, s)
		default:
			return out
		}
	}
}

// TestWebSocket: the upgrade handshake and frames pass both ways; an upstream
// that answers 200 instead of 101 gets no tunnel.
func TestWebSocket(t *testing.T) {
	wsErrs := make(chan error, 8)
	u := startUpstream(t, func(u *upstream, w http.ResponseWriter, r *http.Request) {
		u.record(r, nil)
		if r.URL.Path == "/ws-refused" || r.URL.Path == "/after" {
			w.Header().Set("Content-Type", "text/plain")
			io.WriteString(w, "no websocket here")
			return
		}
		if err := serveWebSocketEcho(w, r); err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
			wsErrs <- err
		}
	})
	direct, via, sc := bothTargets(t, u, SidecarOptions{})

	for _, tg := range []target{direct, via} {
		t.Run(tg.name+"/echo", func(t *testing.T) {
			u.reset()
			conn, br, res := wsDial(t, tg.addr, "/agent-api/v1/workspaces/r1/ws?x=1")
			if res.StatusCode != http.StatusSwitchingProtocols {
				t.Fatalf("status: got %d; want 101", res.StatusCode)
			}
			if got, want := res.Header.Get("Sec-WebSocket-Accept"), wsAccept("dGhlIHNhbXBsZSBub25jZQ=="); got != want {
				t.Errorf("Sec-WebSocket-Accept: got %q; want %q", got, want)
			}
			if got := res.Header.Get("X-Upstream"); got != "ws" {
				t.Errorf("X-Upstream: got %q; want ws", got)
			}
			for i, msg := range []string{"hello", strings.Repeat("x", 300), "bye"} {
				if err := writeFrame(conn, wsText, []byte(msg), true); err != nil {
					t.Fatalf("write frame %d: %v", i, err)
				}
				op, p, err := readFrame(br)
				if err != nil {
					t.Fatalf("read frame %d: %v", i, err)
				}
				if op != wsText || string(p) != msg {
					t.Errorf("frame %d: got op %d %.20q; want text %.20q", i, op, p, msg)
				}
			}
			if err := writeFrame(conn, wsClose, []byte{0x03, 0xe8}, true); err != nil {
				t.Fatal(err)
			}
			if op, _, err := readFrame(br); err != nil || op != wsClose {
				t.Errorf("close: got op %d err %v; want a close frame", op, err)
			}
			seen := u.last(t)
			if seen.RequestURI != "/agent-api/v1/workspaces/r1/ws?x=1" {
				t.Errorf("upstream request-target: got %q", seen.RequestURI)
			}
		})
		t.Run(tg.name+"/200 instead of 101", func(t *testing.T) {
			u.reset()
			conn, br, res := wsDial(t, tg.addr, "/ws-refused")
			b, _ := io.ReadAll(res.Body)
			if res.StatusCode != http.StatusOK || string(b) != "no websocket here" {
				t.Fatalf("got %d %q; want 200 with the upstream's body", res.StatusCode, b)
			}
			// With a raw tunnel (the echo proxy trap) the next request
			// would bypass the sidecar's edge; without one it is parsed,
			// stamped and forwarded like any other.
			fmt.Fprintf(conn, "GET /after HTTP/1.1\r\nHost: ks.example\r\n\r\n")
			conn.SetReadDeadline(time.Now().Add(15 * time.Second))
			next := readOK(t, br, "follow-up request")
			seen := u.requests()
			if len(seen) != 2 || seen[1].RequestURI != "/after" {
				t.Fatalf("upstream requests: got %d; want /ws-refused then /after", len(seen))
			}
			if tg.name == "sidecar" {
				if next.Header.Get("X-Request-Id") == "" || seen[1].Header.Get("X-Forwarded-For") == "" {
					t.Errorf("follow-up bypassed the sidecar's edge (X-Request-Id %q, X-Forwarded-For %q): a tunnel was opened",
						next.Header.Get("X-Request-Id"), seen[1].Header.Get("X-Forwarded-For"))
				}
			}
		})
	}
	select {
	case err := <-wsErrs:
		t.Errorf("upstream websocket: %v", err)
	default:
	}
	testkit.WaitMetric(t, sc.Registry, "knowledge_sidecar_http_requests_total", map[string]string{"handler": "passthrough", "code": "101"}, 1)
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// TestUpgradeMismatch: an upstream that switches to a protocol the client
// did not ask for is refused with 502 and counted as a protocol error.
func TestUpgradeMismatch(t *testing.T) {
	u := startUpstream(t, func(u *upstream, w http.ResponseWriter, r *http.Request) {
		u.record(r, nil)
		conn, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer conn.Close()
		io.WriteString(brw, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: something-else\r\nConnection: Upgrade\r\n\r\n")
		brw.Flush()
	})
	sc := StartSidecar(t, SidecarOptions{CoreURL: u.URL})
	_, br, res := wsDial(t, sc.Addr, "/ws")
	_ = br
	body, _ := io.ReadAll(res.Body)
	if res.StatusCode != http.StatusBadGateway {
		t.Fatalf("status: got %d; want 502", res.StatusCode)
	}
	assertErrorBody(t, body, "upstream_unavailable", u.Listener.Addr().String())
	if got := testkit.Metric(t, sc.Registry, "knowledge_sidecar_upstream_errors_total", map[string]string{"kind": "protocol"}); got != 1 {
		t.Errorf("upstream_errors_total{kind=protocol}: got %v; want 1", got)
	}
}

// assertErrorBody checks a sidecar-made error: Core's {"error","message"}
// JSON, and no trace of the upstream's address.
func assertErrorBody(t *testing.T, body []byte, code, upstreamAddr string) {
	t.Helper()
	var eb struct {
		Error   string `json:"error"`
		Message string `json:"message"`
	}
	if err := json.Unmarshal(body, &eb); err != nil {
		t.Fatalf("error body %q is not JSON: %v", body, err)
	}
	if eb.Error != code || eb.Message == "" {
		t.Errorf("error body: got %+v; want error %q with a message", eb, code)
	}
	host, port, _ := net.SplitHostPort(upstreamAddr)
	for _, leak := range []string{upstreamAddr, host, ":" + port, "dial", "refused", "tcp"} {
		if strings.Contains(string(body), leak) {
			t.Errorf("error body %q reveals %q", body, leak)
		}
	}
}

// TestClientCancelPropagates: when the client goes away, the upstream sees
// its request context cancelled; a client gone before an answer is offered a 502, one gone mid-response is counted as 499.
func TestClientCancelPropagates(t *testing.T) {
	started := make(chan struct{}, 1)
	cancelled := make(chan struct{}, 1)
	u := startUpstream(t, func(u *upstream, w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/upload" {
			started <- struct{}{}
			if _, err := io.ReadAll(r.Body); err != nil {
				cancelled <- struct{}{}
			}
			return
		}
		u.readAndRecord(r)
		if r.URL.Path == "/stream" {
			w.Header().Set("Content-Type", "text/event-stream")
			io.WriteString(w, "data: first\n\n")
			http.NewResponseController(w).Flush()
		}
		started <- struct{}{}
		select {
		case <-r.Context().Done():
			cancelled <- struct{}{}
		case <-time.After(15 * time.Second):
		}
	})
	sc := StartSidecar(t, SidecarOptions{CoreURL: u.URL})
	cl := newClient(t)

	t.Run("before response headers", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		errc := make(chan error, 1)
		go func() {
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, sc.URL+"/slow", nil)
			res, err := cl.Do(req)
			if err == nil {
				res.Body.Close()
			}
			errc <- err
		}()
		waitFor(t, started, "upstream to start")
		cancel()
		waitFor(t, cancelled, "upstream to see the cancellation")
		if err := waitFor(t, errc, "client"); !errors.Is(err, context.Canceled) {
			t.Errorf("client error: got %v; want context.Canceled", err)
		}
		// The client's side ended before an answer; net/http cannot tell a
		// vanished client from a half-closed one, so a 502 is offered (a
		// half-closed client reads it) and that is what is recorded.
		testkit.Eventually(t, 10*time.Second, "502 recorded", func() bool {
			return testkit.Metric(t, sc.Registry, "knowledge_sidecar_http_requests_total", map[string]string{"handler": "passthrough", "code": "502"}) == 1
		})
		if got := testkit.Metric(t, sc.Registry, "knowledge_sidecar_upstream_errors_total", map[string]string{"kind": "canceled"}); got != 1 {
			t.Errorf("upstream_errors_total{kind=canceled}: got %v; want 1", got)
		}
	})
	t.Run("mid-stream", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, sc.URL+"/stream", nil)
		res, err := cl.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		line, _ := bufio.NewReader(res.Body).ReadString('\n')
		if line != "data: first\n" {
			t.Fatalf("first line: got %q", line)
		}
		waitFor(t, started, "upstream to start")
		cancel()
		res.Body.Close()
		waitFor(t, cancelled, "upstream to see the cancellation")
		testkit.Eventually(t, 10*time.Second, "in-flight back to 0 and a 499", func() bool {
			return testkit.Metric(t, sc.Registry, "knowledge_sidecar_http_requests_in_flight", nil) == 0 &&
				testkit.Metric(t, sc.Registry, "knowledge_sidecar_http_requests_total", map[string]string{"handler": "passthrough", "code": "499"}) == 1
		})
	})
	t.Run("mid-upload", func(t *testing.T) {
		conn, err := net.Dial("tcp", sc.Addr)
		if err != nil {
			t.Fatal(err)
		}
		io.WriteString(conn, "POST /upload HTTP/1.1\r\nHost: ks.example\r\nContent-Length: 100000\r\n\r\npartial...")
		waitFor(t, started, "upstream to start")
		conn.Close()
		waitFor(t, cancelled, "upstream to see the upload cut")
		// An incomplete body is answered 400 (a client that only half-closed
		// reads it) and recorded as such.
		testkit.Eventually(t, 10*time.Second, "a 400 for the incomplete body", func() bool {
			return testkit.Metric(t, sc.Registry, "knowledge_sidecar_http_requests_total", map[string]string{"handler": "passthrough", "code": "400"}) == 1
		})
		if got := testkit.Metric(t, sc.Registry, "knowledge_sidecar_upstream_errors_total", map[string]string{"kind": "other"}); got != 0 {
			t.Errorf("upstream_errors_total{kind=other}: got %v; want 0 (the client hung up, not Core)", got)
		}
	})
}

// TestCoreDown: nothing listens at Core's address → 502 with Core's error
// shape and no address in it.
func TestCoreDown(t *testing.T) {
	addr := deadAddr(t)
	sc := StartSidecar(t, SidecarOptions{CoreURL: "http://" + addr})
	cl := newClient(t)
	for _, m := range []string{http.MethodGet, http.MethodPost} {
		req, _ := http.NewRequest(m, sc.URL+"/agent-api/v1/workspaces/r1/turns", strings.NewReader("{}"))
		res, err := cl.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != http.StatusBadGateway {
			t.Errorf("%s: status got %d; want 502", m, res.StatusCode)
		}
		if ct := res.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
			t.Errorf("%s: Content-Type got %q; want application/json", m, ct)
		}
		if res.Header.Get("X-Request-Id") == "" {
			t.Errorf("%s: no X-Request-Id", m)
		}
		assertErrorBody(t, body, "upstream_unavailable", addr)
	}
	const want = `
# HELP knowledge_sidecar_upstream_errors_total Pass-through requests that got no answer from Core, by kind (dial, timeout, canceled, protocol, other).
# TYPE knowledge_sidecar_upstream_errors_total counter
knowledge_sidecar_upstream_errors_total{kind="canceled"} 0
knowledge_sidecar_upstream_errors_total{kind="dial"} 2
knowledge_sidecar_upstream_errors_total{kind="other"} 0
knowledge_sidecar_upstream_errors_total{kind="protocol"} 0
knowledge_sidecar_upstream_errors_total{kind="timeout"} 0
# HELP knowledge_sidecar_http_requests_total Requests answered, by handler and status code (499: client went away mid-response).
# TYPE knowledge_sidecar_http_requests_total counter
knowledge_sidecar_http_requests_total{code="502",handler="passthrough"} 2
`
	testkit.WaitGatherAndCompare(t, sc.Registry, want, "knowledge_sidecar_upstream_errors_total", "knowledge_sidecar_http_requests_total")
}

// TestCoreSlow: Core accepts but does not answer within the response header
// timeout → 504.
func TestCoreSlow(t *testing.T) {
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	u := startUpstream(t, func(u *upstream, w http.ResponseWriter, r *http.Request) {
		u.readAndRecord(r)
		select {
		case <-release:
		case <-r.Context().Done():
		}
	})
	sc := StartSidecar(t, SidecarOptions{CoreURL: u.URL, TransportOptions: proxy.TransportOptions{ResponseHeaderTimeout: 100 * time.Millisecond}})
	res, err := newClient(t).Get(sc.URL + "/agent-api/v1/workspaces/r1/sessions")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusGatewayTimeout {
		t.Fatalf("status: got %d; want 504", res.StatusCode)
	}
	assertErrorBody(t, body, "upstream_timeout", u.Listener.Addr().String())
	if got := testkit.Metric(t, sc.Registry, "knowledge_sidecar_upstream_errors_total", map[string]string{"kind": "timeout"}); got != 1 {
		t.Errorf("upstream_errors_total{kind=timeout}: got %v; want 1", got)
	}
}

// TestMetrics: requests_total by handler and code.
func TestMetrics(t *testing.T) {
	u := startUpstream(t, func(u *upstream, w http.ResponseWriter, r *http.Request) {
		u.readAndRecord(r)
		if r.URL.Path == "/missing" {
			w.WriteHeader(http.StatusNotFound)
		}
	})
	sc := StartSidecar(t, SidecarOptions{CoreURL: u.URL})
	cl := newClient(t)
	for _, p := range []string{"/a", "/b", "/missing", "/c"} {
		mustGet(t, cl, sc.URL+p)
	}
	const want = `
# HELP knowledge_sidecar_http_requests_total Requests answered, by handler and status code (499: client went away mid-response).
# TYPE knowledge_sidecar_http_requests_total counter
knowledge_sidecar_http_requests_total{code="200",handler="passthrough"} 3
knowledge_sidecar_http_requests_total{code="404",handler="passthrough"} 1
# HELP knowledge_sidecar_http_requests_in_flight Requests being served.
# TYPE knowledge_sidecar_http_requests_in_flight gauge
knowledge_sidecar_http_requests_in_flight 0
`
	testkit.WaitGatherAndCompare(t, sc.Registry, want, "knowledge_sidecar_http_requests_total", "knowledge_sidecar_http_requests_in_flight")
	if n := upstreamErrors(t, sc.Registry); n != 0 {
		t.Errorf("upstream_errors_total: got %v; want 0", n)
	}
	// The admin listener serves the same registry.
	code, text := mustGet(t, cl, sc.AdminURL+"/metrics")
	if code != http.StatusOK || !strings.Contains(text, `knowledge_sidecar_http_requests_total{code="404",handler="passthrough"} 1`) {
		t.Errorf("/metrics: got %d without the 404 series", code)
	}
}

// --- header hygiene ---

// rawRequest writes raw bytes to addr and reads one response.
func rawRequest(t *testing.T, addr, raw string) (*http.Response, []byte) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(15 * time.Second))
	if _, err := io.WriteString(conn, raw); err != nil {
		t.Fatal(err)
	}
	res, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("read response: %v", err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	return res, body
}

func TestHopByHopHeadersStripped(t *testing.T) {
	u := startUpstream(t, func(u *upstream, w http.ResponseWriter, r *http.Request) {
		u.readAndRecord(r)
		w.Header().Set("Connection", "X-Resp-Private")
		w.Header().Set("X-Resp-Private", "secret")
		w.Header().Set("Keep-Alive", "timeout=5")
		w.Header().Set("X-Resp-Public", "ok")
	})
	sc := StartSidecar(t, SidecarOptions{CoreURL: u.URL})
	res, _ := rawRequest(t, sc.Addr, "GET /x HTTP/1.1\r\nHost: ks.example\r\n"+
		"Connection: keep-alive, X-Private\r\nConnection: X-Also-Private\r\n"+
		"X-Private: 1\r\nX-Also-Private: 2\r\nKeep-Alive: timeout=5\r\nProxy-Connection: keep-alive\r\n"+
		"TE: gzip\r\nUpgrade: websocket\r\nProxy-Authorization: Basic Zm9vOmJhcg==\r\nX-End-To-End: kept\r\n\r\n")
	if res.StatusCode != http.StatusOK {
		t.Fatalf("status: got %d; want 200", res.StatusCode)
	}
	seen := u.last(t)
	for _, h := range []string{"Connection", "Keep-Alive", "Proxy-Connection", "Te", "Upgrade", "Proxy-Authorization", "X-Private", "X-Also-Private"} {
		if v, ok := seen.Header[h]; ok {
			t.Errorf("upstream got %s: %q; want it stripped", h, v)
		}
	}
	if got := seen.Header.Get("X-End-To-End"); got != "kept" {
		t.Errorf("X-End-To-End: got %q; want kept", got)
	}
	for _, h := range []string{"X-Resp-Private", "Keep-Alive"} {
		if v := res.Header.Values(h); len(v) != 0 {
			t.Errorf("client got response %s: %q; want it stripped", h, v)
		}
	}
	if got := res.Header.Get("X-Resp-Public"); got != "ok" {
		t.Errorf("X-Resp-Public: got %q; want ok", got)
	}
}

func TestForwardedHeaders(t *testing.T) {
	u := startUpstream(t, func(u *upstream, w http.ResponseWriter, r *http.Request) { u.readAndRecord(r) })
	spoof := "X-Forwarded-For: 6.6.6.6\r\nX-Forwarded-Host: evil.example\r\nX-Forwarded-Proto: https\r\n" +
		"Forwarded: for=6.6.6.6;proto=https\r\nX-Real-Ip: 6.6.6.6\r\n" +
		"X-Client-IP: 6.6.6.6\r\nTrue-Client-IP: 6.6.6.6\r\nCF-Connecting-IP: 6.6.6.6\r\nx-cluster-client-ip: 6.6.6.6\r\n"
	// Client-address headers of other proxies and CDNs: only a trusted
	// peer chooses them (added to each case's want below).
	clientIP := []string{"X-Real-Ip", "X-Client-Ip", "True-Client-Ip", "Cf-Connecting-Ip", "X-Cluster-Client-Ip"}
	cases := []struct {
		name    string
		trusted []netip.Prefix
		rewrite bool
		extra   string
		want    map[string][]string // nil slice: header absent
		host    string              // "" = the upstream's own host
	}{
		{name: "untrusted peer: spoofed values replaced", extra: spoof, host: "client.example",
			want: map[string][]string{"X-Forwarded-For": {"127.0.0.1"}, "X-Forwarded-Host": {"client.example"},
				"X-Forwarded-Proto": {"http"}, "Forwarded": nil, "X-Real-Ip": nil}},
		{name: "untrusted peer, no forwarding headers", host: "client.example",
			want: map[string][]string{"X-Forwarded-For": {"127.0.0.1"}, "X-Forwarded-Host": {"client.example"}, "X-Forwarded-Proto": {"http"}}},
		{name: "trusted peer: appended and kept", trusted: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}, extra: spoof, host: "client.example",
			want: map[string][]string{"X-Forwarded-For": {"6.6.6.6, 127.0.0.1"}, "X-Forwarded-Host": {"evil.example"},
				"X-Forwarded-Proto": {"https"}, "Forwarded": {"for=6.6.6.6;proto=https"}, "X-Real-Ip": {"6.6.6.6"}}},
		{name: "trusted network of another peer", trusted: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}, extra: spoof, host: "client.example",
			want: map[string][]string{"X-Forwarded-For": {"127.0.0.1"}, "X-Forwarded-Host": {"client.example"}, "X-Forwarded-Proto": {"http"}, "X-Real-Ip": nil}},
		{name: "host rewritten to core when configured", rewrite: true, host: "",
			want: map[string][]string{"X-Forwarded-Host": {"client.example"}}},
	}
	for _, c := range cases {
		if c.extra != "" {
			for _, h := range clientIP {
				if c.want[h] == nil {
					c.want[h] = c.want["X-Real-Ip"]
				}
			}
		}
		t.Run(c.name, func(t *testing.T) {
			sc := StartSidecar(t, SidecarOptions{CoreURL: u.URL, TrustedProxies: c.trusted, RewriteHost: c.rewrite})
			u.reset()
			res, _ := rawRequest(t, sc.Addr, "GET /x HTTP/1.1\r\nHost: client.example\r\n"+c.extra+"\r\n")
			if res.StatusCode != http.StatusOK {
				t.Fatalf("status: got %d", res.StatusCode)
			}
			seen := u.last(t)
			wantHost := c.host
			if wantHost == "" {
				wantHost = u.Listener.Addr().String()
			}
			if seen.Host != wantHost {
				t.Errorf("Host: got %q; want %q", seen.Host, wantHost)
			}
			for h, want := range c.want {
				if got := seen.Header.Values(h); !reflect.DeepEqual(got, want) && !(len(got) == 0 && len(want) == 0) {
					t.Errorf("%s: got %q; want %q", h, got, want)
				}
			}
		})
	}
}

// clientAddressNames are the client-address and original-URL headers SPEC
// §8.3 names (members of the X-Forwarded-* family among them), and one
// configured extra name (X-Corp-Client-Addr).
var clientAddressNames = []string{
	"X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto", "X-Forwarded-Port", "X-Forwarded-Prefix",
	"X-Forwarded-Server", "X-Forwarded-Ssl", "X-Forwarded-Scheme", "X-Forwarded-Uri", "X-Forwarded-Path",
	"X-Forwarded-Client-Cert", "Forwarded",
	"X-Real-IP", "True-Client-IP", "CF-Connecting-IP", "Fastly-Client-IP", "X-Client-IP", "Client-IP",
	"X-Cluster-Client-IP", "X-Originating-IP", "X-Remote-IP", "X-Remote-Addr", "X-Envoy-External-Address",
	"X-Original-URL", "X-Rewrite-URL", "X-Corp-Client-Addr",
}

// TestClientAddressHeaders: every client-address header, in its dash and
// its underscore spelling, sent over a socket by an untrusted peer, is
// gone from what Core gets, through the pass-through, an intercepted turn
// and a forwarded capabilities probe (X-Forwarded-For/-Host/-Proto are the
// sidecar's own); a trusted proxy's all reach Core.
func TestClientAddressHeaders(t *testing.T) {
	const spoof = "203.0.113.77"
	w := NewWorld(t, WorldOptions{})
	var hdr strings.Builder
	for _, h := range clientAddressNames {
		hdr.WriteString(h + ": " + spoof + "\r\n")
		if u := strings.ReplaceAll(h, "-", "_"); u != h {
			hdr.WriteString(u + ": " + spoof + "\r\n")
		}
	}
	reqs := func(tag string) []struct{ name, path, raw string } {
		turn := newTurn(tag).body(modeJSON("on_demand"))
		head := " HTTP/1.1\r\nHost: client.example\r\nAuthorization: Bearer " + w.TokenA + "\r\n" + hdr.String()
		return []struct{ name, path, raw string }{
			{"pass-through", "/agent-api/v1/workspaces/" + testdb.RouteMulti + "/sessions",
				"GET /agent-api/v1/workspaces/" + testdb.RouteMulti + "/sessions" + head + "\r\n"},
			{"capabilities", capsPath(testdb.RouteMulti), "GET " + capsPath(testdb.RouteMulti) + head + "\r\n"},
			{"turn", turnsPath(testdb.RouteMulti), "POST " + turnsPath(testdb.RouteMulti) + head +
				"Content-Type: application/json\r\nContent-Length: " + strconv.Itoa(len(turn)) + "\r\n\r\n" + string(turn)},
		}
	}
	for _, trusted := range []bool{false, true} {
		t.Run(map[bool]string{false: "untrusted", true: "trusted"}[trusted], func(t *testing.T) {
			o := SidecarOptions{CoreURL: w.CoreURL, Features: w.Features(t, FeatureOptions{}),
				ClientAddressHeadersExtra: []string{"X-Corp-Client-Addr"}}
			if trusted {
				o.TrustedProxies = []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}
			}
			sc := StartSidecar(t, o)
			for _, rq := range reqs("client-address-" + strconv.FormatBool(trusted)) {
				t.Run(rq.name, func(t *testing.T) {
					before := w.Core.Calls(rq.path)
					res, body := rawRequest(t, sc.Addr, rq.raw)
					seen, ok := w.Core.LastRequest(rq.path)
					if !ok || w.Core.Calls(rq.path) != before+1 {
						t.Fatalf("Core got no %s request (answer %d %s)", rq.path, res.StatusCode, body)
					}
					if !trusted {
						for k, v := range seen.Header {
							if strings.Contains(strings.Join(v, ","), spoof) {
								t.Errorf("%s: %q reached Core", k, v)
							}
						}
						for h, want := range map[string]string{"X-Forwarded-For": "127.0.0.1", "X-Forwarded-Host": "client.example", "X-Forwarded-Proto": "http"} {
							if got := seen.Header.Values(h); len(got) != 1 || got[0] != want {
								t.Errorf("%s: got %q; want the sidecar's %q", h, got, want)
							}
						}
						return
					}
					for _, h := range clientAddressNames {
						for _, k := range slices.Compact([]string{http.CanonicalHeaderKey(h), http.CanonicalHeaderKey(strings.ReplaceAll(h, "-", "_"))}) {
							want := spoof
							if k == "X-Forwarded-For" {
								want = spoof + ", 127.0.0.1"
							}
							if got := seen.Header[k]; len(got) != 1 || got[0] != want {
								t.Errorf("%s: got %q; want the trusted proxy's %q", k, got, want)
							}
						}
					}
				})
			}
		})
	}
}

func TestH2CUpgradeRefused(t *testing.T) {
	u := startUpstream(t, func(u *upstream, w http.ResponseWriter, r *http.Request) { u.readAndRecord(r) })
	sc := StartSidecar(t, SidecarOptions{CoreURL: u.URL})
	for _, up := range []string{"h2c", "H2C", "websocket, h2c"} {
		t.Run(up, func(t *testing.T) {
			res, body := rawRequest(t, sc.Addr, "GET / HTTP/1.1\r\nHost: ks.example\r\nConnection: Upgrade, HTTP2-Settings\r\n"+
				"Upgrade: "+up+"\r\nHTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\n\r\n")
			if res.StatusCode != http.StatusBadRequest {
				t.Errorf("status: got %d; want 400", res.StatusCode)
			}
			assertErrorBody(t, body, "invalid_request", u.Listener.Addr().String())
		})
	}
	if n := u.count(); n != 0 {
		t.Errorf("upstream requests: got %d; want 0", n)
	}
}

// TestNoCredentialAdded: the sidecar adds no Authorization of its own and
// passes the client's unchanged.
func TestNoCredentialAdded(t *testing.T) {
	u := startUpstream(t, func(u *upstream, w http.ResponseWriter, r *http.Request) { u.readAndRecord(r) })
	sc := StartSidecar(t, SidecarOptions{CoreURL: u.URL})
	cl := newClient(t)
	for _, auth := range [][]string{nil, {"Bearer client-token"}} {
		u.reset()
		req, _ := http.NewRequest(http.MethodGet, sc.URL+"/agent-api/v1/workspaces/r1/sessions?token=q", nil)
		if auth != nil {
			req.Header["Authorization"] = auth
		}
		res, err := cl.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		drainClose(res.Body)
		seen := u.last(t)
		if got := seen.Header.Values("Authorization"); !reflect.DeepEqual(got, auth) && !(len(got) == 0 && len(auth) == 0) {
			t.Errorf("Authorization: got %q; want %q", got, auth)
		}
		if got := seen.Header.Values("Cookie"); len(got) != 0 {
			t.Errorf("Cookie: got %q; want none", got)
		}
	}
}

// TestRequestID: a valid inbound id is echoed, an invalid one replaced, and
// an id Core sets itself is passed through once.
func TestRequestID(t *testing.T) {
	u := startUpstream(t, func(u *upstream, w http.ResponseWriter, r *http.Request) {
		u.readAndRecord(r)
		if v := r.URL.Query().Get("core_id"); v != "" {
			w.Header().Set("X-Request-Id", v)
		}
	})
	sc := StartSidecar(t, SidecarOptions{CoreURL: u.URL})
	cl := newClient(t)
	cases := []struct {
		name, in, query string
		want            func(got []string) bool
	}{
		{"echoed", "abc-123", "", func(g []string) bool { return len(g) == 1 && g[0] == "abc-123" }},
		{"generated", "", "", func(g []string) bool { return len(g) == 1 && g[0] != "" }},
		{"invalid replaced", strings.Repeat("x", 200), "", func(g []string) bool { return len(g) == 1 && len(g[0]) < 100 }},
		{"core's own, once", "abc-123", "?core_id=abc-123", func(g []string) bool { return len(g) == 1 && g[0] == "abc-123" }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			req, _ := http.NewRequest(http.MethodGet, sc.URL+"/x"+c.query, nil)
			if c.in != "" {
				req.Header.Set("X-Request-Id", c.in)
			}
			res, err := cl.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			drainClose(res.Body)
			if got := res.Header.Values("X-Request-Id"); !c.want(got) {
				t.Errorf("X-Request-Id: got %q", got)
			}
		})
	}
}

// upstreamErrors sums upstream_errors_total over its kinds (every kind has a
// series from start, at 0).
func upstreamErrors(t testing.TB, reg prometheus.Gatherer) float64 {
	t.Helper()
	return testkit.MetricSum(t, reg, "knowledge_sidecar_upstream_errors_total", nil)
}
