package proxy

import "time"

// The edge's defaults for a zero option, their one source (config's
// Defaults maps them onto the proxy section; the defaults the pass-through
// shares with the Core client are in package corelink).
const (
	// DefaultMaxConnections caps the proxy listener's open connections
	// (RunOptions.MaxConnections; proxy.max_connections).
	DefaultMaxConnections = 1024
	// DefaultMaxInFlight caps the requests handled at once
	// (Limits.MaxInFlight; proxy.max_in_flight).
	DefaultMaxInFlight = 512
	// DefaultTurnBodyBudget caps the bytes of turn bodies buffered at once
	// (Limits.TurnBodyBudget; proxy.turn_body_budget): 32 MiB.
	DefaultTurnBodyBudget = 32 << 20
	// DefaultMCPAnswerBudget caps the bytes of remote MCP answers in flight
	// (NewMCPBudget; proxy.mcp_answer_budget): 32 MiB.
	DefaultMCPAnswerBudget = 32 << 20
	// DefaultBodyMinRate is the slowest a request body may arrive on
	// average, in bytes per second (Limits.BodyMinRate; proxy.body_min_rate).
	DefaultBodyMinRate = 1024
	// DefaultBodyMinRateWindow is the grace before DefaultBodyMinRate
	// applies (Limits.BodyMinRateWindow; proxy.body_min_rate_window).
	DefaultBodyMinRateWindow = 20 * time.Second
	// DefaultResponseHeaderTimeout bounds waiting for Core's response
	// headers on pass-through traffic (Options.Transport nil;
	// proxy.response_header_timeout).
	DefaultResponseHeaderTimeout = 60 * time.Second
)
