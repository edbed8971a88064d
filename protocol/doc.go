// Package protocol holds the wire facts of bailing.agent-knowledge.v1, the
// one copy every side imports (as net/http holds the status codes): the
// protocol name, the schema_version of each answer, the fixed limits of
// SPEC §3–§6, the error codes of SPEC §2, the delivery modes and statuses,
// the trust value and the MCP tool names.
//
// It is a leaf: standard library only, no behaviour beyond a validity check,
// nothing of Core's (Core's own rules are in package corefacts). The
// independent checker, package conformance, keeps its own copy of these
// facts on purpose (conformance/oracle.go), so a wrong constant here is
// caught when it checks this sidecar.
package protocol
