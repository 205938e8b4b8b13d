//go:build linux

package proxy

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/goodput/goodput/meter"
)

// startLoopGateway is startGateway with the I/O loops on (io_loop).
func startLoopGateway(t *testing.T, cfg Config) *gateway {
	t.Helper()
	cfg.IOLoop = true
	return startGateway(t, cfg)
}

// onJoin sets testHookLoopJoined to send on the channel it returns, for
// the test's duration.
func onJoin(t *testing.T) <-chan struct{} {
	joined := make(chan struct{}, 1024)
	testHookLoopJoined = func(net.Addr) { joined <- struct{}{} }
	t.Cleanup(func() { testHookLoopJoined = nil })
	return joined
}

// joins tells each upstream connection when its own stream joined a loop:
// a barrier per stream. (One channel for all would let a handler go on at
// another stream's join, and a stream whose whole body came before its
// first wait never joins: its join never comes, and a handler waits for
// ever.) A connection serves its streams one after another: a request
// that came late may reuse one whose stream ended.
type joins struct {
	mu sync.Mutex
	by map[string]chan struct{} // by the gateway's end of the connection
	n  atomic.Int32             // joins in all
}

func onJoins(t *testing.T) *joins {
	j := &joins{by: map[string]chan struct{}{}}
	testHookLoopJoined = func(local net.Addr) {
		j.n.Add(1)
		j.of(local.String()) <- struct{}{}
	}
	t.Cleanup(func() { testHookLoopJoined = nil })
	return j
}

func (j *joins) of(addr string) chan struct{} {
	j.mu.Lock()
	defer j.mu.Unlock()
	c := j.by[addr]
	if c == nil {
		c = make(chan struct{}, 64)
		j.by[addr] = c
	}
	return c
}

// wait waits until the stream read through the upstream connection c (the
// handler's side) joined a loop.
func (j *joins) wait(t *testing.T, c net.Conn) {
	select {
	case <-j.of(c.RemoteAddr().String()):
	case <-time.After(10 * time.Second):
		t.Error("a stream did not join a loop within 10s")
	}
}

// wholeStream checks that a stream's client got want, every event once and
// in order, and that its record is ok with events events.
func wholeStream(t *testing.T, g *gateway, body, want string, events int) {
	t.Helper()
	if body != want {
		t.Fatalf("the client got %d bytes, want %d: not every event, in order", len(body), len(want))
	}
	if rec := g.record(t); rec.Outcome != meter.OutcomeOK || rec.Events != events {
		t.Fatalf("record %+v", rec)
	}
}

// chunkOf is a chat stream's event whose delta is content.
func chunkOf(content string) string {
	return `data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"` + content + `"},"logprobs":null,"finish_reason":null}]}` + "\n\n"
}

// startBurst starts an engine that sends first, waits for its stream to
// join a loop, then sends burst and the stream's end, and a gateway with
// the loops on and MaxClientLag lag in front of it, and sends it a chat
// request on a connection of its own (whose receive buffer is readBuf
// when not 0), which the test reads as its client.
func startBurst(t *testing.T, joined *joins, first, burst string, lag, readBuf int) (*gateway, net.Conn) {
	t.Helper()
	up := startRawUpstream(t, func(c *scriptConn) {
		writeSSEHead(c)
		writeChunk(c, first)
		joined.wait(t, c.Conn)
		writeChunk(c, burst)
		writeChunk(c, done)
		endChunks(c)
	})
	g := startLoopGateway(t, Config{Upstream: up.URL(), MaxClientLag: lag})
	conn, err := net.Dial("tcp", g.addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	if readBuf > 0 {
		_ = conn.(*net.TCPConn).SetReadBuffer(readBuf)
	}
	if _, err := io.WriteString(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: "+strconv.Itoa(len(chatBody))+"\r\n\r\n"+chatBody); err != nil {
		t.Fatal(err)
	}
	return g, conn
}

func waitFor(t *testing.T, c <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-c:
	case <-time.After(10 * time.Second):
		t.Fatal("no " + what + " within 10s")
	}
}

