//go:build linux

package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/goodput/goodput/internal/testenv"
)

// A request's record does not wait at shutdown for the release of its
// limits in a Redis that stopped answering (a hung master, a partition):
// a stream in flight is cut at shutdown_grace, and its record then waits
// for the limiter to release its concurrency slot and reconcile its
// tokens in Redis at most a second (the release is then left to the
// lease's expiry in Redis), not for the Redis timeout, which at its
// largest (10s) outlasts the 5 s the shutdown waits for the cut requests'
// records. The request log holds its one record, and the exit status is 0.
func TestServeRecordsARequestWhoseReleaseRedisDoesNotAnswer(t *testing.T) {
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
	rl := testenv.StartRedisRelay(t, target)
	key, keyLines := newKey(t, "acme", "acme-one")
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "goodput.yaml")
	logPath := filepath.Join(dir, "requests.jsonl")
	yaml := fmt.Sprintf(`listen: 127.0.0.1:0
admin_listen: "off"
request_log: %s
shutdown_grace: 100ms
sim: {itl: 20ms}
ratelimit:
  backend: redis
  redis: {url: "redis://%s/%s", timeout: 10s, key_prefix: "gp-shutdownrelease-%d"}
tenants:
  - name: acme
    limits: {max_concurrency: 4}
    keys:
%s`, logPath, rl.Addr(), db, time.Now().UnixNano(), keyLines)
	if err := os.WriteFile(cfgPath, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "serve", "--config", cfgPath)
	cmd.Env = append(os.Environ(), childEnv+"=1")
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
	rl.Freeze() // Redis stops answering
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err = <-exited:
	case <-time.After(30 * time.Second):
		t.Fatalf("gateway still running 30s after SIGTERM\n%s", stderr.String())
	}
	if err != nil {
		t.Fatalf("exit: %v, want status 0\n%s", err, stderr.String())
	}
	data, err := os.ReadFile(logPath)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	if len(lines) != 1 {
		t.Fatalf("%d records, want 1:\n%s", len(lines), data)
	}
	var rec map[string]any
	if err := json.Unmarshal([]byte(lines[0]), &rec); err != nil {
		t.Fatal(err)
	}
	if rec["outcome"] != "timeout" || rec["tenant"] != "acme" {
		t.Fatalf("record %s, want outcome timeout for tenant acme (the cut stream)", lines[0])
	}
}
