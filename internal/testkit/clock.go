package testkit

import (
	"sync"
	"time"
)

// Clock is a manual clock: Now returns the time it was set to until a test
// moves it (or, from NewRunningClock, the real time plus the moves). It is safe for concurrent use (the code under test reads it from
// its own goroutines). Pass its Now method where a func() time.Time is
// injected.
type Clock struct {
	mu      sync.Mutex
	now     time.Time
	running time.Time // NewRunningClock: the real instant now was read at
}

// NewClock returns a Clock standing at start.
func NewClock(start time.Time) *Clock { return &Clock{now: start} }

// NewRunningClock returns a Clock that runs with the real clock, plus what
// Advance adds: for tests whose code also needs real time to pass between
// moves (a rate limiter refilling between a conformance run's calls).
func NewRunningClock() *Clock {
	now := time.Now()
	return &Clock{now: now, running: now}
}

// Now is the clock's current time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.running.IsZero() {
		return c.now.Add(time.Since(c.running))
	}
	return c.now
}

// Advance moves the clock forward by d.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}
