package knowledge_test

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bailinghub/knowledge-sidecar/audit"
	"github.com/bailinghub/knowledge-sidecar/corefacts"
	"github.com/bailinghub/knowledge-sidecar/knowledge"
)

// benchmarkSearchAudit is BenchmarkServiceSearch with the disclosure audit
// off (nil) or writing each event to a JSON Lines file, with the query's
// HMAC: the audit's CPU share of a whole search (docs/audit.md, README
// performance). Compare the pair with benchstat.
func benchmarkSearchAudit(b *testing.B, on bool) {
	var a knowledge.Auditor
	if on {
		l, err := audit.Open(audit.Options{File: filepath.Join(b.TempDir(), "audit.jsonl"), QueryKey: bytes.Repeat([]byte("k"), 32)})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { l.Close() })
		a = l
	}
	svc := knowledge.NewBenchService(b, a)
	ctx := context.Background()
	route, _ := corefacts.ParseRouteKey(knowledge.BenchRoute)
	b.ReportAllocs()
	for b.Loop() {
		out, err := svc.Search(ctx, knowledge.BenchToken, route, strings.NewReader(knowledge.BenchQuery))
		if err != nil || !bytes.Contains(out, []byte(`"hints":[{`)) {
			b.Fatalf("got %v, %s; want hints", err, out)
		}
	}
}

func BenchmarkSearchAuditOff(b *testing.B) { benchmarkSearchAudit(b, false) }
func BenchmarkSearchAuditOn(b *testing.B)  { benchmarkSearchAudit(b, true) }