// Many streams on the loops at once: each joins a loop once its head is
// out, every event reaches its client whole and is metered, and the
// streams' goroutines are not woken per event (about once each, at the
// end, and at most once per finRecheck while the stream runs). The engines
// are paced by what the clients read (an event is written for each one a
// client got), so that events come one by one, not in one burst the loop
// would read at one wake.
func TestLoopManyStreams(t *testing.T) {
	joined := onJoins(t)
	var wakes atomic.Int32
	testHookLoopWake = func(bool) { wakes.Add(1) }
	defer func() { testHookLoopWake = nil }()

	const streams, events = 48, 30
	got := make(chan struct{}, streams*(events+2)) // an event reached a client
	up := startRawUpstream(t, func(c *scriptConn) {
		writeSSEHead(c)
		writeChunk(c, vllmEvents[0])
		joined.wait(t, c.Conn) // the stream is in a loop: the rest comes through it
		for i := range events {
			select {
			case <-got:
			case <-time.After(10 * time.Second):
				t.Error("no event reached a client within 10s")
				return
			}
			writeChunk(c, vllmEvents[1+i%2])
		}
		writeChunk(c, done)
		endChunks(c)
	})
	g := startLoopGateway(t, Config{Upstream: up.URL()})
	var want strings.Builder
	want.WriteString(vllmEvents[0])
	for i := range events {
		want.WriteString(vllmEvents[1+i%2])
	}
	want.WriteString(done)

	start := time.Now()
	var wg sync.WaitGroup
	bodies := make(chan string, streams)
	for range streams {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := testClient.Do(newPost(t, g.URL()+"/v1/chat/completions", chatBody, nil))
			if err != nil {
				bodies <- "error: " + err.Error()
				return
			}
			defer resp.Body.Close()
			var b strings.Builder
			br := bufio.NewReader(resp.Body)
			for {
				line, err := br.ReadString('\n')
				b.WriteString(line)
				if err != nil {
					if err != io.EOF {
						b.WriteString("; error: " + err.Error())
					}
					break
				}
				if line == "\n" {
					got <- struct{}{} // an event's end
				}
			}
			bodies <- b.String()
		}()
	}
	wg.Wait()
	close(bodies)
	for b := range bodies {
		if b != want.String() {
			t.Fatalf("a client got %q, want %q", b, want.String())
		}
	}
	for range streams {
		if rec := g.record(t); rec.Outcome != meter.OutcomeOK || rec.Events != events+1 {
			t.Fatalf("record %+v", rec)
		}
	}
	if n := joined.n.Load(); n != streams {
		t.Fatalf("%d joins for %d streams: each joins once", n, streams)
	}
	rechecks := int32(time.Since(start)/finRecheck) + 1
	t.Logf("%d streams, %d events each: their goroutines woke %d times", streams, events, wakes.Load())
	if n := wakes.Load(); n > streams*(1+rechecks) {
		t.Fatalf("the streams' goroutines woke %d times for %d streams of %d events: not once each", n, streams, events)
	}
}

// A deadline that fires in the stream's goroutine while the loop has an
// event for the stream: the loop leaves the event to the goroutine (it
// finds the stream held) and does not run the stream meanwhile. When the
// deadline was only the recheck's, the stream reads on and the event
// reaches the client; when it was the idle timeout's, the stream ends
// there, the event is never handled (nor sent), and the connection is not
// reused.
func TestLoopDeadlineRacesEvent(t *testing.T) {
	for _, tc := range []struct {
		name string
		idle time.Duration
		ends bool
	}{
		{"recheck", 0, false},
		{"idle timeout", 300 * time.Millisecond, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			joined := onJoin(t)
			busy := make(chan struct{}, 16)
			onBusy := func() {
				select {
				case busy <- struct{}{}:
				default:
				}
			}
			testHookLoopBusy.Store(&onBusy)
			next := make(chan struct{})
			var once sync.Once
			var sawBusy atomic.Bool
			testHookLateDeadline = func() {
				once.Do(func() {
					for len(busy) > 0 {
						<-busy // the loop met the stream held before (its join)
					}
					next <- struct{}{} // the engine's event comes now
					select {
					case <-busy:
						sawBusy.Store(true)
					case <-time.After(5 * time.Second):
					}
				})
			}
			defer func() {
				testHookLoopBusy.Store(nil)
				testHookLateDeadline = nil
			}()

			up := startRawUpstream(t, func(c *scriptConn) {
				if c.Req.Header.Peek("X-Second") != nil {
					writeSSEHead(c)
					writeChunk(c, done)
					endChunks(c)
					return
				}
				writeSSEHead(c)
				writeChunk(c, vllmEvents[1]) // a token: the idle timeout applies
				<-next
				writeChunk(c, vllmEvents[2])
				if tc.ends {
					hungUpWithin(c, 10*time.Second)
					return
				}
				writeChunk(c, done)
				endChunks(c)
			})
			g := startLoopGateway(t, Config{Upstream: up.URL(), IdleTimeout: tc.idle})
			resp, err := testClient.Do(newPost(t, g.URL()+"/v1/chat/completions", chatBody, nil))
			if err != nil {
				t.Fatal(err)
			}
			waitFor(t, joined, "stream in a loop")
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if !sawBusy.Load() {
				t.Fatal("the loop ran the stream's callback while its goroutine handled the deadline")
			}
			rec := g.record(t)
			if !tc.ends {
				if want := vllmEvents[1] + vllmEvents[2] + done; string(body) != want || rec.Outcome != meter.OutcomeOK {
					t.Fatalf("body %q (want %q), record %+v", body, want, rec)
				}
				return
			}
			if string(body) != vllmEvents[1] || rec.Outcome != meter.OutcomeTimeout || rec.ErrorMessage != errIdleTimeout.Error() || rec.Events != 1 {
				t.Fatalf("body %q, record %+v: want the first event only and an idle timeout", body, rec)
			}
			// The connection was discarded: the next request dials anew.
			if st, _, _, err := post(t, g.URL()+"/v1/chat/completions", chatBody, map[string]string{"X-Second": "1"}); err != nil || st != http.StatusOK {
				t.Fatalf("second request: %d %v", st, err)
			}
			g.record(t)
			if n := up.accepts.Load(); n != 2 {
				t.Fatalf("%d upstream connections, want 2 (the timed-out one is not reused)", n)
			}
		})
	}
}

