package fakecore_test

import (
	"testing"

	"github.com/bailinghub/knowledge-sidecar/internal/fakecore"
)

// TestChunksMatchCoreVectors: every case of Core's own chunker output
// (testdata/chunk-vectors.json, copied from the shared Core facts) is
// reproduced exactly. Chunks takes the stored content (bz_kb_docs.content,
// after Core's ingest sanitization), which is stored_content when the case
// has one.
func TestChunksMatchCoreVectors(t *testing.T) {
	cases, err := fakecore.LoadChunkVectors("testdata/chunk-vectors.json")
	if err != nil || len(cases) < 30 {
		t.Fatalf("got %d cases, %v; want the whole vector file", len(cases), err)
	}
	for _, c := range cases {
		t.Run(c.Name, func(t *testing.T) {
			got := fakecore.Chunks(c.Stored())
			if len(got) != len(c.Chunks) {
				t.Fatalf("got %d chunks %q; want %d %q", len(got), got, len(c.Chunks), c.Chunks)
			}
			for i := range got {
				if got[i] != c.Chunks[i] {
					t.Errorf("chunk %d:\n got %q\nwant %q", i, got[i], c.Chunks[i])
				}
			}
		})
	}
}
