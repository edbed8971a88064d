package audit

import (
	"context"
	"io"
	"path/filepath"
	"strings"
	"testing"
)

// BenchmarkDisclose is one event of a three-document search with the query
// HMAC, written to a file (a write(2) per event) or to io.Discard (the
// encoding alone).
func BenchmarkDisclose(b *testing.B) {
	for _, sink := range []string{"file", "discard"} {
		b.Run(sink, func(b *testing.B) {
			o := Options{File: filepath.Join(b.TempDir(), "a.jsonl"), QueryKey: []byte(strings.Repeat("k", 32))}
			if sink == "discard" {
				o.File, o.Stdout = Stdout, io.Discard
			}
			l, err := Open(o)
			if err != nil {
				b.Fatal(err)
			}
			defer l.Close()
			d := sample()
			d.Documents = append(d.Documents, d.Documents[0], d.Documents[0])
			for i := range d.Documents {
				d.Documents[i].Page = false
			}
			d.Query, d.HasQuery = "refund window shipping carrier", true
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				if err := l.Disclose(ctx, d); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
