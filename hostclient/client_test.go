package hostclient

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bailinghub/knowledge-sidecar/hostclient/hostclienttest"
)

func TestReadTokenFile(t *testing.T) {
	cases := []struct {
		name, content, want, err string
	}{
		{"newline trimmed", "bha_abc\n", "bha_abc", ""},
		{"crlf trimmed", "bha_abc\r\n", "bha_abc", ""},
		{"no newline", "bha_abc", "bha_abc", ""},
		{"only one newline trimmed", "bha_abc\n\n", "bha_abc\n", ""},
		{"empty", "\n", "", "token file is empty"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "token")
			if err := os.WriteFile(path, []byte(tc.content), 0o600); err != nil {
				t.Fatal(err)
			}
			got, err := ReadTokenFile(path)
			if got != tc.want || (err == nil) != (tc.err == "") || (err != nil && !strings.Contains(err.Error(), tc.err)) {
				t.Errorf("got %q, %v; want %q, %q", got, err, tc.want, tc.err)
			}
		})
	}
}

func TestNewAndURL(t *testing.T) {
	for _, bad := range []string{"", "127.0.0.1:8080", "ftp://h", "http://h/?q=1", "http:///x"} {
		if _, err := New(bad, "demo", "t", nil); err == nil {
			t.Errorf("New(%q) accepted; want an error", bad)
		}
	}
	c, err := New("http://h:1/base/", "demo", "t", nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := c.URL("a b", Search), "http://h:1/base/agent-api/v1/workspaces/a%20b/knowledge/search"; got != want {
		t.Errorf("URL: got %s; want %s", got, want)
	}
	if got, want := c.TurnsURL(), "http://h:1/base/agent-api/v1/workspaces/demo/turns"; got != want {
		t.Errorf("TurnsURL: got %s; want %s", got, want)
	}
}

// TestUnreachable: transport failures wrap ErrUnreachable and never show the token.
func TestUnreachable(t *testing.T) {
	c, err := New(hostclienttest.RefusedURL(t), "demo", "bha_secret-token", nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Call(context.Background(), Capabilities, nil)
	if !errors.Is(err, ErrUnreachable) || strings.Contains(err.Error(), "bha_secret-token") {
		t.Errorf("got %v; want ErrUnreachable without the token", err)
	}
}
