package ledger

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/bailinghub/knowledge-sidecar/hostclient/hostclienttest"
	"github.com/bailinghub/knowledge-sidecar/internal/testkit"
	"github.com/bailinghub/knowledge-sidecar/internal/testkit/testdb"
	"github.com/bailinghub/knowledge-sidecar/sharedredis"
)

const (
	inline   = "inline"
	onDemand = "on_demand"
)

// clockStart is where the tests' manual clocks start.
var clockStart = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// TestMain prints one line when tests were skipped for want of Redis.
func TestMain(m *testing.M) { testkit.Main(m) }

// testClient is sharedredis.New(o), closed when the test ends.
func testClient(t *testing.T, o sharedredis.Options) *sharedredis.Client {
	t.Helper()
	c, err := sharedredis.New(o)
	if err != nil {
		t.Fatalf("sharedredis.New: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func newTestRedis(t *testing.T, url, prefix string, ttl time.Duration) *Redis {
	t.Helper()
	r, err := NewRedis(testClient(t, sharedredis.Options{URL: url, OpTimeout: 5 * time.Second}), RedisOptions{TTL: ttl, KeyPrefix: prefix})
	if err != nil {
		t.Fatalf("NewRedis: %v", err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

// --- the behavioural table, run against both backends ----------------------

type backend struct {
	name string
	new  func(t *testing.T) Ledger
}

func backends() []backend {
	return []backend{
		{"memory", func(t *testing.T) Ledger {
			m := NewMemory(1000, time.Hour, testkit.NewClock(clockStart).Now)
			t.Cleanup(func() { m.Close() })
			return m
		}},
		{"redis", func(t *testing.T) Ledger {
			url := testdb.RedisURL(t)
			prefix := testdb.RedisPrefix(t)
			testdb.RawRedis(t, url, prefix)
			return newTestRedis(t, url, prefix, time.Hour)
		}},
	}
}

func key(turn, msg string) Key {
	return Key{SessionID: "sess-1", Route: "order-assistant", ConversationID: "conv-1", TurnID: turn, UserMessageID: msg}
}

type step struct {
	release     bool
	of          int // release: the index of the step whose reservation is released (-1: none)
	k           Key
	mode        string
	wantCreated bool
	want        error
}

// fresh: Reserve of a new turn; retry: Reserve that finds the same mode;
// conflict: Reserve refused; invalid: bad input; release: Release of the
// reservation step `of` got.
func fresh(k Key, mode string) step    { return step{k: k, mode: mode, wantCreated: true} }
func retry(k Key, mode string) step    { return step{k: k, mode: mode} }
func conflict(k Key, mode string) step { return step{k: k, mode: mode, want: ErrConflict} }
func invalid(k Key, mode string) step  { return step{k: k, mode: mode, want: ErrInvalidKey} }
func release(of int, k Key, mode string) step {
	return step{release: true, of: of, k: k, mode: mode}
}

var behaviourCases = []struct {
	name  string
	steps []step
}{
	{"new turn then same-mode retry", []step{
		fresh(key("t1", "m1"), onDemand),
		retry(key("t1", "m1"), onDemand),
		retry(key("t1", "m1"), onDemand),
	}},
	{"mode switch on the same turn", []step{
		fresh(key("t1", "m1"), inline),
		conflict(key("t1", "m1"), onDemand),
		retry(key("t1", "m1"), inline),
	}},
	{"conflict under turn key writes nothing", []step{
		fresh(key("t1", "m1"), inline),
		conflict(key("t1", "m2"), onDemand),
		// m2 must not have been bound to on_demand by the refused call.
		fresh(key("t9", "m2"), inline),
	}},
	{"conflict under user message key writes nothing", []step{
		fresh(key("t1", "m1"), inline),
		conflict(key("t2", "m1"), onDemand),
		// t2 must not have been bound to on_demand by the refused call.
		fresh(key("t2", "m9"), inline),
	}},
	{"keys bound to different earlier turns with different modes", []step{
		fresh(key("t1", "m1"), inline),
		fresh(key("t2", "m2"), onDemand),
		conflict(key("t1", "m2"), inline),
		conflict(key("t1", "m2"), onDemand),
	}},
	{"same mode under one key only is a retry", []step{
		fresh(key("t1", "m1"), inline),
		retry(key("t1", "m2"), inline),
		conflict(key("t3", "m2"), onDemand), // m2 now bound too
	}},
	{"release of a new turn frees both keys", []step{
		fresh(key("t1", "m1"), onDemand),
		release(0, key("t1", "m1"), onDemand),
		fresh(key("t1", "m1"), inline),
	}},
	{"release only deletes its own mode", []step{
		fresh(key("t1", "m1"), inline),
		release(0, key("t1", "m1"), onDemand),
		conflict(key("t1", "m1"), onDemand),
		release(0, key("t1", "m1"), inline),
		fresh(key("t1", "m1"), onDemand),
	}},
	{"release drops only the records the attempt reserved", []step{
		fresh(key("t1", "m1"), inline),
		retry(key("t1", "m9"), inline), // joins t1, creates m9
		release(1, key("t1", "m9"), inline),
		fresh(key("t9", "m9"), onDemand),    // m9 is free again
		conflict(key("t1", "m8"), onDemand), // t1 still held by step 0
	}},
	{"a refused attempt does not release a joined one (SPEC §7 race)", []step{
		fresh(key("t1", "m1"), onDemand), // A: Core will refuse it
		retry(key("t1", "m1"), onDemand), // B: joined while A was in flight; creates the run
		release(0, key("t1", "m1"), onDemand),
		conflict(key("t1", "m1"), inline), // never served in two modes
		conflict(key("t1", "m2"), inline),
		conflict(key("t2", "m1"), inline),
	}},
	{"records go when every attempt that joined was refused", []step{
		fresh(key("t1", "m1"), onDemand),
		retry(key("t1", "m1"), onDemand),
		release(1, key("t1", "m1"), onDemand),
		conflict(key("t1", "m1"), inline),
		release(0, key("t1", "m1"), onDemand),
		fresh(key("t1", "m1"), inline),
	}},
	{"release of an unknown turn is a no-op", []step{
		release(-1, key("t1", "m1"), inline),
		fresh(key("t1", "m1"), onDemand),
	}},
	{"a stale reservation does not release a newer record", []step{
		fresh(key("t1", "m1"), onDemand),
		release(0, key("t1", "m1"), onDemand),
		fresh(key("t1", "m1"), onDemand), // a new record under the same keys
		release(0, key("t1", "m1"), onDemand),
		conflict(key("t1", "m1"), inline),
	}},
	{"sessions, routes and conversations are separate", []step{
		fresh(key("t1", "m1"), inline),
		fresh(Key{"sess-2", "order-assistant", "conv-1", "t1", "m1"}, onDemand),
		fresh(Key{"sess-1", "other-route", "conv-1", "t1", "m1"}, onDemand),
		fresh(Key{"sess-1", "order-assistant", "conv-2", "t1", "m9"}, onDemand),
	}},
	{"ids that concatenate alike do not collide", []step{
		fresh(Key{"s", "r", "a:b", "c", "m1"}, inline),
		fresh(Key{"s", "r", "a", "b:c", "m2"}, onDemand),
		fresh(Key{"s:r", "x", "a", "b", "m"}, inline),
		fresh(Key{"s", "r:x", "a", "b", "m"}, onDemand),
	}},
	{"turn and user message namespaces are separate", []step{
		fresh(Key{"s", "r", "c", "same", "other"}, inline),
		fresh(Key{"s", "r", "c2", "x", "same"}, onDemand),
	}},
	{"incomplete keys are refused", []step{
		invalid(Key{"", "r", "c", "t", "m"}, inline),
		invalid(Key{"s", "", "c", "t", "m"}, inline),
		invalid(Key{"s", "r", "", "t", "m"}, inline),
		invalid(Key{"s", "r", "c", "", "m"}, inline),
		invalid(Key{"s", "r", "c", "t", ""}, inline),
		invalid(Key{"s", "r", "c", "t", "m"}, ""),
	}},
}

func TestLedgerBehaviour(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			for _, tc := range behaviourCases {
				t.Run(tc.name, func(t *testing.T) {
					l := b.new(t)
					ctx := context.Background()
					res := make([]Reservation, len(tc.steps))
					for i, s := range tc.steps {
						if s.release {
							var r Reservation
							if s.of >= 0 {
								r = res[s.of]
							}
							if err := l.Release(ctx, s.k, s.mode, r); err != nil {
								t.Fatalf("step %d: Release(%+v, %q) = %v; want nil", i, s.k, s.mode, err)
							}
							continue
						}
						r, err := l.Reserve(ctx, s.k, s.mode)
						if !errors.Is(err, s.want) || (s.want == nil && err != nil) {
							t.Fatalf("step %d: Reserve(%+v, %q) error = %v; want %v", i, s.k, s.mode, err, s.want)
						}
						if r.Created != s.wantCreated {
							t.Fatalf("step %d: Reserve(%+v, %q) created = %v; want %v", i, s.k, s.mode, r.Created, s.wantCreated)
						}
						res[i] = r
					}
				})
			}
		})
	}
}

func TestLedgerConcurrentFirstAttempts(t *testing.T) {
	const n = 16
	for _, b := range backends() {
		t.Run(b.name+"/distinct modes: exactly one wins", func(t *testing.T) {
			l := b.new(t)
			created, errs := raceReserve(l, n, func(i int) string { return fmt.Sprintf("mode-%d", i) })
			wins := 0
			for i, err := range errs {
				switch {
				case err == nil:
					wins++
					if !created[i] {
						t.Errorf("goroutine %d won with created=false; want true", i)
					}
				case !errors.Is(err, ErrConflict):
					t.Errorf("goroutine %d: got %v; want nil or ErrConflict", i, err)
				}
			}
			if wins != 1 {
				t.Fatalf("got %d winners; want 1", wins)
			}
		})
		t.Run(b.name+"/two modes: winners all share one mode", func(t *testing.T) {
			l := b.new(t)
			modeOf := func(i int) string {
				if i%2 == 0 {
					return inline
				}
				return onDemand
			}
			created, errs := raceReserve(l, n, modeOf)
			winners := map[string]int{}
			creators := 0
			for i, err := range errs {
				if created[i] {
					creators++
				}
				switch {
				case err == nil:
					winners[modeOf(i)]++
				case !errors.Is(err, ErrConflict):
					t.Errorf("goroutine %d: got %v; want nil or ErrConflict", i, err)
				}
			}
			if len(winners) != 1 {
				t.Fatalf("got winners per mode %v; want exactly one mode", winners)
			}
			if creators != 1 {
				t.Fatalf("got %d callers with created=true; want 1", creators)
			}
			for m, c := range winners {
				if c != n/2 {
					t.Fatalf("got %d winners of mode %s; want %d (every attempt of the winning mode)", c, m, n/2)
				}
			}
		})
	}
}

// raceReserve starts n goroutines that wait on one gate and then Reserve the
// same turn, each with modeOf(i).
func raceReserve(l Ledger, n int, modeOf func(int) string) ([]bool, []error) {
	errs := make([]error, n)
	created := make([]bool, n)
	gate := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-gate
			var r Reservation
			r, errs[i] = l.Reserve(context.Background(), key("t-race", "m-race"), modeOf(i))
			created[i] = r.Created
		})
	}
	close(gate)
	wg.Wait()
	return created, errs
}

