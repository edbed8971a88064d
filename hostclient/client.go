package hostclient

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"syscall"
	"time"
)

// Endpoint names, the last path segment under …/knowledge/.
const (
	Capabilities = "capabilities"
	Search       = "search"
	Read         = "read"
)

// MaxBody bounds what is read of an answer. The protocol's largest body is a
// 32768-byte read page; anything past this bound only proves a violation.
const MaxBody = 1 << 20

// ErrUnreachable wraps transport failures (nothing listening, DNS, timeout).
var ErrUnreachable = errors.New("knowledge service unreachable")

// TransportError is a request that got no complete HTTP answer. It wraps
// ErrUnreachable. Reason says why in a few words, never naming the token or
// the body.
type TransportError struct {
	Method, Host string
	// Reason: "connection refused", "connection reset", "connection closed
	// without an answer", "host not found", "no answer in time", …
	Reason string
}

func (e *TransportError) Error() string {
	return ErrUnreachable.Error() + ": " + e.Method + " " + e.Host + ": " + e.Reason
}

// Unwrap makes errors.Is(err, ErrUnreachable) hold.
func (e *TransportError) Unwrap() error { return ErrUnreachable }

// describe names a transport failure for an operator.
func describe(err error) string {
	var dns *net.DNSError
	var ne net.Error
	var cert *tls.CertificateVerificationError
	var rec tls.RecordHeaderError
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE):
		return "connection reset"
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "connection closed without an answer"
	case errors.As(err, &dns):
		return "host not found"
	case errors.As(err, &cert):
		return "TLS certificate not accepted"
	case errors.As(err, &rec):
		return "TLS handshake failed (not a TLS server?)"
	case errors.As(err, &ne) && ne.Timeout():
		return "no answer in time"
	default:
		return "transport error"
	}
}

// Client talks to one workspace of one implementation.
type Client struct {
	base  *url.URL
	route string
	src   TokenSource
	http  *http.Client
}

// New validates the base URL (absolute http or https, no query) and builds a
// Client that always sends token. hc nil uses a client with a 30 s timeout.
func New(baseURL, route, token string, hc *http.Client) (*Client, error) {
	return NewWithTokenSource(baseURL, route, StaticToken(token), hc)
}

// NewWithTokenSource is New with a token that may change: Call asks src for
// the token of each call and, after a 401, for a new one, once.
func NewWithTokenSource(baseURL, route string, src TokenSource, hc *http.Client) (*Client, error) {
	if src == nil {
		return nil, errors.New("hostclient: no token source")
	}
	u, err := url.Parse(baseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("--url must be an absolute http(s) URL without query, like http://127.0.0.1:8080")
	}
	if hc == nil {
		hc = &http.Client{Timeout: 30 * time.Second}
	}
	u.Path = strings.TrimSuffix(u.Path, "/")
	u.RawPath = ""
	return &Client{base: u, route: route, src: src, http: hc}, nil
}

// Route is the workspace the client was built for.
func (c *Client) Route() string { return c.route }

// URL is the address of a knowledge endpoint of route (escaped as a path segment).
func (c *Client) URL(route, endpoint string) string {
	return c.base.String() + "/agent-api/v1/workspaces/" + url.PathEscape(route) + "/knowledge/" + endpoint
}

// TurnsURL is the address of the turns endpoint of the client's route.
func (c *Client) TurnsURL() string {
	return c.base.String() + "/agent-api/v1/workspaces/" + url.PathEscape(c.route) + "/turns"
}

// Response is an answer as received.
type Response struct {
	Status int
	Header http.Header
	Body   []byte // at most MaxBody+1 bytes
}

// Request is one HTTP exchange. An empty Token sends no Authorization header.
type Request struct {
	Method string
	URL    string
	Token  string
	Body   []byte
	// ContentType defaults to application/json when Body is set.
	ContentType string
	// Header holds further headers, set after the defaults (an Accept here
	// replaces application/json).
	Header http.Header
}

// Do sends r. Transport failures are wrapped in ErrUnreachable; the error
// names neither the token nor the body.
func (c *Client) Do(ctx context.Context, r Request) (*Response, error) {
	var body io.Reader
	if r.Body != nil {
		body = bytes.NewReader(r.Body)
	}
	req, err := http.NewRequestWithContext(ctx, r.Method, r.URL, body)
	if err != nil {
		return nil, fmt.Errorf("build request: %w", err)
	}
	if r.Token != "" {
		req.Header.Set("Authorization", "Bearer "+r.Token)
	}
	if r.Body != nil {
		ct := r.ContentType
		if ct == "" {
			ct = "application/json"
		}
		req.Header.Set("Content-Type", ct)
	}
	req.Header.Set("Accept", "application/json")
	for k, v := range r.Header {
		req.Header[http.CanonicalHeaderKey(k)] = v
	}
	res, err := c.http.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, &TransportError{Method: r.Method, Host: c.base.Host, Reason: describe(err)}
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(res.Body, MaxBody+1))
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, &TransportError{Method: r.Method, Host: c.base.Host, Reason: "reading the answer: " + describe(err)}
	}
	return &Response{Status: res.StatusCode, Header: res.Header, Body: raw}, nil
}

// Call sends the client's token to an endpoint of its route: GET without a
// body, POST with one. When the answer is 401 and the token source has
// another token, the call is sent once more with it; a second 401 is the
// answer.
func (c *Client) Call(ctx context.Context, endpoint string, body []byte) (*Response, error) {
	m := http.MethodGet
	if body != nil {
		m = http.MethodPost
	}
	req := Request{Method: m, URL: c.URL(c.route, endpoint), Token: c.src.Token(), Body: body}
	res, err := c.Do(ctx, req)
	if err != nil || res.Status != http.StatusUnauthorized {
		return res, err
	}
	fresh, ok := c.src.Refresh(ctx, req.Token)
	if !ok {
		return res, nil
	}
	req.Token = fresh
	return c.Do(ctx, req)
}

// Token is the bearer the client sends now (for callers that build their own requests).
func (c *Client) Token() string { return c.src.Token() }

// ErrorBody is the protocol's error body.
type ErrorBody struct {
	Error   string `json:"error"`
	Message string `json:"message"`
}

// ErrorCode decodes the error body; ok is false when the body is not one.
func (r *Response) ErrorCode() (e ErrorBody, ok bool) {
	if json.Unmarshal(r.Body, &e) != nil || e.Error == "" {
		return ErrorBody{}, false
	}
	return e, true
}
