package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/bailinghub/knowledge-sidecar/proxy"
)

// childInfo is the one line a serve-target child prints when it listens.
type childInfo struct {
	Addr  string `json:"addr"`  // the served listener
	Stats string `json:"stats"` // /stats and /debug/pprof/ for the orchestrator
	PID   int    `json:"pid"`
}

// serveTarget is the child mode: serve one role on 127.0.0.1:0, print a
// childInfo line, and stop when stdin closes (the orchestrator exited or
// asked) or on SIGTERM/SIGINT.
// catalogEnv passes the catalog's read-only DSN to the sidecar child;
// noHintsEnv turns its same-run hints off.
const (
	catalogEnv = "KS_BENCH_CATALOG_DSN"
	noHintsEnv = "KS_BENCH_NO_TURN_HINTS"
)

func serveTarget(role, upstream string, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		cancel()
	}()
	level := slog.LevelInfo
	if os.Getenv("KS_BENCH_DEBUG") != "" {
		level = slog.LevelDebug // every request is logged: for diagnosis, not measurement
	}
	log := slog.New(slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: level}))
	fail := func(err error) int {
		fmt.Fprintf(stderr, "bench %s: %v\n", role, err)
		return 1
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fail(err)
	}
	sln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fail(err)
	}
	stats := http.NewServeMux()
	stats.HandleFunc("GET /stats", func(w http.ResponseWriter, r *http.Request) {
		var ru syscall.Rusage
		_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
		cpu := time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
		_ = json.NewEncoder(w).Encode(map[string]int64{"goroutines": int64(runtime.NumGoroutine()), "cpu_us": cpu.Microseconds(), "maxrss_kib": ru.Maxrss})
	})
	stats.HandleFunc("/debug/pprof/", pprof.Index)
	stats.HandleFunc("/debug/pprof/profile", pprof.Profile)
	statsSrv := &http.Server{Handler: stats, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = statsSrv.Serve(sln) }()
	defer statsSrv.Close()

	so := proxy.ServeOptions{ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute, MaxHeaderBytes: 1 << 20, ShutdownTimeout: 2 * time.Second}
	var serve func() error
	switch role {
	case "upstream":
		h, closeCore := upstreamHandler()
		defer closeCore()
		srv := proxy.NewHTTPServer(h, so, nil, log)
		serve = func() error { return serveUntil(ctx, srv, ln) }
	case "revproxy":
		h, err := newBareProxy(upstream)
		if err != nil {
			return fail(err)
		}
		srv := &http.Server{Handler: h, ReadHeaderTimeout: so.ReadHeaderTimeout, IdleTimeout: so.IdleTimeout, MaxHeaderBytes: so.MaxHeaderBytes}
		serve = func() error { return serveUntil(ctx, srv, ln) }
	case "lean":
		h, err := newLeanProxy(upstream)
		if err != nil {
			return fail(err)
		}
		srv := &http.Server{Handler: h, ReadHeaderTimeout: so.ReadHeaderTimeout, IdleTimeout: so.IdleTimeout, MaxHeaderBytes: so.MaxHeaderBytes,
			TLSNextProto: map[string]func(*http.Server, *tls.Conn, http.Handler){}} // HTTP/1.1 only
		serve = func() error { return serveUntil(ctx, srv, ln) }
	case "floor":
		h, closeDB, err := newFloor(upstream, os.Getenv(catalogEnv))
		if err != nil {
			return fail(err)
		}
		defer closeDB()
		srv := &http.Server{Handler: h, ReadHeaderTimeout: so.ReadHeaderTimeout, IdleTimeout: so.IdleTimeout, MaxHeaderBytes: so.MaxHeaderBytes,
			TLSNextProto: map[string]func(*http.Server, *tls.Conn, http.Handler){}} // HTTP/1.1 only
		serve = func() error { return serveUntil(ctx, srv, ln) }
	case "sidecar":
		app, err := newSidecar(upstream, os.Getenv(catalogEnv), os.Getenv(noHintsEnv) == "", log)
		if err != nil {
			return fail(err)
		}
		defer app.Close()
		s := app.Server
		aln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return fail(err)
		}
		so.Listener, so.AdminListener = ln, aln
		serve = func() error { return s.Run(ctx, so) }
	default:
		return fail(fmt.Errorf("unknown role %q", role))
	}
	info, _ := json.Marshal(childInfo{Addr: ln.Addr().String(), Stats: sln.Addr().String(), PID: os.Getpid()})
	fmt.Fprintf(stdout, "%s\n", info)
	if err := serve(); err != nil && !errors.Is(err, context.Canceled) {
		return fail(err)
	}
	return 0
}

