package sidecar

import (
	"context"
	"crypto/tls"
	"net/http"
	"time"

	"github.com/bailinghub/knowledge-sidecar/config"
	"github.com/bailinghub/knowledge-sidecar/coreclient"
	"github.com/bailinghub/knowledge-sidecar/corefacts"
	"github.com/bailinghub/knowledge-sidecar/hostclient"
	"github.com/bailinghub/knowledge-sidecar/proxy"
)

// nativeCallTimeout bounds one tool request to a native Core's knowledge
// endpoint, answer read included (hostclient's default for a host).
const nativeCallTimeout = 30 * time.Second

// nativeMCP is the remote MCP endpoint's client of a native Core's
// knowledge endpoints (proxy.NativeKnowledge): hostclient's requests, each
// with the bearer of the MCP request it serves, over a pool of its own to
// core.url that waits for Core's answer as long as the pass-through does
// (proxy.response_header_timeout).
type nativeMCP struct{ c *hostclient.Client }

// newNativeMCP builds the client for cfg (validated), verifying Core with
// tlsCfg when core.ca_file is set (nil: the system roots). core.url is
// validated as hostclient wants it (absolute http(s), no query or
// fragment); were it refused, the result is nil and the MCP endpoint of a
// native Core passes through as with no client.
func newNativeMCP(cfg config.Config, tlsCfg *tls.Config) proxy.NativeKnowledge {
	t := coreclient.NewTransport(coreclient.TransportOptions{
		DialTimeout:           cfg.Proxy.DialTimeout,
		ResponseHeaderTimeout: cfg.Proxy.ResponseHeaderTimeout,
		MaxIdleConnsPerHost:   cfg.Proxy.MaxIdleConnsPerHost,
	})
	if tlsCfg != nil {
		t.TLSClientConfig = tlsCfg.Clone()
	}
	// No token of its own: every call sends its caller's Authorization.
	c, err := hostclient.New(cfg.Core.URL, "", "", &http.Client{Transport: t, Timeout: nativeCallTimeout})
	if err != nil {
		return nil
	}
	return nativeMCP{c}
}

// Call implements proxy.NativeKnowledge. Its errors are hostclient's: they
// name the method, Core's host and a reason, never the bearer or the body.
func (n nativeMCP) Call(ctx context.Context, authorization string, route corefacts.RouteKey, endpoint string, body []byte) (proxy.NativeAnswer, error) {
	res, err := n.c.Do(ctx, hostclient.Request{
		Method: http.MethodPost, URL: n.c.URL(route.String(), endpoint), Body: body,
		Header: http.Header{"Authorization": {authorization}},
	})
	if err != nil {
		return proxy.NativeAnswer{}, err
	}
	return proxy.NativeAnswer{Status: res.Status, RetryAfter: res.Header.Get("Retry-After"), Body: res.Body}, nil
}
