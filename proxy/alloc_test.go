package proxy

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/net/http/httpguts"
)

// cannedCore answers every request in memory with the same 1 KiB JSON body,
// so an allocation count measures the proxy and not a network upstream.
type cannedCore struct{ body []byte }

func (c cannedCore) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Body != nil {
		_ = r.Body.Close()
	}
	return &http.Response{
		StatusCode: http.StatusOK, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header:        http.Header{"Content-Type": {"application/json"}, "Content-Length": {strconv.Itoa(len(c.body))}},
		ContentLength: int64(len(c.body)),
		Body:          io.NopCloser(bytes.NewReader(c.body)),
		Request:       r,
	}, nil
}

// leanProxy is the lean stdlib proxy the edge is measured against: a
// ReverseProxy with Rewrite (SetURL, SetXForwarded), pooled buffers and
// FlushInterval 0, over rt.
func leanProxy(target string, rt http.RoundTripper) *httputil.ReverseProxy {
	u, _ := url.Parse(target)
	return &httputil.ReverseProxy{
		Rewrite:    func(pr *httputil.ProxyRequest) { pr.SetURL(u); pr.SetXForwarded() },
		Transport:  rt,
		BufferPool: newBufferPool(),
	}
}

// passAllocs is the allocations per pass-through GET of h (request
// construction and the canned answer included, both the same for every
// handler).
func passAllocs(t *testing.T, h http.Handler, n int) float64 {
	t.Helper()
	rw := &benchWriter{h: http.Header{}}
	return testing.AllocsPerRun(500, func() {
		req := httptest.NewRequest(http.MethodGet, "/json/1024", nil)
		req.RemoteAddr = "127.0.0.1:40000"
		rw.reset()
		h.ServeHTTP(rw, req)
		if rw.code != http.StatusOK || rw.n != n {
			t.Fatalf("got %d with %d bytes; want 200 with %d", rw.code, rw.n, n)
		}
	})
}

// Allocation ceilings of one pass-through request through the edge (the
// sidecar with knowledge features on), issue 22 item 2. They hold the count
// as it is; a change that allocates more per request fails here, and a
// change that allocates less lowers them.
const (
	// maxEdgeAllocs: the whole request through the edge's handler. 38 since
	// the stdlib's SetXForwarded replaced a copy that set the three values
	// in one allocation instead of three (it bought under 1 % of the
	// request's CPU; DESIGN rule 14).
	maxEdgeAllocs = 38
	// maxEdgeOverLean: what the edge allocates beyond a lean ReverseProxy
	// (Rewrite with SetURL and SetXForwarded, pooled buffers, FlushInterval
	// 0) over the same canned Core: 3 (the copy's 2 saved allocations had
	// hidden 2 of the edge's own).
	maxEdgeOverLean = 3
)

func TestPassthroughAllocs(t *testing.T) {
	if testing.Short() {
		t.Skip("allocation counts: not in -short")
	}
	body := bytes.Repeat([]byte("x"), 1<<10)
	core := cannedCore{body: body}
	w := newBenchWorldWith(t, core)
	lean := leanProxy(w.upstream.URL, core)
	h := w.server.Handler()
	passAllocs(t, h, len(body)) // warm: pools, lazily built label children
	edge := passAllocs(t, h, len(body))
	bare := passAllocs(t, lean, len(body))
	t.Logf("allocs per request: edge %.1f, lean %.1f, edge − lean %.1f", edge, bare, edge-bare)
	if edge > maxEdgeAllocs+raceAllocs {
		t.Errorf("edge: got %.1f allocs per pass-through request; want at most %d", edge, maxEdgeAllocs)
	}
	if edge-bare > maxEdgeOverLean+raceAllocs {
		t.Errorf("edge over lean: got %.1f allocs per request; want at most %d", edge-bare, maxEdgeOverLean)
	}
}