func serveUntil(ctx context.Context, srv *http.Server, ln net.Listener) error {
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		if srv.Shutdown(sctx) != nil {
			srv.Close()
		}
	}()
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// child is a started serve-target process.
type child struct {
	role  string
	cmd   *exec.Cmd
	stdin io.WriteCloser
	info  childInfo
	log   string
}

func spawn(exe, role, upstream, dir string) (*child, error) {
	return spawnEnv(exe, role, role, upstream, dir, nil)
}

// spawnEnv starts a child of role, named name (its log file), with env
// added to the inherited environment.
func spawnEnv(exe, role, name, upstream, dir string, env []string) (*child, error) {
	logPath := filepath.Join(dir, name+".log")
	lf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer lf.Close()
	cmd := exec.Command(exe, "--serve-target="+role, "--upstream="+upstream)
	cmd.Stderr = lf
	if env != nil {
		cmd.Env = append(os.Environ(), env...)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	c := &child{role: role, cmd: cmd, stdin: stdin, log: logPath}
	line := make(chan string, 1)
	go func() {
		s, _ := bufio.NewReader(out).ReadString('\n')
		line <- s
		_, _ = io.Copy(io.Discard, out)
	}()
	t := time.NewTimer(30 * time.Second)
	defer t.Stop()
	select {
	case s := <-line:
		if err := json.Unmarshal([]byte(s), &c.info); err != nil || c.info.Addr == "" {
			c.stop()
			return nil, fmt.Errorf("%s did not start (see %s)", role, logPath)
		}
	case <-t.C:
		c.stop()
		return nil, fmt.Errorf("%s did not start within 30s (see %s)", role, logPath)
	}
	return c, nil
}

// stop closes the child's stdin (it shuts down) and kills it if it has not
// exited within 5 s.
func (c *child) stop() { stopProcess(c.cmd, func() { _ = c.stdin.Close() }) }

// stopProcess asks cmd's process to exit and kills it if it has not
// within 5 s.
func stopProcess(cmd *exec.Cmd, ask func()) {
	ask()
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t := time.NewTimer(5 * time.Second)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		_ = cmd.Process.Kill()
		<-done
	}
}

// ---- /proc readings ----

const clockTicks = 100 // USER_HZ; 100 on every Linux architecture Go supports here

// cpuTime is the user+system CPU time of the processes.
func cpuTime(pids []int) time.Duration {
	var ticks int64
	for _, pid := range pids {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err != nil {
			continue
		}
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:])
		// f[0] is field 3 (state); utime and stime are fields 14 and 15.
		if len(f) < 13 {
			continue
		}
		u, _ := strconv.ParseInt(f[11], 10, 64)
		st, _ := strconv.ParseInt(f[12], 10, 64)
		ticks += u + st
	}
	return time.Duration(ticks) * time.Second / clockTicks
}

// rss is the resident set size of the processes, in bytes.
func rss(pids []int) int64 {
	var total int64
	for _, pid := range pids {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/statm")
		if err != nil {
			continue
		}
		f := strings.Fields(string(b))
		if len(f) < 2 {
			continue
		}
		pages, _ := strconv.ParseInt(f[1], 10, 64)
		total += pages * int64(os.Getpagesize())
	}
	return total
}

// withChildren is pid and its direct children (nginx master and workers).
func withChildren(pid int) []int {
	pids := []int{pid}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		f := strings.Fields(s[i+1:])
		if len(f) > 1 && f[1] == strconv.Itoa(pid) {
			pids = append(pids, p)
		}
	}
	return pids
}

// timeWait counts TCP sockets in TIME_WAIT (state 06) with a local or
// remote port in ports (port → endpoint name), so other activity on the
// machine is not counted. by says which side closed: "sidecar/server" is a
// connection the sidecar's listener closed, "direct/client" one a client of
// the upstream (the load generator or a proxy's transport) closed.
func timeWait(ports map[int]string) (n int, by map[string]int) {
	by = map[string]int{}
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n")[1:] {
			fs := strings.Fields(line)
			if len(fs) < 4 || fs[3] != "06" {
				continue
			}
			if name, ok := ports[hexPort(fs[1])]; ok {
				n++
				by[name+"/server"]++
			} else if name, ok := ports[hexPort(fs[2])]; ok {
				n++
				by[name+"/client"]++
			}
		}
	}
	return n, by
}

func hexPort(addr string) int {
	i := strings.LastIndexByte(addr, ':')
	if i < 0 {
		return -1
	}
	p, err := strconv.ParseInt(addr[i+1:], 16, 32)
	if err != nil {
		return -1
	}
	return int(p)
}

func portOf(addr string) int {
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		return -1
	}
	n, _ := strconv.Atoi(p)
	return n
}
