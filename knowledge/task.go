package knowledge

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/bailinghub/knowledge-sidecar/corefacts"
	"github.com/bailinghub/knowledge-sidecar/protocol"
)

// taskCodes is the closed label set of knowledge_task_denials_total.
var taskCodes = []protocol.ErrorCode{protocol.CodeTaskRequired, protocol.CodeTaskRecordInvalid, protocol.CodeTaskBindingConflict,
	protocol.CodeTaskRunInactive, protocol.CodeTaskMemberMismatch, protocol.CodeTaskScopeBlocked, protocol.CodeTaskPaused,
	protocol.CodeTaskCancelled, protocol.CodeTaskExpired, protocol.CodeTaskInvalidInput, protocol.CodeTaskUnavailable}

// Tasks reads Core's task control (Core ≥ 0.8) for one request. The schema
// gate of package catalog satisfies it: it knows whether the task tables
// are absent (a snapshot with Enforced false, no I/O), partial
// (corefacts.ErrTaskUnavailable) or present.
//
// Errors: wrapping corefacts.ErrTaskUnavailable → 503 TASK_UNAVAILABLE;
// anything else (the catalog unreachable, its breaker open) → 503
// knowledge_unavailable. An error never lets a request through.
type Tasks interface {
	TaskSnapshot(ctx context.Context, sessionID, runID string) (corefacts.TaskSnapshot, error)
}

func errTask(code protocol.ErrorCode) *Error {
	status := http.StatusConflict
	switch code {
	case protocol.CodeTaskInvalidInput:
		status = http.StatusBadRequest
	case protocol.CodeTaskUnavailable:
		status = http.StatusServiceUnavailable
	}
	return newError(status, code, protocol.TaskMessage, nil)
}

// admitTask is the managed-task step and the route step of SPEC §2 for a
// search or a read: the task check runs beside the route admission (see
// startTask) and is answered first. runChecked is checkTask's.
func (s *Service) admitTask(ctx context.Context, authorization string, route corefacts.RouteKey, sess corefacts.Session, runID string, pf prefetch) (a admitted, runChecked bool, err error) {
	task := s.startTask(ctx, sess, route.String(), runID)
	a, routeErr := s.admitRoute(ctx, authorization, route, sess, false, pf)
	if runChecked, err = task.wait(); err != nil {
		return admitted{}, false, err
	}
	if routeErr != nil {
		return admitted{}, false, routeErr
	}
	return a, runChecked, nil
}

// taskCheck is a checkTask under way (startTask).
type taskCheck struct {
	done       chan struct{} // nil when the check ran inline
	runChecked bool
	err        error
	panicked   any // a panic of the check, raised again by wait
}

// startTask begins checkTask. When the check needs the catalog it runs
// beside the route admission that follows it (both only read), so a managed
// request waits for the slower of the two instead of their sum. Callers take
// its answer (wait) before the route's, which keeps SPEC §2's order: a task
// denial wins over a route error. Without task control (absent tables) it
// costs no goroutine.
func (s *Service) startTask(ctx context.Context, sess corefacts.Session, route, runID string) *taskCheck {
	tc := &taskCheck{}
	if s.tasksAbsent() {
		tc.runChecked, tc.err = s.checkTask(ctx, sess, route, runID)
		return tc
	}
	tc.done = make(chan struct{})
	go func() {
		defer close(tc.done)
		defer func() { tc.panicked = recover() }()
		tc.runChecked, tc.err = s.checkTask(ctx, sess, route, runID)
	}()
	return tc
}

// tasksAbsent: no task rules, or Core has no task tables (the schema
// gate's last probe), so checkTask does no I/O.
func (s *Service) tasksAbsent() bool {
	if s.tasks == nil {
		return true
	}
	st, ok := s.tasks.(interface {
		TaskControlState() corefacts.TaskControlState
	})
	return ok && st.TaskControlState() == corefacts.TaskControlAbsent
}

