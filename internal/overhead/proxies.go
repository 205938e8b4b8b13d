package main

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// target is one way from the client to the engine: direct, or through a
// proxy process started for the round.
type target struct {
	name  string // direct, goodput, goodput-loop, nginx, haproxy, proto-goroutine, proto-epoll, proto-epoll-netpoll
	label string // as printed
	bin   string // the proxy's binary; empty for direct
	// config writes the proxy's configuration into dir and returns the
	// command line that runs it in the foreground.
	config func(bin, dir, listen, upstream string) ([]string, error)
	// tree: the proxy has worker processes (children) to measure too.
	tree bool
	// phases: a goodput built with -tags phases, told where to write its
	// figures (--phases).
	phases bool
}

// proc is a running proxy.
type proc struct {
	cmd    *exec.Cmd
	listen string
	pids   []int // the process, and its workers
	logf   string
	exited chan struct{}
	phases string // the file of a phases build's figures, or ""
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// start runs t's proxy in dir in front of upstream (host:port) and waits
// until its listener accepts.
func (t target) start(dir, upstream string) (*proc, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	listen := "127.0.0.1:" + strconv.Itoa(port)
	args, err := t.config(t.bin, dir, listen, upstream)
	if err != nil {
		return nil, err
	}
	logf := filepath.Join(dir, t.name+".log")
	out, err := os.Create(logf)
	if err != nil {
		return nil, err
	}
	defer out.Close()
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	var phasesFile string
	if t.phases {
		phasesFile = filepath.Join(dir, "phases.json")
		cmd.Env = append(os.Environ(), "GOODPUT_PHASES="+phasesFile)
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &proc{cmd: cmd, listen: listen, logf: logf, exited: make(chan struct{}), phases: phasesFile}
	go func() { _ = cmd.Wait(); close(p.exited) }()
	deadline := time.Now().Add(15 * time.Second)
	for {
		select {
		case <-p.exited:
			return nil, fmt.Errorf("%s exited at start: %s", t.name, tail(logf))
		default:
		}
		c, err := net.DialTimeout("tcp", listen, time.Second)
		if err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			p.stop()
			return nil, fmt.Errorf("%s does not accept on %s: %s", t.name, listen, tail(logf))
		}
		time.Sleep(20 * time.Millisecond)
	}
	p.pids = []int{cmd.Process.Pid}
	if t.tree {
		// nginx starts its workers before it listens? Not necessarily:
		// give them a moment, then take every child of the master.
		for range 50 {
			if kids := children(cmd.Process.Pid); len(kids) > 0 {
				time.Sleep(50 * time.Millisecond) // let the rest of them start
				p.pids = append(p.pids, children(cmd.Process.Pid)...)
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	return p, nil
}

// stop ends the proxy: SIGTERM to its process group, SIGKILL after 5 s.
func (p *proc) stop() {
	pgid := p.cmd.Process.Pid
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(5 * time.Second):
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		<-p.exited
	}
}

func tail(path string) string {
	b, _ := os.ReadFile(path)
	s := strings.TrimSpace(string(b))
	if len(s) > 2000 {
		s = "…" + s[len(s)-2000:]
	}
	if s == "" {
		return "(no output)"
	}
	return s
}

func goodputConfig(bin, dir, listen, upstream string) ([]string, error) {
	return writeGoodputConfig(bin, dir, listen, upstream, "")
}

// goodputLoopConfig is goodputConfig with the I/O loops on (the target
// goodput-loop).
func goodputLoopConfig(bin, dir, listen, upstream string) ([]string, error) {
	return writeGoodputConfig(bin, dir, listen, upstream, "io_loop: true\n")
}

func writeGoodputConfig(bin, dir, listen, upstream, extra string) ([]string, error) {
	// No request log; open (no tenants, no keys); admin listener on a
	// port of its own. max_connections stays at its default, (open-files
	// limit - 64)/2: the benchmark raises its own limit, which goodput
	// inherits and raises to the hard limit again.
	conf := fmt.Sprintf(`upstream: http://%s
listen: %q
admin_listen: "127.0.0.1:0"
log_level: warn
shutdown_grace: 1s
`, upstream, listen) + extra
	f := filepath.Join(dir, "goodput.yaml")
	if err := os.WriteFile(f, []byte(conf), 0o600); err != nil {
		return nil, err
	}
	return []string{bin, "serve", "--config", f}, nil
}

// protoConfig runs the prototype the target names: proto-goroutine,
// proto-epoll, or proto-epoll-netpoll (the epoll model with its loops
// parked in Go's poller); it has no configuration file.
func protoConfig(name string) func(bin, dir, listen, upstream string) ([]string, error) {
	model, wait, _ := strings.Cut(strings.TrimPrefix(name, "proto-"), "-")
	return func(bin, _, listen, upstream string) ([]string, error) {
		args := []string{bin, "--listen", listen, "--upstream", upstream, "--model", model}
		if wait != "" {
			args = append(args, "--epoll-wait", wait)
		}
		return args, nil
	}
}

func nginxConfig(bin, dir, listen, upstream string) ([]string, error) {
	userLine := ""
	if os.Geteuid() == 0 {
		// as root, nginx would run its workers as nobody, who cannot
		// write to the temporary directory.
		u, err := user.Current()
		if err != nil {
			return nil, err
		}
		userLine = "user " + u.Username + ";"
	}
	conf := fmt.Sprintf(`daemon off;
master_process on;
worker_processes auto;
worker_rlimit_nofile 20000;
%s
pid %[2]s/nginx.pid;
error_log %[2]s/error.log warn;
events { worker_connections 8192; }
http {
  access_log off;
  client_body_temp_path %[2]s/body;
  proxy_temp_path %[2]s/proxy;
  fastcgi_temp_path %[2]s/fastcgi;
  uwsgi_temp_path %[2]s/uwsgi;
  scgi_temp_path %[2]s/scgi;
  upstream engine {
    server %[3]s;
    keepalive 1024;
    keepalive_requests 1000000;
    keepalive_timeout 300s;
  }
  server {
    listen %[4]s backlog=4096;
    keepalive_requests 1000000;
    keepalive_timeout 300s;
    location / {
      proxy_pass http://engine;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_buffering off;
      proxy_read_timeout 300s;
    }
  }
}
`, userLine, dir, upstream, listen)
	f := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(f, []byte(conf), 0o600); err != nil {
		return nil, err
	}
	return []string{bin, "-p", dir, "-e", filepath.Join(dir, "error.log"), "-c", f}, nil
}

func haproxyConfig(bin, dir, listen, upstream string) ([]string, error) {
	conf := fmt.Sprintf(`global
  nbthread 2
  maxconn 8000
defaults
  mode http
  option http-no-delay
  timeout connect 5s
  timeout client 300s
  timeout server 300s
  timeout http-request 30s
  timeout http-keep-alive 300s
frontend fe
  bind %s
  default_backend engine
backend engine
  server engine %s
`, listen, upstream)
	f := filepath.Join(dir, "haproxy.cfg")
	if err := os.WriteFile(f, []byte(conf), 0o600); err != nil {
		return nil, err
	}
	return []string{bin, "-db", "-f", f}, nil
}

// findBinary looks for name on PATH and in the sbin directories Debian
// installs nginx and HAProxy into.
func findBinary(name string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	for _, d := range []string{"/usr/sbin", "/usr/local/sbin", "/sbin"} {
		p := filepath.Join(d, name)
		if st, err := os.Stat(p); err == nil && !st.IsDir() && st.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", errors.New(name + " not installed")
}