func TestLedgerClosed(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			l := b.new(t)
			if err := l.Close(); err != nil {
				t.Fatalf("Close: got %v; want nil", err)
			}
			if _, err := l.Reserve(context.Background(), key("t1", "m1"), inline); !errors.Is(err, ErrUnavailable) {
				t.Fatalf("Reserve after Close: got %v; want ErrUnavailable", err)
			}
			if err := l.Release(context.Background(), key("t1", "m1"), inline, Reservation{tokens: [2]string{"1", "1"}}); !errors.Is(err, ErrUnavailable) {
				t.Fatalf("Release after Close: got %v; want ErrUnavailable", err)
			}
		})
	}
}

func TestLedgerCanceledContext(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			l := b.new(t)
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			if _, err := l.Reserve(ctx, key("t1", "m1"), inline); !errors.Is(err, context.Canceled) {
				t.Fatalf("Reserve with canceled ctx: got %v; want context.Canceled", err)
			}
			// Nothing was written.
			if _, err := l.Reserve(context.Background(), key("t1", "m1"), onDemand); err != nil {
				t.Fatalf("Reserve after canceled attempt: got %v; want nil", err)
			}
		})
	}
}

// --- Memory only ------------------------------------------------------------

func TestMemoryTTL(t *testing.T) {
	const ttl = 10 * time.Minute
	tests := []struct {
		name    string
		advance time.Duration
		want    error
	}{
		{"just before expiry the record holds", ttl - time.Nanosecond, ErrConflict},
		{"at expiry the record is gone", ttl, nil},
		{"long after expiry the record is gone", 3 * ttl, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			clock := testkit.NewClock(clockStart)
			m := NewMemory(100, ttl, clock.Now)
			ctx := context.Background()
			if _, err := m.Reserve(ctx, key("t1", "m1"), inline); err != nil {
				t.Fatal(err)
			}
			clock.Advance(tc.advance)
			for _, k := range []Key{key("t1", "m-other"), key("t-other", "m1")} {
				if _, err := m.Reserve(ctx, k, onDemand); !errors.Is(err, tc.want) || (tc.want == nil && err != nil) {
					t.Fatalf("Reserve(%+v) after %v: got %v; want %v", k, tc.advance, err, tc.want)
				}
			}
		})
	}
}

