package mcpserver

import (
	"bytes"
	"encoding/json"
	"io"
	"strings"
	"testing"
)

// repeatReader is n bytes of b, then the tail: a long line without holding it.
type repeatReader struct {
	b    byte
	n    int
	tail io.Reader
}

func (r *repeatReader) Read(p []byte) (int, error) {
	if r.n == 0 {
		return r.tail.Read(p)
	}
	k := min(len(p), r.n)
	for i := range k {
		p[i] = r.b
	}
	r.n -= k
	return k, nil
}

// TestFrameReaderBounded: a 16 MiB line is answered and skipped while the
// reader keeps at most MaxFrameBytes and a read chunk; the line after it is
// handed over whole.
func TestFrameReaderBounded(t *testing.T) {
	next := `{"jsonrpc":"2.0","id":2,"method":"tools/list"}`
	src := &repeatReader{b: 'a', n: 16 << 20, tail: strings.NewReader("\n" + next + "\n")}
	var out bytes.Buffer
	r := newFrameReader(io.NopCloser(src), &frameWriter{w: &out})
	got, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != next+"\n" {
		t.Errorf("handed over %.100q; want only the valid line", got)
	}
	if c := cap(r.buf); c > MaxFrameBytes+2+readChunk {
		t.Errorf("line buffer grew to %d bytes; want at most %d", c, MaxFrameBytes+2+readChunk)
	}
	var ans struct {
		ID    any `json:"id"`
		Error struct {
			Code int `json:"code"`
		} `json:"error"`
	}
	if err := json.Unmarshal(out.Bytes(), &ans); err != nil || ans.ID != nil || ans.Error.Code != -32600 {
		t.Errorf("answer %s; want one invalid request error with id null", out.Bytes())
	}
}
