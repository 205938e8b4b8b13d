//go:build unix

package proxy

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime/pprof"
	"strings"
	"testing"
	"time"

	"github.com/goodput/goodput/meter"
)

// streamGoroutines counts the goroutines a stream starts: a reader of its
// own (started by Read) and the writer (started by startWriter).
func streamGoroutines() (readers, writers int) {
	var b bytes.Buffer
	pprof.Lookup("goroutine").WriteTo(&b, 2)
	return strings.Count(b.String(), "created by github.com/goodput/goodput/proxy.(*stream).Read"),
		strings.Count(b.String(), "created by github.com/goodput/goodput/proxy.(*stream).startWriter")
}

// A stream whose client keeps up has one goroutine: the client
// connection's, which reads the upstream and writes each event itself. No
// reader or writer goroutine runs while it streams.
func TestOneGoroutinePerStream(t *testing.T) {
	next := make(chan struct{})
	up := startRawUpstream(t, func(c *scriptConn) {
		writeSSEHead(c)
		for _, e := range vllmEvents {
			writeChunk(c, e)
			<-next // the test looks at the goroutines between events
		}
		writeChunk(c, done)
		endChunks(c)
	})
	g := startGateway(t, Config{Upstream: up.URL()})
	body := rawStreamBody(t, g)
	for i := range vllmEvents {
		ev, err := readEvent(body)
		if err != nil || ev != vllmEvents[i] {
			t.Fatalf("event %d: %q, %v", i, ev, err)
		}
		// The event reached the client; the stream waits for the next.
		if r, w := streamGoroutines(); r != 0 || w != 0 {
			t.Fatalf("after event %d: %d reader and %d writer goroutines, want none (one goroutine per stream)", i, r, w)
		}
		next <- struct{}{}
	}
	rest, err := io.ReadAll(body)
	if err != nil || string(rest) != done {
		t.Fatalf("rest %q, %v", rest, err)
	}
	if rec := g.record(t); rec.Outcome != meter.OutcomeOK || rec.Events != len(vllmEvents) {
		t.Fatalf("record %+v", rec)
	}
}

// readEvent reads one SSE event (up to its blank line).
func readEvent(br *bufio.Reader) (string, error) {
	var ev strings.Builder
	for {
		line, err := br.ReadString('\n')
		ev.WriteString(line)
		if err != nil || line == "\n" {
			return ev.String(), err
		}
	}
}

// A client that stops reading makes the stream fall back to the writer
// goroutine: the reader goes on reading and stamping (the engine's events
// are all read though the client takes none), and when the client reads
// again it gets every byte, in order, chunk framing intact. So too when
// the first read is large (a first event of 64 KB): the response head goes
// alone then, and the event by the non-blocking write, which the client
// does not take; it used to go with the head in one write, which waited
// for the client.
func TestLaggingClientFallsBack(t *testing.T) {
	for _, c := range []struct {
		name  string
		first int // bytes of content in the first event
	}{{"events of 2 KB", 2000}, {"a first event of 64 KB", 64 << 10}} {
		t.Run(c.name, func(t *testing.T) { laggingClientFallsBack(t, c.first) })
	}
}

func laggingClientFallsBack(t *testing.T, first int) {
	const n = 40
	ev := func(i int) string {
		size := 2000
		if i == 0 {
			size = first
		}
		return fmt.Sprintf("data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"%04d%s\"}}]}\n\n", i, strings.Repeat("x", size))
	}
	allWritten := make(chan struct{})
	readAll := make(chan struct{}) // the gateway's reader handled [DONE]
	testHookEvent = func(raw []byte) {
		if string(raw) == done {
			close(readAll)
		}
	}
	defer func() { testHookEvent = nil }()
	up := startRawUpstream(t, func(c *scriptConn) {
		writeSSEHead(c)
		for i := 0; i < n; i++ {
			if writeChunk(c, ev(i)) != nil {
				return
			}
		}
		writeChunk(c, done)
		endChunks(c)
		close(allWritten)
	})
	// Small socket buffers on the gateway's side too: the client's lag
	// shows after a few events, not megabytes.
	g := startGatewayOn(t, Config{Upstream: up.URL()}, func(c net.Conn) net.Conn {
		c.(*net.TCPConn).SetWriteBuffer(4096)
		return c
	})
	// A small receive window from the connection's start: it fills at
	// once, and the gateway's socket soon after.
	conn := smallWindowPost(t, g.addr)
	defer conn.Close()
	// 80 KB: more than the sockets hold, less than the gateway's
	// lag bound (MaxClientLag, 1 MiB): the engine's writes all end, and the
	// gateway reads them all, while the client reads nothing.
	select {
	case <-allWritten:
	case <-time.After(10 * time.Second):
		t.Fatal("the engine could not write its stream while the client did not read: the reader waited for the client")
	}
	select {
	case <-readAll:
	case <-time.After(10 * time.Second):
		t.Fatal("the gateway did not read the stream while its client did not read: the reader waited for the client")
	}
	if _, w := streamGoroutines(); w != 1 {
		t.Fatalf("%d writer goroutines for the lagging client, want 1", w)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	var want strings.Builder
	for i := 0; i < n; i++ {
		want.WriteString(ev(i))
	}
	want.WriteString(done)
	if string(b) != want.String() {
		t.Fatalf("the client got %d bytes, want %d (in order)", len(b), want.Len())
	}
	if rec := g.record(t); rec.Outcome != meter.OutcomeOK || rec.Events != n {
		t.Fatalf("record %+v", rec)
	}
}