// byTimer sets testHookLoopWake, for the test's duration, to note whether
// a stream's goroutine woke at its deadline's timer.
func byTimer(t *testing.T) *atomic.Bool {
	var timer atomic.Bool
	testHookLoopWake = func(byTimer bool) {
		if byTimer {
			timer.Store(true)
		}
	}
	t.Cleanup(func() { testHookLoopWake = nil })
	return &timer
}

// The shutdown's cut ends a stream in a loop at once: its goroutine is
// woken by the cut, not at its next recheck.
func TestLoopShutdownCut(t *testing.T) {
	joined := onJoin(t)
	timer := byTimer(t)
	var late atomic.Bool
	testHookLateDeadline = func() { late.Store(true) }
	defer func() { testHookLateDeadline = nil }()
	hung := make(chan time.Time, 1)
	up := startRawUpstream(t, func(c *scriptConn) {
		writeSSEHead(c)
		writeChunk(c, vllmEvents[0])
		hung <- hungUpWithin(c, 10*time.Second)
	})
	g := startLoopGateway(t, Config{Upstream: up.URL()})
	s := startStream(t, g.URL()+"/v1/chat/completions", chatBody, nil)
	waitFor(t, joined, "stream in a loop")
	g.p.Cut()
	end := s.end(t)
	rec := g.record(t)
	if late.Load() || timer.Load() {
		t.Fatal("the stream ended at its recheck, not at the cut")
	}
	if end.err == nil || rec.Outcome != meter.OutcomeTimeout || rec.ErrorMessage != errShutdown.Error() {
		t.Fatalf("client end %v, record %+v: want an abnormal end and the shutdown's cut", end.err, rec)
	}
	if (<-hung).IsZero() {
		t.Fatal("the engine was not hung up on")
	}
}

// A client that leaves while its stream is in a loop: the loop's write to
// it fails, the stream ends as client_abort, its goroutine is told at once
// (not at its next recheck), and the engine is hung up on.
func TestLoopClientLeaves(t *testing.T) {
	joined := onJoin(t)
	timer := byTimer(t)
	gone := make(chan struct{})
	hung := make(chan bool, 1)
	up := startRawUpstream(t, func(c *scriptConn) {
		writeSSEHead(c)
		writeChunk(c, vllmEvents[0])
		<-gone
		for range 200 {
			if writeChunk(c, vllmEvents[1]) != nil || !hungUpWithin(c, 50*time.Millisecond).IsZero() {
				hung <- true
				return
			}
		}
		hung <- false
	})
	g := startLoopGateway(t, Config{Upstream: up.URL()})
	conn := rawPost(t, g.addr, chatBody, "")
	waitFor(t, joined, "stream in a loop")
	conn.Close()
	close(gone)
	rec := g.record(t)
	if rec.Outcome != meter.OutcomeClientAbort {
		t.Fatalf("record %+v: want client_abort", rec)
	}
	if timer.Load() {
		t.Fatal("the stream's goroutine learnt of the end at its recheck, not from the loop")
	}
	if !<-hung {
		t.Fatal("the engine was not hung up on")
	}
}