func TestMemoryRetryRefreshesTTL(t *testing.T) {
	const ttl = 10 * time.Minute
	clock := testkit.NewClock(clockStart)
	m := NewMemory(100, ttl, clock.Now)
	ctx := context.Background()
	if _, err := m.Reserve(ctx, key("t1", "m1"), inline); err != nil {
		t.Fatal(err)
	}
	clock.Advance(ttl - time.Minute)
	if _, err := m.Reserve(ctx, key("t1", "m1"), inline); err != nil {
		t.Fatalf("retry: got %v; want nil", err)
	}
	clock.Advance(2 * time.Minute) // past the first TTL, inside the refreshed one
	if _, err := m.Reserve(ctx, key("t1", "m1"), onDemand); !errors.Is(err, ErrConflict) {
		t.Fatalf("switch after refresh: got %v; want ErrConflict", err)
	}
}

func TestMemoryBounded(t *testing.T) {
	tests := []struct {
		name       string
		maxEntries int
		turns      int
		wantMax    int
	}{
		{"explicit capacity", 6, 50, 6},
		{"zero means the default, never unbounded or zero", 0, 10, DefaultMaxEntries},
		{"negative means the default", -1, 10, DefaultMaxEntries},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := NewMemory(tc.maxEntries, time.Hour, testkit.NewClock(clockStart).Now)
			for i := range tc.turns {
				if _, err := m.Reserve(context.Background(), key(fmt.Sprint("t", i), fmt.Sprint("m", i)), inline); err != nil {
					t.Fatal(err)
				}
			}
			got := m.Len()
			if got > tc.wantMax || got == 0 {
				t.Fatalf("got %d records; want 1..%d", got, tc.wantMax)
			}
			if tc.turns*2 <= tc.wantMax && got != tc.turns*2 {
				t.Fatalf("got %d records; want %d (two per turn)", got, tc.turns*2)
			}
			if tc.maxEntries <= 0 && m.max != tc.wantMax {
				t.Fatalf("got capacity %d; want ledger.max_entries' default %d", m.max, tc.wantMax)
			}
		})
	}
}

