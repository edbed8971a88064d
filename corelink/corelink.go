// Package corelink holds the defaults of how the sidecar reaches Core that
// more than one layer applies: the pass-through (proxy), the Core client
// (coreclient) and the decisions' own bounds (knowledge, the native probe)
// cannot import one another, so the value each of them takes for a zero
// option is written here, once. Package config's Defaults maps them onto
// core.timeout, probe_interval, proxy.dial_timeout and
// proxy.max_idle_conns_per_host. A default only one package applies lives in
// that package. Standard library only; no I/O.
package corelink

import "time"

const (
	// Timeout bounds each call to Core: identity, route gate, retrieval and
	// the native-capabilities probe (core.timeout). The Core client's
	// transport also waits this long for Core's response headers.
	Timeout = 3 * time.Second
	// ProbeInterval is how long a native-detection verdict, and the Core
	// client's "system-info is absent", are held (probe_interval).
	ProbeInterval = 60 * time.Second
	// DialTimeout bounds connecting to Core, by the pass-through and the
	// Core client alike (proxy.dial_timeout).
	DialTimeout = 5 * time.Second
	// MaxIdleConnsPerHost sizes each keep-alive pool to Core: the
	// pass-through's and the Core client's (proxy.max_idle_conns_per_host).
	MaxIdleConnsPerHost = 256
)
