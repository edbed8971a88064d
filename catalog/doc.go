// Package catalog is the read-only SQL view of Core's database (MySQL or
// MariaDB through database/sql and go-sql-driver/mysql): routes with their
// knowledge configuration normalized as Core does, KBs, documents with their
// revision (and the bounded body cache), runs, the route gate for Cores
// without system-info, and the managed-task snapshot. It speaks in the values
// and errors of package corefacts, runs every query behind the catalog
// breaker (package breaker) and knows nothing about the knowledge protocol.
//
// [MemCatalog] is its in-memory twin (the demo, the load tool and tests).
//
// # Schema gate
//
// [SchemaGate] wraps a catalog: it answers nothing until Core's tables are
// verified ([SQLCatalog.CheckSchema], retried with backoff), then probes the
// task-control tables with every check.
//
// # Core's rate limit on the sidecar's client
//
// [ClientLimitCheck] reads bz_clients.rate_limit_per_min of the sidecar's own
// client and the most KBs one route searches, logs a non-zero limit at warn
// with the search capacity it implies and exports both as gauges. It runs
// after every passing schema check ([SchemaGate.AfterCheck]).
//
// # Managed tasks (Core ≥ 0.8)
//
// [SQLCatalog.TaskPresence] probes Core's six task-control tables (absent,
// partial, enforced); [SchemaGate] runs it with the schema check and every
// interval after, exposes the result as [SchemaGate.TaskControlState] and the
// gauge task_control_state, and answers [SchemaGate.TaskSnapshot] from it.
// [SQLCatalog.TaskSnapshot] reads everything the task rules need in one
// statement and decides, as Core's verifyMembers does, every member's rows
// (corefacts.TaskMember.Valid adds the time-dependent refresh expiry) and
// the task's stored policy ([TaskExpiry]).
//
// # Metrics
//
// [NewMetrics] registers the catalog's collectors (with the breaker gauges)
// on a caller-supplied registerer (nil: unregistered). Labels come from
// closed sets only.
package catalog
