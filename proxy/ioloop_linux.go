//go:build linux

package proxy

import (
	"net"
	"os"
	"runtime"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"
)

// The I/O loops (an experiment, on with io_loop, Config.IOLoop): a direct
// stream whose head is out and whose client keeps up hands its upstream
// reads to a loop instead of waking its own goroutine at every event.
//
// Each goroutine parked in its socket's RawConn.Read is woken through Go's
// poller at every event (netpoll hands it to a P, the scheduler switches
// to it, it runs the callback, parks again). A loop is one goroutine
// parked the same way on an epoll instance of its own, in which the
// streams' upstream sockets are registered (edge-triggered): one wake of
// the loop takes every socket that became readable meanwhile, and runs
// each stream's onReadable in turn. The prototype of issue 12
// (internal/overhead/protoproxy, the epoll model parked in Go's poller)
// measured that this saves about 2.1 ms of CPU per 1,000 events at 256
// streams against a goroutine per stream.
//
// The stream's goroutine (fasthttp's handler, in WriteTo) waits meanwhile
// on its slot's channels and timer, not woken per event: until the loop
// says the body ended, failed, was cut or must be read by the goroutine
// again (its client lags: a blocking wait for the writer goroutine must not
// hold the loop; or its engine is ahead, loopTurnReads), until the read deadline armed (s.armed, never more than
// finRecheck ahead, as on the direct path) or until the shutdown's cut or
// the client guard expire the connection's deadline (upConn.SetDeadline
// pokes the slot). At the deadline it does what readDirect does: moves a
// late deadline on (then reads the socket itself once, to EAGAIN, for
// bytes whose edge the loop left), or ends the stream.
//
// Exactly one side handles a stream at a time: the slot's mutex is held by
// the loop while it runs the stream's callback and by the goroutine while
// it looks at its deadline, and the one that ends the stream marks the
// slot ended under it. The loop only tries the lock: an event that finds it
// held is left in pending, and whoever holds it handles pending after
// unlocking (drain), so neither waits for the other and no edge is lost.
// The goroutine removes the socket from the epoll instance (EPOLL_CTL_DEL)
// and bumps the slot's generation, under the mutex, before the stream ends
// and its connection goes back to the pool: an event of the batch in hand
// that names the old generation is ignored.
//
// Each loop keeps its slots, with their channels and timer, for reuse: a
// request allocates nothing once the slots it needs exist.

// ioLoopSupported: the loops exist on this platform.
const ioLoopSupported = true

const (
	epollET   = 1 << 31 // syscall.EPOLLET is declared negative
	loopFlags = syscall.EPOLLIN | syscall.EPOLLRDHUP | epollET
	// loopEnd: an event that tells of the peer's FIN, a reset or an error;
	// the callback then reads to EAGAIN or the end.
	loopEnd = syscall.EPOLLRDHUP | syscall.EPOLLHUP | syscall.EPOLLERR
)

// loopSlot is one stream's registration with a loop.
type loopSlot struct {
	mu      sync.Mutex
	gen     atomic.Uint32 // bumped at each release: stale events are ignored
	pending atomic.Uint32 // events not yet handled (the lock was held)

	// Under mu.
	s        *stream // nil while free
	fd       uintptr
	ended    bool   // the stream is no longer the loop's (ended, or handed back)
	inLoop   bool   // the loop is running the stream's callback
	panicked any    // what a callback run by the loop panicked with
	stack    []byte // and where: the stack of the goroutine that ran it

	done  chan struct{} // loop -> goroutine: ended
	wake  chan struct{} // a deadline moved earlier, the cut, the guard
	timer *time.Timer   // the goroutine's read deadline

	l   *ioLoop
	idx uint32
}

// poke wakes the slot's goroutine to look at its stream again.
func (sl *loopSlot) poke() {
	select {
	case sl.wake <- struct{}{}:
	default:
	}
}

// ioLoop is one loop: an epoll instance, parked in Go's poller.
type ioLoop struct {
	epfd   int
	f      *os.File // owns epfd
	rc     syscall.RawConn
	pollFn func(uintptr) bool // poll, bound once
	events [128]syscall.EpollEvent

	mu    sync.Mutex                  // guards free and the table's growth
	slots atomic.Pointer[[]*loopSlot] // by index; grown by copy
	free  []*loopSlot
}

