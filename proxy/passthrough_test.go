package proxy

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/netip"
	"net/url"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

type timeoutErr struct{}

func (timeoutErr) Error() string   { return "i/o timeout" }
func (timeoutErr) Timeout() bool   { return true }
func (timeoutErr) Temporary() bool { return true }

func TestClassifyUpstreamError(t *testing.T) {
	live := context.Background()
	gone, cancel := context.WithCancel(context.Background())
	cancel()
	dial := &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	read := &net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ECONNRESET)}
	cases := []struct {
		name       string
		ctx        context.Context
		err        error
		kind       string
		wantStatus int
	}{
		{"client gone", gone, context.Canceled, "canceled", statusClientClosed},
		{"client gone, wrapped", gone, fmt.Errorf("round trip: %w", context.Canceled), "canceled", statusClientClosed},
		{"canceled but the client is still there", live, context.Canceled, "other", http.StatusBadGateway},
		{"deadline", live, context.DeadlineExceeded, "timeout", http.StatusGatewayTimeout},
		{"net timeout", live, fmt.Errorf("awaiting headers: %w", timeoutErr{}), "timeout", http.StatusGatewayTimeout},
		{"dial refused", live, dial, "dial", http.StatusBadGateway},
		{"dial refused, wrapped", live, fmt.Errorf("x: %w", dial), "dial", http.StatusBadGateway},
		{"reset while reading", live, read, "other", http.StatusBadGateway},
		// The stdlib's refusal of Core's 101.
		{"error after a 101", context.WithValue(live, ctxKey{}, &reqState{outcome: http.StatusSwitchingProtocols}), errors.New("backend tried to switch protocol"), "protocol", http.StatusBadGateway},
		{"EOF", live, io.ErrUnexpectedEOF, "other", http.StatusBadGateway},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			kind, status := classifyUpstreamError(c.ctx, c.err)
			if kind != c.kind || status != c.wantStatus {
				t.Errorf("got %s %d; want %s %d", kind, status, c.kind, c.wantStatus)
			}
		})
	}
}

func TestIsTrusted(t *testing.T) {
	f := forwarding{trusted: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("2001:db8::/32")}}
	cases := []struct {
		remote string
		want   bool
	}{
		{"10.1.2.3:5555", true},
		{"11.1.2.3:5555", false},
		{"[2001:db8::1]:443", true},
		{"[2001:db9::1]:443", false},
		{"[::ffff:10.1.2.3]:80", true}, // v4-mapped
		{"10.1.2.3", true},             // no port
		{"not-an-ip:80", false},
		{"", false},
	}
	for _, c := range cases {
		t.Run(c.remote, func(t *testing.T) {
			if got := f.isTrusted(c.remote); got != c.want {
				t.Errorf("got %v; want %v", got, c.want)
			}
		})
	}
	if (forwarding{}).isTrusted("10.1.2.3:1") {
		t.Error("empty trusted list: got trusted; want untrusted")
	}
}

// proxyRequest builds what ReverseProxy hands Rewrite: Out is a clone of In
// with the inbound forwarding headers removed.
func proxyRequest(t *testing.T, target, remote string, h http.Header) *httputil.ProxyRequest {
	t.Helper()
	in, err := http.NewRequest(http.MethodGet, target, nil)
	if err != nil {
		t.Fatal(err)
	}
	in.RemoteAddr = remote
	in.Host = "client.example"
	for k, v := range h {
		in.Header[k] = v
	}
	out := in.Clone(context.Background())
	for _, k := range []string{"Forwarded", "X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto"} {
		out.Header.Del(k)
	}
	return &httputil.ProxyRequest{In: in, Out: out}
}

