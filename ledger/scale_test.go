package ledger

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// crc16 is Redis Cluster's key hash (CRC-16/XMODEM: polynomial 0x1021,
// initial 0), written here as the test's own oracle.
func crc16(b []byte) uint16 {
	var crc uint16
	for _, c := range b {
		crc ^= uint16(c) << 8
		for i := 0; i < 8; i++ {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}

// clusterKeySlot is CLUSTER KEYSLOT: the hash of the first non-empty {tag},
// else of the whole key, modulo 16384.
func clusterKeySlot(key string) int {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	return int(crc16([]byte(key)) % 16384)
}

func TestCRC16Oracle(t *testing.T) {
	// The reference value of the Redis Cluster specification.
	if got := crc16([]byte("123456789")); got != 0x31C3 {
		t.Fatalf("crc16(123456789) = %#x; want 0x31c3", got)
	}
	if clusterKeySlot("{user1000}.following") != clusterKeySlot("{user1000}.followers") {
		t.Fatal("hash tags are not honoured")
	}
}

func randomID(t *testing.T) string {
	var b [12]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b[:])
}

// TestRedisKeysShareOneSlot: every key a script touches (the turn record,
// the user message record and their counts) hashes to one cluster slot,
// for random ids, so the scripts never fail with CROSSSLOT; and the tag
// comes from (session, route), so many sessions spread over many slots
// (a constant tag would put the whole ledger on one primary).
func TestRedisKeysShareOneSlot(t *testing.T) {
	r := &Redis{prefix: DefaultKeyPrefix}
	slots := map[int]bool{}
	const sessions = 2000
	for i := 0; i < sessions; i++ {
		k := Key{SessionID: randomID(t), Route: "route-" + randomID(t)[:4], ConversationID: randomID(t),
			TurnID: randomID(t), UserMessageID: randomID(t)}
		keys := r.keys(k)
		if len(keys) != 4 {
			t.Fatalf("keys: %v", keys)
		}
		s := clusterKeySlot(keys[0])
		for _, key := range keys[1:] {
			if got := clusterKeySlot(key); got != s {
				t.Fatalf("keys of one turn in slots %d and %d: %v", s, got, keys)
			}
		}
		// Another turn of the same session and route: the same slot.
		k2 := k
		k2.TurnID, k2.UserMessageID = randomID(t), randomID(t)
		if got := clusterKeySlot(r.keys(k2)[0]); got != s {
			t.Fatalf("turns of one session and route in slots %d and %d", s, got)
		}
		slots[s] = true
	}
	// 2000 random sessions over 16384 slots: about 1885 distinct expected;
	// a tag not derived from the session would give 1.
	if len(slots) < sessions*8/10 {
		t.Errorf("%d sessions map to only %d slots", sessions, len(slots))
	}
	// Three primaries split 0-5460, 5461-10922, 10923-16383: all are used.
	var shard [3]int
	for s := range slots {
		shard[min(s/5461, 2)]++
	}
	for i, n := range shard {
		if n < sessions/10 {
			t.Errorf("primary %d of 3 gets %d of %d sessions' slots", i, n, len(slots))
		}
	}
	// The rate-limit key is one key per session (a tag of its own).
	if !strings.Contains(DefaultRateKeyPrefix, "ratelimit") || strings.ContainsAny(DefaultRateKeyPrefix, "{}") {
		t.Errorf("rate key prefix %q", DefaultRateKeyPrefix)
	}
}

// TestParseRedisURLModes: each mode reads its own URL form; errors never
// quote the URL (it may carry a password).
func TestParseRedisURLModes(t *testing.T) {
	const pw = "s3cretPW"
	cases := []struct {
		mode, url string
		ok        bool
	}{
		{"single", "redis://u:" + pw + "@127.0.0.1:6379/2", true},
		{"", "rediss://127.0.0.1:6379/0", true},
		{"cluster", "redis://u:" + pw + "@10.0.0.1:6379?addr=10.0.0.2:6379&addr=10.0.0.3:6379", true},
		{"sentinel", "redis://u:" + pw + "@10.0.0.1:26379?master_name=mymaster&addr=10.0.0.2:26379", true},
		{"sentinel", "redis://u:" + pw + "@10.0.0.1:26379?addr=10.0.0.2:26379", false}, // no master_name
		{"single", "redis://u:" + pw + "@127.0.0.1:6379/notadb", false},
		{"cluster", "http://u:" + pw + "@10.0.0.1:6379", false},
		{"cluster", "redis://u:" + pw + "@10.0.0.1:6379?addr=10.0.0.2:6379&bogus_option=1", false},
		{"bogus", "redis://u:" + pw + "@10.0.0.1:6379", false},
	}
	for _, tc := range cases {
		err := ParseRedisURL(tc.mode, tc.url)
		if (err == nil) != tc.ok {
			t.Errorf("mode %q: ok=%v, err %v", tc.mode, tc.ok, err)
		}
		if err != nil && (strings.Contains(err.Error(), pw) || strings.Contains(err.Error(), "10.0.0")) {
			t.Errorf("error quotes the URL: %v", err)
		}
	}
}

// TestRedisTLSExplicit: rediss:// gets the same explicit tls.Config in
// every mode (at least TLS 1.2, the CA file's roots), whatever the URL
// parsers' defaults; a CA file with redis:// or an unreadable one is an
// error.
func TestRedisTLSExplicit(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.pem")
	if err := os.WriteFile(bad, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, mode := range []string{"single", "cluster", "sentinel"} {
		u := "rediss://127.0.0.1:6379"
		if mode == "sentinel" {
			u += "?master_name=m"
		}
		r, err := NewRedis(RedisOptions{URL: u, Mode: mode})
		if err != nil {
			t.Fatalf("%s: %v", mode, err)
		}
		var tc *tls.Config
		switch c := r.client.(type) {
		case *redis.Client:
			tc = c.Options().TLSConfig
		case *redis.ClusterClient:
			tc = c.Options().TLSConfig
		}
		r.Close()
		if tc == nil || tc.MinVersion != tls.VersionTLS12 {
			t.Errorf("%s: TLS config %+v; want MinVersion TLS 1.2", mode, tc)
		}
		if _, err := NewRedis(RedisOptions{URL: u, Mode: mode, CAFile: bad}); err == nil || strings.Contains(err.Error(), "127.0.0.1") {
			t.Errorf("%s: bad CA file: %v; want an error naming no address", mode, err)
		}
		plain := strings.Replace(u, "rediss", "redis", 1)
		if _, err := NewRedis(RedisOptions{URL: plain, Mode: mode, CAFile: bad}); err == nil {
			t.Errorf("%s: a CA file with redis:// accepted", mode)
		}
		r, err = NewRedis(RedisOptions{URL: plain, Mode: mode})
		if err != nil {
			t.Fatal(err)
		}
		if c, ok := r.client.(*redis.Client); ok && c.Options().TLSConfig != nil {
			t.Errorf("%s: redis:// has TLS on", mode)
		}
		r.Close()
	}
}

// TestRedisRateLimiterGCRA: the shared bucket admits the burst at once, then
// one request per 1/rps, and its Retry-After says when; two clients (two
// replicas) draw from one bucket per session.
func TestRedisRateLimiterGCRA(t *testing.T) {
	url := requireRedis(t)
	prefix := uniquePrefix(t)
	raw := rawRedis(t, url, "rate:"+prefix)
	_ = raw
	a, b := newTestRedis(t, url, prefix, time.Minute), newTestRedis(t, url, prefix, time.Minute)
	la, err := a.RateLimiter(prefix)
	if err != nil {
		t.Fatal(err)
	}
	lb, err := b.RateLimiter(prefix)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	// 0.5 rps (one token every 2s), burst 4: the test is far quicker than 2s
	// per request, so at most one token refills.
	start := time.Now()
	admitted := 0
	var lastRetry time.Duration
	for i := 0; i < 10; i++ {
		l := la
		if i%2 == 1 {
			l = lb
		}
		ok, retry, err := l.Allow(ctx, "session-1", 0.5, 4)
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			admitted++
		} else {
			lastRetry = retry
		}
	}
	allowed := 4 + int(time.Since(start).Seconds()*0.5)
	if admitted < 4 || admitted > allowed {
		t.Errorf("admitted %d of 10; want 4..%d (burst + rps × elapsed, shared by both clients)", admitted, allowed)
	}
	if lastRetry <= 0 || lastRetry > 2*time.Second {
		t.Errorf("retry after %v; want in (0, 2s]", lastRetry)
	}
	// Another session has its own bucket.
	if ok, _, err := lb.Allow(ctx, "session-2", 0.5, 4); err != nil || !ok {
		t.Errorf("another session: ok=%v err=%v", ok, err)
	}
	// Redis down: an error naming no address.
	dead, err := NewRedis(RedisOptions{URL: "redis://127.0.0.1:1/0", DialTimeout: 200 * time.Millisecond, OpTimeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer dead.Close()
	ld, _ := dead.RateLimiter("")
	if _, _, err := ld.Allow(ctx, "s", 1, 1); err == nil || strings.Contains(err.Error(), "127.0.0.1") {
		t.Errorf("dead Redis: %v; want an error naming no address", err)
	}
}

// TestRedisWaitReplicas: with WaitReplicas the reservation is followed by
// WAIT on the same connection; a Redis without enough replicas makes the
// reservation fail (ErrUnavailable, after the WAIT timeout: its cost there)
// and the record stays bound to its mode; a conflict does not wait.
func TestRedisWaitReplicas(t *testing.T) {
	url := requireRedis(t)
	prefix := uniquePrefix(t)
	rawRedis(t, url, prefix)
	r, err := NewRedis(RedisOptions{URL: url, KeyPrefix: prefix, TTL: time.Minute, OpTimeout: 2 * time.Second,
		WaitReplicas: 16, WaitTimeout: 150 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	k := key("t-wait", "m-wait")
	start := time.Now()
	_, err = r.Reserve(context.Background(), k, "inline")
	took := time.Since(start)
	if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "replicas did not acknowledge") {
		t.Fatalf("reserve with WAIT 16 on a Redis without 16 replicas: %v; want ErrUnavailable", err)
	}
	if took < 150*time.Millisecond {
		t.Errorf("reserve took %v; WAIT must wait its timeout", took)
	}
	start = time.Now()
	if _, err := r.Reserve(context.Background(), k, "on_demand"); err != ErrConflict {
		t.Errorf("other mode after an unacknowledged reservation: %v; want ErrConflict", err)
	}
	if took := time.Since(start); took > 100*time.Millisecond {
		t.Errorf("a conflict waited %v", took)
	}
	// WAIT 0 replicas answers at once: the reservation succeeds.
	r0, err := NewRedis(RedisOptions{URL: url, KeyPrefix: prefix, TTL: time.Minute, WaitReplicas: 1, WaitTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer r0.Close()
	r0.waitReplicas = 0 // the pipeline path with a WAIT that needs nobody
	if res, err := r0.reserveAndWait(context.Background(), r0.keys(key("t-wait2", "m-wait2")), []any{"inline", int64(60000), "g1", "g2"}); err != nil || len(res) != 3 {
		t.Errorf("reserve and WAIT 0: %v %v", res, err)
	}
}
