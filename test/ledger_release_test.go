package test

// A refused on_demand attempt whose ledger release fails (SPEC §7, issue
// 30 finding 5c): run as it was found, with a real Redis paused (SIGSTOP)
// while Core refuses the attempt. The record that release should have
// removed never answers 409 to the corrected retry.

import (
	"net/http"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/bailinghub/knowledge-sidecar/internal/fakecore"
	"github.com/bailinghub/knowledge-sidecar/internal/testkit"
	"github.com/bailinghub/knowledge-sidecar/internal/testkit/testdb"
	"github.com/bailinghub/knowledge-sidecar/ledger"
	"github.com/bailinghub/knowledge-sidecar/sharedredis"
)

func TestTurnReleaseFailsRedisPaused(t *testing.T) {
	addr, redis := testkit.RedisServer(t, "--port")
	rl, err := newRedisLedger(sharedredis.Options{URL: "redis://" + addr + "/0", DialTimeout: 300 * time.Millisecond, OpTimeout: 300 * time.Millisecond}, ledger.RedisOptions{})
	if err != nil {
		t.Fatal(err)
	}
	led := ledger.NewRetrying(rl, time.Hour, nil)
	w := NewWorld(t, WorldOptions{})
	route := testdb.RouteMulti
	tap := newCoreTap(t, w.Core)
	var pause sync.Once
	tap.hold = func(r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/turns") {
			// Redis hangs while Core refuses the attempt: the release fails.
			pause.Do(func() { _ = redis.Process.Signal(syscall.SIGSTOP) })
		}
	}
	// sidecar.Deps hook: a Retrying ledger over a Redis the test kills
	side := StartSidecar(t, SidecarOptions{CoreURL: tap.URL, Features: w.Features(t, FeatureOptions{Ledger: led})})
	c := newClient(t)

	refusal := []byte(`{"error":"TASK_REQUIRED","message":"The governed task operation could not be accepted."}`)
	w.Core.SetFault(turnsPath(route), fakecore.Fault{Status: 409, Body: refusal})
	ti := newTurn("release-paused")
	r := send(t, c, "POST", turnsURL(side, route), w.TokenA, ti.body(modeJSON("on_demand")), nil)
	if r.Status != 409 || string(r.Body) != string(refusal) {
		t.Fatalf("the refused attempt: got %d %s; want Core's 409 relayed", r.Status, r.Body)
	}
	if got := testkit.Metric(t, side.Registry, "knowledge_sidecar_ledger_errors_total", nil); got != 1 {
		t.Fatalf("ledger_errors_total after the refusal with Redis paused: %v; want 1 (the failed release)", got)
	}
	_ = redis.Process.Signal(syscall.SIGCONT)
	w.Core.ClearFaults()

	// The corrected retry, in the other mode, at once: served, not 409.
	r = send(t, c, "POST", turnsURL(side, route), w.TokenA, ti.body(modeJSON("inline")), nil)
	if r.Status != 200 || answerMode(r) != "inline" {
		t.Fatalf("the corrected retry after the failed release: got %d %s; want 200 inline", r.Status, r.Body)
	}
	testkit.Eventually(t, 10*time.Second, "no release left pending", func() bool { return led.Pending() == 0 })
}
