package main

import (
	"bufio"
	"io"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/goodput/goodput/internal/cfgtypes"
	"github.com/goodput/goodput/internal/config"
)

// A request whose body is still arriving when the shutdown's grace is over
// does not hold the shutdown (issue 8.3: slow bodies stretched it past its
// grace): its read is cut, and it ends as one record.
func TestServeShutdownCutsSlowBodies(t *testing.T) {
	dir := t.TempDir()
	logPath := filepath.Join(dir, "requests.jsonl")
	const grace = 300 * time.Millisecond
	cfg := &config.Config{Listen: "127.0.0.1:0", AdminListen: "127.0.0.1:0", RequestLog: logPath,
		ShutdownGrace: cfgtypes.Duration(grace)}
	cfg.Timeouts.ReadBody = cfgtypes.Duration(20 * time.Second) // the cut, not this, must end the reads
	r := launchServe(t, cfg)
	defer r.cancel()
	s, cancel, done := r.serving, r.cancel, r.done
	const head = "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n"
	dial := func() net.Conn {
		c, err := net.Dial("tcp", s.Proxy)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	// One client asks to continue: the 100 says its headers were read.
	withExpect := dial()
	io.WriteString(withExpect, head+"Expect: 100-continue\r\n\r\n")
	br := bufio.NewReader(withExpect)
	withExpect.SetReadDeadline(time.Now().Add(5 * time.Second))
	if line, err := br.ReadString('\n'); err != nil || !strings.HasPrefix(line, "HTTP/1.1 100") {
		t.Fatalf("no 100 Continue: %q %v", line, err)
	}
	io.WriteString(withExpect, `{"model":"x"`)
	// The other sends its headers and part of its body.
	plain := dial()
	io.WriteString(plain, head+"\r\n"+`{"model":"x"`)
	waitFor(t, func() bool {
		return strings.Contains(scrape(t, "http://"+s.Admin+"/metrics"), "goodput_client_connections 2")
	})

	stopAt := time.Now()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("serve still running 20s after the shutdown began")
	}
	took := time.Since(stopAt)
	if took > grace+2*time.Second {
		t.Fatalf("serve returned %v after the shutdown began (grace %v)", took, grace)
	}
	lines := readLog(t, logPath)
	if len(lines) != 2 {
		t.Fatalf("%d records for the 2 requests cut while their bodies were read: %v", len(lines), lines)
	}
	for _, l := range lines {
		if l["outcome"] != "rejected" {
			t.Fatalf("record %v", l)
		}
	}
	t.Logf("serve returned %v after the shutdown began", took)
}
