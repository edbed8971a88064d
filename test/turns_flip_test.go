package test

import (
	"bytes"
	"net/http"
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

// turnThenRetry sends ti on_demand through from (it must succeed) and its
// retry through to: the first answer, the retry's and the retry's exchange
// with Core.
func (f flipWorld) turnThenRetry(t *testing.T, c *http.Client, ti turnInput, from, to *Sidecar) (first, retry turnResult, e tapExchange) {
	t.Helper()
	first = send(t, c, "POST", turnsURL(from, testdb.RouteMulti), f.w.TokenA, ti.body(`"on_demand"`), nil)
	if first.Status != 200 {
		t.Fatalf("the first attempt: got %d %s; want 200", first.Status, first.Body)
	}
	retry, e = f.tap.post(t, c, turnsURL(to, testdb.RouteMulti), f.w.TokenA, ti.body(`"on_demand"`), nil)
	return first, retry, e
}

// freshTurn sends a turn never seen on_demand through side and checks that
// it is answered 200 and reached Core with the field want ("": stripped).
func (f flipWorld) freshTurn(t *testing.T, c *http.Client, side *Sidecar, want string) (turnResult, tapExchange) {
	t.Helper()
	fresh := newTurn("fresh-after-flip")
	r, e := f.tap.post(t, c, turnsURL(side, testdb.RouteMulti), f.w.TokenA, fresh.body(`"on_demand"`), nil)
	if !bytes.Equal(e.ReqBody, fresh.body(want)) || r.Status != 200 {
		t.Errorf("a new turn after the flip: Core got %s, client %d; want it with field %q, 200", e.ReqBody, r.Status, want)
	}
	return r, e
}

// TestTurnAcrossUpgrade: a turn served on_demand before the upgrade (the
// field stripped, so Core holds it without) is handled as recorded when
// retried after it: Core replays it and the host gets its first answer,
// not Core's 409. A new turn goes to the native Core untouched.
func TestTurnAcrossUpgrade(t *testing.T) {
	f := newFlipWorld(t)
	c := newClient(t)
	ti := newTurn("upgrade")
	_, retry, e := f.turnThenRetry(t, c, ti, f.legacy, f.native)
	if !bytes.Equal(e.ReqBody, ti.body("")) {
		t.Errorf("the retry reached Core as %s; want it stripped as recorded", e.ReqBody)
	}
	if retry.Status != 200 {
		t.Fatalf("the retry after the upgrade: got %d %s; want 200", retry.Status, retry.Body)
	}
	checkRewrite(t, e.RespBody, retry.Body, "on_demand", "partial", scopeRevision(t, c, f.legacy, testdb.RouteMulti, f.w.TokenA))
	r, e := f.freshTurn(t, c, f.native, `"on_demand"`)
	checkRelayed(t, r, e)
}

// TestTurnAcrossRollback: a turn passed to the native Core with its field
// (Core holds it with the field) is retried after a rollback to legacy: it
// passes untouched and Core replays it, instead of being stripped (Core's
// 409). A turn never seen before the rollback is intercepted as usual.
func TestTurnAcrossRollback(t *testing.T) {
	f := newFlipWorld(t)
	c := newClient(t)
	ti := newTurn("rollback")
	first, retry, e := f.turnThenRetry(t, c, ti, f.native, f.legacy)
	if !bytes.Equal(e.ReqBody, ti.body(`"on_demand"`)) {
		t.Errorf("the retry reached Core as %s; want it untouched, as Core recorded it", e.ReqBody)
	}
	if retry.Status != 200 || !bytes.Equal(retry.Body, first.Body) {
		t.Errorf("the retry after the rollback: got %d %s; want Core's replay of %s", retry.Status, retry.Body, first.Body)
	}
	checkRelayed(t, retry, e)
	f.freshTurn(t, c, f.legacy, "")
}
