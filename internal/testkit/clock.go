package testkit

import (
	"sync"
	"time"
)

// Clock is a manual clock: Now returns the time it was set to until a test
// moves it. It is safe for concurrent use (the code under test reads it from
// its own goroutines). Pass its Now method where a func() time.Time is
// injected.
type Clock struct {
	mu  sync.Mutex
	now time.Time
}

// NewClock returns a Clock standing at start.
func NewClock(start time.Time) *Clock { return &Clock{now: start} }

// Now is the clock's current time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock forward by d.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}
