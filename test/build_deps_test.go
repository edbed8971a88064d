package test

import (
	"context"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bailinghub/knowledge-sidecar/internal/testkit/testdb"
	"github.com/bailinghub/knowledge-sidecar/ledger"
)

// countingLedger counts the reservations made through it.
type countingLedger struct {
	ledger.Ledger
	reserves atomic.Int64
}

func (l *countingLedger) Reserve(ctx context.Context, k ledger.Key, mode string) (ledger.Reservation, error) {
	l.reserves.Add(1)
	return l.Ledger.Reserve(ctx, k, mode)
}

// countingLimiter allows everything and counts the asks.
type countingLimiter struct{ asks atomic.Int64 }

func (l *countingLimiter) Allow(context.Context, string, float64, int) (bool, time.Duration, error) {
	l.asks.Add(1)
	return true, 0, nil
}

// TestBuildUsesGivenParts: the turn ledger, shared rate limit and
// pass-through transport given in sidecar.Deps are the ones the built
// sidecar uses, and a given ledger is left open for its owner.
func TestBuildUsesGivenParts(t *testing.T) {
	w := NewWorld(t, WorldOptions{})
	led := &countingLedger{Ledger: ledger.NewMemory(100, time.Hour, nil)}
	lim := &countingLimiter{}
	var carried atomic.Int64
	base := &http.Transport{}
	t.Cleanup(base.CloseIdleConnections)
	tr := rtFunc(func(r *http.Request) (*http.Response, error) { carried.Add(1); return base.RoundTrip(r) })
	side := StartSidecar(t, SidecarOptions{CoreURL: w.CoreURL, Transport: tr,
		Features: w.Features(t, FeatureOptions{Ledger: led, SharedLimiter: lim})})
	c := newClient(t)
	route := testdb.RouteMulti

	if code, _, body := Call(t, c, "POST", side.WS(route)+"/knowledge/search", w.TokenA, map[string]any{"query": refundQuery}); code != 200 || lim.asks.Load() == 0 {
		t.Errorf("search: %d %s, %d asks of the given shared limiter; want 200 and at least one", code, clip(string(body)), lim.asks.Load())
	}
	mustTurn(t, c, side, route, w.TokenA, newTurn("given-parts").body(`"on_demand"`), "turn")
	if led.reserves.Load() != 1 || carried.Load() == 0 {
		t.Errorf("turn: %d reservations in the given ledger, %d requests on the given transport; want 1, at least 1",
			led.reserves.Load(), carried.Load())
	}

	if err := side.Stop(); err != nil {
		t.Fatal(err)
	}
	k := ledger.Key{SessionID: "s", Route: route, ConversationID: "c", TurnID: "t", UserMessageID: "m"}
	if _, err := led.Reserve(context.Background(), k, "inline"); err != nil {
		t.Errorf("the given ledger after the sidecar stopped: %v; want it left open for its owner", err)
	}
}
