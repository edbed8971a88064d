// Package proxy is the sidecar's HTTP edge: one echo server that serves the
// knowledge endpoints and intercepts turns for rolled-out workspaces of a
// legacy Core, and passes every other request through a single tuned
// httputil.ReverseProxy, unchanged. It also owns the admin listener
// (/metrics, /healthz, /readyz) and the error-to-status mapping of the edge.
//
// Data flows one way: proxy (HTTP) → knowledge, native (decisions) →
// coreclient, catalog (I/O), all speaking in package corefacts' values. The
// edge decides nothing about Core's version (native.Detector) and imports no
// adapter (sidecar/layering_test.go).
package proxy
