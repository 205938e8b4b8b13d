//go:build linux && !race

package proxy

import (
	"fmt"
	"testing"
	"time"
)

// A direct stream in an I/O loop: per arrival, the loop's wake, the
// stream's callback run by it (one read(2) into the framer, the framing
// taken off in place, events framed, parsed, metered and written to the
// client with one non-blocking write) allocates nothing once buffers have
// grown, on the loop's goroutine or the stream's.
func TestLoopReadAllocatesNothing(t *testing.T) {
	s, c, engine := directStreamForTest(t, true)

	// The stream joins a loop as loopRead has it join, its goroutine
	// played by the test, which waits for the loop's park after both
	// events of a write were metered (the meter is started again there, on
	// the loop's goroutine, so that it does not grow).
	metered := make(chan struct{}, 1)
	testHookPark = func(int) {
		if s.meter.TokenEvents() == 2 {
			s.meter.Start(time.Now())
			metered <- struct{}{}
		}
	}
	defer func() { testHookPark = nil }()
	l := pickLoop()
	if l == nil {
		t.Skip("no I/O loop on this machine")
	}
	if err := c.rc.Control(func(fd uintptr) { s.dr.fd = fd }); err != nil {
		t.Fatal(err)
	}
	sl := l.take(s, s.dr.fd)
	if e := epollCtl(l.epfd, 1 /* EPOLL_CTL_ADD */, sl.fd, loopFlags, sl.idx, sl.gen.Load()); e != 0 {
		t.Fatal(e)
	}
	s.dr.slot = sl
	s.conn.loop.Store(sl)
	sl.mu.Unlock()
	defer func() {
		sl.mu.Lock()
		s.leaveLoop(sl)
	}()

	chunk := []byte(fmt.Sprintf("%x\r\n%s\r\n", len(vllmEvents[1]+vllmEvents[2]), vllmEvents[1]+vllmEvents[2]))
	timeout := time.NewTimer(time.Hour)
	timeout.Stop()
	step := func() {
		if _, err := engine.Write(chunk); err != nil {
			t.Fatal(err)
		}
		timeout.Reset(10 * time.Second)
		select {
		case <-metered:
			timeout.Stop()
		case <-timeout.C:
			t.Fatal("the loop did not meter the write's events within 10s")
		}
		if sl.ended || s.lagging {
			t.Fatalf("the stream left the loop: %v", s.dr.err)
		}
	}
	assertNoAllocs(t, step, "read of 2 events in a loop")
}