// A client that starts lagging inside what the loop reads (an engine far
// ahead of it): the loop never waits for it, as queue would once the
// stream's queue is full (every stream on the loop would wait too). The
// stream goes back to its goroutine, which waits for the client, and the
// client gets every event once it reads.
func TestLoopLaggingClientLeavesLoop(t *testing.T) {
	joined := onJoins(t)
	var loopWaited atomic.Bool
	var queued atomic.Int64 // held for the client when its stream first waited
	full := make(chan struct{})
	var once sync.Once
	testHookLagFull = func(s *stream) {
		if s.dr.inLoop() {
			loopWaited.Store(true)
		}
		once.Do(func() {
			queued.Store(s.p.LagMemory())
			close(full)
		})
	}
	defer func() { testHookLagFull = nil }()

	ev := chunkOf(strings.Repeat("x", 1000))
	// About 9 MiB, read by the loop in full reads one after another: more
	// than the sockets between it and the client take (up to 4 MiB sent).
	const events = 8000
	burst := strings.Repeat(ev, events)
	const lag = 64 << 10
	g, conn := startBurst(t, joined, vllmEvents[0], burst, lag, 0)
	select {
	case <-full: // the client lags a queue behind: the stream waits for it
	case <-time.After(10 * time.Second):
		t.Fatal("the stream never waited for its client")
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	wholeStream(t, g, string(body), vllmEvents[0]+burst+done, events+1)
	if loopWaited.Load() {
		t.Fatal("an I/O loop waited for a client that lags")
	}
	// The queue's room (half of MaxClientLag), and past it the chunk the
	// writer began with and the rest of one read (a few KiB of these
	// events): the loop read no more once the client lagged.
	t.Logf("held for the client when its stream first waited: %d KiB", queued.Load()>>10)
	if most := int64(lag/2 + 16<<10); queued.Load() > most {
		t.Fatalf("%d KiB held for the client when its stream first waited, want at most %d KiB: the loop read on for a client that lags", queued.Load()>>10, most>>10)
	}
}

// A slot is readied for its next stream under its mutex: the loop may
// drain an event of the slot's last registration at any time (it checked
// the generation before that stream left), and must find the slot either
// held or free, never readied for a stream whose goroutine has not handed
// it over (it would run that stream's callback meanwhile).
func TestLoopSlotTakenUnderLock(t *testing.T) {
	l, err := newIOLoop()
	if err != nil {
		t.Fatal(err)
	}
	defer l.f.Close() // never run: its epoll fd is the test's to close
	var seen atomic.Bool
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { // the loop, as drain finds the slot
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
			}
			if slots := *l.slots.Load(); len(slots) > 0 && slots[0].mu.TryLock() {
				if slots[0].s != nil {
					seen.Store(true)
				}
				slots[0].mu.Unlock()
			}
		}
	}()
	s := new(stream)
	for range 100000 {
		sl := l.take(s, 0)
		sl.s = nil // the stream left: the slot is free again
		sl.mu.Unlock()
		l.put(sl)
	}
	close(stop)
	<-done
	if seen.Load() {
		t.Fatal("the loop found a slot readied for a stream and not held")
	}
}

