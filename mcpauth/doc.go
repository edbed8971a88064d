// Package mcpauth decides the OAuth 2.1 front the sidecar shows MCP hosts
// (SPEC §12): RFC 8414 metadata, stateless RFC 7591 registration, the
// authorization endpoint (RFC 6749 §4.1 + PKCE + RFC 8707), the token
// endpoint and RFC 7009 revocation, all backed by Core's Agent Auth
// (CORE_FACTS Addendum 4). The sidecar issues nothing: every code and token
// is Core's, and nothing is kept between requests, so any replica serves
// any step.
//
// The translations Core needs are stateless: a localhost callback is given
// to Core as 127.0.0.1 (the token request is translated the same way), a
// missing state is replaced by a random one, form-encoded requests become
// Core's JSON, and the host's resolved address is the one X-Forwarded-For
// entry of the authorization call (Core rate-limits authorizations per
// client and IP).
//
// [Service.Handle] takes a [Request] in plain values (the edge parses
// nothing) and returns an [Answer] the edge writes as it is. No code,
// token, verifier or state is logged or put in a metric label.
package mcpauth
