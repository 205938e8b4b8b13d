package proxy

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/goodput/goodput/meter"
)

// oversizedUpload sends the head of a chat request whose body is declared
// over the gateway's limit, and the first n bytes of that body.
func oversizedUpload(t *testing.T, addr string, declared, n int) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(time.Minute))
	fmt.Fprintf(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", declared)
	chunk := bytes.Repeat([]byte("a"), 64<<10)
	for sent := 0; sent < n; sent += len(chunk) {
		if _, err := c.Write(chunk[:min(len(chunk), n-sent)]); err != nil {
			t.Fatalf("the upload was cut after %d of %d bytes: %v", sent, n, err)
		}
	}
	return c
}

// readAnswer413 reads one response from c and checks it is the limit's 413.
func readAnswer413(t *testing.T, c net.Conn) {
	t.Helper()
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("no answer: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 413 || !strings.Contains(string(body), "request_too_large") {
		t.Fatalf("answer %d %s", resp.StatusCode, body)
	}
}

// A client that sends its whole body before it reads the answer (Node's
// fetch under the openai SDK, curl for a large body) gets the 413 of an
// upload over the limit. The gateway answers as soon as it has the head,
// and closed the connection with the body unread, which made the close a
// reset: the client's writes failed, and its kernel dropped the answer
// (7 of 10 uploads of 8 MB through the SDK ended as "connection error",
// and the SDK sent each again). The connection now drains what the client
// sends before it closes, as nginx does.
func TestOversizedUploadGetsItsAnswer(t *testing.T) {
	up := startRawUpstream(t, vllmUpstream(0))
	g := startGateway(t, Config{Upstream: up.URL(), MaxBodyBytes: 64 << 10})
	c := oversizedUpload(t, g.addr, 64<<20, 16<<20)
	readAnswer413(t, c)
	if rec := g.record(t); rec.Outcome != meter.OutcomeRejected || rec.Status != 413 {
		t.Fatalf("record %+v", rec)
	}
	g.noMoreRecords(t)
}

// A lingering close ends once the client has gone quiet for lingerIdle,
// and gives the connection's slot back.
func TestLingerEndsWhenTheClientGoesQuiet(t *testing.T) {
	g, done := startLingerGateway(t, 50*time.Millisecond)
	c := oversizedUpload(t, g.addr, 1<<20, 4<<10)
	readAnswer413(t, c)
	// The client neither sends nor closes: the linger ends on its own.
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the lingering close did not end when the client went quiet")
	}
	if n := g.ln.Open(); n != 0 {
		t.Fatalf("%d connections still open after the linger", n)
	}
}

// The shutdown's last resort, closing every connection, ends a lingering
// close at once.
func TestCloseAllEndsALinger(t *testing.T) {
	g, done := startLingerGateway(t, time.Hour)
	c := oversizedUpload(t, g.addr, 1<<20, 4<<10)
	readAnswer413(t, c)
	select {
	case <-done:
		t.Fatal("the linger ended before the client went quiet for an hour")
	default:
	}
	g.ln.CloseAll()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("CloseAll did not end the lingering close")
	}
	if n := g.ln.Open(); n != 0 {
		t.Fatalf("%d connections still open", n)
	}
}

// startLingerGateway starts a gateway with a body limit of 1 KiB whose
// lingering closes wait idle for the client's next bytes; done receives
// when one has closed its connection.
func startLingerGateway(t *testing.T, idle time.Duration) (g *gateway, done <-chan struct{}) {
	ch := make(chan struct{}, 16)
	up := startRawUpstream(t, vllmUpstream(0))
	g = startTunedGateway(t, Config{Upstream: up.URL(), MaxBodyBytes: 1 << 10}, func(g *gateway) {
		g.ln.lingerIdle = idle
		g.ln.lingerDone = func() { ch <- struct{}{} }
	})
	return g, ch
}

// Near the connection cap a connection does not linger: lingering ones
// hold their slots for up to lingerTotal, and new clients would wait at the
// cap for them.
func TestNoLingerNearTheCap(t *testing.T) {
	up := startRawUpstream(t, vllmUpstream(0))
	lingered := make(chan struct{}, 4)
	g := startTunedGateway(t, Config{Upstream: up.URL(), MaxBodyBytes: 1 << 10}, func(g *gateway) {
		g.ln = NewListener(g.ln.Listener, 4, nil)
		g.ln.lingerIdle = time.Hour
		g.ln.lingerDone = func() { lingered <- struct{}{} }
	})
	for i := 0; i < 2; i++ { // two idle clients: with the next, 3 of 4 open
		c, err := net.Dial("tcp", g.addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
	}
	waitOpen(t, g.ln, 2)
	c := oversizedUpload(t, g.addr, 1<<20, 4<<10)
	readAnswer413(t, c)
	waitOpen(t, g.ln, 2) // closed at once, not after an hour's linger
	select {
	case <-lingered:
		t.Fatal("a lingering close ran")
	default:
	}
}

// waitOpen waits until l has n connections open.
func waitOpen(t *testing.T, l *Listener, n int64) {
	t.Helper()
	for end := time.Now().Add(10 * time.Second); l.Open() != n; {
		if time.Now().After(end) {
			t.Fatalf("%d connections open, want %d", l.Open(), n)
		}
		time.Sleep(time.Millisecond)
	}
}
