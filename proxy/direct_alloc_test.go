//go:build unix && !race

package proxy

import (
	"fmt"
	"io"
	"net"
	"testing"
	"time"
)

// The direct read path per arrival (one read(2) into the framer, the
// framing taken off in place, events framed, parsed, metered and written to
// the client with one non-blocking write) allocates nothing once buffers
// have grown.
func TestDirectReadAllocatesNothing(t *testing.T) {
	s, c, engine := directStreamForTest(t, false) // the stream's own reads (TestLoopReadAllocatesNothing: the loop's)
	chunk := []byte(fmt.Sprintf("%x\r\n%s\r\n", len(vllmEvents[1]+vllmEvents[2]), vllmEvents[1]+vllmEvents[2]))
	callback := func(fd uintptr) { s.onReadable(fd) }
	step := func() {
		if _, err := engine.Write(chunk); err != nil {
			t.Fatal(err)
		}
		want := s.meter.TokenEvents() + 2
		for s.meter.TokenEvents() < want { // until loopback has delivered the write
			if err := c.rc.Control(callback); err != nil || s.dr.err != nil {
				t.Fatalf("read: %v %v", err, s.dr.err)
			}
		}
		if s.lagging {
			t.Fatal("the client lagged: the writer goroutine took over")
		}
		s.meter.Start(time.Now())
	}
	assertNoAllocs(t, step, "read of 2 events")
	if s.dr.reads == 0 {
		t.Fatal("no read(2) made")
	}
}

// directStreamForTest returns an SSE stream on the direct read path, its
// head out, inline, reading upstream connection c (whose engine side is
// engine) and writing to a client that keeps up; ioLoop says whether its
// proxy has I/O loops.
func directStreamForTest(t *testing.T, ioLoop bool) (s *stream, c *upConn, engine net.Conn) {
	t.Helper()
	c, src, engine := upstreamPair(t)
	c.src = src
	client, _, clientPeer := upstreamPair(t) // a connection to play the client's
	go io.Copy(io.Discard, clientPeer)       // a client that keeps up

	s = testSSEStream(t)
	s.p.ioLoop = ioLoop
	s.conn = c
	s.client, s.raw = client.Conn, rawConnOf(client.Conn)
	s.writeFDFn = s.writeFD
	s.headSent = true
	s.state.Store(stateInline)
	s.direct = true
	s.dr = directReader{}
	s.dr.dec.init(-1)
	s.onReadableFn = s.onReadable
	s.armed = time.Now().Add(time.Hour)
	s.meter.Start(time.Now())
	return s, c, engine
}
