package mcpserver

import (
	"context"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/bailinghub/knowledge-sidecar/hostclient"
)

// fakeBackend answers every call with a function of its endpoint and body.
type fakeBackend func(endpoint string, body []byte) (*hostclient.Response, error)

func (f fakeBackend) Call(_ context.Context, endpoint string, body []byte) (*hostclient.Response, error) {
	return f(endpoint, body)
}

// connect serves New(o) to the SDK's client over in-memory transports.
func connect(t *testing.T, o Options) *mcp.ClientSession {
	t.Helper()
	if o.Version == "" {
		o.Version = "test"
	}
	srv, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	st, ct := mcp.NewInMemoryTransports()
	ss, err := srv.Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test-host", Version: "1"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cs.Close(); _ = ss.Wait() })
	return cs
}
