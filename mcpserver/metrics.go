package mcpserver

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/bailinghub/knowledge-sidecar/internal/prom"
)

// RequestCounter registers mcp_requests_total with reg (nil: none) and
// returns what counts one request into it (HTTPOptions.Observe). Every
// method and outcome exists at 0 from the start, so dashboards read 0
// rather than no data.
func RequestCounter(reg prometheus.Registerer) func(method, outcome string) {
	v := prom.CounterVec("mcp_requests_total",
		"Remote MCP requests by JSON-RPC method (initialize, notifications/initialized, server/discover, ping, tools/list, tools/call, other) and outcome (ok, tool_error: a tool result with isError, error: a JSON-RPC error).", "method", "outcome")
	for _, method := range MethodLabels {
		for _, o := range []string{OutcomeOK, OutcomeToolError, OutcomeError} {
			v.WithLabelValues(method, o)
		}
	}
	if reg != nil {
		reg.MustRegister(v)
	}
	return func(method, outcome string) { v.WithLabelValues(method, outcome).Inc() }
}