// BenchmarkPassthroughCanned: the pass-through handler over the canned,
// in-memory Core: the edge's own work and allocations without a network
// round trip (-benchmem; -memprofile shows where they are).
func BenchmarkPassthroughCanned(b *testing.B) {
	body := bytes.Repeat([]byte("x"), 1<<10)
	core := cannedCore{body: body}
	w := newBenchWorldWith(b, core)
	lean := leanProxy(w.upstream.URL, core)
	for _, h := range []struct {
		name string
		h    http.Handler
	}{{"edge", w.server.Handler()}, {"lean", lean}} {
		b.Run(h.name, func(b *testing.B) {
			rw := &benchWriter{h: http.Header{}}
			b.ReportAllocs()
			for b.Loop() {
				req := httptest.NewRequest(http.MethodGet, "/json/1024", nil)
				req.RemoteAddr = "127.0.0.1:40000"
				rw.reset()
				h.h.ServeHTTP(rw, req)
				if rw.code != http.StatusOK || rw.n != len(body) {
					b.Fatalf("got %d with %d bytes", rw.code, rw.n)
				}
			}
		})
	}
}

// TestClientAddressHeadersList: every entry of clientAddressHeaders is a
// header name or a prefix ending in '*', and the list matches every name
// SPEC §8.3 gives, in its canonical, lower-case and underscore spellings.
func TestClientAddressHeadersList(t *testing.T) {
	for _, h := range clientAddressHeaders {
		if n, _ := strings.CutSuffix(h, "*"); !httpguts.ValidHeaderFieldName(n) || strings.Contains(n, "*") {
			t.Errorf("clientAddressHeaders: %q is not a header name or prefix", h)
		}
	}
	a := newAddrHeaders(nil)
	for _, h := range specClientAddressHeaders {
		for _, k := range []string{http.CanonicalHeaderKey(h), strings.ToLower(h), strings.ReplaceAll(h, "-", "_"), http.CanonicalHeaderKey(strings.ReplaceAll(h, "-", "_"))} {
			if !a.matches(k) {
				t.Errorf("%q (%s) is not in the list", k, h)
			}
		}
	}
	for _, k := range []string{"X-Request-Id", "Authorization", "Host", "Content-Type", "X-Forwarder", "Traceparent", "X-Real-Ipv"} {
		if a.matches(k) {
			t.Errorf("%q matches; want only client-address headers", k)
		}
	}
	if extra := newAddrHeaders([]string{"X-Akamai-Edge-IP", "X-Corp-*"}); !extra.matches("x_akamai_edge_ip") || !extra.matches("X-Corp-Client") || !extra.matches("X-Real-Ip") || extra.matches("X-Corp") {
		t.Error("extra names: want X-Akamai-Edge-IP and the X-Corp-* prefix added to the built-in list")
	}
	if n := testing.AllocsPerRun(100, func() { a.strip(http.Header{"Accept": nil, "X_real_ip": nil, "X-Forwarded-Port": nil}, true, true) }); n > 1 {
		t.Errorf("strip: %.0f allocations; want the header map's only", n)
	}
}

// specClientAddressHeaders are the names SPEC §8.3 lists, plus members of
// the X-Forwarded-* family.
var specClientAddressHeaders = []string{
	"X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto", "X-Forwarded-Port", "X-Forwarded-Prefix",
	"X-Forwarded-Server", "X-Forwarded-Ssl", "X-Forwarded-Scheme", "X-Forwarded-Uri", "X-Forwarded-Path",
	"X-Forwarded-Client-Cert", "X-Forwarded", "Forwarded",
	"X-Real-IP", "True-Client-IP", "CF-Connecting-IP", "Fastly-Client-IP", "X-Client-IP", "Client-IP",
	"X-Cluster-Client-IP", "X-Originating-IP", "X-Remote-IP", "X-Remote-Addr", "X-Envoy-External-Address",
	"X-Original-URL", "X-Rewrite-URL",
}
