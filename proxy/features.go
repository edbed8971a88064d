package proxy

import (
	"github.com/labstack/echo/v4"
)

// Features are the knowledge endpoints and turn interception. Filled in by
// the knowledge wiring.
type Features struct{}

type features struct{}

func newFeatures(f *Features, s *Server) (*features, error) { return &features{}, nil }

func (s *Server) capabilities(c echo.Context) error { return s.passH(c) }
func (s *Server) search(c echo.Context) error       { return s.passH(c) }
func (s *Server) read(c echo.Context) error         { return s.passH(c) }
func (s *Server) turns(c echo.Context) error        { return s.passH(c) }