var ioLoops struct {
	once  sync.Once
	loops []*ioLoop
	next  atomic.Uint32
	dead  atomic.Bool // a loop failed: no stream joins any more
}

// pickLoop returns a loop for a stream to join, starting the loops (one
// per GOMAXPROCS) at the first call; nil when they cannot run.
func pickLoop() *ioLoop {
	ioLoops.once.Do(startLoops)
	if ioLoops.dead.Load() || len(ioLoops.loops) == 0 {
		return nil
	}
	return ioLoops.loops[ioLoops.next.Add(1)%uint32(len(ioLoops.loops))]
}

func startLoops() {
	for range runtime.GOMAXPROCS(0) {
		l, err := newIOLoop()
		if err != nil {
			ioLoops.dead.Store(true)
			return
		}
		ioLoops.loops = append(ioLoops.loops, l)
	}
	for _, l := range ioLoops.loops {
		go l.run()
	}
}

func newIOLoop() (*ioLoop, error) {
	fd, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
	if err != nil {
		return nil, err
	}
	// Non-blocking before os.NewFile, which registers the fd with the
	// poller only when it is; the file owns the fd from then on.
	if err := syscall.SetNonblock(fd, true); err != nil {
		_ = syscall.Close(fd)
		return nil, err
	}
	f := os.NewFile(uintptr(fd), "epoll")
	rc, err := f.SyscallConn()
	if err != nil {
		_ = f.Close()
		return nil, err
	}
	l := &ioLoop{epfd: fd, f: f, rc: rc}
	l.pollFn = l.poll
	empty := []*loopSlot{}
	l.slots.Store(&empty)
	return l, nil
}

// run waits in Go's poller until the epoll instance has ready sockets, and
// handles them, for as long as the process runs.
func (l *ioLoop) run() {
	_ = l.rc.Read(l.pollFn)
	// Only a broken epoll instance ends the wait. No stream joins a loop
	// from now on (pickLoop), and this loop's streams are woken to go
	// back to their own reads (loopRead): at their deadline alone they
	// would be read once per finRecheck.
	ioLoops.dead.Store(true)
	for _, sl := range *l.slots.Load() {
		sl.poke()
	}
}

// poll takes the ready sockets without waiting (epoll_pwait with a zero
// timeout) and handles them; it returns false, to park until the epoll fd
// is readable again, when there are none.
func (l *ioLoop) poll(fd uintptr) bool {
	for {
		n, _, e := syscall.RawSyscall6(syscall.SYS_EPOLL_PWAIT, fd, uintptr(unsafe.Pointer(&l.events[0])), uintptr(len(l.events)), 0, 0, 0)
		switch {
		case e == syscall.EINTR:
			continue
		case e != 0:
			return true
		case n == 0:
			return false
		}
		slots := *l.slots.Load()
		for i := range l.events[:n] {
			ev := &l.events[i]
			idx, gen := uint32(ev.Fd), uint32(ev.Pad)
			if int(idx) >= len(slots) {
				continue
			}
			sl := slots[idx]
			if sl.gen.Load() != gen {
				continue // an event of a registration already gone
			}
			sl.pending.Or(ev.Events | syscall.EPOLLIN)
			if busy := testHookLoopBusy.Load(); busy != nil {
				if sl.mu.TryLock() {
					sl.mu.Unlock()
				} else {
					(*busy)()
				}
			}
			sl.drain()
		}
		if int(n) < len(l.events) {
			// A short batch: what becomes ready meanwhile is a new edge
			// on the epoll fd, which wakes the wait at once.
			return false
		}
	}
}

// drain runs the stream's callback for its pending events, unless the
// lock is held: its holder drains after unlocking.
func (sl *loopSlot) drain() {
	for sl.pending.Load() != 0 && sl.mu.TryLock() {
		evs := sl.pending.Swap(0)
		if evs != 0 && sl.s != nil && !sl.ended {
			sl.run(evs)
		}
		sl.mu.Unlock()
	}
}

