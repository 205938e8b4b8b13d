package main

import (
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/goodput/goodput/internal/config"
)

// SIGHUP never ends the gateway, also with no tenants configured (issue
// 8.4: it exited with code 129): it reopens the request log after a
// rotation moved the file away, and a stream in flight across it is
// untouched and logged.
func TestServeSIGHUPReopensRequestLog(t *testing.T) {
	dir := t.TempDir()
	logPath := filepath.Join(dir, "requests.jsonl")
	cfg := &config.Config{Listen: "127.0.0.1:0", AdminListen: "off", RequestLog: logPath}
	s, logs := startServe(t, cfg)
	base := "http://" + s.Proxy

	if st, _ := chatReq(t, base, "", map[string]string{"X-Request-Id": "r-before"}, smallChat); st != 200 {
		t.Fatalf("first request: %d", st)
	}
	waitFor(t, func() bool { return len(readLog(t, logPath)) == 1 })

	// A stream is in flight across the rotation and the signal.
	req, _ := http.NewRequest("POST", base+"/v1/chat/completions",
		strings.NewReader(`{"model":"sim-llama","stream":true,"max_tokens":30,"ignore_eos":true,"messages":[]}`))
	req.Header.Set("X-Sim-ITL", "10ms")
	req.Header.Set("X-Request-Id", "r-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	first := make([]byte, 1)
	if _, err := io.ReadFull(resp.Body, first); err != nil {
		t.Fatal(err)
	}

	if err := os.Rename(logPath, logPath+".1"); err != nil {
		t.Fatal(err)
	}
	syscall.Kill(os.Getpid(), syscall.SIGHUP)
	waitFor(t, func() bool { return strings.Contains(logs.String(), "request log reopened") })

	rest, err := io.ReadAll(resp.Body)
	if err != nil || !strings.HasSuffix(string(rest), "data: [DONE]\n\n") {
		t.Fatalf("the stream across SIGHUP: %v, ends %q", err, rest[max(0, len(rest)-80):])
	}
	if st, _ := chatReq(t, base, "", map[string]string{"X-Request-Id": "r-after"}, smallChat); st != 200 {
		t.Fatalf("request after SIGHUP: %d", st)
	}
	// The stream ends in the file that is current when it ends (the new
	// one, unless the signal took longer than the stream).
	ids := func(path string) string {
		var out []string
		for _, l := range readLog(t, path) {
			out = append(out, l["request_id"].(string))
		}
		return strings.Join(out, ",")
	}
	waitFor(t, func() bool { return strings.HasSuffix(ids(logPath), "r-after") })
	moved, current := ids(logPath+".1"), ids(logPath)
	if !(moved == "r-before" && current == "r-stream,r-after" || moved == "r-before,r-stream" && current == "r-after") {
		t.Fatalf("moved file has %q, the new one %q: want r-before in the moved file only, r-after in the new one only, r-stream once", moved, current)
	}
	// A second SIGHUP, nothing moved: the log goes on in the same file.
	syscall.Kill(os.Getpid(), syscall.SIGHUP)
	waitFor(t, func() bool { return strings.Count(logs.String(), "request log reopened") == 2 })
	if st, _ := chatReq(t, base, "", map[string]string{"X-Request-Id": "r-last"}, smallChat); st != 200 {
		t.Fatalf("request after the second SIGHUP: %d", st)
	}
	waitFor(t, func() bool { return strings.HasSuffix(ids(logPath), "r-after,r-last") })
}

// SIGHUP with neither tenants nor a request log is logged and ignored.
func TestServeSIGHUPNothingToReload(t *testing.T) {
	cfg := &config.Config{Listen: "127.0.0.1:0", AdminListen: "off"}
	s, logs := startServe(t, cfg)
	syscall.Kill(os.Getpid(), syscall.SIGHUP)
	waitFor(t, func() bool { return strings.Contains(logs.String(), "SIGHUP: nothing to reload") })
	if st, _ := chatReq(t, "http://"+s.Proxy, "", nil, smallChat); st != 200 {
		t.Fatalf("request after SIGHUP: %d", st)
	}
}
