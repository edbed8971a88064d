//go:build race

package proxy

// raceAllocs: the race detector's instrumentation allocates on its own.
const raceAllocs = 2
