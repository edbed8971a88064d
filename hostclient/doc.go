// Package hostclient is the host side of bailing.agent-knowledge.v1: a small
// HTTP client for the three knowledge endpoints of one workspace, used by the
// MCP server and the conformance checker. It knows the paths and the error
// body convention, nothing about any implementation. The bearer comes from a
// TokenSource: fixed (StaticToken), a file read again when it changes
// (FileToken) or a credential-helper command (CommandToken); Call retries a
// 401 once when the source has another token.
package hostclient
