package mcpserver

import (
	"context"
	"errors"
	"strconv"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/bailinghub/knowledge-sidecar/hostclient"
	"github.com/bailinghub/knowledge-sidecar/protocol"
)

// Knowledge is the sidecar's knowledge service as the tools call it in
// process (the /knowledge/mcp endpoint of `serve`): a protocol request's
// JSON body in, the 200 answer's JSON out. The caller (bearer, route) travels
// in ctx, put there by the edge. An error that has a Refusal method
// (knowledge.Error) is the protocol's refusal and becomes the tool error
// naming its code; any other error means knowledge is unavailable.
// A Knowledge that is also a Recorder audits each tool call as one event.
type Knowledge interface {
	Search(ctx context.Context, body []byte) ([]byte, error)
	Read(ctx context.Context, body []byte) ([]byte, error)
}

// refuser is an error in its wire form (knowledge.Error.Refusal): the one
// encoding of a knowledge error, shared with the edge's HTTP answers.
type refuser interface {
	Refusal() protocol.Refusal
}

// The JSON work on one knowledge_read tool call served in process (no near),
// counting each time a request or an answer is encoded or decoded whole:
//
//	in: the SDK decodes the arguments once (for the schema; toolArgs is a
//	  copy of them); the protocol request is encoded and the service
//	  decodes it (the service's one entry, shared with the HTTP edge).
//	out: the service encodes the answer once; the tool decodes it once to
//	  write the text for the model; structuredContent is that JSON with the
//	  note spliced in (withNote), not encoded again; the SDK frames the
//	  result and the JSON-RPC message.
//	refusal: no error body is encoded or decoded (refuser is a value).
//
// BenchmarkInProcessRead measures the call.

// ask sends a protocol request to endpoint (hostclient.Search, Read or
// Capabilities) through the Backend or, in process, the Knowledge, and
// returns the 200 answer's body; fail is the isError result of a refusal
// or of a service that could not be asked; err only the context's error.
func (c *caller) ask(ctx context.Context, endpoint string, body []byte) (raw []byte, fail *mcp.CallToolResult, err error) {
	if c.k != nil {
		return c.inProcess(ctx, endpoint, body)
	}
	res, err := c.b.Call(ctx, endpoint, body)
	if err != nil {
		if ctx.Err() != nil {
			return nil, nil, ctx.Err()
		}
		c.log.Warn("knowledge call failed", "endpoint", endpoint, "err", err)
		return nil, toolError(protocol.CodeUnavailable, "the knowledge service could not be reached", ""), nil
	}
	if res.Status != 200 {
		return nil, answerError(res), nil
	}
	return res.Body, nil, nil
}

// inProcess is ask against the Knowledge.
func (c *caller) inProcess(ctx context.Context, endpoint string, body []byte) ([]byte, *mcp.CallToolResult, error) {
	var out []byte
	var err error
	switch endpoint {
	case hostclient.Search:
		out, err = c.k.Search(ctx, body)
	case hostclient.Read:
		out, err = c.k.Read(ctx, body)
	default:
		err = errors.New("mcpserver: no in-process endpoint " + endpoint)
	}
	if err == nil {
		return out, nil, nil
	}
	var r refuser
	if errors.As(err, &r) {
		ref := r.Refusal()
		retry := ""
		if ref.RetryAfter > 0 {
			retry = strconv.Itoa(ref.RetryAfter)
		}
		return nil, toolError(ref.Code, ref.Message, retry), nil
	}
	if ctx.Err() != nil {
		return nil, nil, ctx.Err()
	}
	c.log.Warn("knowledge call failed", "endpoint", endpoint, "err", err)
	return nil, toolError(protocol.CodeUnavailable, "Knowledge is temporarily unavailable.", ""), nil
}
