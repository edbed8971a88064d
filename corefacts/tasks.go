package corefacts

import (
	"errors"
	"time"
)

// Managed tasks of Core ≥ 0.8 (shared/core/TASK_CONTROL.md): the values the
// catalog reads and the knowledge rules decide on.

// TaskControlState says whether Core's task-control tables are there.
type TaskControlState string

// The presence states (also the values of the task_control_state gauge).
const (
	TaskControlUnknown  TaskControlState = ""         // not probed yet, or the probe failed
	TaskControlAbsent   TaskControlState = "absent"   // none of the six tables: no task rules
	TaskControlPartial  TaskControlState = "partial"  // some, or migration 062 recorded but tables not visible: fail closed
	TaskControlEnforced TaskControlState = "enforced" // all six: enforce
)

// TaskControlStates are the known states, in gauge order.
var TaskControlStates = []TaskControlState{TaskControlAbsent, TaskControlPartial, TaskControlEnforced}

// ErrTaskUnavailable: task control is partially installed, or a task query
// failed although the database answered (a missing column or grant, a server
// error). It does NOT wrap ErrUnavailable: the catalog is up (the breaker
// counts it as a success) and the answer is 503 TASK_UNAVAILABLE, not
// knowledge_unavailable.
var ErrTaskUnavailable = errors.New("task control cannot be verified")

// TaskSnapshot is what the catalog knows about a caller's task at one
// instant. Enforced is false when task control is absent (no rules).
type TaskSnapshot struct {
	Enforced bool
	Marked   bool     // the session has an enforcement marker
	Bound    bool     // (run, session) has a task binding
	Run      *TaskRun // the bound run's row; nil when missing
	Task     *TaskRow // the bound task's row; nil when missing
	Members  []TaskMember
}

// TaskRun is a bound run's row.
type TaskRun struct {
	SessionID, ClientAppID, RouteKey, Conversation, Status string
	CompletedAt                                            *time.Time
}

// Active: context_ready and not completed (Core's ACTIVE_RUN).
func (r TaskRun) Active() bool { return r.Status == "context_ready" && r.CompletedAt == nil }

// TaskRow is a task's row, reduced to what the rules read.
type TaskRow struct {
	State string // active | paused | blocked | cancelled (anything else is invalid)
	// PolicyValid: policy_json is a policy Core's normalizeAgentTaskPolicy
	// accepts (the catalog decides it when it reads the row).
	PolicyValid bool
	Expiry      *time.Time // the policy's expiresAt; nil: none
}

// TaskMember is one member of a task. The catalog checks the rows Core
// revalidates it against when it reads them (RowsValid); what depends on the
// time of the decision (the session's refresh expiry) is left to Valid.
type TaskMember struct {
	Key                                            string // member_key: Core's member order
	SessionID, ClientAppID, RouteKey, Conversation string

	// RowsValid: Core's verifyMembers holds for this member's session,
	// client and route rows, except the refresh expiry.
	RowsValid bool
	// RefreshExpires is the session's refresh_expires_at; zero when NULL or
	// the session row is missing.
	RefreshExpires time.Time
}

// Valid is Core's verifyMembers for this member at now (TASK_CONTROL.md §2):
// the rows' checks passed and the session's refresh expiry is after now (an
// expired access token alone does not matter).
func (m TaskMember) Valid(now time.Time) bool {
	return m.RowsValid && !m.RefreshExpires.IsZero() && m.RefreshExpires.After(now)
}
