package fakecore_test

import (
	"encoding/json"
	"os"
	"testing"

	"github.com/bailinghub/knowledge-sidecar/test/fakecore"
)

// chunkVectors is testdata/chunk-vectors.json: inputs and outputs of Core
// 0.3.4's own chunker, run unmodified (copied from the shared Core facts).
type chunkVectors struct {
	Cases []struct {
		Name          string   `json:"name"`
		Document      string   `json:"document"`
		StoredContent *string  `json:"stored_content"`
		Chunks        []string `json:"chunks"`
	} `json:"cases"`
}

func loadChunkVectors(t *testing.T) chunkVectors {
	t.Helper()
	raw, err := os.ReadFile("testdata/chunk-vectors.json")
	if err != nil {
		t.Fatal(err)
	}
	var v chunkVectors
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatal(err)
	}
	if len(v.Cases) < 30 {
		t.Fatalf("got %d chunk vector cases; want the full file", len(v.Cases))
	}
	return v
}

// TestChunksMatchCoreVectors: every case of Core's own chunker output is
// reproduced exactly. Chunks takes the stored content (bz_kb_docs.content,
// after Core's ingest sanitization), which is stored_content when the case
// has one.
func TestChunksMatchCoreVectors(t *testing.T) {
	for _, c := range loadChunkVectors(t).Cases {
		t.Run(c.Name, func(t *testing.T) {
			in := c.Document
			if c.StoredContent != nil {
				in = *c.StoredContent
			}
			got := fakecore.Chunks(in)
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
