package proxy

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"net/textproto"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/bailinghub/knowledge-sidecar/internal/testkit"
)

func TestValidRequestID(t *testing.T) {
	cases := []struct {
		id   string
		want bool
	}{
		{"abc-123", true},
		{"0f3e:4b/7+x", true},
		{"", false},
		{strings.Repeat("a", maxRequestIDLen), true},
		{strings.Repeat("a", maxRequestIDLen+1), false},
		{"has space", false},
		{"tab\there", false},
		{"newline\nX-Injected: 1", false},
		{"del\x7f", false},
		{"utf8-é", false},
	}
	for _, c := range cases {
		if got := validRequestID(c.id); got != c.want {
			t.Errorf("validRequestID(%.20q): got %v; want %v", c.id, got, c.want)
		}
	}
}

func TestIDSource(t *testing.T) {
	a, b := newIDSource(), newIDSource()
	if a.prefix == b.prefix {
		t.Errorf("two processes' prefixes: got both %q; want different", a.prefix)
	}
	seen := map[string]bool{}
	for range 1000 {
		id := a.next()
		if seen[id] || !validRequestID(id) || !strings.HasPrefix(id, a.prefix) {
			t.Fatalf("id %q: duplicate, invalid or without the prefix", id)
		}
		seen[id] = true
	}
}

func TestIsH2CUpgrade(t *testing.T) {
	cases := []struct {
		upgrade []string
		want    bool
	}{
		{nil, false},
		{[]string{"websocket"}, false},
		{[]string{"h2c"}, true},
		{[]string{"H2C"}, true},
		{[]string{"websocket, h2c"}, true},
		{[]string{"websocket", " h2c "}, true},
		{[]string{"h2"}, false},
		{[]string{"h2cx"}, false},
	}
	for _, c := range cases {
		h := http.Header{}
		for _, v := range c.upgrade {
			h.Add("Upgrade", v)
		}
		if got := isH2CUpgrade(h); got != c.want {
			t.Errorf("isH2CUpgrade(%q): got %v; want %v", c.upgrade, got, c.want)
		}
	}
}

