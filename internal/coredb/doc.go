// Package coredb creates a throwaway copy of the Core tables the sidecar
// reads, on a MySQL/MariaDB server, with a read-only user holding exactly the
// column GRANTs of docs/core-contract.md, and drops both again.
//
// schema.sql is the sidecar's own copy of those tables (written from
// CORE_SCHEMA.md §9, never copied from Core's migrations); migrations.sql
// records the migrations of a pre-0.8 Core as a migrated Core does;
// grants.sql is the read-only user's GRANTs. DB.InstallTasks migrates the
// database to Core 0.8's task control (tasks.sql, written from
// TASK_CONTROL.md §1, and grants_tasks.sql).
//
// The tests use it through internal/testkit/testdb (which adds fixtures and
// test cleanup); `knowledge-sidecar demo --sql` uses it directly to rehearse
// the production path on one machine, so it imports nothing of testing.
package coredb
