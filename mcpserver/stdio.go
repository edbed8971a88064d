package mcpserver

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"strconv"
	"sync"
	"sync/atomic"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// MaxFrameBytes bounds one JSON-RPC message read from stdin (one line,
// without its line ending). A longer line is answered with an invalid
// request error and its bytes are skipped without being kept. The tools'
// largest legitimate arguments are a few KiB.
const MaxFrameBytes = 1 << 20

// readChunk is the size of the buffer stdin is read through.
const readChunk = 64 << 10

// Stdio is the stdio transport of the mcp command: newline-delimited
// JSON-RPC read from in and written to out. Unlike the SDK's IOTransport
// alone, a malformed line does not end the session: every line is checked
// before the SDK sees it, and one that is not a JSON-RPC message is answered
// on out (parse error -32700 with id null for a line that is not JSON or not
// UTF-8, invalid request -32600 for the rest, with the request's id when it
// has a usable one) and skipped. A line over MaxFrameBytes is answered the
// same way and discarded as it is read, so memory stays bounded. Answers are
// written whole, between the SDK's own frames (out is written under a lock
// one frame per Write). out is not closed; in is closed with the session.
func Stdio(in io.ReadCloser, out io.Writer) mcp.Transport {
	return &stdioTransport{in: in, out: out}
}

type stdioTransport struct {
	in  io.ReadCloser
	out io.Writer
}

func (t *stdioTransport) Connect(ctx context.Context) (mcp.Connection, error) {
	w := &frameWriter{w: t.out}
	r := newFrameReader(t.in, w)
	// The checks above bound every frame; the SDK need not count again.
	c, err := (&mcp.IOTransport{Reader: r, Writer: w, MaxLineLength: -1}).Connect(ctx)
	if err != nil {
		return nil, err
	}
	return &checkedConn{Connection: c, r: r}, nil
}

// frameWriter serialises whole frames on the shared stdout: the SDK writes
// each message with one Write, and so does frameReader.
type frameWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (f *frameWriter) Write(p []byte) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.w.Write(p)
}

// Close leaves stdout open: the process may still write to it.
func (*frameWriter) Close() error { return nil }

// frameReader hands the SDK only lines that are JSON-RPC messages, each
// trimmed and ending in "\n", and answers the others itself.
type frameReader struct {
	src *bufio.Reader
	in  io.Closer
	out *frameWriter

	line   []byte // the frame being handed over
	off    int    // how much of line has been read
	buf    []byte // the line being read; at most MaxFrameBytes+2 bytes kept
	srcErr error  // the source's error, returned once the lines before it are done

	failed atomic.Bool // Read has returned an error: the SDK's reader has stopped
}

func newFrameReader(in io.ReadCloser, out *frameWriter) *frameReader {
	return &frameReader{src: bufio.NewReaderSize(in, readChunk), in: in, out: out}
}

func (r *frameReader) Read(p []byte) (int, error) {
	for r.off >= len(r.line) {
		if err := r.next(); err != nil {
			r.failed.Store(true)
			return 0, err
		}
	}
	n := copy(p, r.line[r.off:])
	r.off += n
	return n, nil
}

func (r *frameReader) Close() error { return r.in.Close() }

// next reads lines until one is to be handed over, answering the others.
func (r *frameReader) next() error {
	for {
		line, over, err := r.readLine()
		if err != nil {
			return err
		}
		var reply []byte
		if over {
			reply = errorFrame(nil, jsonrpc.CodeInvalidRequest, "invalid request: message longer than "+strconv.Itoa(MaxFrameBytes)+" bytes; discarded")
		} else {
			line, reply = checkFrame(line)
		}
		if reply != nil {
			if _, err := r.out.Write(reply); err != nil {
				return err
			}
		}
		if len(line) > 0 {
			r.line, r.off = append(line, '\n'), 0
			return nil
		}
	}
}

