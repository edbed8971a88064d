package hostclient

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bailinghub/knowledge-sidecar/internal/testkit"
)

// badTokenFiles puts, at a new path in dir, each kind of file ReadTokenFile
// refuses.
func badTokenFiles(t *testing.T, dir string) map[string]func(path string) {
	t.Helper()
	return map[string]func(string){
		"fifo": func(path string) {
			if err := syscall.Mkfifo(path, 0o600); err != nil {
				t.Fatal(err)
			}
		},
		"link to /dev/zero": func(path string) {
			if err := os.Symlink("/dev/zero", path); err != nil {
				t.Fatal(err)
			}
		},
		"directory": func(path string) {
			if err := os.Mkdir(path, 0o700); err != nil {
				t.Fatal(err)
			}
		},
		"too large": func(path string) {
			if err := os.WriteFile(path, bytes.Repeat([]byte("a"), MaxTokenFileBytes+1), 0o600); err != nil {
				t.Fatal(err)
			}
		},
		"empty": func(path string) {
			if err := os.WriteFile(path, nil, 0o600); err != nil {
				t.Fatal(err)
			}
		},
	}
}

// readWithin runs ReadTokenFile and fails the test when it does not return
// within a bound (a FIFO read blocks until a writer comes).
func readWithin(t *testing.T, path string) (string, error) {
	t.Helper()
	type result struct {
		token string
		err   error
	}
	done := make(chan result, 1)
	go func() {
		tok, err := ReadTokenFile(path)
		done <- result{tok, err}
	}()
	select {
	case r := <-done:
		return r.token, r.err
	case <-time.After(5 * time.Second):
		t.Fatalf("ReadTokenFile(%s) did not return within 5 s", filepath.Base(path))
		return "", nil
	}
}

// TestReadTokenFileRefuses: only a regular file of at most MaxTokenFileBytes
// is read; anything else is refused at once, not read.
func TestReadTokenFileRefuses(t *testing.T) {
	dir := t.TempDir()
	for name, create := range badTokenFiles(t, dir) {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(dir, strings.NewReplacer(" ", "-", "/", "-").Replace(name))
			create(path)
			tok, err := readWithin(t, path)
			if tok != "" || !errors.Is(err, ErrTokenFileRefused) {
				t.Errorf("got a %d-byte token, %v; want ErrTokenFileRefused", len(tok), err)
			}
		})
	}
	t.Run("at the bound", func(t *testing.T) {
		path := filepath.Join(dir, "max")
		want := strings.Repeat("a", MaxTokenFileBytes-1)
		if err := os.WriteFile(path, []byte(want+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if tok, err := readWithin(t, path); tok != want || err != nil {
			t.Errorf("got %d bytes, %v; want the %d-byte token", len(tok), err, len(want))
		}
	})
}

// TestFileTokenKeepsLastGood: the token file replaced by each kind of bad
// file keeps the last good token, without blocking, with one warning per bad
// file and no read of it while it stays the same; a good file again is used.
func TestFileTokenKeepsLastGood(t *testing.T) {
	var logs testkit.Buffer
	dir := t.TempDir()
	path := filepath.Join(dir, "token")
	if err := os.WriteFile(path, []byte("bha_good-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	src, err := NewFileToken(path, slog.New(slog.NewJSONHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	kinds := badTokenFiles(t, dir)
	i := 0
	for name, create := range kinds {
		i++
		tmp := filepath.Join(dir, "next"+strconv.Itoa(i))
		create(tmp)
		if name == "directory" { // a directory cannot be renamed over a file
			if err := os.Remove(path); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.Rename(tmp, path); err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		go func() {
			defer close(done)
			for range 3 {
				if got := src.Token(); got != "bha_good-token" {
					t.Errorf("%s: Token gave %d bytes; want the last good token", name, len(got))
				}
			}
			if got, ok := src.Refresh(context.Background(), "bha_good-token"); ok {
				t.Errorf("%s: Refresh found a %d-byte token; want no other token", name, len(got))
			}
		}()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: Token or Refresh did not return within 5 s", name)
		}
		if name == "directory" {
			if err := os.Remove(path); err != nil {
				t.Fatal(err)
			}
		}
	}
	// One warning per bad file, however often it was looked at; the removed
	// directory's absence is one more problem.
	if n := strings.Count(logs.String(), "token file cannot be read; keeping the last token"); n < len(kinds) || n > len(kinds)+1 {
		t.Errorf("%d warnings for %d bad files; want one each\n%s", n, len(kinds), logs.String())
	}
	replaceFile(t, path, "bha_next-token\n")
	if got := src.Token(); got != "bha_next-token" {
		t.Errorf("Token %q after a good file came back; want bha_next-token", got)
	}
	if strings.Contains(logs.String(), "bha_") {
		t.Errorf("the log shows a token: %s", logs.String())
	}
}

// grandchildCommand is a token command that starts a long-lived child, notes
// its pid, and waits for it: a helper that hangs.
func grandchildCommand(t *testing.T) (command string, pid func() int) {
	t.Helper()
	pidFile := filepath.Join(t.TempDir(), "pid")
	command = "sleep 300 & echo $! > '" + pidFile + "'; wait"
	pid = func() int {
		t.Helper()
		return testkit.ChildPID(t, pidFile, "the token command wrote its child's pid")
	}
	return command, pid
}

// TestCommandTokenKillsItsGroup: a token command that times out, or is still
// running at Close, is killed with the children it started.
func TestCommandTokenKillsItsGroup(t *testing.T) {
	t.Run("timeout", func(t *testing.T) {
		command, pid := grandchildCommand(t)
		c := newCommandToken(command, nil, nil, 300*time.Millisecond)
		defer c.Close()
		if _, err := c.run(context.Background()); err == nil || !strings.Contains(err.Error(), "no token within") {
			t.Errorf("got %v; want a timeout", err)
		}
		child := pid()
		testkit.Eventually(t, 5*time.Second, "the command's child is gone after the timeout", func() bool { return testkit.ProcessGone(child) })
	})
	t.Run("close", func(t *testing.T) {
		command, pid := grandchildCommand(t)
		c := newCommandToken(command, nil, nil, time.Minute)
		errs := make(chan error, 1)
		go func() {
			_, err := c.run(context.Background())
			errs <- err
		}()
		child := pid()
		c.Close()
		select {
		case err := <-errs:
			if !errors.Is(err, errTokenCommandClosed) {
				t.Errorf("run: %v; want it stopped by Close", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("the run did not return within 5 s of Close")
		}
		testkit.Eventually(t, 5*time.Second, "the command's child is gone after Close", func() bool { return testkit.ProcessGone(child) })
		if _, ok := c.Refresh(context.Background(), ""); ok {
			t.Error("Refresh after Close found a token")
		}
	})
}
