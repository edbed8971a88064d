package mcpserver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
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

// scriptedConn is an mcp.Connection whose reads return a script.
type scriptedConn struct {
	mcp.Connection
	script []readResult
}

type readResult struct {
	msg jsonrpc.Message
	err error
}

func (c *scriptedConn) Read(context.Context) (jsonrpc.Message, error) {
	r := c.script[0]
	c.script = c.script[1:]
	return r.msg, r.err
}

// TestCheckedConnGoesOn: a message the SDK refuses while its reader still
// runs is answered and reading goes on; the end of the input still ends it.
func TestCheckedConnGoesOn(t *testing.T) {
	var out bytes.Buffer
	ping := &jsonrpc.Request{Method: "ping"}
	c := &checkedConn{
		Connection: &scriptedConn{script: []readResult{{nil, errors.New("batch contains previously seen request 7")}, {ping, nil}, {nil, io.EOF}}},
		r:          newFrameReader(io.NopCloser(strings.NewReader("")), &frameWriter{w: &out}),
	}
	if msg, err := c.Read(context.Background()); msg != ping || err != nil {
		t.Fatalf("got %v, %v; want the message after the refused one", msg, err)
	}
	if !strings.Contains(out.String(), `"id":null,"error":{"code":-32600`) {
		t.Errorf("answer %q; want an invalid request error with id null", out.String())
	}
	if _, err := c.Read(context.Background()); !errors.Is(err, io.EOF) {
		t.Errorf("got %v; want io.EOF to end the session", err)
	}
}
