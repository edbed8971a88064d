#!/usr/bin/env node
// The "browser" mcp-remote opens (through its opener's BROWSER variable)
// in cmd/knowledge-sidecar/mcp_oauth_clients_test.go: it hands the URL it
// was asked to open to the test (a POST to KS_BROWSER_CONTROL), which
// follows it as a browser would once mcp-remote's callback server listens.
// It decides nothing.
const res = await fetch(process.env.KS_BROWSER_CONTROL, { method: "POST", body: process.argv[2] });
process.exit(res.ok ? 0 : 1);