func TestRewrite(t *testing.T) {
	core, _ := url.Parse("http://core.internal:8000")
	coreQ, _ := url.Parse("http://core.internal:8000/base?svc=1")
	spoof := http.Header{"X-Forwarded-For": {"6.6.6.6"}, "X-Forwarded-Host": {"evil"}, "X-Forwarded-Proto": {"https"}, "X-Real-Ip": {"6.6.6.6"}}
	trusted := []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}
	cases := []struct {
		name     string
		fw       forwarding
		target   *url.URL
		in       string
		wantURL  string
		wantHost string
		wantXFF  string
		wantXFH  string
		wantXFP  string
		wantReal string
	}{
		{"untrusted, preserve host", forwarding{preserveHost: true}, core, "http://client.example/a%2Fb?x=1;y=2&p=100%",
			"http://core.internal:8000/a%2Fb?x=1;y=2&p=100%", "client.example", "127.0.0.1", "client.example", "http", ""},
		{"untrusted, core host", forwarding{}, core, "http://client.example/q?a=1&a=2",
			"http://core.internal:8000/q?a=1&a=2", "", "127.0.0.1", "client.example", "http", ""},
		{"trusted peer", forwarding{trusted: trusted, preserveHost: true}, core, "http://client.example/q",
			"http://core.internal:8000/q", "client.example", "6.6.6.6, 127.0.0.1", "evil", "https", "6.6.6.6"},
		{"target with path and query", forwarding{}, coreQ, "http://client.example/q?b=2",
			"http://core.internal:8000/base/q?svc=1&b=2", "", "127.0.0.1", "client.example", "http", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			pr := proxyRequest(t, c.in, "127.0.0.1:40000", spoof)
			c.fw.rewrite(c.target, pr)
			if got := pr.Out.URL.String(); got != c.wantURL {
				t.Errorf("URL: got %q; want %q", got, c.wantURL)
			}
			if pr.Out.Host != c.wantHost {
				t.Errorf("Host: got %q; want %q", pr.Out.Host, c.wantHost)
			}
			h := pr.Out.Header
			for name, want := range map[string]string{"X-Forwarded-For": c.wantXFF, "X-Forwarded-Host": c.wantXFH, "X-Forwarded-Proto": c.wantXFP, "X-Real-Ip": c.wantReal} {
				if got := strings.Join(h.Values(name), ", "); got != want {
					t.Errorf("%s: got %q; want %q", name, got, want)
				}
			}
			if v := h.Values("Authorization"); len(v) != 0 {
				t.Errorf("Authorization: got %q; want none", v)
			}
		})
	}
}

func TestRewriteSharesRequestTrailers(t *testing.T) {
	core, _ := url.Parse("http://core.internal")
	pr := proxyRequest(t, "http://client.example/up", "127.0.0.1:1", nil)
	pr.In.Trailer = http.Header{"X-Digest": nil}
	forwarding{}.rewrite(core, pr)
	pr.In.Trailer.Set("X-Digest", "abc") // what the server does at body EOF
	if got := pr.Out.Trailer.Get("X-Digest"); got != "abc" {
		t.Errorf("outbound trailer: got %q; want abc", got)
	}
}

func TestJoinQuery(t *testing.T) {
	for _, c := range []struct{ target, in, want string }{
		{"", "", ""}, {"", "a=1;b", "a=1;b"}, {"s=1", "", "s=1"}, {"s=1", "a=%zz", "s=1&a=%zz"},
	} {
		if got := joinQuery(c.target, c.in); got != c.want {
			t.Errorf("joinQuery(%q, %q): got %q; want %q", c.target, c.in, got, c.want)
		}
	}
}

// TestNoteUpgrade: a 101 is recorded and gets the request id; whether it
// may open a tunnel is the stdlib's (TestUpgradeThroughReverseProxy).
func TestNoteUpgrade(t *testing.T) {
	wsReq := http.Header{"Connection": {"Upgrade"}, "Upgrade": {"websocket"}}
	cases := []struct {
		name    string
		status  int
		req     http.Header
		res     http.Header
		outcome int
		id      string
	}{
		{"not a switch", http.StatusOK, wsReq, http.Header{}, 0, ""},
		{"switch", http.StatusSwitchingProtocols, wsReq, http.Header{"Connection": {"upgrade"}, "Upgrade": {"WebSocket"}}, 101, "rid-1"},
		{"core keeps its own id", http.StatusSwitchingProtocols, wsReq, http.Header{"Connection": {"Upgrade"}, "Upgrade": {"websocket"}, "X-Request-Id": {"core-1"}}, 101, "core-1"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			st := &reqState{id: "rid-1"}
			req, _ := http.NewRequestWithContext(context.WithValue(context.Background(), ctxKey{}, st), http.MethodGet, "http://core/ws", nil)
			req.Header = c.req
			res := &http.Response{StatusCode: c.status, Header: c.res, Request: req}
			if err := noteUpgrade(res); err != nil {
				t.Fatalf("err: got %v; want nil", err)
			}
			if st.outcome != c.outcome {
				t.Errorf("outcome: got %d; want %d", st.outcome, c.outcome)
			}
			if got := res.Header.Get("X-Request-Id"); got != c.id {
				t.Errorf("X-Request-Id: got %q; want %q", got, c.id)
			}
		})
	}
}

