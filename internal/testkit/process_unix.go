//go:build unix

package testkit

import (
	"bytes"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// ChildPID waits (bounded) for a command to write a child's pid, one line,
// to file, and kills that child at cleanup; what names the wait.
func ChildPID(t testing.TB, file, what string) int {
	t.Helper()
	var n int
	Eventually(t, 10*time.Second, what, func() bool {
		raw, err := os.ReadFile(file)
		if err != nil || !bytes.HasSuffix(raw, []byte("\n")) {
			return false
		}
		n, err = strconv.Atoi(strings.TrimSpace(string(raw)))
		return err == nil
	})
	t.Cleanup(func() { _ = syscall.Kill(n, syscall.SIGKILL) })
	return n
}

// ProcessCPU is this process's user + system CPU time so far (getrusage):
// steadier than wall time on a shared machine, for benchmarks that report
// CPU per operation.
func ProcessCPU(tb testing.TB) time.Duration {
	tb.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
