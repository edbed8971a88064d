package main

import (
	"log/slog"
	"math"
	"runtime/debug"
	"testing"
)

// TestApplyMemoryLimit: GOMEMLIMIT wins, then proxy.memory_limit, then 90 %
// of the cgroup's limit; without any, no limit is set.
func TestApplyMemoryLimit(t *testing.T) {
	prev := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetMemoryLimit(prev) })
	log := slog.New(slog.DiscardHandler)
	noEnv := func(string) (string, bool) { return "", false }
	cgroup := func(n int64) func() int64 { return func() int64 { return n } }
	for _, tc := range []struct {
		name       string
		configured int64
		env        func(string) (string, bool)
		cgroup     int64
		want       int64
		source     string
	}{
		{"configured", 200 << 20, noEnv, 256 << 20, 200 << 20, "proxy.memory_limit"},
		{"from the cgroup", 0, noEnv, 256 << 20, 256 << 20 / 10 * 9, "cgroup"},
		{"none", 0, noEnv, 0, math.MaxInt64, "none"},
		{"GOMEMLIMIT wins", 200 << 20, func(k string) (string, bool) { return "123MiB", k == "GOMEMLIMIT" }, 256 << 20, prev, "GOMEMLIMIT"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			debug.SetMemoryLimit(prev)
			got, source := applyMemoryLimit(log, tc.configured, tc.env, cgroup(tc.cgroup))
			if got != tc.want || source != tc.source {
				t.Errorf("got %d from %s; want %d from %s", got, source, tc.want, tc.source)
			}
			if tc.source != "none" && debug.SetMemoryLimit(-1) != tc.want {
				t.Errorf("runtime limit: got %d; want %d", debug.SetMemoryLimit(-1), tc.want)
			}
		})
	}
}

func TestParseCgroupLimit(t *testing.T) {
	for in, want := range map[string]int64{"268435456\n": 268435456, "max\n": 0, "9223372036854771712\n": 0, "": 0, "-1": 0} {
		if got := parseCgroupLimit(in); got != want {
			t.Errorf("parseCgroupLimit(%q): got %d; want %d", in, got, want)
		}
	}
}
