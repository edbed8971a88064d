package testkit

import (
	"bytes"
	"strings"
	"sync"
)

// Buffer is a bytes.Buffer safe for writers on the code's goroutines and a
// reader on the test's: a log sink, a child process's stderr.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p.
func (l *Buffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// String is everything written so far.
func (l *Buffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// Lines is everything written so far as lines, without empty ones.
func (l *Buffer) Lines() []string {
	var out []string
	for _, line := range strings.Split(l.String(), "\n") {
		if line != "" {
			out = append(out, line)
		}
	}
	return out
}

// Take returns everything written so far and forgets it.
func (l *Buffer) Take() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.b.String()
	l.b.Reset()
	return s
}
