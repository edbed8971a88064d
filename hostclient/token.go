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

// MaxTokenFileBytes bounds a token file. Core's access tokens are well
// under 1 KiB; a larger file is refused rather than read.
const MaxTokenFileBytes = 16 << 10

// ErrTokenFileRefused is wrapped by the errors of a token file that exists
// but is not one: not a regular file (a FIFO, a device, a directory, a link
// to one of these), larger than MaxTokenFileBytes, or empty.
var ErrTokenFileRefused = errors.New("token file refused")

// ReadTokenFile reads a bearer from a file, trimming the trailing newline
// (LF or CRLF) editors and `echo` add; other whitespace is kept. Only a
// regular file (after links) of at most MaxTokenFileBytes is read, and the
// open cannot block: a FIFO or device swapped in is refused, never waited on.
func ReadTokenFile(path string) (string, error) {
	t, _, err := readTokenFile(path)
	return t, err
}

// readTokenFile is ReadTokenFile that also returns what the file was judged
// by (the opened file's Stat, or the path's when it was refused before
// opening; nil when even Stat failed). Errors never carry the content.
func readTokenFile(path string) (string, os.FileInfo, error) {
	info, err := os.Stat(path)
	if err != nil {
		return "", nil, fmt.Errorf("token file: %w", err)
	}
	if err := checkTokenFile(info); err != nil {
		return "", info, err
	}
	f, err := openNoBlock(path)
	if err != nil {
		return "", info, fmt.Errorf("token file: %w", err)
	}
	defer f.Close()
	// The path may name another file now than when it was Stat'ed: judge
	// the one opened.
	if info, err = f.Stat(); err != nil {
		return "", nil, fmt.Errorf("token file: %w", err)
	}
	if err := checkTokenFile(info); err != nil {
		return "", info, err
	}
	raw, err := io.ReadAll(io.LimitReader(f, MaxTokenFileBytes+1))
	if err != nil {
		return "", info, fmt.Errorf("token file: %w", err)
	}
	if len(raw) > MaxTokenFileBytes { // grew after Stat
		return "", info, fmt.Errorf("%w: larger than %d bytes", ErrTokenFileRefused, MaxTokenFileBytes)
	}
	t := strings.TrimSuffix(strings.TrimSuffix(string(raw), "\n"), "\r")
	if t == "" {
		return "", info, fmt.Errorf("%w: token file is empty", ErrTokenFileRefused)
	}
	return t, info, nil
}

func checkTokenFile(info os.FileInfo) error {
	switch {
	case !info.Mode().IsRegular():
		return fmt.Errorf("%w: not a regular file (%s)", ErrTokenFileRefused, info.Mode().Type())
	case info.Size() > MaxTokenFileBytes:
		return fmt.Errorf("%w: larger than %d bytes", ErrTokenFileRefused, MaxTokenFileBytes)
	}
	return nil
}

// FileToken reads the token from a file, and reads it again when the file
// changes: a replaced file (another inode, as a Kubernetes secret update or a
// write-then-rename makes), another size or another modification time, seen
// with one os.Stat per call. After a 401 it reads the file once more whatever
// Stat says, so an in-place rewrite Stat cannot see is still picked up.
//
// When the file cannot be read or is refused (see ReadTokenFile) the last
// good token stays in use; the problem is logged once until it changes, and
// a refused file is not read again until Stat shows it changed. No call
// waits on another call's file I/O: files are read outside the lock, and the
// token read is swapped in under it.
type FileToken struct {
	path string
	log  *slog.Logger

	mu      sync.Mutex
	token   string
	info    os.FileInfo // the file token was read from
	bad     os.FileInfo // the file last refused; nil when none (or Stat failed)
	problem string      // the problem last logged; "" while the file is good
}

// NewFileToken reads path; it fails when the file cannot be read, is
// refused or holds no token. log (nil: discard) receives refresh problems,
// never the token.
func NewFileToken(path string, log *slog.Logger) (*FileToken, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	t, info, err := readTokenFile(path)
	if err != nil {
		return nil, err
	}
	return &FileToken{path: path, log: log, token: t, info: info}, nil
}

// Token implements TokenSource.
func (f *FileToken) Token() string {
	info, err := os.Stat(f.path)
	f.mu.Lock()
	token := f.token
	unchanged := err == nil && (sameFile(f.info, info) || (f.bad != nil && sameFile(f.bad, info)))
	warn := func() {}
	if err != nil {
		f.bad = nil
		warn = f.problemLocked(fmt.Errorf("token file: %w", err))
	}
	f.mu.Unlock()
	if err != nil || unchanged {
		warn()
		return token
	}
	token, _ = f.load()
	return token
}