// --- Redis only -------------------------------------------------------------

func TestRedisTTLIsSetAndRefreshed(t *testing.T) {
	url := testdb.RedisURL(t)
	prefix := testdb.RedisPrefix(t)
	raw := testdb.RawRedis(t, url, prefix)
	const ttl = 90 * time.Second
	l := newTestRedis(t, url, prefix, ttl)
	ctx := context.Background()
	k := key("t1", "m1")
	if _, err := l.Reserve(ctx, k, inline); err != nil {
		t.Fatal(err)
	}
	keys := l.keys(k)
	for _, rk := range keys {
		got, err := raw.PTTL(ctx, rk).Result()
		if err != nil {
			t.Fatal(err)
		}
		if got <= 0 || got > ttl {
			t.Fatalf("PTTL(%s) = %v; want in (0, %v]", rk, got, ttl)
		}
		if v := raw.Get(ctx, rk).Val(); rk == keys[0] || rk == keys[1] {
			if v != inline {
				t.Fatalf("GET(%s) = %q; want %q", rk, v, inline)
			}
		}
	}
	// Shorten both records by hand; a same-mode retry must refresh them.
	for _, rk := range keys {
		raw.PExpire(ctx, rk, 5*time.Second)
	}
	if _, err := l.Reserve(ctx, k, inline); err != nil {
		t.Fatalf("retry: got %v; want nil", err)
	}
	for _, rk := range keys {
		if got := raw.PTTL(ctx, rk).Val(); got <= 5*time.Second {
			t.Fatalf("PTTL(%s) after retry = %v; want > 5s (refreshed)", rk, got)
		}
	}
	// A refused switch leaves the TTL alone.
	for _, rk := range keys {
		raw.PExpire(ctx, rk, 5*time.Second)
	}
	if _, err := l.Reserve(ctx, k, onDemand); !errors.Is(err, ErrConflict) {
		t.Fatalf("switch: got %v; want ErrConflict", err)
	}
	for _, rk := range keys {
		if got := raw.PTTL(ctx, rk).Val(); got > 5*time.Second {
			t.Fatalf("PTTL(%s) after refused switch = %v; want ≤ 5s (untouched)", rk, got)
		}
	}
}