// edgeServer is a Server with extra test routes on its echo instance (every
// request goes through echo's router), so the edge middleware runs exactly
// as in production.
func edgeServer(t *testing.T, routes func(e *echo.Echo)) *Server {
	t.Helper()
	core, _ := url.Parse("http://core.invalid")
	s, err := New(Options{CoreURL: core, Registry: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	routes(s.echo)
	s.claim = []string{"/"} // the test's routes may claim any path
	return s
}

func TestEdgeInformationalThenFinal(t *testing.T) {
	s := edgeServer(t, func(e *echo.Echo) {
		e.GET("/hints", func(c echo.Context) error {
			w := c.Response()
			w.Header().Set("Link", "</a.css>; rel=preload")
			w.WriteHeader(http.StatusEarlyHints)
			w.Header().Del("Link")
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusCreated)
			_, err := io.WriteString(w, `{"ok":true}`)
			return err
		})
	})
	srv := httptest.NewServer(s.Handler())
	defer srv.Close()
	var got1xx []int
	var hintID string
	trace := &httptrace.ClientTrace{Got1xxResponse: func(code int, h textproto.MIMEHeader) error {
		got1xx = append(got1xx, code)
		hintID = h.Get("X-Request-Id")
		return nil
	}}
	req, _ := http.NewRequestWithContext(httptrace.WithClientTrace(context.Background(), trace), http.MethodGet, srv.URL+"/hints", nil)
	req.Header.Set("X-Request-Id", "rid-9")
	res, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusCreated || string(body) != `{"ok":true}` {
		t.Errorf("final: got %d %q; want 201 with the body", res.StatusCode, body)
	}
	if len(got1xx) != 1 || got1xx[0] != http.StatusEarlyHints {
		t.Errorf("1xx: got %v; want [103]", got1xx)
	}
	if hintID != "" {
		t.Errorf("103 carried X-Request-Id %q; want it only on the final answer", hintID)
	}
	if got := res.Header.Values("X-Request-Id"); len(got) != 1 || got[0] != "rid-9" {
		t.Errorf("X-Request-Id: got %q; want [rid-9]", got)
	}
	// The edge records after the handler returns, possibly just after the
	// client has the whole answer: poll, bounded.
	c := s.m.requests.WithLabelValues("passthrough", "201")
	testkit.Poll(10*time.Second, func() bool { return testutil.ToFloat64(c) == 1 })
	if got := testutil.ToFloat64(c); got != 1 {
		t.Errorf("requests_total{201}: got %v; want 1", got)
	}
}

func TestEdgeInformationalThenBodyOnly(t *testing.T) {
	s := edgeServer(t, func(e *echo.Echo) {
		e.GET("/hints-write", func(c echo.Context) error {
			c.Response().WriteHeader(http.StatusEarlyHints)
			_, err := c.Response().Write([]byte("body"))
			return err
		})
	})
	srv := httptest.NewServer(s.Handler())
	defer srv.Close()
	res, err := srv.Client().Get(srv.URL + "/hints-write")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusOK || string(body) != "body" || res.Header.Get("X-Request-Id") == "" {
		t.Errorf("got %d %q id %q; want 200 body with an X-Request-Id", res.StatusCode, body, res.Header.Get("X-Request-Id"))
	}
}

func TestEdgeDoesNotRelayContinue(t *testing.T) {
	s := edgeServer(t, func(e *echo.Echo) {
		e.GET("/continue", func(c echo.Context) error {
			// What ReverseProxy does with Core's 100 and then the answer.
			c.Response().WriteHeader(http.StatusContinue)
			c.Response().Header().Set("X-Final", "1")
			c.Response().WriteHeader(http.StatusNoContent)
			return nil
		})
	})
	srv := httptest.NewServer(s.Handler())
	defer srv.Close()
	var got1xx []int
	trace := &httptrace.ClientTrace{Got1xxResponse: func(code int, _ textproto.MIMEHeader) error {
		got1xx = append(got1xx, code)
		return nil
	}}
	req, _ := http.NewRequestWithContext(httptrace.WithClientTrace(context.Background(), trace), http.MethodGet, srv.URL+"/continue", nil)
	res, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusNoContent || len(got1xx) != 0 {
		t.Errorf("got %d after 1xx %v; want 204 and no relayed 100", res.StatusCode, got1xx)
	}
}

func TestEdgeKeepsHandlerRequestID(t *testing.T) {
	s := edgeServer(t, func(e *echo.Echo) {
		e.GET("/own", func(c echo.Context) error {
			c.Response().Header().Set("X-Request-Id", "core-7")
			return c.NoContent(http.StatusNoContent)
		})
		e.GET("/none", func(c echo.Context) error { return c.NoContent(http.StatusNoContent) })
	})
	for _, c := range []struct{ path, want string }{{"/own", "core-7"}, {"/none", "client-1"}} {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest(http.MethodGet, c.path, nil)
		req.Header.Set("X-Request-Id", "client-1")
		s.Handler().ServeHTTP(rec, req)
		if got := rec.Header().Values("X-Request-Id"); len(got) != 1 || got[0] != c.want {
			t.Errorf("%s: X-Request-Id got %q; want [%s]", c.path, got, c.want)
		}
	}
}

// TestEdgeAbortedResponse: ReverseProxy aborts a broken stream by panicking
// with http.ErrAbortHandler; the edge must still count the request and
// leave the in-flight gauge, and re-raise the panic for net/http.
func TestEdgeAbortedResponse(t *testing.T) {
	s := edgeServer(t, func(e *echo.Echo) {
		e.GET("/abort", func(c echo.Context) error {
			c.Response().WriteHeader(http.StatusOK)
			panic(http.ErrAbortHandler)
		})
	})
	cases := []struct {
		name   string
		cancel bool
		code   string
	}{
		{"core broke the stream", false, "502"},
		{"client went away", true, "499"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if c.cancel {
				cancel()
			}
			req := httptest.NewRequest(http.MethodGet, "/abort", nil).WithContext(ctx)
			var p any
			func() {
				defer func() { p = recover() }()
				s.Handler().ServeHTTP(httptest.NewRecorder(), req)
			}()
			if p != http.ErrAbortHandler {
				t.Errorf("panic: got %v; want http.ErrAbortHandler re-raised", p)
			}
			if got := testutil.ToFloat64(s.m.inFlight); got != 0 {
				t.Errorf("in flight: got %v; want 0", got)
			}
			if got := testutil.ToFloat64(s.m.requests.WithLabelValues("passthrough", c.code)); got != 1 {
				t.Errorf("requests_total{%s}: got %v; want 1", c.code, got)
			}
		})
	}
}

