package proxy

import (
	"bufio"
	"fmt"
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
	ask := func(conn net.Conn, br *bufio.Reader) { t.Helper(); askOn(t, g, conn, br) }
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

// A connection in steady use is never closed to make room, however long
// new ones wait: its client sends its next request as soon as the answer
// ends, and a close racing that request would lose it, unanswered and
// unrecorded. Only a connection idle for reclaimMinIdle is reclaimed.
func TestCapSparesABusyConnection(t *testing.T) {
	up := startRawUpstream(t, vllmUpstream(0))
	g := startTunedGateway(t, Config{Upstream: up.URL()}, func(g *gateway) {
		g.ln = NewListener(g.ln.Listener, 1, nil)
	})
	busy, err := net.Dial("tcp", g.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	br := bufio.NewReader(busy)
	askOn(t, g, busy, br) // the busy client holds the one slot
	waiting, err := net.Dial("tcp", g.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer waiting.Close()
	answered := make(chan error, 1)
	go func() {
		waiting.SetDeadline(time.Now().Add(30 * time.Second))
		answered <- askErr(waiting, bufio.NewReader(waiting))
	}()
	busy.SetDeadline(time.Now().Add(30 * time.Second))
	for range 200 {
		if err := askErr(busy, br); err != nil {
			t.Fatalf("a request on the busy connection: %v (reclaimed %d)", err, g.ln.Reclaimed())
		}
	}
	// Once it rests, it is reclaimed and the waiting client is served.
	if err := <-answered; err != nil {
		t.Fatalf("the waiting client: %v", err)
	}
	if got := g.ln.Reclaimed(); got != 1 {
		t.Fatalf("%d reclaimed, want 1", got)
	}
	for range 201 { // the busy client's 200 more, and the waiting one's
		g.record(t)
	}
	g.noMoreRecords(t)
}

// Below the cap nothing is reclaimed: a slot that came free while Accept
// waited for the next connection is taken.
func TestCapTakesAFreeSlotFirst(t *testing.T) {
	up := startRawUpstream(t, vllmUpstream(0))
	g := startTunedGateway(t, Config{Upstream: up.URL()}, func(g *gateway) {
		g.ln = NewListener(g.ln.Listener, 2, nil)
		g.ln.minIdle = 0 // any idle one could be reclaimed
	})
	var conns []net.Conn
	for range 2 {
		c, err := net.Dial("tcp", g.addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		askOn(t, g, c, bufio.NewReader(c))
		conns = append(conns, c)
	}
	conns[1].Close()
	waitOpen(t, g.ln, 1)
	c, err := net.Dial("tcp", g.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(20 * time.Second))
	askOn(t, g, c, bufio.NewReader(c))
	if got := g.ln.Reclaimed(); got != 0 {
		t.Fatalf("%d reclaimed below the cap", got)
	}
	// The first connection still serves.
	conns[0].SetDeadline(time.Now().Add(20 * time.Second))
	askOn(t, g, conns[0], bufio.NewReader(conns[0]))
}

// askErr sends one chat request on conn and reads its whole answer.
func askErr(conn net.Conn, br *bufio.Reader) error {
	if _, err := io.WriteString(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: "+strconv.Itoa(len(chatBody))+"\r\n\r\n"+chatBody); err != nil {
		return err
	}
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		return err
	}
	if resp.StatusCode != 200 {
		return fmt.Errorf("status %d", resp.StatusCode)
	}
	_, err = io.ReadAll(resp.Body)
	return err
}

// askOn is askErr that fails the test, and takes the request's record.
func askOn(t *testing.T, g *gateway, conn net.Conn, br *bufio.Reader) {
	t.Helper()
	if err := askErr(conn, br); err != nil {
		t.Fatal(err)
	}
	g.record(t)
}
