package testkit

import (
	"bufio"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// RedisServer starts a redis-server of the test's own on a free loopback
// port: args name where it listens on that port ("--port" or, for TLS,
// "--tls-port" followed by the port RedisServer fills in) and anything else
// it needs; it runs without persistence in a temporary directory. It
// returns the address and the process (to pause it with SIGSTOP, say), and
// is stopped when the test ends (resumed first, should it be paused). No
// redis-server on the machine: skip (fail with CI=true).
func RedisServer(t testing.TB, portFlag string, args ...string) (string, *exec.Cmd) {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	RequireService(t, "redis-server (a private Redis)", err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	all := append([]string{portFlag, strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", t.TempDir()}, args...)
	cmd := exec.Command(bin, all...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGCONT)
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	// Redis logs to stdout; it is ready when it says so.
	ready := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(out)
		said := false
		for sc.Scan() {
			if !said && strings.Contains(sc.Text(), "Ready to accept connections") {
				said = true
				ready <- true
			}
		}
		if !said {
			ready <- false
		}
	}()
	select {
	case ok := <-ready:
		if !ok {
			t.Fatal("the private redis-server exited before it was ready")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the private redis-server was not ready within 10s")
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), cmd
}
