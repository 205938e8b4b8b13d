//go:build linux

package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/goodput/goodput/internal/config"
	"github.com/goodput/goodput/sim"
)

// childEnv makes the test binary run as the goodput binary (TestMain).
const childEnv = "GOODPUT_TEST_CHILD"

// gatewayChild is `goodput serve` in a process of its own.
type gatewayChild struct {
	cmd    *exec.Cmd
	stderr syncBuffer
	addr   string
	exited chan error
}

// startChild runs `goodput serve --config cfg` under `ulimit -n nofile`
// (soft and hard) and waits until it listens.
func startChild(t *testing.T, nofile int, cfg string) *gatewayChild {
	t.Helper()
	if _, err := os.Stat("/bin/sh"); err != nil {
		t.Skip("no /bin/sh to set the child's file limit")
	}
	g := &gatewayChild{exited: make(chan error, 1)}
	g.cmd = exec.Command("/bin/sh", "-c", fmt.Sprintf(`ulimit -n %d && exec "$0" "$@"`, nofile),
		os.Args[0], "serve", "--config", cfg)
	g.cmd.Env = append(os.Environ(), childEnv+"=1")
	pipe, err := g.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := g.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	listening := make(chan string, 1)
	go func() {
		re := regexp.MustCompile(`listening on (\S+),`)
		sc := bufio.NewScanner(pipe)
		for sc.Scan() {
			g.stderr.Write([]byte(sc.Text() + "\n"))
			if m := re.FindStringSubmatch(sc.Text()); m != nil {
				listening <- m[1]
			}
		}
		g.exited <- g.cmd.Wait()
	}()
	t.Cleanup(func() {
		if g.cmd.ProcessState == nil {
			g.cmd.Process.Kill()
		}
	})
	select {
	case g.addr = <-listening:
	case err := <-g.exited:
		t.Fatalf("gateway exited before listening: %v\n%s", err, g.stderr.String())
	case <-time.After(30 * time.Second):
		t.Fatalf("gateway not listening after 30s\n%s", g.stderr.String())
	}
	return g
}

