package sidecar

import "runtime/debug"

// DefaultGCPercent is the garbage collector's target the sidecar runs with
// unless GOGC is set: 200, not Go's 100. Measured side by side in the load
// tool (docs/performance.md, "Decisions that shaped the numbers"): 0.92×
// the CPU per 1 KiB pass-through request, 0.83× per search, 0.86× per
// read, for +0.7 MiB of peak RSS; the memory limit the sidecar always sets
// where it can (serve's applyMemoryLimit) still bounds the heap.
const DefaultGCPercent = 200

// ApplyGCPercent sets the collector's target: GOGC when the environment
// has it (the runtime applied it already), else DefaultGCPercent. It
// returns the target and where it came from.
func ApplyGCPercent(env func(string) (string, bool)) (int, string) {
	if v, ok := env("GOGC"); ok && v != "" {
		p := debug.SetGCPercent(-1)
		debug.SetGCPercent(p)
		return p, "GOGC"
	}
	debug.SetGCPercent(DefaultGCPercent)
	return DefaultGCPercent, "default"
}
