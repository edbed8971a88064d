package testdb

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// DefaultRedisURL is used when KS_TEST_REDIS_URL is not set.
const DefaultRedisURL = "redis://127.0.0.1:6379/15"

// RedisURL returns KS_TEST_REDIS_URL (or DefaultRedisURL) once Redis answers
// a PING. Unreachable: t.Fatal when CI=true, else t.Skip.
func RedisURL(t testing.TB) string {
	t.Helper()
	u := os.Getenv("KS_TEST_REDIS_URL")
	if u == "" {
		u = DefaultRedisURL
	}
	opts, err := redis.ParseURL(u)
	if err != nil {
		t.Fatal("testdb: KS_TEST_REDIS_URL is not a valid redis url")
	}
	c := redis.NewClient(opts)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if err := c.Ping(ctx).Err(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("testdb: redis at KS_TEST_REDIS_URL unreachable (CI=true): %v", err)
		}
		t.Skipf("testdb: redis at KS_TEST_REDIS_URL unreachable, skipping: %v", err)
	}
	return u
}
