package knowledge

import (
	"testing"
	"time"
)

// TestRetryAfter: a 429 says when the session's next token is back, in
// whole seconds rounded up and at least 1 (SPEC §2), computed from the
// token bucket and the injected clock.
func TestRetryAfter(t *testing.T) {
	cases := []struct {
		name    string
		rps     float64
		burst   int
		advance time.Duration // after the burst is spent
		want    int
	}{
		{"fast refill rounds up to one second", 10, 2, 0, 1},
		{"one token every 4s", 0.25, 1, 0, 4},
		{"one token every 4s, 1.5s later", 0.25, 1, 1500 * time.Millisecond, 3},
		{"one token every 10s, 9.9s later", 0.1, 1, 9900 * time.Millisecond, 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, func(o *Options) { o.RateLimit, o.RateBurst = tc.rps, tc.burst })
			for i := 0; i < tc.burst; i++ {
				if _, _, ke := e.call("capabilities", tokA, routeKey, ""); ke != nil {
					t.Fatalf("request %d: got %v; want success within the burst", i+1, ke)
				}
			}
			e.clock.Advance(tc.advance)
			_, _, ke := e.call("capabilities", tokA, routeKey, "")
			if ke == nil || ke.Status != 429 {
				t.Fatalf("got %v; want 429", ke)
			}
			if got := ke.RetryAfterSeconds(); got != tc.want {
				t.Errorf("Retry-After: got %d; want %d (retry after %v)", got, tc.want, ke.RetryAfter)
			}
			// Waiting that long is enough: the next request is admitted.
			e.clock.Advance(time.Duration(ke.RetryAfterSeconds()) * time.Second)
			if _, _, ke := e.call("capabilities", tokA, routeKey, ""); ke != nil {
				t.Errorf("after waiting Retry-After: got %v; want success", ke)
			}
		})
	}
}
