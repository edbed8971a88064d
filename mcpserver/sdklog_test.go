package mcpserver

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/bailinghub/knowledge-sidecar/hostclient"
)

// syncBuffer is a log sink shared by the handler's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestSDKLogsAtDebug: the SDK's per-request session lines ("server session
// connected", "session initialized", …) are DEBUG records: a sidecar log at
// INFO shows none of them for stateless requests through the official
// client, and a DEBUG log still has them.
func TestSDKLogsAtDebug(t *testing.T) {
	for _, level := range []slog.Level{slog.LevelInfo, slog.LevelDebug} {
		t.Run(level.String(), func(t *testing.T) {
			var out syncBuffer
			log := slog.New(slog.NewJSONHandler(&out, &slog.HandlerOptions{Level: level}))
			h, err := NewHTTP(HTTPOptions{Version: "test", Logger: log, Backend: fakeBackend(func(string, []byte) (*hostclient.Response, error) {
				t.Error("no tool is called")
				return nil, io.EOF
			})})
			if err != nil {
				t.Fatal(err)
			}
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Method != http.MethodPost {
					w.WriteHeader(http.StatusMethodNotAllowed)
					return
				}
				body, err := io.ReadAll(io.LimitReader(r.Body, MaxHTTPBody))
				if err != nil {
					w.WriteHeader(http.StatusBadRequest)
					return
				}
				h.Serve(w, r, body)
			}))
			t.Cleanup(srv.Close)
			ctx := context.Background()
			tr := &mcp.StreamableClientTransport{Endpoint: srv.URL, DisableStandaloneSSE: true}
			cs, err := mcp.NewClient(&mcp.Implementation{Name: "test-host", Version: "1"}, nil).Connect(ctx, tr, nil)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := cs.ListTools(ctx, nil); err != nil {
				t.Fatal(err)
			}
			_ = cs.Close()
			logs := out.String()
			switch level {
			case slog.LevelInfo:
				if logs != "" {
					t.Errorf("an INFO-level log has lines for stateless requests:\n%s", logs)
				}
			default:
				if !strings.Contains(logs, `"level":"DEBUG","msg":"server session connected"`) || strings.Contains(logs, `"level":"INFO"`) {
					t.Errorf("a DEBUG-level log: want the SDK's session lines at DEBUG, none at INFO:\n%s", logs)
				}
			}
		})
	}
}
