package hostclient

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"
)

// TokenSource supplies the Agent access token. Core's access tokens live
// minutes, so a long-running host (the MCP server) asks for the token on
// every call and for a new one once after a 401.
type TokenSource interface {
	// Token is the token to send now.
	Token() string
	// Refresh is called once after rejected was answered 401. It returns
	// the token to retry with; ok is false when there is no other token to
	// try (the source cannot change, the refresh failed, or it gave the
	// rejected token again), and the 401 stands.
	Refresh(ctx context.Context, rejected string) (token string, ok bool)
}

// StaticToken is a token that cannot change (an environment variable).
type StaticToken string

// Token implements TokenSource.
func (t StaticToken) Token() string { return string(t) }

// Refresh implements TokenSource: there is never another token.
func (StaticToken) Refresh(context.Context, string) (string, bool) { return "", false }

// FileToken reads the token from a file, and reads it again when the file
// changes: a replaced file (another inode, as a Kubernetes secret update or a
// write-then-rename makes), another size or another modification time, seen
// with one os.Stat per call. After a 401 it reads the file once more whatever
// Stat says, so an in-place rewrite Stat cannot see is still picked up. When
// the file cannot be read the last token read stays in use.
type FileToken struct {
	path string
	log  *slog.Logger

	mu     sync.Mutex
	token  string
	info   os.FileInfo // what Stat said when token was read
	broken bool        // the last attempt to re-read failed (logged once)
}

// NewFileToken reads path; it fails when the file cannot be read or holds no
// token. log (nil: discard) receives refresh problems, never the token.
func NewFileToken(path string, log *slog.Logger) (*FileToken, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	f := &FileToken{path: path, log: log}
	info, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("token file: %w", err)
	}
	t, err := ReadTokenFile(path)
	if err != nil {
		return nil, err
	}
	f.token, f.info = t, info
	return f, nil
}

// Token implements TokenSource.
func (f *FileToken) Token() string {
	info, err := os.Stat(f.path)
	f.mu.Lock()
	defer f.mu.Unlock()
	if err != nil {
		f.failed(err)
		return f.token
	}
	if sameFile(f.info, info) {
		return f.token
	}
	f.reread(info)
	return f.token
}

// Refresh implements TokenSource.
func (f *FileToken) Refresh(_ context.Context, rejected string) (string, bool) {
	info, err := os.Stat(f.path)
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.token != rejected { // another call has read the new token meanwhile
		return f.token, true
	}
	if err != nil {
		f.failed(err)
		return "", false
	}
	if !f.reread(info) || f.token == rejected {
		return "", false
	}
	return f.token, true
}

// reread reads the file; on success it keeps the token and the Stat it was
// read after. Called with mu held.
func (f *FileToken) reread(info os.FileInfo) bool {
	t, err := ReadTokenFile(f.path)
	if err != nil {
		f.failed(err)
		return false
	}
	if f.broken {
		f.log.Warn("token file readable again", "path", f.path)
	}
	f.token, f.info, f.broken = t, info, false
	return true
}

func (f *FileToken) failed(err error) {
	if !f.broken {
		f.log.Warn("token file cannot be read; keeping the last token", "path", f.path, "err", err)
	}
	f.broken = true
}

func sameFile(a, b os.FileInfo) bool {
	return os.SameFile(a, b) && a.Size() == b.Size() && a.ModTime().Equal(b.ModTime())
}

// CommandToken runs a shell command (sh -c) whose standard output, trimmed of
// surrounding white space, is the token — as credential helpers do. It runs
// at construction and again after a 401; concurrent refreshes of the same
// rejected token run it once.
type CommandToken struct {
	command string
	stderr  io.Writer
	log     *slog.Logger
	timeout time.Duration

	sem   chan struct{} // one run at a time
	mu    sync.Mutex
	token string
}

// CommandTimeout bounds one run of a token command.
const CommandTimeout = 30 * time.Second

// maxTokenOutput bounds what is read of a token command's output.
const maxTokenOutput = 64 << 10

// NewCommandToken runs command once. The command's stderr goes to stderr
// (nil: discarded) and its stdin is empty; log (nil: discard) receives refresh
// problems, never the token or the command's output.
func NewCommandToken(ctx context.Context, command string, stderr io.Writer, log *slog.Logger) (*CommandToken, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if strings.TrimSpace(command) == "" {
		return nil, errors.New("token command is empty")
	}
	c := &CommandToken{command: command, stderr: stderr, log: log, timeout: CommandTimeout, sem: make(chan struct{}, 1)}
	t, err := c.run(ctx)
	if err != nil {
		return nil, err
	}
	c.token = t
	return c, nil
}

// Token implements TokenSource.
func (c *CommandToken) Token() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.token
}

// Refresh implements TokenSource.
func (c *CommandToken) Refresh(ctx context.Context, rejected string) (string, bool) {
	select {
	case c.sem <- struct{}{}:
		defer func() { <-c.sem }()
	case <-ctx.Done():
		return "", false
	}
	if t := c.Token(); t != rejected { // refreshed by another call meanwhile
		return t, true
	}
	t, err := c.run(ctx)
	if err != nil {
		c.log.Warn("token command failed; keeping the last token", "err", err)
		return "", false
	}
	c.mu.Lock()
	c.token = t
	c.mu.Unlock()
	return t, t != rejected
}

// run executes the command once and returns its trimmed output. Errors
// never carry the output.
func (c *CommandToken) run(ctx context.Context) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "sh", "-c", c.command)
	out := &limitedBuffer{max: maxTokenOutput}
	cmd.Stdout = out
	cmd.Stderr = c.stderr
	cmd.WaitDelay = time.Second // a background child holding stdout cannot hang the refresh
	if err := cmd.Run(); err != nil {
		if ctx.Err() != nil {
			return "", fmt.Errorf("token command: no token within %s", c.timeout)
		}
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			return "", fmt.Errorf("token command failed: %s", exit.ProcessState)
		}
		return "", fmt.Errorf("token command: %w", err)
	}
	if out.over {
		return "", fmt.Errorf("token command printed more than %d bytes", maxTokenOutput)
	}
	t := strings.TrimSpace(out.String())
	if t == "" {
		return "", errors.New("token command printed no token")
	}
	return t, nil
}

// limitedBuffer keeps the first max bytes written and notes any excess.
type limitedBuffer struct {
	bytes.Buffer
	max  int
	over bool
}

func (b *limitedBuffer) Write(p []byte) (int, error) {
	if room := b.max - b.Len(); len(p) > room {
		b.over = true
		if room > 0 {
			b.Buffer.Write(p[:room])
		}
		return len(p), nil
	}
	return b.Buffer.Write(p)
}