// A panic in a stream's callback run by an I/O loop (a bug met on some
// bytes) ends that stream as one on its own goroutine would: an upstream
// error whose record says what the panic said, nothing more (the record
// goes to the request log and the exporters: no stack, no source paths),
// while the log has the loop's stack. The loop goes on serving.
func TestLoopPanicIsContained(t *testing.T) {
	joined := onJoins(t)
	var logged strings.Builder
	var logMu sync.Mutex
	up := startRawUpstream(t, func(c *scriptConn) {
		writeSSEHead(c)
		writeChunk(c, vllmEvents[0])
		joined.wait(t, c.Conn)
		writeChunk(c, vllmEvents[1])
		writeChunk(c, vllmEvents[2])
		writeChunk(c, done)
		endChunks(c)
	})
	g := startLoopGateway(t, Config{Upstream: up.URL(), Logf: func(format string, args ...any) {
		logMu.Lock()
		fmt.Fprintf(&logged, format, args...)
		logMu.Unlock()
	}})
	var n atomic.Int32
	testHookEvent = func([]byte) {
		if n.Add(1) == 2 { // the first event after the join
			panic("test: a parser bug")
		}
	}
	status, _, body, err := post(t, g.URL()+"/v1/chat/completions", chatBody, nil)
	rec := g.record(t)
	testHookEvent = nil
	if status != 200 || err == nil || strings.Contains(body, "[DONE]") {
		t.Fatalf("status %d err %v body %q: want an abnormal end", status, err, body)
	}
	if want := "gateway internal error while reading the upstream: test: a parser bug"; rec.Outcome != meter.OutcomeUpstreamError || rec.ErrorMessage != want {
		t.Fatalf("record's outcome %s, message %q: want upstream_error, %q", rec.Outcome, rec.ErrorMessage, want)
	}
	logMu.Lock()
	if !strings.Contains(logged.String(), "(*loopSlot).run") {
		t.Errorf("the log lacks the loop's stack: %q", logged.String())
	}
	logMu.Unlock()
	if status, _, _, err := post(t, g.URL()+"/v1/chat/completions", chatBody, nil); status != 200 || err != nil {
		t.Fatalf("after the panic: %d %v", status, err)
	}
	if rec := g.record(t); rec.Outcome != meter.OutcomeOK {
		t.Fatalf("after the panic: %+v", rec)
	}
}

// A loop's slot table grows as append grows a slice: a new slot goes in
// the room the last growth left (the loop reads only as far as the length
// it loaded), so thousands of streams on a loop make a few tables, not a
// copy of the table each.
func TestLoopSlotTableGrowsByDoubling(t *testing.T) {
	l, err := newIOLoop()
	if err != nil {
		t.Fatal(err)
	}
	defer l.f.Close() // never run: its epoll fd is the test's to close
	const slots = 4096
	tables := 0
	var last **loopSlot
	for range slots {
		sl := l.take(nil, 0)
		sl.mu.Unlock()
		if p := unsafe.SliceData(*l.slots.Load()); p != last {
			tables, last = tables+1, p
		}
	}
	if tables > 10 {
		t.Fatalf("%d slots made %d tables: want a few (doubling from 16 makes 9)", slots, tables)
	}
}

// A loop that fails (its epoll instance broken: here closed) sends its
// streams back to their own reads at once, not to be read once per
// finRecheck at their deadline for as long as they run, and no stream
// joins a loop from then on.
func TestLoopFailureHandsStreamsBack(t *testing.T) {
	if pickLoop() == nil {
		t.Skip("no I/O loop on this machine")
	}
	l, err := newIOLoop()
	if err != nil {
		t.Fatal(err)
	}
	saved := ioLoops.loops
	ioLoops.loops = []*ioLoop{l} // before the gateway starts: its handlers see it
	exited := make(chan struct{})
	go func() {
		l.run()
		close(exited)
	}()
	defer func() {
		_ = l.f.Close()
		<-exited
		ioLoops.loops = saved
		ioLoops.dead.Store(false)
	}()
	joined := onJoin(t)
	timer := byTimer(t)
	resume := make(chan struct{})
	up := startRawUpstream(t, func(c *scriptConn) {
		writeSSEHead(c)
		writeChunk(c, vllmEvents[0])
		if c.Req.Header.Peek("X-Second") == nil {
			<-resume
		}
		writeChunk(c, vllmEvents[1])
		writeChunk(c, vllmEvents[2])
		writeChunk(c, done)
		endChunks(c)
	})
	g := startLoopGateway(t, Config{Upstream: up.URL()})
	s := startStream(t, g.URL()+"/v1/chat/completions", chatBody, nil)
	waitFor(t, joined, "stream in a loop")
	_ = l.f.Close() // the loop's wait fails
	<-exited
	close(resume)
	end := s.end(t)
	if rec := g.record(t); end.err != nil || s.first+end.body != vllmEvents[0]+vllmEvents[1]+vllmEvents[2]+done || rec.Outcome != meter.OutcomeOK {
		t.Fatalf("client got %q (%v), record %+v", s.first+end.body, end.err, rec)
	}
	if timer.Load() {
		t.Fatal("the stream left its failed loop at its deadline, not at once")
	}
	if st, _, _, err := post(t, g.URL()+"/v1/chat/completions", chatBody, map[string]string{"X-Second": "1"}); err != nil || st != http.StatusOK {
		t.Fatalf("second request: %d %v", st, err)
	}
	g.record(t)
	select {
	case <-joined:
		t.Fatal("a stream joined a loop after a loop failed")
	default:
	}
}