// readLine returns the next line without its line ending; over reports a
// line longer than MaxFrameBytes, whose bytes were skipped, not kept. A last
// line without "\n" is returned before the source's io.EOF.
func (r *frameReader) readLine() (line []byte, over bool, err error) {
	if r.srcErr != nil {
		return nil, false, r.srcErr
	}
	r.buf = r.buf[:0]
	for {
		chunk, err := r.src.ReadSlice('\n')
		if !over {
			if len(r.buf)+len(chunk) > MaxFrameBytes+2 { // +2: "\r\n"
				over, r.buf = true, r.buf[:0]
			} else {
				r.buf = append(r.buf, chunk...)
			}
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if err != nil {
			if len(r.buf) == 0 && !over {
				return nil, false, err
			}
			r.srcErr = err
		}
		line = bytes.TrimSuffix(bytes.TrimSuffix(r.buf, []byte("\n")), []byte("\r"))
		return line, over || len(line) > MaxFrameBytes, nil
	}
}

// checkFrame judges one line. It returns the frame to hand to the SDK (nil:
// none) and the answer to write (nil: none). A blank line is skipped. A batch
// is handed over without its bad elements, which are answered in an array of
// their own.
func checkFrame(line []byte) (frame, reply []byte) {
	trimmed := bytes.TrimSpace(line)
	switch {
	case len(trimmed) == 0:
		return nil, nil
	case !utf8.Valid(trimmed):
		return nil, errorFrame(nil, jsonrpc.CodeParseError, "parse error: the message is not UTF-8")
	case !json.Valid(trimmed):
		return nil, errorFrame(nil, jsonrpc.CodeParseError, "parse error: the message is not JSON")
	case trimmed[0] == '{':
		if id, problem := checkMessage(trimmed); problem == skipMessage {
			return nil, nil
		} else if problem != "" {
			return nil, errorFrame(id, jsonrpc.CodeInvalidRequest, "invalid request: "+problem)
		}
		return trimmed, nil
	case trimmed[0] != '[':
		return nil, errorFrame(nil, jsonrpc.CodeInvalidRequest, "invalid request: a JSON-RPC message is an object")
	}
	var elems []json.RawMessage
	if err := json.Unmarshal(trimmed, &elems); err != nil || len(elems) == 0 {
		return nil, errorFrame(nil, jsonrpc.CodeInvalidRequest, "invalid request: an empty batch")
	}
	var good, bad [][]byte
	seen := map[jsonrpc.ID]bool{}
	for _, e := range elems {
		id, problem := checkMessage(e)
		if problem == skipMessage {
			continue
		}
		if problem == "" && id != nil && isRequest(e) {
			if key := makeID(id); seen[key] {
				problem = "the batch uses this id twice"
			} else {
				seen[key] = true
			}
		}
		if problem != "" {
			bad = append(bad, bytes.TrimSuffix(errorFrame(id, jsonrpc.CodeInvalidRequest, "invalid request: "+problem), []byte("\n")))
			continue
		}
		good = append(good, e)
	}
	if len(bad) > 0 {
		reply = append(append([]byte("["), bytes.Join(bad, []byte(","))...), "]\n"...)
	}
	switch {
	case len(good) == 0:
		return nil, reply
	case len(bad) == 0:
		return trimmed, nil
	}
	return append(append([]byte("["), bytes.Join(good, []byte(","))...), ']'), reply
}

// checkMessage judges one JSON-RPC message (a request, a notification, or a
// response to the server's own request). It returns the message's id when
// it is usable in an answer (a string or a number) and what is wrong ("":
// nothing).
func checkMessage(raw []byte) (id json.RawMessage, problem string) {
	var m map[string]json.RawMessage // exact member names, as the SDK reads them
	if len(raw) == 0 || raw[0] != '{' || json.Unmarshal(raw, &m) != nil {
		return nil, "a JSON-RPC message is an object"
	}
	if v, ok := m["id"]; ok && v[0] != 'n' { // null is no id
		if v[0] != '"' && v[0] != '-' && (v[0] < '0' || v[0] > '9') {
			return nil, "id must be a string or a number"
		}
		id = v
	}
	if version, ok := m["jsonrpc"]; !ok || string(version) != `"2.0"` {
		return id, `"jsonrpc" must be "2.0"`
	}
	method, isReq := m["method"]
	switch {
	case isReq && method[0] != '"':
		return id, "method must be a string"
	case isReq && m["params"] != nil && !bytes.ContainsAny(m["params"][:1], "{[n"): // null: none
		return id, "params must be an object or an array"
	case !isReq && id == nil && m["result"] == nil && m["error"] != nil:
		return nil, skipMessage
	case !isReq && id == nil:
		return nil, "a request needs a method; a response needs an id"
	case !isReq && (m["result"] == nil) == (m["error"] == nil):
		return id, "a response has either result or error"
	case !isReq && m["error"] != nil && m["error"][0] != '{':
		return id, "a response's error must be an object"
	}
	// Whatever the checks above let through must also be a message to the
	// SDK (its decoder also limits the nesting depth), or it would end the
	// session.
	if _, err := jsonrpc.DecodeMessage(raw); err != nil {
		return id, "not a JSON-RPC message"
	}
	return id, ""
}

// skipMessage is checkMessage's verdict on an error answer without an id:
// the peer could not read something it was sent. It is dropped, as the SDK
// cannot take it and an answer to an answer is never sent.
const skipMessage = "skip"

func isRequest(raw []byte) bool {
	var m struct {
		Method json.RawMessage `json:"method"`
	}
	return json.Unmarshal(raw, &m) == nil && m.Method != nil
}

// makeID is the SDK's id for a raw string or number id (as it compares them).
func makeID(raw json.RawMessage) jsonrpc.ID {
	var v any
	_ = json.Unmarshal(raw, &v)
	id, _ := jsonrpc.MakeID(v)
	return id
}

// errorFrame is a JSON-RPC error answer line; id nil is "id": null.
func errorFrame(id json.RawMessage, code int, message string) []byte {
	if id == nil {
		id = json.RawMessage("null")
	}
	b, _ := json.Marshal(struct {
		JSONRPC string          `json:"jsonrpc"`
		ID      json.RawMessage `json:"id"`
		Error   struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}{JSONRPC: "2.0", ID: id, Error: struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	}{code, message}})
	return append(b, '\n')
}

// checkedConn is the SDK's connection over frameReader. The lines handed
// over are messages the SDK decodes, but it can still refuse one for the
// session's state (a batch reusing the id of a call still in flight); that
// error would end the session, so it is answered instead and reading goes
// on. Errors of the input itself (end of file, a read error) still end it.
type checkedConn struct {
	mcp.Connection
	r *frameReader
}

func (c *checkedConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	for {
		msg, err := c.Connection.Read(ctx)
		if err == nil || ctx.Err() != nil || c.r.failed.Load() ||
			errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, mcp.ErrConnectionClosed) {
			return msg, err
		}
		if _, werr := c.r.out.Write(errorFrame(nil, jsonrpc.CodeInvalidRequest, "invalid request: refused by the session")); werr != nil {
			return nil, werr
		}
	}
}
