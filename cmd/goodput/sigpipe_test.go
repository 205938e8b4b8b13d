//go:build linux

package main

import (
	"bufio"
	"errors"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A gateway whose stdout (the request log, "-") and stderr (its own log)
// readers have gone away keeps serving: the process was killed by SIGPIPE
// at its next write to either (exit 141, the streams in flight cut, their
// records lost, nothing logged).
func TestServeSurvivesBrokenPipes(t *testing.T) {
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "goodput.yaml")
	if err := os.WriteFile(cfgPath, []byte("listen: 127.0.0.1:0\nadmin_listen: \"off\"\nrequest_log: \"-\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "serve", "--config", cfgPath)
	cmd.Env = append(os.Environ(), childEnv+"=1")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			<-exited
		}
	})
	// Read stderr until the gateway listens, then close both pipes' read
	// ends: every later write to them fails with EPIPE.
	re := regexp.MustCompile(`listening on (\S+),`)
	sc := bufio.NewScanner(stderr)
	addr := ""
	for addr == "" && sc.Scan() {
		if m := re.FindStringSubmatch(sc.Text()); m != nil {
			addr = m[1]
		}
	}
	if addr == "" {
		t.Fatal("the gateway did not say where it listens")
	}
	stdout.Close()
	stderr.Close()
	go func() { exited <- cmd.Wait() }()

	for i := 0; i < 20; i++ {
		resp, err := http.Post("http://"+addr+"/v1/chat/completions", "application/json",
			strings.NewReader(`{"model":"sim-llama","max_tokens":2,"messages":[]}`))
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("request %d: status %d", i, resp.StatusCode)
		}
		if i == 10 {
			// Something for the gateway's own log to say (to stderr).
			_ = cmd.Process.Signal(syscall.SIGHUP)
		}
	}
	select {
	case err := <-exited:
		t.Fatalf("the gateway ended with its readers gone: %v", err)
	default:
	}
	// The shutdown logs to stderr and flushes the request log to stdout
	// before the process exits: both writes meet a broken pipe.
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-exited:
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
				t.Fatalf("the gateway was killed by %v", ws.Signal())
			}
		}
		// Any exit status is fine (1 reports the records it could not write).
	case <-time.After(30 * time.Second):
		t.Fatal("the gateway did not exit 30s after SIGTERM")
	}
}