// A stream whose read buffer grew (one large event) keeps it while it
// runs, so that a loop's read(2) could take a megabyte of events at once;
// a client that began to lag inside such a read had all of that read's
// events queued past the lag queue's room, beyond MaxClientLag and
// MaxLagMemory alike (found by the second review: 0.9 MiB held with a room
// of 32 KiB). A loop reads no more than lagFloor at a time, so a client
// that lags is held to the room and one such read past it.
func TestLoopLagAfterGrownReadBuffer(t *testing.T) {
	joined := onJoins(t)
	var queued atomic.Int64 // held for the client when its stream first waited
	full := make(chan struct{})
	var once sync.Once
	testHookLagFull = func(s *stream) {
		once.Do(func() {
			queued.Store(s.p.LagMemory())
			close(full)
		})
	}
	defer func() { testHookLagFull = nil }()

	big := chunkOf(strings.Repeat("b", 600<<10) + "END")
	ev := chunkOf(strings.Repeat("x", 1000))
	const events = 16000 // about 18 MiB
	burst := strings.Repeat(ev, events)
	const lag = 64 << 10
	// The client's receive buffer takes the large event at once.
	g, conn := startBurst(t, joined, vllmEvents[0]+big, burst, lag, 4<<20)
	// The client reads up to the large event's end, then no more until
	// its stream waits for it.
	var got []byte
	buf := make([]byte, 64<<10)
	for !strings.Contains(string(got), "END\"") {
		n, err := conn.Read(buf)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, buf[:n]...)
	}
	select {
	case <-full:
	case <-time.After(10 * time.Second):
		t.Fatal("the stream never waited for its client")
	}
	for !strings.HasSuffix(string(got[max(0, len(got)-16):]), "\r\n0\r\n\r\n") {
		n, err := conn.Read(buf)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, buf[:n]...)
	}
	if rec := g.record(t); rec.Outcome != meter.OutcomeOK || rec.Events != events+2 {
		t.Fatalf("record %+v", rec)
	}
	t.Logf("held for the client when its stream first waited: %d KiB", queued.Load()>>10)
	// The room, the chunk the writer began with and the rest of the read
	// in which the client began to lag: each read's events, at most
	// loopReadMax and the end of an event it completes.
	if most := int64(lag/2 + 3*lagFloor); queued.Load() > most {
		t.Fatalf("%d KiB held for the client when its stream first waited, want at most %d KiB: the loop's read took more than a client that lags is held to", queued.Load()>>10, most>>10)
	}
}

// A loop runs one stream's callback at a time: a stream whose engine is
// ahead of the gateway (its reads come back full) kept the loop until its
// socket was drained or its armed deadline passed, up to finRecheck (found
// by the second review: streams of 10 ms gaps on the same loop as one such
// stream had gaps of 774 and 814 ms, against 31 ms at most without the
// loops). A callback makes at most loopTurnReads reads; a stream with more
// to read goes back to its goroutine, which reads on its own until it has
// caught up, and then joins a loop again.
func TestLoopTurnIsBounded(t *testing.T) {
	joined := onJoins(t)
	var most atomic.Int64
	hook := func(_ *stream, reads int, _ bool) {
		for {
			m := most.Load()
			if int64(reads) <= m || most.CompareAndSwap(m, int64(reads)) {
				return
			}
		}
	}
	testHookLoopRun.Store(&hook)
	defer testHookLoopRun.Store(nil)

	ev := chunkOf(strings.Repeat("x", 100))
	const events = 40000 // about 9 MiB, written at once
	burst := strings.Repeat(ev, events)
	up := startRawUpstream(t, func(c *scriptConn) {
		writeSSEHead(c)
		writeChunk(c, vllmEvents[0])
		joined.wait(t, c.Conn)
		writeChunk(c, burst)
		// The stream left the loop for its goroutine, and joins one
		// again once it has caught up: the rest comes only then.
		joined.wait(t, c.Conn)
		writeChunk(c, done)
		endChunks(c)
	})
	g := startLoopGateway(t, Config{Upstream: up.URL()})
	_, _, body, err := post(t, g.URL()+"/v1/chat/completions", chatBody, nil)
	if err != nil {
		t.Fatal(err)
	}
	wholeStream(t, g, body, vllmEvents[0]+burst+done, events+1)
	t.Logf("at most %d reads in one callback of a loop; %d joins", most.Load(), joined.n.Load())
	if most.Load() > loopTurnReads {
		t.Fatalf("a loop made %d reads in one stream's callback, want at most %d: the other streams on the loop waited meanwhile", most.Load(), loopTurnReads)
	}
}

