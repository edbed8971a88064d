package proxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"net/url"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
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
		{"upgrade refused", live, errUpgradeRefused, "protocol", http.StatusBadGateway},
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

func TestCheckUpgrade(t *testing.T) {
	wsReq := http.Header{"Connection": {"Upgrade"}, "Upgrade": {"websocket"}}
	cases := []struct {
		name    string
		status  int
		req     http.Header
		res     http.Header
		wantErr error
		outcome int
		id      string
	}{
		{"not a switch", http.StatusOK, wsReq, http.Header{}, nil, 0, ""},
		{"matching switch", http.StatusSwitchingProtocols, wsReq, http.Header{"Connection": {"upgrade"}, "Upgrade": {"WebSocket"}}, nil, 101, "rid-1"},
		{"core keeps its own id", http.StatusSwitchingProtocols, wsReq, http.Header{"Connection": {"Upgrade"}, "Upgrade": {"websocket"}, "X-Request-Id": {"core-1"}}, nil, 101, "core-1"},
		{"other protocol", http.StatusSwitchingProtocols, wsReq, http.Header{"Connection": {"Upgrade"}, "Upgrade": {"h2c"}}, errUpgradeRefused, 0, ""},
		{"switch nobody asked for", http.StatusSwitchingProtocols, http.Header{}, http.Header{"Connection": {"Upgrade"}, "Upgrade": {"websocket"}}, errUpgradeRefused, 0, ""},
		{"upgrade without connection token", http.StatusSwitchingProtocols, wsReq, http.Header{"Upgrade": {"websocket"}}, errUpgradeRefused, 0, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			st := &reqState{id: "rid-1"}
			req, _ := http.NewRequestWithContext(context.WithValue(context.Background(), ctxKey{}, st), http.MethodGet, "http://core/ws", nil)
			req.Header = c.req
			res := &http.Response{StatusCode: c.status, Header: c.res, Request: req}
			err := checkUpgrade(res)
			if !errors.Is(err, c.wantErr) || (c.wantErr == nil && err != nil) {
				t.Fatalf("err: got %v; want %v", err, c.wantErr)
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
