package proxy

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"testing"
	"time"
)

// A connection that closes gives its goroutine back soon (idleWorkerTTL),
// not after fasthttp's 10 s: kept, an idle worker holds the 8 KiB stack its
// last stream grew to, and when many streams end together (a burst over)
// the next collection shrinks each of those stacks into a new one, memory
// the process did not use while the streams ran.
func TestClosedConnectionsGiveBackTheirGoroutines(t *testing.T) {
	// An engine that is not fasthttp's: only the gateway's goroutines are
	// counted.
	engine := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"object":"list","data":[]}`)
	}))
	defer engine.Close()
	g := startGateway(t, Config{Upstream: engine.URL})
	const n = 40
	var conns []net.Conn
	for range n {
		c, err := net.Dial("tcp", g.addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		fmt.Fprintf(c, "GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("status %d", resp.StatusCode)
		}
		conns = append(conns, c)
	}
	if w := workers(); w < n {
		t.Fatalf("%d connections served by %d goroutines", n, w)
	}
	for _, c := range conns {
		c.Close()
	}
	deadline := time.Now().Add(5 * time.Second)
	for workers() > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines of closed connections still kept after 5 s", workers())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// workers counts fasthttp's connection goroutines, serving or idle.
func workers() int {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	return bytes.Count(buf, []byte("fasthttp.(*workerPool).workerFunc("))
}
