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