// TestUpgradeThroughReverseProxy: Core's 101 through the real pass-through
// proxy. Every switch but the asked-for one is refused (by the stdlib: this
// pins that noteUpgrade need not check) with 502, counted as a protocol
// error; the asked-for switch is tunnelled.
func TestUpgradeThroughReverseProxy(t *testing.T) {
	const ws = "Connection: Upgrade\r\nUpgrade: websocket\r\n"
	cases := []struct {
		name, reqHeaders, core101 string
		tunnel                    bool
	}{
		{"nobody asked, none named", "", "HTTP/1.1 101 Switching Protocols\r\n\r\n", false},
		{"nobody asked, websocket named", "", "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n", false},
		{"other protocol", ws, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: something-else\r\n\r\n", false},
		{"upgrade without connection token", ws, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\r\n", false},
		{"asked-for switch", ws, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n", true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			core := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				conn, brw, err := http.NewResponseController(w).Hijack()
				if err != nil {
					return
				}
				defer conn.Close()
				_, _ = brw.WriteString(c.core101 + "tunnelled")
				_ = brw.Flush()
				_, _ = io.Copy(io.Discard, brw) // until the proxy closes its side
			}))
			t.Cleanup(core.Close)
			u, _ := url.Parse(core.URL)
			s, err := New(Options{CoreURL: u, Registry: prometheus.NewRegistry()})
			if err != nil {
				t.Fatal(err)
			}
			edge := httptest.NewServer(s.Handler())
			t.Cleanup(edge.Close)
			conn, err := net.Dial("tcp", edge.Listener.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			if _, err := io.WriteString(conn, "GET /ws HTTP/1.1\r\nHost: ks\r\n"+c.reqHeaders+"\r\n"); err != nil {
				t.Fatal(err)
			}
			br := bufio.NewReader(conn)
			res, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatalf("read response: %v", err)
			}
			protocolErrs := testutil.ToFloat64(s.m.upstreamErrors.WithLabelValues("protocol"))
			if c.tunnel {
				b := make([]byte, len("tunnelled"))
				if res.StatusCode != http.StatusSwitchingProtocols {
					t.Fatalf("status: got %d; want 101", res.StatusCode)
				}
				if _, err := io.ReadFull(br, b); err != nil || string(b) != "tunnelled" {
					t.Errorf("tunnel: got %q, %v; want Core's bytes", b, err)
				}
				if protocolErrs != 0 {
					t.Errorf("upstream_errors_total{kind=protocol}: got %v; want 0", protocolErrs)
				}
				return
			}
			body, _ := io.ReadAll(res.Body)
			if res.StatusCode != http.StatusBadGateway || !strings.Contains(string(body), "upstream_unavailable") {
				t.Fatalf("got %d %s; want 502 upstream_unavailable (no tunnel)", res.StatusCode, body)
			}
			if protocolErrs != 1 {
				t.Errorf("upstream_errors_total{kind=protocol}: got %v; want 1", protocolErrs)
			}
		})
	}
}

type errReader struct{ err error }

func (r errReader) Read([]byte) (int, error) { return 0, r.err }
func (errReader) Close() error               { return nil }

func TestBodyWatch(t *testing.T) {
	cases := []struct {
		name      string
		err       error
		bad, gone bool
	}{
		{"EOF", io.EOF, false, false},
		{"malformed chunking", errors.New("invalid byte in chunk length"), true, false},
		{"client hung up", io.ErrUnexpectedEOF, false, true},
		{"connection reset", &net.OpError{Op: "read", Err: syscall.ECONNRESET}, false, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			st := &reqState{}
			b := &bodyWatch{ReadCloser: errReader{c.err}, st: st}
			_, err := b.Read(make([]byte, 8))
			if !errors.Is(err, c.err) {
				t.Errorf("err: got %v; want %v passed through", err, c.err)
			}
			if st.bodyBad.Load() != c.bad || st.bodyGone.Load() != c.gone {
				t.Errorf("bad/gone: got %v/%v; want %v/%v", st.bodyBad.Load(), st.bodyGone.Load(), c.bad, c.gone)
			}
		})
	}
}

func TestNewTransport(t *testing.T) {
	tr := NewTransport(TransportOptions{DialTimeout: time.Second, ResponseHeaderTimeout: 2 * time.Second, MaxIdleConnsPerHost: 256})
	if !tr.DisableCompression {
		t.Error("DisableCompression: got false; want true (gzip must pass through)")
	}
	if tr.Proxy != nil {
		t.Error("Proxy: got an environment proxy; want none")
	}
	if tr.MaxIdleConnsPerHost != 256 || tr.MaxIdleConns < 256 {
		t.Errorf("idle pool: got %d per host, %d total; want 256 per host", tr.MaxIdleConnsPerHost, tr.MaxIdleConns)
	}
	if tr.ResponseHeaderTimeout != 2*time.Second {
		t.Errorf("ResponseHeaderTimeout: got %v; want 2s", tr.ResponseHeaderTimeout)
	}
}

func TestBufferPool(t *testing.T) {
	p := newBufferPool()
	b := p.Get()
	if len(b) != 32<<10 {
		t.Fatalf("buffer: got %d bytes; want %d", len(b), 32<<10)
	}
	p.Put(b)
	if got := p.Get(); len(got) != 32<<10 {
		t.Errorf("reused buffer: got %d bytes", len(got))
	}
}
