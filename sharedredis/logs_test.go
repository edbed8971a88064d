package sharedredis

import (
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestRedisLibraryLogsNothing runs a rate-limit Allow against a Redis that refuses
// connections in a child process (go-redis's default logger holds the
// stderr it found at start, so only a fresh process shows what it writes)
// and finds none of go-redis's own lines, nor the address, on its stderr.
func TestRedisLibraryLogsNothing(t *testing.T) {
	if addr := os.Getenv("KS_REDISLOG_CHILD_ADDR"); addr != "" {
		for _, mode := range []string{ModeSingle, ModeSentinel} {
			url := "redis://" + addr + "/0"
			if mode == ModeSentinel {
				url = "redis://" + addr + "?master_name=none"
			}
			c, err := New(Options{URL: url, Mode: mode})
			if err != nil {
				t.Fatalf("%s: %v", mode, err)
			}
			l, _ := c.Limiter("")
			_, _, err = l.Allow(context.Background(), "s", 1, 1)
			if !errors.Is(err, ErrUnavailable) {
				t.Fatalf("%s: Allow against a refused Redis: %v; want ErrUnavailable", mode, err)
			}
			_ = c.Close()
		}
		return
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // refused from here on (nothing listens)
	cmd := exec.Command(os.Args[0], "-test.run=^TestRedisLibraryLogsNothing$", "-test.count=1")
	cmd.Env = append(os.Environ(), "KS_REDISLOG_CHILD_ADDR="+addr)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("child: %v\n%s\n%s", err, out, stderr.String())
	}
	if !strings.Contains(string(out), "PASS") {
		t.Fatalf("child did not pass:\n%s", out)
	}
	for _, leak := range []string{"redis:", addr} {
		if strings.Contains(stderr.String(), leak) || strings.Contains(string(out), leak) {
			t.Errorf("the child's output has %q:\nstdout:\n%s\nstderr:\n%s", leak, out, stderr.String())
		}
	}
}
