package main

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// nginxProc is an nginx master (and its workers) proxying to the upstream.
type nginxProc struct {
	cmd     *exec.Cmd
	addr    string
	version string
}

// nginxConf: workers (two in the saturation section, one per core like
// GOMAXPROCS; one in the CPU section, as issue 22 measured it), upstream
// keep-alive, no buffering (the Go proxies stream too), no access log.
const nginxConf = `worker_processes %[5]d;
%[1]s
pid %[2]s/nginx.pid;
error_log %[2]s/nginx-error.log warn;
events { worker_connections 8192; }
http {
    access_log off;
    client_body_temp_path %[2]s/body;
    proxy_temp_path %[2]s/proxy;
    fastcgi_temp_path %[2]s/fastcgi;
    uwsgi_temp_path %[2]s/uwsgi;
    scgi_temp_path %[2]s/scgi;
    keepalive_requests 10000000;
    keepalive_timeout 120s;
    upstream core {
        server %[3]s;
        keepalive 256;
        keepalive_requests 10000000;
    }
    server {
        listen %[4]s;
        location / {
            proxy_pass http://core;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_set_header Host $http_host;
            proxy_buffering off;
            proxy_request_buffering off;
        }
    }
}
`

// startNginx runs nginx with workers worker processes in the foreground
// from dir when the binary exists. It returns (nil, reason) when nginx is
// not available.
func startNginx(dir, upstreamAddr string, workers int) (*nginxProc, string) {
	bin, err := exec.LookPath("nginx")
	if err != nil {
		for _, p := range []string{"/usr/sbin/nginx", "/usr/local/sbin/nginx"} {
			if _, serr := os.Stat(p); serr == nil {
				bin, err = p, nil
				break
			}
		}
	}
	if err != nil {
		return nil, "nginx not installed (apt-get install -y nginx-light to compare)"
	}
	ver, _ := exec.Command(bin, "-v").CombinedOutput()
	// A free loopback port: listen on :0, note it, release it for nginx.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err.Error()
	}
	addr := l.Addr().String()
	l.Close()
	user := ""
	if os.Geteuid() == 0 {
		user = "user root;"
	}
	conf := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(conf, []byte(fmt.Sprintf(nginxConf, user, dir, upstreamAddr, addr, workers)), 0o644); err != nil {
		return nil, err.Error()
	}
	cmd := exec.Command(bin, "-p", dir, "-c", conf, "-e", filepath.Join(dir, "nginx-error.log"), "-g", "daemon off; master_process on;")
	cmd.Stdout, cmd.Stderr = nil, nil
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	if err := cmd.Start(); err != nil {
		return nil, "nginx failed to start: " + err.Error()
	}
	n := &nginxProc{cmd: cmd, addr: addr, version: strings.TrimSpace(strings.TrimPrefix(string(ver), "nginx version: "))}
	// Wait (bounded) until it accepts connections.
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			return n, ""
		}
		if time.Now().After(deadline) {
			n.stop()
			return nil, "nginx did not start listening (see " + filepath.Join(dir, "nginx-error.log") + ")"
		}
		t := time.NewTimer(50 * time.Millisecond)
		<-t.C
	}
}

func (n *nginxProc) stop() {
	stopProcess(n.cmd, func() { _ = n.cmd.Process.Signal(syscall.SIGTERM) })
}
