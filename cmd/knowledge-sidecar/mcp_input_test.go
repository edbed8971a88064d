package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/bailinghub/knowledge-sidecar/internal/testkit"
	"github.com/bailinghub/knowledge-sidecar/mcpserver"
)

// rawMCP is `knowledge-sidecar mcp` in process on pipes, driven line by line
// as a host that writes anything would.
type rawMCP struct {
	stdin  *io.PipeWriter
	lines  chan []byte // stdout, one line each
	done   chan int
	stderr testkit.Buffer
}

func startRawMCP(t *testing.T, args ...string) *rawMCP {
	t.Helper()
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	p := &rawMCP{stdin: inW, lines: make(chan []byte, 64), done: make(chan int, 1)}
	go func() {
		code := cmdMCP(args, inR, outW, &p.stderr)
		_ = outW.Close()
		p.done <- code
	}()
	go func() {
		defer close(p.lines)
		sc := bufio.NewScanner(outR)
		sc.Buffer(nil, 4<<20)
		for sc.Scan() {
			p.lines <- append([]byte(nil), sc.Bytes()...)
		}
	}()
	t.Cleanup(func() { _ = inW.Close(); _ = outR.Close() })
	return p
}

// send writes one line (a newline is added).
func (p *rawMCP) send(t *testing.T, line string) {
	t.Helper()
	if _, err := io.WriteString(p.stdin, line+"\n"); err != nil {
		t.Fatalf("writing to the server's stdin: %v (the session ended?)", err)
	}
}

// next is the next line the server writes, within a bound.
func (p *rawMCP) next(t *testing.T, after string) []byte {
	t.Helper()
	select {
	case l, ok := <-p.lines:
		if !ok {
			t.Fatalf("after %.80q: stdout closed; the session ended (stderr: %s)", after, p.stderr.String())
		}
		return l
	case <-time.After(10 * time.Second):
		t.Fatalf("after %.80q: no answer within 10 s", after)
		return nil
	}
}

// TestMCPMalformedFrames: every malformed line a host (or anything writing to
// the server's stdin) can send is answered with a JSON-RPC error, and the
// session goes on: a tools/list after all of them is answered.
func TestMCPMalformedFrames(t *testing.T) {
	t.Setenv(tokenEnv, "bha_x")
	p := startRawMCP(t, "--url", closedURL(t), "--route", "demo")
	p.send(t, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"x","version":"1"}}}`)
	var init testkit.RPCAnswer
	if err := json.Unmarshal(p.next(t, "initialize"), &init); err != nil || init.Error != nil || string(init.ID) != "1" {
		t.Fatalf("initialize: %+v, %v; want a result", init, err)
	}
	p.send(t, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)

	huge := strings.Repeat("a", 16<<20)
	deep := `{"jsonrpc":"2.0","id":30,"method":"tools/list","params":{"x":` + strings.Repeat("[", 5000) + strings.Repeat("]", 5000) + `}}`
	cases := []struct {
		name, line string
		code       int
		id         string // the id the answer must carry
	}{
		{"not json", `not json`, -32700, "null"},
		{"open brace", `{`, -32700, "null"},
		{"empty batch", `[]`, -32600, "null"},
		{"batch of a number", `[1]`, -32600, "null"},
		{"number", `1`, -32600, "null"},
		{"string", `"s"`, -32600, "null"},
		{"null", `null`, -32600, "null"},
		{"empty object", `{}`, -32600, "null"},
		{"jsonrpc 1.0", `{"jsonrpc":"1.0","id":1,"method":"tools/list"}`, -32600, "1"},
		{"jsonrpc missing", `{"id":2,"method":"tools/list"}`, -32600, "2"},
		{"object id", `{"jsonrpc":"2.0","id":{},"method":"x"}`, -32600, "null"},
		{"boolean id", `{"jsonrpc":"2.0","id":true,"method":"x"}`, -32600, "null"},
		{"no method, no result", `{"jsonrpc":"2.0","id":1}`, -32600, "1"},
		{"method not a string", `{"jsonrpc":"2.0","id":3,"method":7}`, -32600, "3"},
		{"params not structured", `{"jsonrpc":"2.0","id":4,"method":"tools/list","params":1}`, -32600, "4"},
		{"nested past the SDK's depth", deep, -32600, "30"},
		{"invalid UTF-8", "{\"jsonrpc\":\"2.0\",\"id\":5,\"method\":\"tools/list\",\"params\":{\"q\":\"\xff\xfe\"}}", -32700, "null"},
		{"16 MiB line", huge, -32600, "null"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p.send(t, tc.line)
			raw := p.next(t, tc.line)
			var ans testkit.RPCAnswer
			if bytes.HasPrefix(raw, []byte("[")) { // a batch is answered with an array
				var arr []testkit.RPCAnswer
				if err := json.Unmarshal(raw, &arr); err != nil || len(arr) != 1 {
					t.Fatalf("answer %s; want one error", raw)
				}
				ans = arr[0]
			} else if err := json.Unmarshal(raw, &ans); err != nil {
				t.Fatalf("answer %s is not JSON-RPC: %v", raw, err)
			}
			if ans.JSONRPC != "2.0" || ans.Error == nil || ans.Error.Code != tc.code || string(ans.ID) != tc.id {
				t.Errorf("answer %s; want error %d with id %s", raw, tc.code, tc.id)
			}
		})
	}

	// A batch with a good and a bad element: the good one is served.
	p.send(t, `[{"jsonrpc":"2.0","id":40,"method":"ping"},{"jsonrpc":"2.0","id":41}]`)
	answers := map[string]bool{}
	for range 2 {
		answers[string(p.next(t, "mixed batch"))] = true
	}
	if !answers[`[{"jsonrpc":"2.0","id":41,"error":{"code":-32600,"message":"invalid request: a response has either result or error"}}]`] ||
		!answers[`[{"jsonrpc":"2.0","id":40,"result":{}}]`] {
		t.Errorf("mixed batch: answers %v; want the ping's result and the bad element's error", answers)
	}

	// The host's own error answer without an id is dropped, not answered.
	p.send(t, `{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"parse error"}}`)

	// Trailing white space after a message is not malformed.
	p.send(t, `{"jsonrpc":"2.0","id":50,"method":"tools/list"}`+" \t")
	var list testkit.RPCAnswer
	raw := p.next(t, "tools/list")
	var tools struct {
		Tools []struct {
			Name string `json:"name"`
		} `json:"tools"`
	}
	if err := json.Unmarshal(raw, &list); err != nil || list.Error != nil || string(list.ID) != "50" || json.Unmarshal(list.Result, &tools) != nil || len(tools.Tools) != len(mcpserver.Tools()) {
		t.Fatalf("tools/list after the malformed lines: %s; want the tools", raw)
	}

	_ = p.stdin.Close()
	select {
	case code := <-p.done:
		if code != 0 {
			t.Errorf("exit code %d after stdin closed; want 0 (stderr: %s)", code, p.stderr.String())
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the MCP server did not exit within 5 s of stdin closing")
	}
}
