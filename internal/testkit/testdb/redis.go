package testdb

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bailinghub/knowledge-sidecar/internal/testkit"
)

// DefaultRedisURL is used when KS_TEST_REDIS_URL is not set.
const DefaultRedisURL = "redis://127.0.0.1:6379/15"

// RedisURL returns KS_TEST_REDIS_URL (or DefaultRedisURL) once Redis answers
// a PING. Unreachable: t.Fatal when CI=true, else t.Skip, counted for
// testkit.Main's line.
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
	testkit.RequireService(t, "Redis at KS_TEST_REDIS_URL", c.Ping(ctx).Err())
	return u
}

// RedisPrefix returns a key prefix of the test's own on the test Redis
// (KS_TEST_REDIS_URL or DefaultRedisURL) and deletes every key under it when
// the test ends, so tests that share the Redis never see each other's keys.
func RedisPrefix(t testing.TB) string {
	t.Helper()
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	prefix := "ks:test:" + hex.EncodeToString(b[:]) + ":"
	t.Cleanup(func() {
		u := os.Getenv("KS_TEST_REDIS_URL")
		if u == "" {
			u = DefaultRedisURL
		}
		opts, err := redis.ParseURL(u)
		if err != nil {
			return
		}
		c := redis.NewClient(opts)
		defer c.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		// redis_rate puts "rate:" in front of the shared rate limit's keys.
		for _, p := range []string{prefix, "rate:" + prefix} {
			if keys, _ := c.Keys(ctx, p+"*").Result(); len(keys) > 0 {
				c.Del(ctx, keys...)
			}
		}
	})
	return prefix
}

// RawRedis is a plain client on url for inspecting keys; it deletes every
// key under prefix when the test ends.
func RawRedis(t testing.TB, url, prefix string) *redis.Client {
	t.Helper()
	opts, err := redis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(opts)
	t.Cleanup(func() {
		ctx := context.Background()
		keys, err := c.Keys(ctx, prefix+"*").Result()
		if err == nil && len(keys) > 0 {
			c.Del(ctx, keys...)
		}
		c.Close()
	})
	return c
}
