// Command bench is the side-by-side load tool of issue 6: it measures what
// the sidecar costs on top of a direct connection to Core, on this machine,
// in one run.
//
//	go run ./test/bench --quick                 # well under a minute
//	go run ./test/bench --out bench.json        # the fuller run
//
// It starts its own processes, all on 127.0.0.1 with kernel-chosen ports:
//
//   - upstream: a Core double (canned 1 KiB / 10 KiB / 64 KiB JSON, SSE,
//     canned 10 KiB / 256 KiB turn contexts, and the fake Core of
//     internal/fakecore for identity, route gate and /kb/search);
//   - sidecar: the real proxy.Server with knowledge features over that
//     upstream, its catalog a MariaDB database made for the run on the
//     server of KS_TEST_MYSQL_DSN and seeded with the same documents
//     (--catalog sql, the default, as in production; --catalog mem: the
//     in-memory twin);
//   - revproxy: a bare, tuned httputil.ReverseProxy (the baseline);
//   - nginx, when the nginx binary is installed (proxy_buffering off,
//     upstream keep-alive).
//
// The cpu section (--only cpu, issue 22) starts a lean stdlib proxy (the
// unit: httputil.ReverseProxy with pooled buffers, FlushInterval 0, no
// compression, HTTP/1.1) and a one-worker nginx, and reports each proxy's
// CPU per request (its own utime+stime over the requests it served, closed
// loop, interleaved rounds) and the sidecar's search, read and turn as
// multiples of one lean pass-through request, and the same search as a
// tools/call on the remote MCP endpoint as a multiple of the REST search
// (target 1.25×, issue 33); --cpu-variant adds sidecar
// children from another build (PGO on/off) or environment (GOGC).
//
// The tracing section (--only tracing) starts three more sidecars that
// differ only in tracing (off; on with OTEL_TRACES_SAMPLER=always_off; on
// with always_on), each exporting OTLP/HTTP to a sink in this process on
// 127.0.0.1, and compares their CPU per pass-through request.
//
// The Go children are this same binary re-executed in a serve-target mode
// (--serve-target=upstream|sidecar|revproxy|lean), so the load generator (vegeta
// as a library) never shares a process, a heap or a scheduler with the
// server it measures; it still shares the machine's cores, which is why
// only ratios and deltas measured in interleaved A/B pairs are reported.
//
// Nothing here is run by `go test`; docs/performance.md explains every
// number and records the latest table.
package main