// wait returns checkTask's answer. A panic of the check is raised again
// here, on the request's goroutine, where the edge's safety net answers it.
func (tc *taskCheck) wait() (runChecked bool, err error) {
	if tc.done != nil {
		<-tc.done
	}
	if tc.panicked != nil {
		panic(tc.panicked)
	}
	return tc.runChecked, tc.err
}

// checkTask applies SPEC §4a's rule table for the caller on the URL route
// with the request's run_id (lower-cased, "" when absent). It runs after the
// body is validated and before the route gate, as Core does on its own
// search endpoint.
//
// runChecked is true when the run passed as a managed task's run: the rules
// read its row in the same snapshot and required what §2's run check does
// (this session, client and route; context_ready and not completed), so the
// caller skips that check and its query. That keeps a managed request at one
// catalog statement more than an unmanaged one.
func (s *Service) checkTask(ctx context.Context, sess corefacts.Session, route, runID string) (runChecked bool, err error) {
	if s.tasks == nil {
		return false, nil
	}
	snap, err := s.tasks.TaskSnapshot(ctx, sess.SessionID, runID)
	if err != nil {
		if errors.Is(err, corefacts.ErrTaskUnavailable) {
			e := errTask(protocol.CodeTaskUnavailable)
			e.Err = err
			s.m.taskDenied(protocol.CodeTaskUnavailable)
			return false, e
		}
		return false, classifyCore(err, nil)
	}
	if code := decideTask(snap, sess, route, runID, s.now()); code != "" {
		s.m.taskDenied(code)
		return false, errTask(code)
	}
	return snap.Enforced && runID != "" && snap.Bound, nil
}

// decideTask is the rule table, in Core's order (TASK_CONTROL.md §2b, §3):
// marker and binding → record integrity → run client and route → run active
// → caller membership → every member's revalidation → state → expiry. ""
// means the request may go on (unmanaged, or a managed run that passes).
func decideTask(snap corefacts.TaskSnapshot, sess corefacts.Session, route, runID string, now time.Time) protocol.ErrorCode {
	if !snap.Enforced {
		return ""
	}
	if runID == "" || !snap.Bound {
		if snap.Marked {
			return protocol.CodeTaskRequired
		}
		return "" // unmanaged: §4's run rules apply later
	}
	run, task := snap.Run, snap.Task
	if run == nil || run.SessionID != sess.SessionID || task == nil || !knownTaskState(task.State) {
		return protocol.CodeTaskRecordInvalid
	}
	if !task.PolicyValid {
		return protocol.CodeTaskInvalidInput
	}
	if !hasMember(snap.Members, "", run.ClientAppID, run.RouteKey, run.Conversation) {
		return protocol.CodeTaskRecordInvalid
	}
	if run.ClientAppID != sess.ClientAppID || run.RouteKey != route {
		return protocol.CodeTaskBindingConflict
	}
	if !run.Active() {
		return protocol.CodeTaskRunInactive
	}
	if !hasMember(snap.Members, sess.SessionID, sess.ClientAppID, route, run.Conversation) {
		return protocol.CodeTaskMemberMismatch
	}
	for _, m := range snap.Members {
		if !m.Valid(now) {
			return protocol.CodeTaskScopeBlocked
		}
	}
	switch task.State {
	case "paused":
		return protocol.CodeTaskPaused
	case "cancelled":
		return protocol.CodeTaskCancelled
	case "blocked":
		return protocol.CodeTaskScopeBlocked
	}
	if task.Expiry != nil && !task.Expiry.After(now) {
		return protocol.CodeTaskExpired
	}
	return ""
}

func knownTaskState(s string) bool {
	switch s {
	case "active", "paused", "blocked", "cancelled":
		return true
	}
	return false
}

// hasMember looks for an exact member match; session "" matches any session.
func hasMember(members []corefacts.TaskMember, session, client, route, conversation string) bool {
	for _, m := range members {
		if (session == "" || m.SessionID == session) && m.ClientAppID == client &&
			m.RouteKey == route && m.Conversation == conversation {
			return true
		}
	}
	return false
}
