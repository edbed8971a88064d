package knowledge

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/bailinghub/knowledge-sidecar/corefacts"
	"github.com/bailinghub/knowledge-sidecar/protocol"
)

// fakeTasks answers every snapshot with snap or err.
type fakeTasks struct {
	snap  corefacts.TaskSnapshot
	err   error
	calls int
}

func (f *fakeTasks) TaskSnapshot(context.Context, string, string) (corefacts.TaskSnapshot, error) {
	f.calls++
	return f.snap, f.err
}

// How the task step maps the catalog's answers: errors never let a request
// through; TASK_* answers carry Core's status and message. (The rule table
// itself runs end to end against MariaDB in test/tasks_test.go.)
func TestTaskStepAnswers(t *testing.T) {
	cases := []struct {
		name   string
		tasks  *fakeTasks
		status int
		code   protocol.ErrorCode
	}{
		{"absent: no rules", &fakeTasks{}, 0, ""},
		{"enforced, unmarked, no run", &fakeTasks{snap: corefacts.TaskSnapshot{Enforced: true}}, 0, ""},
		{"enforced, marked, no run", &fakeTasks{snap: corefacts.TaskSnapshot{Enforced: true, Marked: true}}, 409, protocol.CodeTaskRequired},
		{"partial or refused query", &fakeTasks{err: fmt.Errorf("x: %w", corefacts.ErrTaskUnavailable)}, 503, protocol.CodeTaskUnavailable},
		{"catalog down", &fakeTasks{err: fmt.Errorf("x: %w", corefacts.ErrUnavailable)}, 503, protocol.CodeUnavailable},
		{"breaker open", &fakeTasks{err: corefacts.ErrBreakerOpen}, 503, protocol.CodeUnavailable},
		{"unexpected error", &fakeTasks{err: context.DeadlineExceeded}, 503, protocol.CodeUnavailable},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			ref := e.refFor(tokA, routeKey, "", docRefund) // minted before the task rules are on
			e.svc.tasks = tc.tasks
			for _, ep := range []string{"search", "read"} {
				body := `{"query":"退款"}`
				if ep == "read" {
					body = `{"ref":"` + ref + `"}`
				}
				_, _, ke := e.call(ep, tokA, routeKey, body)
				switch {
				case tc.status == 0 && ke != nil:
					t.Errorf("%s: got %v; want allowed", ep, ke)
				case tc.status != 0 && (ke == nil || ke.Status != tc.status || ke.Code != tc.code):
					t.Errorf("%s: got %v; want %d %s", ep, ke, tc.status, tc.code)
				case ke != nil && ke.Code[:5] == "TASK_" && ke.Message != protocol.TaskMessage:
					t.Errorf("%s: message %q; want Core's %q", ep, ke.Message, protocol.TaskMessage)
				}
			}
			if tc.tasks.calls != 2 {
				t.Errorf("task snapshots: got %d; want 2 (search and read)", tc.tasks.calls)
			}
		})
	}
	// Capabilities has no body and no task rules.
	ft := &fakeTasks{snap: corefacts.TaskSnapshot{Enforced: true, Marked: true}}
	e := newEnv(t, func(o *Options) { o.Tasks = ft })
	if _, _, ke := e.call("capabilities", tokA, routeKey, ""); ke != nil || ft.calls != 0 {
		t.Errorf("capabilities of a marked session: got %v after %d snapshots; want 200 without a task check", ke, ft.calls)
	}
}

// routeFirstTasks answers a snapshot only once the route has been read: the
// task check must run beside the route admission, not before it. The
// deadline only turns a serialized (deadlocked) check into a failure.
type routeFirstTasks struct{ routeRead <-chan struct{} }

func (f routeFirstTasks) TaskSnapshot(ctx context.Context, _, _ string) (corefacts.TaskSnapshot, error) {
	select {
	case <-f.routeRead:
		return corefacts.TaskSnapshot{Enforced: true, Marked: true}, nil
	case <-time.After(10 * time.Second):
		return corefacts.TaskSnapshot{}, errors.New("the route was never read while the task check ran")
	}
}

// A managed request waits for the slower of the task check and the route
// admission, not their sum; the task's answer still comes first (a marked
// session without run_id is TASK_REQUIRED on a route that is fine).
func TestTaskCheckBesideRoute(t *testing.T) {
	for _, ep := range []string{"search", "read"} {
		t.Run(ep, func(t *testing.T) {
			e := newEnv(t)
			ref := e.refFor(tokA, routeKey, "", docRefund)
			routeRead := make(chan struct{})
			var once sync.Once
			e.cat.onRoute = func() { once.Do(func() { close(routeRead) }) }
			e.svc.tasks = routeFirstTasks{routeRead}
			body := `{"query":"退款"}`
			if ep == "read" {
				body = `{"ref":"` + ref + `"}`
			}
			if _, _, ke := e.call(ep, tokA, routeKey, body); ke == nil || ke.Code != protocol.CodeTaskRequired {
				t.Errorf("got %v; want %s", ke, protocol.CodeTaskRequired)
			}
		})
	}
}

// panickyTasks panics inside the task check.
type panickyTasks struct{}

func (panickyTasks) TaskSnapshot(context.Context, string, string) (corefacts.TaskSnapshot, error) {
	panic("task snapshot broke")
}

// A panic in the task check, which runs on its own goroutine, reaches the
// request's goroutine (where the edge answers it) instead of ending the
// process.
func TestTaskCheckPanicReachesTheRequest(t *testing.T) {
	e := newEnv(t)
	e.svc.tasks = panickyTasks{}
	defer func() {
		if r := recover(); r != "task snapshot broke" {
			t.Errorf("recovered %v; want the task check's panic", r)
		}
	}()
	e.call("search", tokA, routeKey, `{"query":"退款"}`)
	t.Error("the search returned; want the task check's panic")
}