// A loop does not parse an event of more than loopEventMax: its read
// buffer grows by copies of what it holds, and an event over 64 KiB is
// read lean, which took 160 ms for 10 MB of logprobs and 530 ms for 30 MB
// (max_event_bytes raised to 64 MiB), the loop's other streams waiting
// (found by the second review of the loops). A stream that holds more than
// that of an event goes back to its goroutine, and joins a loop again once
// the event is read.
func TestLoopLeavesLargeEventsToTheGoroutine(t *testing.T) {
	joined := onJoins(t)
	var most atomic.Int64 // of an event held by a stream when its loop callback ended
	ran := make(chan struct{}, 1)
	left := make(chan struct{})
	var once sync.Once
	hook := func(s *stream, _ int, gone bool) {
		if n := int64(len(s.framer.Rest())); n > most.Load() {
			most.Store(n) // (the loop's callbacks of one stream run one at a time)
		}
		if gone {
			once.Do(func() { close(left) })
		}
		select {
		case ran <- struct{}{}:
		default:
		}
	}
	testHookLoopRun.Store(&hook)
	defer testHookLoopRun.Store(nil)

	big := chunkOf(strings.Repeat("b", 1<<20))
	up := startRawUpstream(t, func(c *scriptConn) {
		writeSSEHead(c)
		writeChunk(c, vllmEvents[0])
		joined.wait(t, c.Conn)
		// A piece at a time, each once the loop has read the one
		// before, until the stream leaves the loop.
		for i := 0; i < len(big); i += 8 << 10 {
			writeChunk(c, big[i:min(i+8<<10, len(big))])
			select {
			case <-ran:
			case <-left:
			}
		}
		writeChunk(c, vllmEvents[1])
		joined.wait(t, c.Conn) // back in a loop once the large event is read
		writeChunk(c, done)
		endChunks(c)
	})
	g := startLoopGateway(t, Config{Upstream: up.URL(), MaxEventBytes: 4 << 20})
	_, _, body, err := post(t, g.URL()+"/v1/chat/completions", chatBody, nil)
	if err != nil {
		t.Fatal(err)
	}
	wholeStream(t, g, body, vllmEvents[0]+big+vllmEvents[1]+done, 3)
	t.Logf("at most %d KiB of an event held at the end of a loop callback", most.Load()>>10)
	if most.Load() > loopEventMax+loopReadMax {
		t.Fatalf("a loop read %d KiB of one event, want at most %d KiB: it would parse it, the loop's other streams waiting", most.Load()>>10, (loopEventMax+loopReadMax)>>10)
	}
}

// A stream whose engine gets ahead again and again leaves its loop and
// joins one again each time (an epoll_ctl each way, its slot given back
// and taken again, its generation bumped): every event still goes out once
// and in order, each leave is followed by a join, and the loops' slot
// tables do not grow with the churn (found by the review of the loop's
// turn bound, which adds these round trips).
func TestLoopChurnOfJoins(t *testing.T) {
	joined := onJoins(t)
	var turns atomic.Int32 // callbacks that ended at the turn bound
	hook := func(_ *stream, reads int, left bool) {
		if left && reads >= loopTurnReads {
			turns.Add(1)
		}
	}
	testHookLoopRun.Store(&hook)
	defer testHookLoopRun.Store(nil)
	pickLoop() // the loops run (their table is set once)
	// slots: the loops' tables' slots (a table only grows).
	slots := func() (n int) {
		for _, l := range ioLoops.loops {
			n += len(*l.slots.Load())
		}
		return n
	}

	ev := chunkOf(strings.Repeat("x", 200))
	burst := strings.Repeat(ev, 48) // more than a turn reads into a lent buffer
	const cycles = 50
	var before, after atomic.Int32 // slots in the loops' tables
	up := startRawUpstream(t, func(c *scriptConn) {
		writeSSEHead(c)
		writeChunk(c, vllmEvents[0])
		joined.wait(t, c.Conn)
		before.Store(int32(slots()))
		for range cycles {
			writeChunk(c, burst)
			joined.wait(t, c.Conn) // back in a loop
		}
		after.Store(int32(slots()))
		writeChunk(c, done)
		endChunks(c)
	})
	g := startLoopGateway(t, Config{Upstream: up.URL()})
	_, _, body, err := post(t, g.URL()+"/v1/chat/completions", chatBody, nil)
	if err != nil {
		t.Fatal(err)
	}
	wholeStream(t, g, body, vllmEvents[0]+strings.Repeat(burst, cycles)+done, 48*cycles+1)
	t.Logf("%d turns ended at the bound, %d joins; slots %d, then %d", turns.Load(), joined.n.Load(), before.Load(), after.Load())
	if turns.Load() < cycles {
		t.Fatalf("%d turns ended at the bound in %d bursts: the test did not make the stream leave its loop", turns.Load(), cycles)
	}
	if after.Load() > before.Load()+int32(len(ioLoops.loops)) {
		t.Fatalf("the loops' slot tables grew from %d to %d over %d joins of one stream: slots are not reused", before.Load(), after.Load(), joined.n.Load())
	}
}

