package sharedredis

import (
	"context"
	"crypto/tls"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bailinghub/knowledge-sidecar/internal/testkit"
	"github.com/bailinghub/knowledge-sidecar/internal/testkit/testdb"
)

func TestMain(m *testing.M) { testkit.Main(m) }

// testClient is New(o), closed when the test ends.
func testClient(t *testing.T, o Options) *Client {
	t.Helper()
	c, err := New(o)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestRateKeys: the rate-limit key is one key per session (a tag of its
// own), and its hash is the one the limiter had in the ledger package (a
// change orphans every bucket of a running fleet).
func TestRateKeys(t *testing.T) {
	if !strings.Contains(DefaultRateKeyPrefix, "ratelimit") || strings.ContainsAny(DefaultRateKeyPrefix, "{}") {
		t.Errorf("rate key prefix %q", DefaultRateKeyPrefix)
	}
	l := &Limiter{prefix: DefaultRateKeyPrefix}
	if got, want := l.key("session-1"), DefaultRateKeyPrefix+"{111541ba9447f03d}"; got != want {
		t.Errorf("key: got %q; want %q", got, want)
	}
}

func TestNewRejectsBadURLWithoutEchoingIt(t *testing.T) {
	tests := []struct{ name, url string }{
		{"empty", ""},
		{"blank", "   "},
		{"wrong scheme", "http://user:hunter2@cache.internal:6379/0"},
		{"bad db number", "redis://:hunter2@cache.internal:6379/notanumber"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := New(Options{URL: tc.url})
			if err == nil {
				t.Fatal("got nil error; want an invalid url error")
			}
			for _, s := range []string{"hunter2", "cache.internal", "notanumber"} {
				if strings.Contains(err.Error(), s) {
					t.Fatalf("error %q contains %q", err, s)
				}
			}
		})
	}
}

// TestParseURLModes: each mode reads its own URL form; errors never
// quote the URL (it may carry a password).
func TestParseURLModes(t *testing.T) {
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
		err := ParseURL(tc.mode, tc.url)
		if (err == nil) != tc.ok {
			t.Errorf("mode %q: ok=%v, err %v", tc.mode, tc.ok, err)
		}
		if err != nil && (strings.Contains(err.Error(), pw) || strings.Contains(err.Error(), "10.0.0")) {
			t.Errorf("error quotes the URL: %v", err)
		}
	}
}

// TestTLSExplicit: rediss:// gets the same explicit tls.Config in
// every mode (at least TLS 1.2, the CA file's roots), whatever the URL
// parsers' defaults; a CA file with redis:// or an unreadable one is an
// error.
func TestTLSExplicit(t *testing.T) {
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
		r, err := New(Options{URL: u, Mode: mode})
		if err != nil {
			t.Fatalf("%s: %v", mode, err)
		}
		var tc *tls.Config
		switch c := r.rdb.(type) {
		case *redis.Client:
			tc = c.Options().TLSConfig
		case *redis.ClusterClient:
			tc = c.Options().TLSConfig
		}
		r.Close()
		if tc == nil || tc.MinVersion != tls.VersionTLS12 {
			t.Errorf("%s: TLS config %+v; want MinVersion TLS 1.2", mode, tc)
		}
		if _, err := New(Options{URL: u, Mode: mode, CAFile: bad}); err == nil || strings.Contains(err.Error(), "127.0.0.1") {
			t.Errorf("%s: bad CA file: %v; want an error naming no address", mode, err)
		}
		plain := strings.Replace(u, "rediss", "redis", 1)
		if _, err := New(Options{URL: plain, Mode: mode, CAFile: bad}); err == nil {
			t.Errorf("%s: a CA file with redis:// accepted", mode)
		}
		r, err = New(Options{URL: plain, Mode: mode})
		if err != nil {
			t.Fatal(err)
		}
		if c, ok := r.rdb.(*redis.Client); ok && c.Options().TLSConfig != nil {
			t.Errorf("%s: redis:// has TLS on", mode)
		}
		r.Close()
	}
}

// TestLimiterGCRA: the shared bucket admits the burst at once, then
// one request per 1/rps, and its Retry-After says when; two clients (two
// replicas) draw from one bucket per session.
func TestLimiterGCRA(t *testing.T) {
	url := testdb.RedisURL(t)
	prefix := testdb.RedisPrefix(t)
	testdb.RawRedis(t, url, "rate:"+prefix)
	a, b := testClient(t, Options{URL: url, OpTimeout: 5 * time.Second}), testClient(t, Options{URL: url, OpTimeout: 5 * time.Second})
	la, err := a.Limiter(prefix)
	if err != nil {
		t.Fatal(err)
	}
	lb, err := b.Limiter(prefix)
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
	dead, err := New(Options{URL: "redis://127.0.0.1:1/0", DialTimeout: 200 * time.Millisecond, OpTimeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer dead.Close()
	ld, _ := dead.Limiter("")
	if _, _, err := ld.Allow(ctx, "s", 1, 1); err == nil || strings.Contains(err.Error(), "127.0.0.1") {
		t.Errorf("dead Redis: %v; want an error naming no address", err)
	}
}
