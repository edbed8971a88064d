// Package proxy is the sidecar's HTTP edge: one echo server that serves the
// knowledge endpoints and intercepts turns for rolled-out workspaces of a
// legacy Core, and passes every other request through a single tuned
// httputil.ReverseProxy, unchanged. It also owns the admin listener
// (/metrics, /healthz, /readyz) and the error-to-status mapping of the edge.
//
// Data flows one way: proxy (HTTP) → knowledge, turn, native (decisions) →
// coreclient, catalog (I/O), all speaking in package corefacts' values. The
// edge reads bodies, forwards through its ReverseProxies and answers; it
// decides nothing about turns (turn.Turn) or Core's version
// (native.Detector), and imports no adapter (sidecar/layering_test.go).
package proxy