func TestEdgeRefusesH2C(t *testing.T) {
	called := false
	s := edgeServer(t, func(e *echo.Echo) {
		e.GET("/x", func(c echo.Context) error { called = true; return nil })
	})
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodGet, "/x", nil)
	req.Header.Set("Connection", "Upgrade, HTTP2-Settings")
	req.Header.Set("Upgrade", "h2c")
	s.Handler().ServeHTTP(rec, req)
	if rec.Code != http.StatusBadRequest || called {
		t.Errorf("got %d (handler called: %v); want 400 without calling the handler", rec.Code, called)
	}
	if rec.Header().Get("X-Request-Id") == "" {
		t.Error("no X-Request-Id on the refusal")
	}
	if got := testutil.ToFloat64(s.m.requests.WithLabelValues("passthrough", "400")); got != 1 {
		t.Errorf("requests_total{400}: got %v; want 1", got)
	}
}

// TestEdgeWriterUnwraps: Flush and Hijack stay reachable through the edge's
// writer (SSE and WebSocket depend on it).
func TestEdgeWriterUnwraps(t *testing.T) {
	errs := make(chan error, 2)
	s := edgeServer(t, func(e *echo.Echo) {
		e.GET("/flush", func(c echo.Context) error {
			io.WriteString(c.Response(), "x")
			errs <- http.NewResponseController(c.Response()).Flush()
			return nil
		})
		e.GET("/hijack", func(c echo.Context) error {
			conn, _, err := http.NewResponseController(c.Response()).Hijack()
			errs <- err
			if err == nil {
				io.WriteString(conn, "HTTP/1.1 204 No Content\r\n\r\n")
				conn.Close()
			}
			return nil
		})
	})
	srv := httptest.NewServer(s.Handler())
	defer srv.Close()
	for _, p := range []string{"/flush", "/hijack"} {
		res, err := srv.Client().Get(srv.URL + p)
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		if err := <-errs; err != nil {
			t.Errorf("%s through the edge: %v", p, err)
		}
	}
}

func TestBodyEndsCleanly(t *testing.T) {
	closed := io.NopCloser(errReader{http.ErrBodyReadAfterClose})
	cases := []struct {
		name string
		body io.Reader
		want bool
	}{
		{"nil", nil, true},
		{"NoBody", http.NoBody, true},
		{"rest read to EOF", strings.NewReader("tail"), true},
		{"closed by the handler", closed, true},
		{"longer than the bound", io.LimitReader(zeros{}, passDrainLimit+10), true},
		{"broken framing", errReader{errors.New("invalid byte in chunk length")}, false},
		{"client gone", errReader{io.ErrUnexpectedEOF}, false},
	}
	for _, c := range cases {
		if got := bodyEndsCleanly(c.body, passDrainLimit); got != c.want {
			t.Errorf("%s: got %v; want %v", c.name, got, c.want)
		}
	}
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) { clear(p); return len(p), nil }