// run is the stream's onReadable for the events evs, with sl.mu held. The
// stream leaves the loop when it ends (or fails, or is cut), and when its
// client lags or its engine is ahead (loopTurnReads): its goroutine then
// reads on its own.
func (sl *loopSlot) run(evs uint32) {
	s := sl.s
	defer func() {
		if r := recover(); r != nil {
			// A bug met on some bytes: the stream's goroutine panics
			// with it, where containReaderPanic ends the stream as on
			// the goroutine's own reads. The value is the panic's own:
			// the record carries what it says, and only the log the
			// stack, which the goroutine logs first.
			sl.panicked, sl.stack = r, debug.Stack()
			sl.inLoop, sl.ended = false, true
			sl.signalDone()
		}
	}()
	sl.inLoop = true
	s.dr.fresh = evs&loopEnd != 0 // a FIN: read until EAGAIN or the end
	reads := s.dr.reads
	ended := s.onReadable(sl.fd)
	sl.inLoop = false
	if ended || s.lagging { // (ended with s.dr.err nil: the goroutine reads on)
		sl.ended = true
		sl.signalDone()
	}
	if hook := testHookLoopRun.Load(); hook != nil {
		(*hook)(s, int(s.dr.reads-reads), sl.ended)
	}
}

func (sl *loopSlot) signalDone() {
	select {
	case sl.done <- struct{}{}:
	default:
	}
}

// Test hooks, when set by a test: a stream joined a loop (told the
// gateway's end of its upstream connection); a stream's goroutine woke
// while its stream was in a loop (byTimer: at its deadline, not told by
// the loop, the cut or the guard); the loop found a stream's slot held (by
// its goroutine) and left the event to the holder (an atomic: the loops
// outlive the tests, and meet events of streams that are ending, with
// nothing ordering them before the test that sets it back).
var (
	testHookLoopJoined func(local net.Addr)
	testHookLoopWake   func(byTimer bool)
	testHookLoopBusy   atomic.Pointer[func()]
	// testHookLoopRun: a loop ran the callback of s, which made reads
	// read(2) calls; left: s left the loop.
	testHookLoopRun atomic.Pointer[func(s *stream, reads int, left bool)]
)

// take returns a free slot (a new one when none is), readied for s and
// the socket fd, with its mutex held.
func (l *ioLoop) take(s *stream, fd uintptr) *loopSlot {
	l.mu.Lock()
	var sl *loopSlot
	if n := len(l.free); n > 0 {
		sl = l.free[n-1]
		l.free[n-1] = nil
		l.free = l.free[:n-1]
	} else {
		old := *l.slots.Load()
		sl = &loopSlot{l: l, idx: uint32(len(old)), done: make(chan struct{}, 1), wake: make(chan struct{}, 1), timer: time.NewTimer(time.Hour)}
		sl.timer.Stop()
		// Appended within the table's capacity while there is room: the
		// loop reads only the first len(old) of it, the length it
		// loaded. A copy per new slot would cost quadratic time and
		// garbage as a loop's streams grow to thousands.
		grown := old
		if len(old) == cap(old) {
			grown = make([]*loopSlot, len(old), max(2*len(old), 16))
			copy(grown, old)
		}
		grown = append(grown, sl)
		l.slots.Store(&grown)
	}
	l.mu.Unlock()
	// Under the slot's mutex: the loop may still hold an event of the
	// slot's last registration, whose gen it checked before that stream
	// left, and drain it now. Held, it leaves the event to this stream's
	// goroutine, which finds a readable socket that is not (a read that
	// says EAGAIN); unheld, it would run this stream's callback before
	// its goroutine has handed it over.
	sl.mu.Lock()
	sl.s, sl.fd, sl.ended, sl.inLoop, sl.panicked, sl.stack = s, fd, false, false, nil, nil
	sl.pending.Store(0)
	return sl
}

// put makes sl free again; its stream has left it.
func (l *ioLoop) put(sl *loopSlot) {
	// A poke or a done from before the release would wake the next
	// stream once, for nothing: emptied now.
	select {
	case <-sl.done:
	default:
	}
	select {
	case <-sl.wake:
	default:
	}
	l.mu.Lock()
	l.free = append(l.free, sl)
	l.mu.Unlock()
}

// epollCtl is epoll_ctl(2), without the scheduler's syscall bookkeeping
// (it does not block).
func epollCtl(epfd int, op int, fd uintptr, events uint32, idx, gen uint32) syscall.Errno {
	ev := syscall.EpollEvent{Events: events, Fd: int32(idx), Pad: int32(gen)}
	_, _, e := syscall.RawSyscall6(syscall.SYS_EPOLL_CTL, uintptr(epfd), uintptr(op), fd, uintptr(unsafe.Pointer(&ev)), 0, 0)
	return e
}

