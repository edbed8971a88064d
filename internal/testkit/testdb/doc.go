// Package testdb gives tests a private MariaDB/MySQL database holding the
// sidecar's own copy of the Core tables it reads and a read-only user that
// has exactly the column GRANTs of docs/core-contract.md (both made by
// internal/coredb, which the demo's --sql rehearsal uses too), plus a fixed
// set of fixtures (fixtures.sql).
//
// The base schema is a pre-0.8 Core. DB.InstallTaskControl migrates a test
// database to Core 0.8's task control: the six task tables, the 062
// migration row and the read-only user's Core 0.8 GRANTs; with table names
// it creates only those (a partial migration).
//
// Each call to New creates a fresh database ks_test_<random> and a user on the
// server named by KS_TEST_MYSQL_DSN and drops both when the test ends, so
// tests may mutate data freely through DB.Admin. When the server cannot be
// reached the test is skipped, or fails when CI=true.
//
// The fixture ids are exported as constants (RouteMulti, DocBig, RunActive, …)
// so that tests in other packages name them rather than repeat literals.
package testdb
