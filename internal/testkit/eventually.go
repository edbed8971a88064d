package testkit

import (
	"runtime"
	"testing"
	"time"
)

// Eventually polls cond until it is true, or fails the test with what once
// the bound passes (the condition last, as a closure reads best). It is for states that have no event to wait on (a
// listener closing, a metric the edge records just after the answer went
// out, a process starting); where a channel can be waited on, wait on it.
func Eventually(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	if !Poll(within, cond) {
		t.Fatalf("%s: not true within %v", what, within)
	}
}

// Poll reports whether cond became true within the bound, checking it every
// few milliseconds. Eventually is Poll that fails the test.
func Poll(within time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(within)
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		runtime.Gosched()
		<-tick.C
	}
	return true
}
