package test

import (
	"bytes"
	"testing"
	"time"

	"github.com/bailinghub/knowledge-sidecar/internal/fakecore"
	"github.com/bailinghub/knowledge-sidecar/internal/testkit/testdb"
	"github.com/bailinghub/knowledge-sidecar/ledger"
)

// flipWorld is one native Core (it takes knowledge_delivery and keeps it in
// a turn's idempotency hash) behind two sidecars sharing one ledger: one
// that holds the Core legacy (before the upgrade, or after a rollback) and
// one that holds it native. Sending a turn to one and its retry to the
// other is the verdict flipping between them.
type flipWorld struct {
	w              *World
	tap            *coreTap
	legacy, native *Sidecar
}

func newFlipWorld(t *testing.T) flipWorld {
	w := NewWorld(t, WorldOptions{Core: fakecore.Options{Native: true}})
	tap := newCoreTap(t, w.Core)
	led := ledger.NewMemory(1000, time.Hour, time.Now)
	side := func(mode string) *Sidecar {
		return StartSidecar(t, SidecarOptions{CoreURL: tap.URL,
			Features: w.Features(t, FeatureOptions{NativeDetection: mode, Ledger: led})})
	}
	return flipWorld{w: w, tap: tap, legacy: side("never"), native: side("always")}
}

// TestTurnAcrossUpgrade: a turn served on_demand before the upgrade (the
// field stripped, so Core holds it without) is handled as recorded when
// retried after it: Core replays it and the host gets its first answer,
// not Core's 409. A new turn goes to the native Core untouched.
func TestTurnAcrossUpgrade(t *testing.T) {
	f := newFlipWorld(t)
	route := testdb.RouteMulti
	c := newClient(t)
	ti := newTurn("upgrade")
	first := send(t, c, "POST", turnsURL(f.legacy, route), f.w.TokenA, ti.body(`"on_demand"`), nil)
	if first.Status != 200 {
		t.Fatalf("before the upgrade: got %d %s; want 200", first.Status, first.Body)
	}
	n := f.tap.count()
	retry := send(t, c, "POST", turnsURL(f.native, route), f.w.TokenA, ti.body(`"on_demand"`), nil)
	e := f.tap.oneSince(t, n)
	if !bytes.Equal(e.ReqBody, ti.body("")) {
		t.Errorf("the retry reached Core as %s; want it stripped as recorded", e.ReqBody)
	}
	if retry.Status != 200 {
		t.Fatalf("the retry after the upgrade: got %d %s; want 200", retry.Status, retry.Body)
	}
	checkRewrite(t, e.RespBody, retry.Body, "on_demand", "partial", scopeRevision(t, c, f.legacy, route, f.w.TokenA))

	fresh := newTurn("after-upgrade")
	n = f.tap.count()
	r := send(t, c, "POST", turnsURL(f.native, route), f.w.TokenA, fresh.body(`"on_demand"`), nil)
	e = f.tap.oneSince(t, n)
	if !bytes.Equal(e.ReqBody, fresh.body(`"on_demand"`)) || r.Status != 200 {
		t.Errorf("a new turn after the upgrade: Core got %s, client %d; want it untouched, 200", e.ReqBody, r.Status)
	}
	checkRelayed(t, r, e)
}

// TestTurnAcrossRollback: a turn passed to the native Core with its field
// (Core holds it with the field) is retried after a rollback to legacy: it
// passes untouched and Core replays it, instead of being stripped (Core's
// 409). A turn never seen before the rollback is intercepted as usual.
func TestTurnAcrossRollback(t *testing.T) {
	f := newFlipWorld(t)
	route := testdb.RouteMulti
	c := newClient(t)
	ti := newTurn("rollback")
	first := send(t, c, "POST", turnsURL(f.native, route), f.w.TokenA, ti.body(`"on_demand"`), nil)
	if first.Status != 200 {
		t.Fatalf("while native: got %d %s; want 200", first.Status, first.Body)
	}
	n := f.tap.count()
	retry := send(t, c, "POST", turnsURL(f.legacy, route), f.w.TokenA, ti.body(`"on_demand"`), nil)
	e := f.tap.oneSince(t, n)
	if !bytes.Equal(e.ReqBody, ti.body(`"on_demand"`)) {
		t.Errorf("the retry reached Core as %s; want it untouched, as Core recorded it", e.ReqBody)
	}
	if retry.Status != 200 || !bytes.Equal(retry.Body, first.Body) {
		t.Errorf("the retry after the rollback: got %d %s; want Core's replay of %s", retry.Status, retry.Body, first.Body)
	}
	checkRelayed(t, retry, e)

	fresh := newTurn("after-rollback")
	n = f.tap.count()
	r := send(t, c, "POST", turnsURL(f.legacy, route), f.w.TokenA, fresh.body(`"on_demand"`), nil)
	e = f.tap.oneSince(t, n)
	if !bytes.Equal(e.ReqBody, fresh.body("")) || r.Status != 200 {
		t.Errorf("a new turn after the rollback: Core got %s, client %d; want it stripped, 200", e.ReqBody, r.Status)
	}
}
