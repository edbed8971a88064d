// Package testkit is the one set of test helpers the module's tests share:
// a manual clock, a bounded Eventually, metric reading, a command child's
// pid (ChildPID), the process's CPU time (ProcessCPU), a deterministic
// document generator, the handling of tests that need a real service
// (MariaDB, Redis) — a failure with CI=true, else a skip counted for one
// loud line at the end of the package's run — and the JSON-RPC answers of
// an MCP server as tests read them.
//
// It is imported only by tests and test-support packages (testdb below it
// — the MariaDB fixtures and the test Redis —, the load tool under test/). It knows nothing of the protocol; the protocol's
// answer types live in hostclient, which the conformance checker shares.
package testkit
