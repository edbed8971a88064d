// Package test holds the black-box end-to-end tests of the sidecar: real
// sockets, a fake Core (internal/fakecore) that follows CORE_FACTS.md, a fresh
// MariaDB database per world (internal/testkit/testdb) and, where named, a real Redis.
//
//   - harness_test.go: StartSidecar and the shared helpers
//   - world_test.go: World (fake Core + catalog) and the features wiring
//   - passthrough_test.go, smuggling_test.go, lifecycle_test.go: SPEC §8.1, §9
//   - knowledge_test.go, faults_test.go: SPEC §2–§6 through the edge
//   - turns_test.go, rollout_test.go, native_test.go: SPEC §7, §8.2
//
// Services: KS_TEST_MYSQL_DSN and KS_TEST_REDIS_URL (defaults point at the
// local servers). With CI=true a missing service fails the tests; otherwise
// they are skipped with the reason. The load tool lives in test/bench.
package test
