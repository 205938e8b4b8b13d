package proxy

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/goodput/goodput/internal/testenv"
	"github.com/goodput/goodput/meter"
)

// A stream's answer tells nginx not to buffer it (X-Accel-Buffering: no):
// an event stream, metered or not, and Ollama's NDJSON stream; a JSON body
// does not, and an engine's own X-Accel-Buffering is left as it is.
func TestStreamsSayNotToBuffer(t *testing.T) {
	ndjson := `{"model":"m","message":{"role":"assistant","content":"hi"},"done":false}` + "\n" +
		`{"model":"m","message":{"role":"assistant","content":""},"done":true,"done_reason":"stop","prompt_eval_count":7,"eval_count":1}` + "\n"
	for _, c := range []struct {
		name, path, ctype, extra, body, want string
	}{
		{"event stream", "/v1/chat/completions", "text/event-stream", "", strings.Join(vllmEvents, "") + done, "no"},
		{"unmetered event stream", "/v1/other", "text/event-stream", "", "data: x\n\n", "no"},
		{"Ollama's stream", "/api/chat", "application/x-ndjson", "", ndjson, "no"},
		{"a JSON body", "/v1/chat/completions", "application/json", "", jsonReply, ""},
		{"the engine's own", "/v1/chat/completions", "text/event-stream", "X-Accel-Buffering: yes\r\n", strings.Join(vllmEvents, "") + done, "yes"},
	} {
		t.Run(c.name, func(t *testing.T) {
			up := startRawUpstream(t, func(s *scriptConn) {
				fmt.Fprintf(s.BW, "HTTP/1.1 200 OK\r\nContent-Type: %s\r\n%sTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n", c.ctype, c.extra, len(c.body), c.body)
				s.BW.Flush()
			})
			g := startGateway(t, Config{Upstream: up.URL()})
			status, hdr, body, err := post(t, g.URL()+c.path, `{"model":"m","stream":true,"messages":[]}`, nil)
			if err != nil || status != 200 || body != c.body {
				t.Fatalf("%d %v %q", status, err, body)
			}
			if got := hdr.Get("X-Accel-Buffering"); got != c.want || len(hdr.Values("X-Accel-Buffering")) > 1 {
				t.Fatalf("X-Accel-Buffering %q, want %q", hdr.Values("X-Accel-Buffering"), c.want)
			}
			g.record(t)
		})
	}
}

// Behind nginx with its defaults for proxy_pass (HTTP/1.0 to the gateway,
// proxy_buffering on), a stream reaches the client as it comes: the
// engine holds the rest of its answer until the client has read the first
// event, which a buffering nginx would keep until the answer's end (the
// engine then gives up waiting, and the test fails). The record is the
// stream's, whole.
func TestStreamThroughNginxDefaults(t *testing.T) {
	bin := testenv.Binary(t, "nginx-light", "nginx")
	seen := make(chan struct{})
	held := make(chan bool, 1) // whether the engine's wait ended by the client's read
	up := startRawUpstream(t, func(c *scriptConn) {
		writeSSEHead(c)
		writeChunk(c, vllmEvents[0])
		select {
		case <-seen:
			held <- true
		case <-time.After(10 * time.Second):
			held <- false
		}
		for _, e := range vllmEvents[1:] {
			writeChunk(c, e)
		}
		writeChunk(c, done)
		endChunks(c)
	})
	g := startGateway(t, Config{Upstream: up.URL()})
	addr := startNginx(t, bin, `location / { proxy_pass http://`+g.addr+`; }`)

	resp, err := http.Post("http://"+addr+"/v1/chat/completions", "application/json",
		strings.NewReader(`{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	br := bufio.NewReader(resp.Body)
	var got strings.Builder
	for {
		line, err := br.ReadString('\n')
		got.WriteString(line)
		if strings.HasPrefix(line, "data: ") {
			close(seen)
			break
		}
		if err != nil {
			t.Fatalf("no event: %v, after %q", err, got.String())
		}
	}
	if !<-held {
		t.Fatal("nginx held the first event until the engine's answer ended")
	}
	rest := new(strings.Builder)
	if _, err := bufio.NewReader(br).WriteTo(rest); err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(rest.String(), done) {
		t.Fatalf("the stream's end: %q", rest.String())
	}
	if rec := g.record(t); rec.Outcome != meter.OutcomeOK || !rec.Stream || rec.OSL <= 0 {
		t.Fatalf("record %+v", rec)
	}
}

// startNginx runs nginx in the foreground, a single process, with location
// as its one server's configuration, on a loopback port of its own, and
// returns its address once it accepts connections.
func startNginx(t *testing.T, bin, location string) string {
	t.Helper()
	dir := t.TempDir()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nginx binds it next; another taker in between fails the start
	conf := fmt.Sprintf(`daemon off;
master_process off;
pid %[1]s/nginx.pid;
error_log %[1]s/error.log warn;
events { worker_connections 64; }
http {
  access_log off;
  client_body_temp_path %[1]s/body;
  proxy_temp_path %[1]s/proxy;
  fastcgi_temp_path %[1]s/fastcgi;
  uwsgi_temp_path %[1]s/uwsgi;
  scgi_temp_path %[1]s/scgi;
  server {
    listen %[2]s;
    %[3]s
  }
}
`, dir, addr, location)
	f := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(f, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-p", dir, "-e", filepath.Join(dir, "error.log"), "-c", f)
	_, exited := testenv.StartChild(t, "nginx", cmd)
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			return addr
		}
		select {
		case <-exited:
			log, _ := os.ReadFile(filepath.Join(dir, "error.log"))
			t.Fatalf("nginx exited: %s", log)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("nginx does not accept on %s: %v", addr, err)
		}
		time.Sleep(10 * time.Millisecond) // an outside process: no barrier of ours to wait on
	}
}

// X-Accel-Buffering: no goes with what the gateway streams, not with what
// the request asked for: a stream request's error answer that is not an
// event stream (a 503 in text/plain) is one body, not a stream, and says
// nothing to nginx; an event stream under another type (text/plain), which
// the gateway frames and flushes as one and records as a stream, says it.
func TestAccelBufferingFollowsTheAnswer(t *testing.T) {
	ev := strings.Join(vllmEvents, "") + done
	for _, c := range []struct {
		name, status, ctype, body, want string
		stream                          bool
	}{
		{"an error in text/plain", "503 Service Unavailable", "text/plain", "busy", "", false},
		{"an error in HTML", "502 Bad Gateway", "text/html", "<html>bad gateway</html>", "", false},
		{"a stream under text/plain", "200 OK", "text/plain", ev, "no", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			up := startRawUpstream(t, func(s *scriptConn) {
				fmt.Fprintf(s.BW, "HTTP/1.1 %s\r\nContent-Type: %s\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n", c.status, c.ctype, len(c.body), c.body)
				s.BW.Flush()
			})
			g := startGateway(t, Config{Upstream: up.URL()})
			_, hdr, body, err := post(t, g.URL()+"/v1/chat/completions", `{"model":"m","stream":true,"messages":[]}`, nil)
			if err != nil || body != c.body {
				t.Fatalf("%v %q", err, body)
			}
			rec := g.record(t)
			if got := hdr.Get("X-Accel-Buffering"); got != c.want {
				t.Fatalf("X-Accel-Buffering %q, want %q (record: stream %v, status %d)", got, c.want, rec.Stream, rec.Status)
			}
			if c.stream && !rec.Stream {
				t.Fatal("record: not a stream")
			}
		})
	}
}
