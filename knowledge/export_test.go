package knowledge

import "testing"

// Exported for the external benchmarks (audit_bench_test.go), which import
// package audit (an import cycle from package knowledge's own tests).

// NewBenchService is newBenchService with auditor (nil: audit off).
func NewBenchService(b *testing.B, auditor Auditor) *Service {
	return newBenchService(b, func(o *Options) { o.Auditor = auditor })
}

const (
	BenchToken = tokA
	BenchRoute = routeKey
	BenchQuery = benchQuery
)
