package proxy

import (
	"io"
	"strconv"

	"github.com/labstack/echo/v4"

	"github.com/bailinghub/knowledge-sidecar/mcpauth"
)

func (s *Server) oauthMetadata(c echo.Context) error {
	return s.oauth(c, mcpauth.EndpointMetadata)
}
func (s *Server) oauthRegister(c echo.Context) error {
	return s.oauth(c, mcpauth.EndpointRegister)
}
func (s *Server) oauthAuthorize(c echo.Context) error {
	return s.oauth(c, mcpauth.EndpointAuthorize)
}
func (s *Server) oauthToken(c echo.Context) error { return s.oauth(c, mcpauth.EndpointToken) }
func (s *Server) oauthRevoke(c echo.Context) error {
	return s.oauth(c, mcpauth.EndpointRevoke)
}

// oauth hands one request of the front to mcpauth: its query, its body
// (read through the edge's body watch, at most one byte past the cap, so
// an oversized body costs nothing more) and the host's resolved address.
func (s *Server) oauth(c echo.Context, endpoint string) error {
	if s.feat.oauth == nil {
		return s.passH(c)
	}
	r := c.Request()
	body, err := io.ReadAll(io.LimitReader(r.Body, mcpauth.MaxBody+1))
	if err != nil {
		return errBodyUnreadable
	}
	client, _ := s.fw.clientAddr(r)
	a := s.feat.oauth.Handle(r.Context(), mcpauth.Request{Endpoint: endpoint, RawQuery: r.URL.RawQuery,
		ContentType: r.Header.Get("Content-Type"), Body: body, Client: client})
	h := c.Response().Header()
	if a.NoCache {
		h.Set("Pragma", "no-cache")
	}
	if a.RetryAfter > 0 {
		h.Set("Retry-After", strconv.Itoa(a.RetryAfter))
	}
	if a.Location != "" {
		h.Set("Location", a.Location)
		h.Set("Cache-Control", "no-store")
		c.Response().WriteHeader(a.Status)
		return nil
	}
	writeJSON(c.Response(), a.Status, a.JSON)
	return nil
}