// Refresh implements TokenSource.
func (f *FileToken) Refresh(_ context.Context, rejected string) (string, bool) {
	f.mu.Lock()
	token := f.token
	f.mu.Unlock()
	if token != rejected { // another call has read the new token meanwhile
		return token, true
	}
	token, ok := f.load()
	if !ok || token == rejected {
		return "", false
	}
	return token, true
}

// load reads the file (without the lock) and keeps its token, or keeps the
// last one when it is refused. It returns the token now in use and whether
// the read succeeded.
func (f *FileToken) load() (string, bool) {
	t, info, err := readTokenFile(f.path)
	f.mu.Lock()
	if err != nil {
		f.bad = info
		warn, token := f.problemLocked(err), f.token
		f.mu.Unlock()
		warn()
		return token, false
	}
	recovered := f.problem != ""
	f.token, f.info, f.bad, f.problem = t, info, nil, ""
	f.mu.Unlock()
	if recovered {
		f.log.Warn("token file readable again", "path", f.path)
	}
	return t, true
}

// problemLocked records err as the file's problem and returns what to log
// once mu is released: a warning when the problem is not the one last
// logged, else nothing. Called with mu held.
func (f *FileToken) problemLocked(err error) (warn func()) {
	if err == nil || err.Error() == f.problem {
		return func() {}
	}
	f.problem = err.Error()
	return func() { f.log.Warn("token file cannot be read; keeping the last token", "path", f.path, "err", err) }
}

func sameFile(a, b os.FileInfo) bool {
	return os.SameFile(a, b) && a.Size() == b.Size() && a.ModTime().Equal(b.ModTime())
}

// CommandToken runs a shell command (sh -c) whose standard output, trimmed of
// surrounding white space, is the token — as credential helpers do. It runs
// at construction and again after a 401; concurrent refreshes of the same
// rejected token run it once.
//
// Each run is its own process group; on timeout, on cancellation and at
// Close the whole group is killed (where the platform has process groups),
// so a helper's own children cannot outlive it.
type CommandToken struct {
	command string
	stderr  io.Writer
	log     *slog.Logger
	timeout time.Duration

	sem   chan struct{} // one run at a time
	mu    sync.Mutex
	token string

	life    context.Context // ends at Close: running commands are killed
	stop    context.CancelFunc
	running sync.WaitGroup // runs not yet returned
	closed  bool           // guarded by mu: no run starts after Close
}

// CommandTimeout bounds one run of a token command.
const CommandTimeout = 30 * time.Second

// maxTokenOutput bounds what is read of a token command's output.
const maxTokenOutput = 64 << 10

// NewCommandToken runs command once. The command's stderr goes to stderr
// (nil: discarded) and its stdin is empty; log (nil: discard) receives refresh
// problems, never the token or the command's output.
func NewCommandToken(ctx context.Context, command string, stderr io.Writer, log *slog.Logger) (*CommandToken, error) {
	if strings.TrimSpace(command) == "" {
		return nil, errors.New("token command is empty")
	}
	c := newCommandToken(command, stderr, log, CommandTimeout)
	t, err := c.run(ctx)
	if err != nil {
		c.Close()
		return nil, err
	}
	c.token = t
	return c, nil
}

// newCommandToken builds a CommandToken that has not run yet.
func newCommandToken(command string, stderr io.Writer, log *slog.Logger, timeout time.Duration) *CommandToken {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	c := &CommandToken{command: command, stderr: stderr, log: log, timeout: timeout, sem: make(chan struct{}, 1)}
	c.life, c.stop = context.WithCancel(context.Background())
	return c
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

// Close kills the process groups of the runs still going and waits for
// them to return (at most commandWaitDelay after the kill); later refreshes
// fail. The MCP server calls it when it exits.
func (c *CommandToken) Close() {
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	c.stop()
	c.running.Wait()
}

// commandWaitDelay bounds the wait for a command's output pipes after its
// process ended or was killed (a child that left its own group may hold them).
const commandWaitDelay = time.Second

// errTokenCommandClosed is a run refused, or stopped, by Close.
var errTokenCommandClosed = errors.New("token command: stopped (the server is exiting)")

// run executes the command once and returns its trimmed output. Errors
// never carry the output.
func (c *CommandToken) run(ctx context.Context) (string, error) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return "", errTokenCommandClosed
	}
	c.running.Add(1)
	c.mu.Unlock()
	defer c.running.Done()

	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	defer context.AfterFunc(c.life, cancel)()
	cmd := exec.CommandContext(ctx, "sh", "-c", c.command)
	out := &limitedBuffer{max: maxTokenOutput}
	cmd.Stdout = out
	cmd.Stderr = c.stderr
	ownProcessGroup(cmd)
	cmd.WaitDelay = commandWaitDelay // a background child holding stdout cannot hang the refresh
	if err := cmd.Run(); err != nil {
		if c.life.Err() != nil {
			return "", errTokenCommandClosed
		}
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