func TestRedisExpiredRecordIsFree(t *testing.T) {
	url := testdb.RedisURL(t)
	prefix := testdb.RedisPrefix(t)
	raw := testdb.RawRedis(t, url, prefix)
	l := newTestRedis(t, url, prefix, time.Hour)
	ctx := context.Background()
	k := key("t1", "m1")
	if _, err := l.Reserve(ctx, k, inline); err != nil {
		t.Fatal(err)
	}
	// Expire both records now instead of sleeping through a TTL: an expiry
	// time in the past makes Redis expire the key at once, as PX does when it
	// runs out.
	for _, rk := range l.keys(k) {
		if err := raw.PExpireAt(ctx, rk, time.Unix(1, 0)).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if n := raw.Exists(ctx, l.keys(k)...).Val(); n != 0 {
		t.Fatalf("got %d records after expiry; want 0", n)
	}
	if _, err := l.Reserve(ctx, k, onDemand); err != nil {
		t.Fatalf("Reserve after expiry: got %v; want nil", err)
	}
}

func TestRedisKeysHideRawIDs(t *testing.T) {
	url := testdb.RedisURL(t)
	prefix := testdb.RedisPrefix(t)
	raw := testdb.RawRedis(t, url, prefix)
	l := newTestRedis(t, url, prefix, time.Hour)
	k := Key{"session-secretish", "order-assistant", "conversation-xyz", "turn-abc", "message-def"}
	if _, err := l.Reserve(context.Background(), k, onDemand); err != nil {
		t.Fatal(err)
	}
	keys, err := raw.Keys(context.Background(), prefix+"*").Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 4 {
		t.Fatalf("got %d keys %v; want 4 (two records and their attempt counts)", len(keys), keys)
	}
	for _, rk := range keys {
		for _, id := range []string{k.SessionID, k.Route, k.ConversationID, k.TurnID, k.UserMessageID} {
			if strings.Contains(rk, id) {
				t.Fatalf("key %q contains raw id %q", rk, id)
			}
		}
		if strings.HasSuffix(rk, ":n") {
			v := raw.HGetAll(context.Background(), rk).Val()
			if len(v) != 2 || v["n"] != "1" || len(v["g"]) != 16 {
				t.Fatalf("count %q = %v; want only a generation and the attempts", rk, v)
			}
			continue
		}
		if v := raw.Get(context.Background(), rk).Val(); v != onDemand {
			t.Fatalf("value of %q = %q; want only the mode %q", rk, v, onDemand)
		}
	}
	// Both keys share one hash tag (one cluster slot).
	tag := func(s string) string { return s[strings.Index(s, "{"):strings.Index(s, "}")] }
	for _, rk := range keys[1:] {
		if tag(rk) != tag(keys[0]) {
			t.Fatalf("hash tags differ: %q vs %q", rk, keys[0])
		}
	}
}

func TestRedisReplicasShareRecords(t *testing.T) {
	url := testdb.RedisURL(t)
	prefix := testdb.RedisPrefix(t)
	testdb.RawRedis(t, url, prefix)
	a := newTestRedis(t, url, prefix, time.Hour)
	b := newTestRedis(t, url, prefix, time.Hour)
	ctx := context.Background()
	steps := []struct {
		name    string
		l       Ledger
		release int // ≥ 0: release the reservation of that step
		k       Key
		mode    string
		want    error
	}{
		{"a binds the turn", a, -1, key("t1", "m1"), inline, nil},
		{"b sees the turn key", b, -1, key("t1", "m2"), onDemand, ErrConflict},
		{"b sees the message key", b, -1, key("t2", "m1"), onDemand, ErrConflict},
		{"b retries with the same mode", b, -1, key("t1", "m1"), inline, nil},
		{"b releases its attempt", b, 3, key("t1", "m1"), inline, nil},
		{"a's attempt still holds the turn", a, -1, key("t1", "m2"), onDemand, ErrConflict},
		{"a releases its attempt", a, 0, key("t1", "m1"), inline, nil},
		{"b sees the release", b, -1, key("t1", "m1"), onDemand, nil},
	}
	res := make([]Reservation, len(steps))
	for i, s := range steps {
		var err error
		if s.release >= 0 {
			err = s.l.Release(ctx, s.k, s.mode, res[s.release])
		} else {
			res[i], err = s.l.Reserve(ctx, s.k, s.mode)
		}
		if !errors.Is(err, s.want) || (s.want == nil && err != nil) {
			t.Fatalf("%s: got %v; want %v", s.name, err, s.want)
		}
	}
}

// TestRedisRecordWithoutCount: a record written by an older version (the
// mode alone, no attempt count) is joined by a same-mode retry, refuses
// another mode, and is never released.
func TestRedisRecordWithoutCount(t *testing.T) {
	url := testdb.RedisURL(t)
	prefix := testdb.RedisPrefix(t)
	raw := testdb.RawRedis(t, url, prefix)
	l := newTestRedis(t, url, prefix, time.Hour)
	ctx := context.Background()
	k := key("t1", "m1")
	keys := l.keys(k)
	for _, rk := range keys[:2] {
		raw.Set(ctx, rk, onDemand, time.Hour)
	}
	r, err := l.Reserve(ctx, k, onDemand)
	if err != nil || r.Created {
		t.Fatalf("retry over an old record: got %+v, %v; want a retry", r, err)
	}
	if n := raw.Exists(ctx, keys[2:]...).Val(); n != 0 {
		t.Fatalf("the retry gave the old records %d attempt counts; want none", n)
	}
	if err := l.Release(ctx, k, onDemand, r); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Reserve(ctx, k, inline); !errors.Is(err, ErrConflict) {
		t.Fatalf("switch after the release: got %v; want ErrConflict (old records are kept)", err)
	}
}

// TestRedisCountsFollowRecords: the attempt counts live and expire with
// their records, and a release removes record and count together.
func TestRedisCountsFollowRecords(t *testing.T) {
	url := testdb.RedisURL(t)
	prefix := testdb.RedisPrefix(t)
	raw := testdb.RawRedis(t, url, prefix)
	l := newTestRedis(t, url, prefix, time.Hour)
	ctx := context.Background()
	k := key("t1", "m1")
	keys := l.keys(k)
	a, err := l.Reserve(ctx, k, onDemand)
	if err != nil {
		t.Fatal(err)
	}
	b, err := l.Reserve(ctx, k, onDemand)
	if err != nil {
		t.Fatal(err)
	}
	for _, ck := range keys[2:] {
		if n := raw.HGet(ctx, ck, "n").Val(); n != "2" {
			t.Fatalf("attempts in %s: got %q; want 2", ck, n)
		}
		if ttl := raw.PTTL(ctx, ck).Val(); ttl <= 0 || ttl > time.Hour {
			t.Fatalf("PTTL(%s) = %v; want in (0, 1h]", ck, ttl)
		}
	}
	for _, r := range []Reservation{a, b} {
		if err := l.Release(ctx, k, onDemand, r); err != nil {
			t.Fatal(err)
		}
	}
	if n := raw.Exists(ctx, keys...).Val(); n != 0 {
		t.Fatalf("%d keys left after both releases; want 0", n)
	}
}

func TestRedisDown(t *testing.T) {
	addr := strings.TrimPrefix(hostclienttest.RefusedURL(t), "http://") // refuses connections for the whole test
	_, port, _ := net.SplitHostPort(addr)
	const password = "s3cret-pa55"
	url := "redis://:" + password + "@" + addr + "/3"
	r, err := NewRedis(testClient(t, sharedredis.Options{URL: url, DialTimeout: time.Second, OpTimeout: 2 * time.Second}), RedisOptions{})
	if err != nil {
		t.Fatalf("NewRedis: %v", err)
	}
	defer r.Close()
	ops := []struct {
		name string
		call func() error
	}{
		{"Ping", func() error { return r.Ping(context.Background()) }},
		{"Reserve", func() error { _, err := r.Reserve(context.Background(), key("t1", "m1"), inline); return err }},
		{"Release", func() error {
			return r.Release(context.Background(), key("t1", "m1"), inline, Reservation{tokens: [2]string{"a", "b"}})
		}},
	}
	for _, op := range ops {
		t.Run(op.name, func(t *testing.T) {
			err := op.call()
			if !errors.Is(err, ErrUnavailable) {
				t.Fatalf("got %v; want ErrUnavailable", err)
			}
			if errors.Is(err, ErrConflict) {
				t.Fatalf("got %v; must not look like a conflict", err)
			}
			msg := err.Error()
			for _, secret := range []string{password, addr, port, "127.0.0.1", "redis://"} {
				if strings.Contains(msg, secret) {
					t.Fatalf("error %q contains %q", msg, secret)
				}
			}
		})
	}
}

func TestNewRedisRejectsBracedPrefix(t *testing.T) {
	if _, err := NewRedis(testClient(t, sharedredis.Options{URL: "redis://127.0.0.1:1/0"}), RedisOptions{KeyPrefix: "ks:{x}:"}); err == nil {
		t.Fatal("got nil error for a prefix with a hash tag; want an error")
	}
}

// TestMemorySessionCap: one session flooding the ledger evicts its own
// oldest records, never another session's (the campaign: 1,200 turns of
// one session evicted another's record from a global LRU).
func TestMemorySessionCap(t *testing.T) {
	m := NewMemory(1000, time.Hour, testkit.NewClock(clockStart).Now)
	ctx := context.Background()
	victim := Key{"sess-victim", "r", "c", "t", "m"}
	if _, err := m.Reserve(ctx, victim, onDemand); err != nil {
		t.Fatal(err)
	}
	for i := range 1200 {
		k := Key{"sess-flood", "r", "c", fmt.Sprint("t", i), fmt.Sprint("m", i)}
		if _, err := m.Reserve(ctx, k, inline); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := m.Reserve(ctx, victim, inline); !errors.Is(err, ErrConflict) {
		t.Fatalf("victim's turn after the flood: got %v; want ErrConflict (its record kept)", err)
	}
	if got, want := m.Len(), 2+m.SessionCap(); got != want {
		t.Fatalf("records: got %d; want the victim's 2 + the flooder's cap %d", got, m.SessionCap())
	}
	// The flooder's newest turns are held, its oldest went.
	if _, err := m.Reserve(ctx, Key{"sess-flood", "r", "c", "t1199", "m1199"}, onDemand); !errors.Is(err, ErrConflict) {
		t.Fatalf("flooder's newest turn: got %v; want ErrConflict", err)
	}
	if r, err := m.Reserve(ctx, Key{"sess-flood", "r", "c", "t0", "m0"}, onDemand); err != nil || !r.Created {
		t.Fatalf("flooder's oldest turn: got %+v, %v; want evicted (free)", r, err)
	}
}

// TestMemorySessionCapDefaults: a quarter of the capacity, at most
// MaxSessionEntries, at least one turn.
func TestMemorySessionCapDefaults(t *testing.T) {
	for _, tc := range []struct{ max, want int }{
		{1000, 250}, {0, MaxSessionEntries}, {100_000_000, MaxSessionEntries}, {1, 2}, {6, 2},
	} {
		if got := NewMemory(tc.max, time.Hour, nil).SessionCap(); got != tc.want {
			t.Errorf("NewMemory(%d).SessionCap() = %d; want %d", tc.max, got, tc.want)
		}
	}
}

// TestMemoryGlobalCapAcrossSessions: many sessions together are still
// bounded by maxEntries.
func TestMemoryGlobalCapAcrossSessions(t *testing.T) {
	m := NewMemory(40, time.Hour, testkit.NewClock(clockStart).Now) // 10 per session
	for i := range 100 {
		k := Key{fmt.Sprint("s", i%20), "r", "c", fmt.Sprint("t", i), fmt.Sprint("m", i)}
		if _, err := m.Reserve(context.Background(), k, inline); err != nil {
			t.Fatal(err)
		}
	}
	if got := m.Len(); got != 40 {
		t.Fatalf("records: got %d; want 40", got)
	}
}

// TestMemoryStaleReleaseAfterExpiry: an attempt whose record expired and
// was created anew by a later attempt does not release the new one.
func TestMemoryStaleReleaseAfterExpiry(t *testing.T) {
	clock := testkit.NewClock(clockStart)
	m := NewMemory(100, time.Minute, clock.Now)
	ctx := context.Background()
	k := key("t1", "m1")
	old, err := m.Reserve(ctx, k, onDemand)
	if err != nil {
		t.Fatal(err)
	}
	clock.Advance(time.Minute)
	if r, err := m.Reserve(ctx, k, onDemand); err != nil || !r.Created {
		t.Fatalf("after expiry: got %+v, %v; want a new record", r, err)
	}
	if err := m.Release(ctx, k, onDemand, old); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Reserve(ctx, k, inline); !errors.Is(err, ErrConflict) {
		t.Fatalf("switch: got %v; want ErrConflict (the new record stays)", err)
	}
}

// TestMemoryEvictionsCounted: past a bound the memory ledger forgets a turn
// before ledger.ttl — a mode switch on it is then served — and counts each
// record it dropped in ledger_evictions_total{bound}, read from the
// registry. session: one session's turns past its cap (2,000 records at the
// default max_entries); ledger: many sessions past max_entries.
func TestMemoryEvictionsCounted(t *testing.T) {
	cases := []struct {
		name       string
		maxEntries int
		others     func(i int) Key // the turns after the first one
		n          int
		session    float64 // want ledger_evictions_total{bound="session"}
		ledger     float64 // want ledger_evictions_total{bound="ledger"}
	}{
		{"session cap", 100_000, func(i int) Key { return Key{"sess-a", "r", "c", fmt.Sprint("t", i), fmt.Sprint("m", i)} },
			1_001, 2 + 2*1_001 - MaxSessionEntries, 0},
		{"max entries", 40, func(i int) Key { return Key{fmt.Sprint("sess-", i), "r", "c", "t", "m"} },
			20, 0, 2},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			reg := prometheus.NewRegistry()
			m := NewMemory(tc.maxEntries, time.Hour, testkit.NewClock(clockStart).Now)
			m.Register(reg)
			first := Key{"sess-a", "r", "c", "first", "first-m"}
			if _, err := m.Reserve(ctx, first, onDemand); err != nil {
				t.Fatal(err)
			}
			for i := range tc.n {
				if _, err := m.Reserve(ctx, tc.others(i), inline); err != nil {
					t.Fatal(err)
				}
			}
			want := fmt.Sprintf(`# HELP knowledge_sidecar_ledger_evictions_total %s
# TYPE knowledge_sidecar_ledger_evictions_total counter
knowledge_sidecar_ledger_evictions_total{bound="ledger"} %v
knowledge_sidecar_ledger_evictions_total{bound="session"} %v
`, evictionsHelp, tc.ledger, tc.session)
			if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "knowledge_sidecar_ledger_evictions_total"); err != nil {
				t.Errorf("got evictions %v; want session %v, ledger %v", err, tc.session, tc.ledger)
			}
			if r, err := m.Reserve(ctx, first, inline); err != nil || !r.Created {
				t.Errorf("mode switch on the evicted turn: got %+v, %v; want served (created)", r, err)
			}
		})
	}
}

