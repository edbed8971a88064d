package mcpserver

import (
	"context"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// DrainOnEOF wraps a transport so that when the host closes its end (stdin
// reaches EOF) the calls already received are answered before the session
// ends, for at most grace. Without it the SDK cancels in-flight calls at EOF,
// so a host that writes a call and closes stdin would get no answer.
//
// The wrapper hides the stdio connection's unexported session hook, whose
// only use is refusing JSON-RPC batches from hosts that negotiated protocol
// 2025-06-18 or later; such batches are answered instead.
func DrainOnEOF(t mcp.Transport, grace time.Duration) mcp.Transport {
	return drainTransport{t, grace}
}

type drainTransport struct {
	mcp.Transport
	grace time.Duration
}

func (d drainTransport) Connect(ctx context.Context) (mcp.Connection, error) {
	c, err := d.Transport.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return &drainConn{Connection: c, grace: d.grace, pending: map[any]bool{}}, nil
}

type drainConn struct {
	mcp.Connection
	grace time.Duration

	mu      sync.Mutex
	pending map[any]bool  // ids of calls read and not yet answered
	idle    chan struct{} // closed when pending becomes empty; nil while empty
}

func (c *drainConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	msg, err := c.Connection.Read(ctx)
	if err != nil {
		c.waitIdle(ctx)
		return nil, err
	}
	if req, ok := msg.(*jsonrpc.Request); ok && req.ID.IsValid() {
		c.mu.Lock()
		if len(c.pending) == 0 {
			c.idle = make(chan struct{})
		}
		c.pending[req.ID.Raw()] = true
		c.mu.Unlock()
	}
	return msg, nil
}

func (c *drainConn) Write(ctx context.Context, msg jsonrpc.Message) error {
	err := c.Connection.Write(ctx, msg)
	if res, ok := msg.(*jsonrpc.Response); ok {
		c.mu.Lock()
		if c.pending[res.ID.Raw()] {
			delete(c.pending, res.ID.Raw())
			if len(c.pending) == 0 {
				close(c.idle)
				c.idle = nil
			}
		}
		c.mu.Unlock()
	}
	return err
}

// waitIdle blocks until every call read has been answered, grace passes or
// ctx ends.
func (c *drainConn) waitIdle(ctx context.Context) {
	c.mu.Lock()
	idle := c.idle
	c.mu.Unlock()
	if idle == nil {
		return
	}
	t := time.NewTimer(c.grace)
	defer t.Stop()
	select {
	case <-idle:
	case <-t.C:
	case <-ctx.Done():
	}
}