// waitLog waits for the child to log s.
func (g *gatewayChild) waitLog(t *testing.T, s string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(g.stderr.String(), s) {
		if time.Now().After(deadline) {
			t.Fatalf("the gateway did not log %q within 30s:\n%s", s, g.stderr.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Under a low file limit, with 60 streams in flight and 250 idle
// connections, every stream still ends with its record and the gateway
// keeps serving (issue 8.2: accept's "too many open files" ended the
// server, with the streams lost and the log not closed).
func TestServeUnderLowFileLimit(t *testing.T) {
	simLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	simSrv := sim.New(sim.Config{ITL: 50 * time.Millisecond})
	go simSrv.Serve(simLn)
	defer simSrv.Shutdown()

	for _, c := range []struct {
		name     string
		maxConns string // config line
		want     string // what the gateway logs on the way
	}{
		// The file limit binds: accept fails with EMFILE and waits.
		{"out of descriptors", "max_connections: 100000\n", "too many open files"},
		// The default cap, (256-64)/2, binds first: no accept fails.
		{"default cap", "", "max_connections (96) reached"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			logPath := filepath.Join(dir, "requests.jsonl")
			cfgPath := filepath.Join(dir, "goodput.yaml")
			os.WriteFile(cfgPath, []byte(fmt.Sprintf("upstream: http://%s\nlisten: 127.0.0.1:0\nadmin_listen: \"off\"\nrequest_log: %s\n%s",
				simLn.Addr(), logPath, c.maxConns)), 0o644)
			g := startChild(t, 256, cfgPath)
			base := "http://" + g.addr

			// 60 streams of 40 tokens (2 s), each under way.
			const streams = 60
			tr := &http.Transport{DisableCompression: true, MaxIdleConnsPerHost: streams}
			defer tr.CloseIdleConnections()
			client := &http.Client{Transport: tr}
			bodies := make([]*bufio.Reader, streams)
			var closers []io.Closer
			defer func() {
				for _, c := range closers {
					c.Close()
				}
			}()
			for i := range bodies {
				req, _ := http.NewRequest("POST", base+"/v1/chat/completions",
					strings.NewReader(`{"model":"sim-llama","stream":true,"max_tokens":40,"ignore_eos":true,"messages":[]}`))
				req.Header.Set("X-Request-Id", fmt.Sprintf("stream-%d", i))
				resp, err := client.Do(req)
				if err != nil {
					t.Fatalf("stream %d: %v", i, err)
				}
				closers = append(closers, resp.Body)
				bodies[i] = bufio.NewReader(resp.Body)
				if _, err := bodies[i].ReadString('\n'); err != nil || resp.StatusCode != 200 {
					t.Fatalf("stream %d: %d %v", i, resp.StatusCode, err)
				}
			}

			// 250 idle connections: more than the descriptors left.
			idle := make([]net.Conn, 0, 250)
			for i := 0; i < 250; i++ {
				conn, err := net.Dial("tcp", g.addr) // the backlog takes what the gateway does not
				if err != nil {
					t.Fatalf("idle connection %d: %v", i, err)
				}
				idle = append(idle, conn)
				closers = append(closers, conn)
			}
			g.waitLog(t, c.want)

			// Every stream runs to its end.
			var wg sync.WaitGroup
			errs := make(chan error, streams)
			for i, br := range bodies {
				wg.Add(1)
				go func(i int, br *bufio.Reader) {
					defer wg.Done()
					rest, err := io.ReadAll(br)
					if err != nil || !strings.HasSuffix(string(rest), "data: [DONE]\n\n") {
						errs <- fmt.Errorf("stream %d: %v, ends %q", i, err, rest[max(0, len(rest)-60):])
					}
				}(i, br)
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Error(err)
			}
			if t.Failed() {
				t.Fatalf("gateway log:\n%s", g.stderr.String())
			}

			// The idle clients leave; the gateway keeps serving.
			for _, c := range idle {
				c.Close()
			}
			tr.CloseIdleConnections()
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, "POST", base+"/v1/chat/completions",
				strings.NewReader(`{"model":"sim-llama","stream":true,"max_tokens":3,"messages":[]}`))
			req.Header.Set("X-Request-Id", "after")
			resp, err := (&http.Client{Transport: &http.Transport{DisableKeepAlives: true}}).Do(req)
			if err != nil {
				t.Fatalf("request after the idle connections left: %v\n%s", err, g.stderr.String())
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 || !strings.HasSuffix(string(body), "data: [DONE]\n\n") {
				t.Fatalf("request after the idle connections left: %d %q", resp.StatusCode, body)
			}

			// A clean shutdown writes every record.
			g.cmd.Process.Signal(syscall.SIGTERM)
			select {
			case err := <-g.exited:
				if err != nil {
					t.Fatalf("gateway exit: %v\n%s", err, g.stderr.String())
				}
			case <-time.After(30 * time.Second):
				t.Fatalf("gateway still running 30s after SIGTERM\n%s", g.stderr.String())
			}
			lines := readLog(t, logPath)
			ids := map[string]bool{}
			for _, l := range lines {
				if l["outcome"] != "ok" {
					t.Errorf("record %v", l)
				}
				ids[l["request_id"].(string)] = true
			}
			if len(lines) != streams+1 || len(ids) != streams+1 || !ids["after"] {
				t.Fatalf("%d records (%d ids) for %d requests", len(lines), len(ids), streams+1)
			}
			if !strings.Contains(g.stderr.String(), "open files limit 256") {
				t.Fatalf("the file limit is not logged:\n%s", g.stderr.String())
			}
			t.Logf("gateway log:\n%s", g.stderr.String())
		})
	}
}

// A max_connections set above what the open-files limit holds (a
// descriptor for each client connection and one for its engine
// connection, and 64 more) is warned of at start, with where it binds; one
// within the limit, unset, or under no known limit is not.
func TestMaxConnectionsOverTheFileLimitIsWarned(t *testing.T) {
	for _, c := range []struct {
		set   int
		limit uint64
		want  string
	}{
		{80, 60, "WARNING: max_connections 80 needs about 224 open files (one for each client connection and one for its engine connection, and 64 more), over the open files limit 60: past about 16 connections"},
		{100, 264, ""}, // 2·100 + 64: held
		{101, 264, "needs about 266 open files"},
		{0, 60, ""}, // the default follows the limit
		{80, 0, ""}, // no limit known
	} {
		got := maxConnectionsWarning(&config.Config{MaxConnections: c.set}, c.limit)
		if (c.want == "") != (got == "") || !strings.Contains(got, c.want) {
			t.Errorf("max_connections %d under %d: %q, want %q", c.set, c.limit, got, c.want)
		}
	}
}
