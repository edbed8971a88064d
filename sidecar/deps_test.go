package sidecar_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bailinghub/knowledge-sidecar/catalog"
	"github.com/bailinghub/knowledge-sidecar/config"
	"github.com/bailinghub/knowledge-sidecar/corefacts"
	"github.com/bailinghub/knowledge-sidecar/internal/fakecore"
	"github.com/bailinghub/knowledge-sidecar/ledger"
	"github.com/bailinghub/knowledge-sidecar/sidecar"
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

// countingTransport counts the requests it carries to Core.
type countingTransport struct{ requests atomic.Int64 }

func (c *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	c.requests.Add(1)
	return http.DefaultTransport.RoundTrip(r)
}

// TestBuildUsesGivenParts: the ledger, shared rate limit and pass-through
// transport given in Deps are the ones the built sidecar uses, and a given
// ledger is left open for its owner.
func TestBuildUsesGivenParts(t *testing.T) {
	const (
		service = "svc_deps-service-token"
		bearer  = "bha_ZGVwcy1hY2Nlc3MtdG9rZW4tZm9yLXRoZS10ZXN0LW9mLWRlcHM"
		route   = "orders"
		kb      = "kb-orders"
	)
	core := fakecore.New(fakecore.Options{ServiceToken: service})
	t.Cleanup(core.Close)
	cat := catalog.NewMemCatalog()
	core.AddKB(kb)
	cat.PutKB(kb, true)
	cat.PutRoute(route, true, `{"kb_ids":["kb-orders"],"top_k":8,"min_score":0.05,"inject":"chunk","max_docs":4}`)
	cat.PutClient("deps-host", true, []string{route}, "https://host.example/consent")
	core.SetRoute(route, fakecore.GateAllowed)
	core.AddSession(bearer, corefacts.Session{SessionID: "0b7c1f3e-2a41-4f3c-8e1d-5d2a9c7b6e10", ClientAppID: "deps-host",
		Principal: corefacts.Principal{ID: "u1"}, AllowedRoutes: []string{route}, ExpiresAt: time.Now().Add(time.Hour)})
	coreSrv := httptest.NewServer(core)
	t.Cleanup(coreSrv.Close)

	cfg := config.Defaults()
	cfg.Core.URL, cfg.Core.Token = coreSrv.URL, service
	cfg.Rollout = "allow:" + route
	led := &countingLedger{Ledger: ledger.NewMemory(100, time.Hour, nil)}
	lim, tr := &countingLimiter{}, &countingTransport{}
	app, err := sidecar.Build(context.Background(), cfg, sidecar.Deps{Catalog: cat, SingleProcess: true,
		Ledger: led, SharedLimiter: lim, Transport: tr})
	if err != nil {
		t.Fatal(err)
	}
	front := httptest.NewServer(app.Server.Handler())
	t.Cleanup(front.Close)
	post := func(path, body string) int {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, front.URL+"/agent-api/v1/workspaces/"+route+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+bearer)
		req.Header.Set("Content-Type", "application/json")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res.StatusCode
	}

	if code := post("/knowledge/search", `{"query":"refunds"}`); code != 200 || lim.asks.Load() == 0 {
		t.Errorf("search: %d, %d asks of the given shared limiter; want 200 and at least one", code, lim.asks.Load())
	}
	turn := `{"client_conversation_id":"c1","client_turn_id":"t1","user_message_id":"m1","user_input":"refunds?",` +
		`"knowledge_delivery":"on_demand","renderers":["markdown"]}`
	if code := post("/turns", turn); code != 200 || led.reserves.Load() != 1 || tr.requests.Load() == 0 {
		t.Errorf("turn: %d, %d reservations in the given ledger, %d requests on the given transport; want 200, 1, at least 1",
			code, led.reserves.Load(), tr.requests.Load())
	}

	front.Close()
	app.Close()
	if _, err := led.Reserve(context.Background(), ledger.Key{SessionID: "s", Route: route, ConversationID: "c",
		TurnID: "t2", UserMessageID: "m2"}, "inline"); err != nil {
		t.Errorf("the given ledger after App.Close: %v; want it left open for its owner", err)
	}
}
