//go:build linux

package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
)

// drainWaitsEnv sets, in a re-executed gateway (TestMain), both of the
// shutdown's waits after the cut (cutWait and closeAllWait).
const drainWaitsEnv = "GOODPUT_TEST_DRAIN_WAITS"

// A record that the shutdown's waits do not see is lost, and the exit
// status says so: a stream in flight is cut at shutdown_grace, and its
// record then waits for the limiter to reconcile its tokens and release
// its concurrency slot in Redis, which has stopped answering (a hung
// master, a partition). With redis.timeout longer than the waits after the
// cut, the gateway exits before the record is written: status 1, and its
// log names how many requests had no record.
func TestServeExitsOneWhenARecordMissesTheDrain(t *testing.T) {
	target, db := "", "0"
	if u := os.Getenv("GOODPUT_REDIS_URL"); u != "" {
		pu, err := url.Parse(u)
		if err != nil {
			t.Fatal(err)
		}
		target, db = pu.Host, strings.TrimPrefix(pu.Path, "/")
	} else {
		target = miniredis.RunT(t).Addr()
	}
	rl := startRedisRelay(t, target)
	key, keyLines := newKey(t, "acme", "acme-one")
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "goodput.yaml")
	yaml := fmt.Sprintf(`listen: 127.0.0.1:0
admin_listen: "off"
shutdown_grace: 100ms
sim: {itl: 20ms}
ratelimit:
  backend: redis
  redis: {url: "redis://%s/%s", timeout: 60s, key_prefix: "gp-drainlost-%d"}
tenants:
  - name: acme
    limits: {max_concurrency: 4}
    keys:
%s`, rl.addr(), db, time.Now().UnixNano(), keyLines)
	if err := os.WriteFile(cfgPath, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "serve", "--config", cfgPath)
	cmd.Env = append(os.Environ(), childEnv+"=1", drainWaitsEnv+"=200ms")
	pipe, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var stderr syncBuffer
	listening, exited := make(chan string, 1), make(chan error, 1)
	go func() {
		re := regexp.MustCompile(`listening on (\S+),`)
		sc := bufio.NewScanner(pipe)
		for sc.Scan() {
			stderr.Write([]byte(sc.Text() + "\n"))
			if m := re.FindStringSubmatch(sc.Text()); m != nil {
				listening <- m[1]
			}
		}
		exited <- cmd.Wait()
	}()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			<-exited
		}
	})
	var addr string
	select {
	case addr = <-listening:
	case err := <-exited:
		t.Fatalf("gateway exited before listening: %v\n%s", err, stderr.String())
	case <-time.After(30 * time.Second):
		t.Fatalf("gateway not listening after 30s\n%s", stderr.String())
	}

	// A stream of about 200 s: its first byte says it was admitted (its
	// slot taken in Redis) and is in flight.
	req, _ := http.NewRequest("POST", "http://"+addr+"/v1/chat/completions",
		strings.NewReader(`{"model":"sim-llama","stream":true,"max_tokens":10000,"ignore_eos":true,"messages":[]}`))
	req.Header.Set("Authorization", "Bearer "+key)
	client := &http.Client{Transport: &http.Transport{DisableCompression: true}}
	t.Cleanup(client.CloseIdleConnections)
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("status %d\n%s", resp.StatusCode, stderr.String())
	}
	if _, err := io.ReadFull(resp.Body, make([]byte, 1)); err != nil {
		t.Fatal(err)
	}
	rl.freeze() // Redis stops answering
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err = <-exited:
	case <-time.After(30 * time.Second):
		t.Fatalf("gateway still running 30s after SIGTERM\n%s", stderr.String())
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Fatalf("exit: %v, want status 1\n%s", err, stderr.String())
	}
	if !strings.Contains(stderr.String(), `level=ERROR msg="goodput serve: shutdown: 1 requests ended without a record"`) {
		t.Fatalf("stderr does not say that 1 request had no record:\n%s", stderr.String())
	}
}

// redisRelay forwards connections to a Redis until freeze: from then on
// it forwards no command, and answers none (the replies to those already
// forwarded still come back).
type redisRelay struct {
	ln     net.Listener
	frozen atomic.Bool
	mu     sync.Mutex
	conns  []net.Conn
	wg     sync.WaitGroup
}

func startRedisRelay(t *testing.T, target string) *redisRelay {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &redisRelay{ln: ln}
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			u, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			r.mu.Lock()
			r.conns = append(r.conns, c, u)
			r.mu.Unlock()
			r.wg.Add(2)
			go func() { defer r.wg.Done(); _, _ = io.Copy(c, u) }()
			go func() { defer r.wg.Done(); r.forward(u, c) }()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		r.mu.Lock()
		for _, c := range r.conns {
			c.Close()
		}
		r.mu.Unlock()
		r.wg.Wait()
	})
	return r
}

func (r *redisRelay) addr() string { return r.ln.Addr().String() }

func (r *redisRelay) freeze() { r.frozen.Store(true) }

// forward copies what the client sends to Redis until freeze, and drops
// it after.
func (r *redisRelay) forward(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && !r.frozen.Load() {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}