// TestRedisKeepsRecordsForTTL: the Redis ledger has no per-session bound:
// after 1,200 other turns of the same session (past the memory ledger's
// 1,000) a mode switch on the first turn is still ErrConflict.
func TestRedisKeepsRecordsForTTL(t *testing.T) {
	url := testdb.RedisURL(t)
	prefix := testdb.RedisPrefix(t)
	testdb.RawRedis(t, url, prefix)
	r := newTestRedis(t, url, prefix, time.Hour)
	ctx := context.Background()
	first := Key{"sess-a", "r", "c", "first", "first-m"}
	if _, err := r.Reserve(ctx, first, onDemand); err != nil {
		t.Fatal(err)
	}
	const others = MaxSessionEntries/2 + 200
	for i := range others {
		if _, err := r.Reserve(ctx, Key{"sess-a", "r", "c", fmt.Sprint("t", i), fmt.Sprint("m", i)}, inline); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name string
		key  Key
	}{
		{"both keys", first},
		{"turn id key", Key{"sess-a", "r", "c", "first", "other-m"}},
		{"message id key", Key{"sess-a", "r", "c2", "other-t", "first-m"}},
	} {
		if _, err := r.Reserve(ctx, tc.key, inline); !errors.Is(err, ErrConflict) {
			t.Errorf("%s: mode switch after %d other turns: got %v; want ErrConflict (kept for the ttl)", tc.name, others, err)
		}
	}
}
