// Package hostclienttest has helpers for tests of host-side clients.
package hostclienttest

import (
	"fmt"
	"syscall"
	"testing"
)

// RefusedURL is the http URL of a local port that refuses connections for
// the whole test: a socket bound to it and never listening holds it, so no
// other test on the machine can be given the port meanwhile (listening on :0
// and closing leaves the port free for anyone to take).
func RefusedURL(t testing.TB) string {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatalf("socket: %v", err)
	}
	t.Cleanup(func() { _ = syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatalf("bind: %v", err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatalf("getsockname: %v", err)
	}
	in4, ok := sa.(*syscall.SockaddrInet4)
	if !ok {
		t.Fatalf("getsockname: %T", sa)
	}
	return fmt.Sprintf("http://127.0.0.1:%d", in4.Port)
}
