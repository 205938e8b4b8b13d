package proxy

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strconv"
	"testing"
	"time"
)

// At max_connections the connection idle the longest between requests is
// closed to make room: clients that keep idle connections cannot hold
// every slot for the idle timeout while a new client waits.
func TestCapReclaimsTheLongestIdle(t *testing.T) {
	up := startRawUpstream(t, vllmUpstream(0))
	g := startTunedGateway(t, Config{Upstream: up.URL()}, func(g *gateway) {
		g.ln = NewListener(g.ln.Listener, 2, nil)
	})
	// ask sends one request on conn and reads its whole answer.
	ask := func(conn net.Conn, br *bufio.Reader) {
		t.Helper()
		if _, err := io.WriteString(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: "+strconv.Itoa(len(chatBody))+"\r\n\r\n"+chatBody); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("%v %v", resp, err)
		}
		if _, err := io.ReadAll(resp.Body); err != nil {
			t.Fatal(err)
		}
		g.record(t)
	}
	var conns [3]net.Conn
	var readers [3]*bufio.Reader
	for i := range 2 {
		c, err := net.Dial("tcp", g.addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		conns[i], readers[i] = c, bufio.NewReader(c)
		ask(c, readers[i])
		waitIdle(t, g.ln, i+1) // the first is idle before the second
	}
	// The third is served, though both slots are held by idle clients.
	c, err := net.Dial("tcp", g.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(20 * time.Second)) // the idle timeout is 90 s
	ask(c, bufio.NewReader(c))
	// The first, idle the longest, was closed; the second still serves.
	conns[0].SetReadDeadline(time.Now().Add(10 * time.Second))
	if n, err := readers[0].Read(make([]byte, 1)); n != 0 || err != io.EOF {
		t.Fatalf("the longest idle connection: %d bytes, %v; want it closed", n, err)
	}
	if got := g.ln.Reclaimed(); got != 1 {
		t.Fatalf("%d reclaimed, want 1", got)
	}
	conns[1].SetDeadline(time.Now().Add(20 * time.Second))
	c.Close() // its slot for the second's next request is not needed, but frees one
	ask(conns[1], readers[1])
	g.noMoreRecords(t)
}

// waitIdle waits until n connections of l wait for their next request.
func waitIdle(t *testing.T, l *Listener, n int) {
	t.Helper()
	for end := time.Now().Add(10 * time.Second); ; {
		idle := 0
		for _, c := range l.snapshot() {
			if c.idleAt.Load() != 0 {
				idle++
			}
		}
		if idle == n {
			return
		}
		if time.Now().After(end) {
			t.Fatalf("%d connections idle, want %d", idle, n)
		}
		time.Sleep(time.Millisecond)
	}
}
