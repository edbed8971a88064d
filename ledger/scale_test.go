package ledger

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/bailinghub/knowledge-sidecar/internal/testkit/testdb"
	"github.com/bailinghub/knowledge-sidecar/sharedredis"
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
}

// TestRedisWaitReplicas: with WaitReplicas the reservation is followed by
// WAIT on the same connection; a Redis without enough replicas makes the
// reservation fail (ErrUnavailable, after the WAIT timeout: its cost there)
// and the record stays bound to its mode; a conflict does not wait.
func TestRedisWaitReplicas(t *testing.T) {
	url := testdb.RedisURL(t)
	prefix := testdb.RedisPrefix(t)
	testdb.RawRedis(t, url, prefix)
	r, err := NewRedis(testClient(t, sharedredis.Options{URL: url, OpTimeout: 2 * time.Second}),
		RedisOptions{KeyPrefix: prefix, TTL: time.Minute, WaitReplicas: 16, WaitTimeout: 150 * time.Millisecond})
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
	r0, err := NewRedis(testClient(t, sharedredis.Options{URL: url}), RedisOptions{KeyPrefix: prefix, TTL: time.Minute, WaitReplicas: 1, WaitTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer r0.Close()
	r0.waitReplicas = 0 // the pipeline path with a WAIT that needs nobody
	if res, err := r0.reserveAndWait(context.Background(), r0.keys(key("t-wait2", "m-wait2")), []any{"inline", int64(60000), "g1", "g2"}); err != nil || len(res) != 3 {
		t.Errorf("reserve and WAIT 0: %v %v", res, err)
	}
}