// loopRead hands the stream's upstream reads to a loop, and waits until
// the stream ends (done, with why: as readDirect returns it) or must read
// on its own again (done false: its client lags, its engine is ahead, or
// no loop could take it). The socket's read deadline is s.armed's again when it returns.
func (s *stream) loopRead() (why error, done bool) {
	l := pickLoop()
	if l == nil {
		s.dr.noLoop = true
		return nil, false
	}
	s.dr.err = nil // errJoinLoop; set again when the stream ends
	sl := l.take(s, s.dr.fd)
	locked := true
	defer func() {
		if s.dr.slot != nil { // a panic on this goroutine: leave first
			if !locked {
				sl.mu.Lock()
			}
			s.leaveLoop(sl)
		}
	}()
	gen := sl.gen.Load()
	if e := epollCtl(l.epfd, syscall.EPOLL_CTL_ADD, sl.fd, loopFlags, sl.idx, gen); e != 0 {
		sl.s = nil
		sl.mu.Unlock()
		locked = false
		l.put(sl)
		s.dr.noLoop = true
		return nil, false
	}
	s.dr.slot = sl
	if testHookLoopJoined != nil {
		testHookLoopJoined(s.conn.LocalAddr())
	}
	// Set before the cut and the guard are looked at below: they set
	// theirs before expiring the connection's deadline, which pokes.
	s.conn.loop.Store(sl)
	for {
		end := false
		switch {
		case sl.ended:
			end, why = true, s.dr.err
		case ioLoops.dead.Load():
			end = true // its loop failed: it reads on its own (why is nil)
		case s.p.up.cut.Load():
			end, why = true, errShutdown
		case s.guard.clientLeft():
			end, why = true, errClientGone
		case !time.Now().Before(s.armed):
			if s.lateDeadline() {
				// Moved on: the socket is read to EAGAIN, for bytes
				// whose edge the loop met while the deadline had passed.
				s.dr.fresh = true
				if s.onReadable(sl.fd) || s.lagging {
					end, why = true, s.dr.err
				}
				break
			}
			end = true
			switch {
			case s.p.up.cut.Load():
				why = errShutdown
			case s.guard.clientLeft():
				why = errClientGone
			default:
				if why = s.closedMeanwhile(); why == nil {
					why = &net.OpError{Op: "read", Net: "tcp", Source: s.conn.LocalAddr(), Addr: s.conn.RemoteAddr(), Err: os.ErrDeadlineExceeded}
				}
			}
		}
		if end {
			if p := sl.panicked; p != nil {
				s.p.cfg.Logf("proxy: panic in an I/O loop while reading the upstream of request %s: %v\n%s", s.rec.RequestID, p, sl.stack)
				s.leaveLoop(sl)
				locked = false
				panic(p)
			}
			s.leaveLoop(sl)
			locked = false
			if why == nil {
				// Back to the goroutine's own reads: the socket's
				// deadline is the stream's again.
				_ = s.conn.SetReadDeadline(s.armed)
				return nil, false
			}
			return why, true
		}
		dl := s.armed
		sl.mu.Unlock()
		locked = false
		sl.drain()
		sl.timer.Reset(time.Until(dl))
		byTimer := false
		select {
		case <-sl.done:
		case <-sl.wake:
		case <-sl.timer.C:
			byTimer = true
		}
		sl.timer.Stop()
		if testHookLoopWake != nil {
			testHookLoopWake(byTimer)
		}
		sl.mu.Lock()
		locked = true
	}
}

// leaveLoop takes the stream's socket out of its loop, with sl.mu held,
// and frees the slot: from then on the loop does not touch the stream.
func (s *stream) leaveLoop(sl *loopSlot) {
	_ = epollCtl(sl.l.epfd, syscall.EPOLL_CTL_DEL, sl.fd, 0, 0, 0)
	s.conn.loop.Store(nil)
	sl.gen.Add(1)
	sl.s, sl.ended, sl.panicked, sl.stack = nil, true, nil, nil
	sl.mu.Unlock()
	s.dr.slot = nil
	sl.l.put(sl)
}