// An event over max_event_bytes on a route that does not skip it (TGI's
// native stream) stops the metering, and the rest of the body passes
// through unparsed. The framer keeps what it held of that event, which is
// not read again: a stream that left its loop for that event (more than
// loopEventMax of it) joins a loop again once it has caught up, as before
// the event bound (found by the review of the bound: it stayed on its
// goroutine to its end).
func TestLoopRejoinsAfterAnEventOverTheLimit(t *testing.T) {
	joined := onJoins(t)
	first := `data:{"index":1,"token":{"id":3681,"text":" Paris","logprob":-0.1,"special":false},"generated_text":null,"details":null}` + "\n\n"
	big := `data:{"index":2,"token":{"id":374,"text":"` + strings.Repeat("b", 200<<10) + `","logprob":-0.21,"special":false},"generated_text":null,"details":null}` + "\n\n"
	after := `data:{"index":3,"token":{"id":279,"text":" the","logprob":-0.05,"special":false},"generated_text":null,"details":null}` + "\n\n"
	up := startRawUpstream(t, func(c *scriptConn) {
		writeSSEHead(c)
		writeChunk(c, first)
		joined.wait(t, c.Conn)
		writeChunk(c, big)
		joined.wait(t, c.Conn) // back in a loop once the large event is passed on
		writeChunk(c, after)
		endChunks(c)
	})
	g := startLoopGateway(t, Config{Upstream: up.URL(), MaxEventBytes: 128 << 10})
	_, _, body, err := post(t, g.URL()+"/generate_stream", `{"inputs":"hi"}`, nil)
	if err != nil {
		t.Fatal(err)
	}
	if want := first + big + after; string(body) != want {
		t.Fatalf("the client got %d bytes, want %d: not every byte, in order", len(body), len(want))
	}
	if rec := g.record(t); rec.Outcome != meter.OutcomeUpstreamError || !strings.Contains(rec.ErrorMessage, "maximum event size") {
		t.Fatalf("record %+v", rec)
	}
	t.Logf("%d joins", joined.n.Load())
}

// The first token written before it was metered, on an I/O loop, to a
// client whose socket takes only part of it: the stream leaves the loop
// with its writer goroutine, started once the metering said the event held
// the first token. A client that reads it whole and leaves while the engine
// is quiet left after its first token, and its record keeps the token's
// time.
func TestLoopFirstTokenWrittenFirstToALaggingClient(t *testing.T) {
	joined := onJoins(t)
	const comment = ": waiting\n\n" // bytes, and no token: the head goes out, then the stream waits
	g, conn, body := laggingClientOf(t, Config{IOLoop: true}, func(c *scriptConn) {
		writeSSEHead(c)
		writeChunk(c, comment)
		joined.wait(t, c.Conn)
		writeChunk(c, bigFirstToken)
		io.Copy(io.Discard, c.Conn) // quiet until the gateway closes it
	})
	for _, want := range []string{comment, bigFirstToken} {
		if ev, err := readEvent(body); ev != want {
			t.Fatalf("event of %d bytes, %v: want %d", len(ev), err, len(want))
		}
	}
	conn.Close()
	rec := g.record(t)
	if joined.n.Load() == 0 {
		t.Fatal("the stream never joined a loop")
	}
	if rec.Outcome != meter.OutcomeClientAbort || rec.ErrorMessage != msgGoneWhileQuiet || rec.TTFT <= 0 {
		t.Fatalf("record: outcome %v, error %q, TTFT %v: want a client that left after its first token", rec.Outcome, rec.ErrorMessage, rec.TTFT)
	}
	if n := g.p.LagMemory(); n != 0 {
		t.Fatalf("%d bytes still held for clients that lag", n)
	}
}
