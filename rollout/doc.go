// Package rollout decides per workspace (route) whether the sidecar serves the
// knowledge protocol there or passes everything through (SPEC §8.2).
//
// A Policy is parsed from one spec string, the format shared by the
// KNOWLEDGE_SIDECAR_ROLLOUT environment variable and the config file:
//
//	off                       no workspace (the zero Policy)
//	all                       every workspace
//	allow:route-a,route-b     only the listed workspaces
//	deny:route-a,route-b      every workspace except the listed ones
//	percent:25                a stable 25 % of workspaces (integer 0–100)
//
// Whitespace around the spec and around each list item is ignored. Route names
// must match ^[a-z0-9][a-z0-9_-]{1,63}$ and may not repeat.
//
// Percentage rollout hashes the route key, so every replica and every restart
// takes the same decision, and raising the percentage only adds workspaces:
//
//	bucket(route) = binary.BigEndian.Uint64(sha256(route)[0:8]) % 10000
//	enabled       = bucket(route) < percent * 100
//
// An operator can compute a route's bucket with any SHA-256 tool: take the
// first 16 hex digits of sha256 of the route key as an unsigned 64-bit number,
// modulo 10000; the route is enabled from percent = floor(bucket/100) + 1 on.
package rollout
