package knowledge

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/bailinghub/knowledge-sidecar/corefacts"
	"github.com/bailinghub/knowledge-sidecar/internal/testkit"
	"github.com/bailinghub/knowledge-sidecar/protocol"
)

// BenchmarkSearchNormalized is a pooled search whose hit re-checks miss
// the memo (purged before each search: the first search after documents
// change), over the benchmark corpus ("shortcut": re-checked without
// building anything) and over the same documents each ending in "图"
// ("normalized": the shortcut does not apply, so each document a hit is
// checked against is normalized whole, stripSpace over 40 KiB). It is the
// request BenchmarkStripSpace's saving is a share of; a search whose
// re-checks are remembered runs no stripSpace at all.
func BenchmarkSearchNormalized(b *testing.B) {
	for _, mark := range []string{"shortcut", "normalized"} {
		b.Run(mark, func(b *testing.B) {
			svc := newBenchService(b, func(o *Options) {
				if mark == "shortcut" {
					return
				}
				cat := o.Catalog.(*benchCatalog)
				for id, d := range cat.docs {
					d.Content += "\n\n图"
					d.Revision = corefacts.Revision(d.Title, d.Content)
					cat.docs[id] = d
				}
			})
			ctx := context.Background()
			dst := make([]byte, 0, protocol.ReadMaxBytes)
			b.ReportAllocs()
			cpu0 := testkit.ProcessCPU(b)
			for b.Loop() {
				svc.rechecks.lru.Purge()
				out, err := svc.SearchInto(ctx, dst, tokA, testkit.RouteKey(routeKey), strings.NewReader(benchQuery))
				if err != nil || !bytes.Contains(out, []byte(`"hints":[{`)) {
					b.Fatalf("got %v, %s; want hints", err, out)
				}
			}
			reportCPU(b, cpu0)
		})
	}
}

// BenchmarkAnswerBuffer is a whole search and a whole 32 KiB read
// (BenchmarkServiceSearch, BenchmarkServiceRead) with the answer written
// into a pooled buffer, as the proxy's handlers do (proxy answerBuffers,
// "pooled"), and into a fresh one (Search, Read: "fresh"). Its read is also the
// request BenchmarkPlainEnd is a share of.
func BenchmarkAnswerBuffer(b *testing.B) {
	svc := newBenchService(b)
	ctx := context.Background()
	read := benchReadBody(b, svc)
	pool := sync.Pool{New: func() any { b := make([]byte, 0, protocol.ReadMaxBytes); return &b }}
	for _, op := range []struct {
		name string
		body string
		call func(context.Context, []byte, string, string, *strings.Reader) ([]byte, error)
	}{
		{"search", benchQuery, func(ctx context.Context, dst []byte, auth, route string, r *strings.Reader) ([]byte, error) {
			return svc.SearchInto(ctx, dst, auth, testkit.RouteKey(route), r)
		}},
		{"read", read, func(ctx context.Context, dst []byte, auth, route string, r *strings.Reader) ([]byte, error) {
			return svc.ReadInto(ctx, dst, auth, testkit.RouteKey(route), r)
		}},
	} {
		for _, mode := range []string{"pooled", "fresh"} {
			b.Run(op.name+"/"+mode, func(b *testing.B) {
				b.ReportAllocs()
				cpu0 := testkit.ProcessCPU(b)
				for b.Loop() {
					var buf *[]byte
					var dst []byte
					if mode == "pooled" {
						buf = pool.Get().(*[]byte)
						dst = *buf
					}
					out, err := op.call(ctx, dst, tokA, routeKey, strings.NewReader(op.body))
					if err != nil || len(out) < 100 {
						b.Fatalf("got %v, %d bytes", err, len(out))
					}
					if buf != nil {
						pool.Put(buf)
					}
				}
				reportCPU(b, cpu0)
			})
		}
	}
}
