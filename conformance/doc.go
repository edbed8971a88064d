// Package conformance is a black-box checker of bailing.agent-knowledge.v1:
// it drives an implementation (this sidecar, a native Core, a third party)
// over HTTP with an Agent access token and reports, check by check, which of
// the protocol's observable MUSTs hold. It works on a corpus it does not know:
// without a query it tries common words until a search returns a hint, and
// reports the checks that need a document as skipped, never as passed, when
// none is found. It paces itself under the protocol's default per-session
// limit (10 requests/s), waits out Retry-After after a 429 and never probes
// the rate limit with bursts.
package conformance
