package test

import (
	"strings"
	"testing"
	"time"

	"github.com/bailinghub/knowledge-sidecar/breaker"
	"github.com/bailinghub/knowledge-sidecar/internal/fakecore"
	"github.com/bailinghub/knowledge-sidecar/internal/testkit/testdb"
)

// TestOversizedBearersCannotSwitchKnowledgeOff: unauthenticated callers
// cannot open the shared identity breaker (issue 39, finding 1). Core's
// HTTP front (Node, 16 KiB of headers: fakecore's default MaxHeaderSize)
// answers 431 to a ~17 KB bearer; the sidecar answers such a bearer 401
// itself, without asking Core, and a 4xx Core's front gives a bearer under
// the sidecar's bound is the caller's 401 too, never a breaker failure. After
// many of either, every legitimate search is served.
func TestOversizedBearersCannotSwitchKnowledgeOff(t *testing.T) {
	const floods = 30
	identity := breaker.Settings{Failures: 5, Window: time.Minute, OpenTimeout: time.Hour}
	served := func(t *testing.T, kw *kworld, sc *ksidecar) {
		t.Helper()
		ok := 0
		for range 10 {
			r, a := kw.search(t, sc, testdb.RouteMulti, kw.TokenA, map[string]any{"query": refundQuery})
			if r.Status == 200 && a.Status != "unavailable" && len(a.Hints) > 0 {
				ok++
			}
		}
		if ok != 10 {
			t.Errorf("legitimate searches after the flood: %d/10 served; want 10/10", ok)
		}
	}

	t.Run("bearers over the sidecar's bound are not sent", func(t *testing.T) {
		kw := newKWorld(t, fakecore.Options{SystemInfo: true})
		sc := kw.start(t, kopts{FeatureOptions: FeatureOptions{Identity: identity}})
		sessions := kw.Core.Calls("/agent-auth/v1/session")
		for i := range floods {
			bearer := fakecore.Token("flood") + strings.Repeat(string(rune('A'+i%26)), 17<<10)
			wantError(t, "search with a 17 KB bearer", kw.call(t, "POST", sc.WS(testdb.RouteMulti)+"/knowledge/search", bearer, map[string]any{"query": refundQuery}), 401, "unauthorized")
			wantError(t, "capabilities with a 17 KB bearer", kw.call(t, "GET", sc.WS(testdb.RouteMulti)+"/knowledge/capabilities", bearer, nil), 401, "unauthorized")
		}
		for _, bearer := range []string{strings.Repeat("x", 60), "bha_short"} {
			wantError(t, "a bearer Core never issues", kw.call(t, "POST", sc.WS(testdb.RouteMulti)+"/knowledge/search", bearer, map[string]any{"query": refundQuery}), 401, "unauthorized")
		}
		if got := kw.Core.Calls("/agent-auth/v1/session") - sessions; got != 0 {
			t.Errorf("Core's session endpoint asked %d times for bearers it cannot accept; want 0", got)
		}
		if got := kw.Core.HeaderRefusals(); got != 0 {
			t.Errorf("Core's front answered 431 %d times; want 0 (nothing oversized sent)", got)
		}
		served(t, kw, sc)
	})

	t.Run("Core's front refusing a bearer is the caller's 401", func(t *testing.T) {
		// A front with a smaller header bound than the sidecar's 4 KiB
		// bearer bound: a 3 KiB bearer of Core's shape reaches it and is
		// answered 431.
		kw := newKWorld(t, fakecore.Options{SystemInfo: true, MaxHeaderSize: 2 << 10})
		sc := kw.start(t, kopts{FeatureOptions: FeatureOptions{Identity: identity}})
		for i := range floods {
			bearer := fakecore.Token("flood") + strings.Repeat(string(rune('A'+i%26)), 3<<10)
			wantError(t, "search with a bearer Core's front refuses", kw.call(t, "POST", sc.WS(testdb.RouteMulti)+"/knowledge/search", bearer, map[string]any{"query": refundQuery}), 401, "unauthorized")
		}
		if got := kw.Core.HeaderRefusals(); got < floods {
			t.Fatalf("precondition: Core's front answered 431 %d times; want at least %d", got, floods)
		}
		served(t, kw, sc)
	})
}
