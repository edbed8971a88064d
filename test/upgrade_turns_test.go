package test

import (
	"bytes"
	"testing"
	"time"

	"github.com/bailinghub/knowledge-sidecar/config"
	"github.com/bailinghub/knowledge-sidecar/internal/testkit"
	"github.com/bailinghub/knowledge-sidecar/internal/testkit/testdb"
	"github.com/bailinghub/knowledge-sidecar/sidecar"
)

// TestUpgradeTurnsMidSession is the turn side of the lifecycle
// (docs/rollout.md "Turns across a flip"): one Core, restarted as a native
// version and back on the same database (fakecore SetNative keeps the turns
// it recorded, as Core keeps them in its database), one sidecar built as
// `serve` builds it, the verdict changing once probe_interval has passed.
// A turn the sidecar served on_demand before the upgrade, retried after it,
// gets its first answer (never Core's 409, never inline knowledge); a new
// turn goes to the native Core untouched; after the rollback, a retry of a
// turn the native Core recorded passes untouched, and a new turn is
// intercepted again.
func TestUpgradeTurnsMidSession(t *testing.T) {
	w := NewWorld(t, WorldOptions{})
	tap := newCoreTap(t, w.Core)
	const probeInterval = time.Minute
	clock := testkit.NewRunningClock()
	cfg := config.Defaults()
	cfg.Core.URL, cfg.Core.Token = tap.URL, w.ServiceToken
	cfg.Catalog.DSN = w.DB.ReadOnlyDSN
	cfg.Rollout = "all"
	cfg.Ledger.Backend = "memory"
	cfg.ProbeInterval = probeInterval
	_, url := serveBuilt(t, cfg, sidecar.Deps{Now: clock.Now, SingleProcess: true})
	sc := &Sidecar{URL: url}
	route := testdb.RouteMulti
	c := newClient(t)
	turn := func(ti turnInput) (sent tapExchange, got turnResult) {
		t.Helper()
		n := tap.count()
		got = send(t, c, "POST", turnsURL(sc, route), w.TokenA, ti.body(`"on_demand"`), nil)
		return tap.oneSince(t, n), got
	}
	flip := func(native bool) {
		w.Core.SetNative(native)
		clock.Advance(probeInterval)
		// The next knowledge request past the interval probes Core again.
		scopeRevision(t, c, sc, route, w.TokenA)
	}

	before := newTurn("lifecycle-before")
	e, first := turn(before)
	if first.Status != 200 || !bytes.Equal(e.ReqBody, before.body("")) {
		t.Fatalf("legacy Core: got %d %s, Core got %s; want 200, the field stripped", first.Status, first.Body, e.ReqBody)
	}
	rev := scopeRevision(t, c, sc, route, w.TokenA)
	checkRewrite(t, e.RespBody, first.Body, "on_demand", "partial", rev)

	flip(true)
	e, retry := turn(before)
	if retry.Status != 200 || !bytes.Equal(e.ReqBody, before.body("")) {
		t.Fatalf("native Core, retry of a recorded turn: got %d %s, Core got %s; want 200 as recorded (stripped)",
			retry.Status, retry.Body, e.ReqBody)
	}
	checkRewrite(t, e.RespBody, retry.Body, "on_demand", "partial", rev)

	during := newTurn("lifecycle-native")
	e, fresh := turn(during)
	if fresh.Status != 200 || !bytes.Equal(e.ReqBody, during.body(`"on_demand"`)) {
		t.Fatalf("native Core, new turn: got %d %s, Core got %s; want the native Core's answer to the turn as sent",
			fresh.Status, fresh.Body, e.ReqBody)
	}
	checkRelayed(t, fresh, e)

	flip(false)
	e, again := turn(during)
	if !bytes.Equal(e.ReqBody, during.body(`"on_demand"`)) {
		t.Errorf("after the rollback, retry of a turn the native Core recorded: Core got %s; want it untouched", e.ReqBody)
	}
	checkRelayed(t, again, e)

	after := newTurn("lifecycle-after")
	e, last := turn(after)
	if last.Status != 200 || !bytes.Equal(e.ReqBody, after.body("")) {
		t.Errorf("after the rollback, new turn: got %d, Core got %s; want 200, the field stripped", last.Status, e.ReqBody)
	}
}
