package mcpserver

import (
	"context"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/bailinghub/knowledge-sidecar/hostclient"
	"github.com/bailinghub/knowledge-sidecar/mcpserver/mcpservertest"
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
	return mcpservertest.Connect(t, srv)
}
