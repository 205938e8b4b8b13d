//go:build linux

package main

import (
	"fmt"
	"net"
	"os"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"github.com/goodput/goodput/meter"
)

// The epoll model: GOMAXPROCS event loops, each on a locked OS thread with
// its own epoll instance, its own listening socket (SO_REUSEPORT: the
// kernel spreads the client connections over the loops, so loops share
// nothing), its own pool of upstream connections, and no goroutine per
// connection or stream. A loop waits in epoll_wait and handles each ready
// socket with a small state machine; metering is a call between the read
// from the upstream and the write to the client.
//
// Edge-triggered: every socket is added once, with EPOLLIN, EPOLLOUT and
// EPOLLRDHUP, and never modified (no epoll_ctl per request or per
// event, and a blocked client needs no change of interest), as nginx does.
// The price of edges is that a socket must be read until it is drained:
// a read that fills the buffer is followed by another, and a short read
// means the socket was empty at that instant (a stream socket returns
// less than asked only then), so any later data raises a new edge: one
// read per event, no trailing EAGAIN read. Level-triggered would report a
// socket until it is read to EAGAIN, and need an epoll_ctl to watch and
// unwatch EPOLLOUT whenever a client's socket fills.

const (
	epollET     = 1 << 31 // syscall.EPOLLET is declared negative
	epollFlags  = syscall.EPOLLIN | syscall.EPOLLOUT | syscall.EPOLLRDHUP | epollET
	soReusePort = 0xf // SO_REUSEPORT, which the syscall package does not name
)

// econn is one socket of a loop: a client connection or an upstream one.
type econn struct {
	fd     int
	client bool
	dead   bool
	out    []byte // bytes written while the socket had no room

	// client
	in []byte  // request bytes not yet forwarded
	up *econn  // the upstream answering the request in flight
	s  *stream // the response in flight

	// upstream
	cli        *econn // the client it answers; nil when idle in the pool
	connecting bool
}

type loop struct {
	epfd   int
	lfd    int // this loop's listening socket
	stopR  int // the read end of a pipe that stops the loop
	upAddr syscall.Sockaddr
	conns  []*econn // by fd
	idle   []*econn // idle upstream connections
	dead   []*econn // closed during this batch of events: fds closed after it
	buf    []byte   // read buffer
	out    []byte   // output buffer
	rec    meter.Record
	// wait says how the loop waits for its sockets: waitRaw, waitSyscall
	// or waitNetpoll (see epollWait and runNetpoll).
	wait string
}

// eServer runs the loops.
type eServer struct {
	addr  string // the address it listens on
	loops []*loop
	stopW []int
	wg    sync.WaitGroup
}

// startEpoll listens on listen with one loop per GOMAXPROCS.
func startEpoll(listen, upstream, wait string) (*eServer, error) {
	la, err := sockaddr(listen)
	if err != nil {
		return nil, err
	}
	ua, err := sockaddr(upstream)
	if err != nil {
		return nil, err
	}
	srv := &eServer{}
	fail := func(err error) (*eServer, error) {
		for i, l := range srv.loops {
			l.closeAll()
			_ = syscall.Close(srv.stopW[i])
		}
		return nil, err
	}
	for range runtime.GOMAXPROCS(0) {
		l, stopW, err := newLoop(la, ua, wait)
		if err != nil {
			return fail(err)
		}
		srv.loops = append(srv.loops, l)
		srv.stopW = append(srv.stopW, stopW)
		if srv.addr == "" { // the first loop's port (--listen may say 0) for the others
			bound, err := syscall.Getsockname(l.lfd)
			if err != nil {
				return fail(err)
			}
			a := bound.(*syscall.SockaddrInet4)
			la = a
			srv.addr = net.JoinHostPort(net.IP(a.Addr[:]).String(), strconv.Itoa(a.Port))
		}
	}
	for _, l := range srv.loops {
		srv.wg.Add(1)
		go func() {
			defer srv.wg.Done()
			if l.wait == waitNetpoll {
				l.runNetpoll()
				return
			}
			runtime.LockOSThread()
			l.run()
		}()
	}
	return srv, nil
}

// stop ends the loops and closes every socket they hold.
func (srv *eServer) stop() {
	for _, w := range srv.stopW {
		_, _ = syscall.Write(w, []byte{0})
	}
	srv.wg.Wait()
	for _, w := range srv.stopW {
		_ = syscall.Close(w)
	}
	srv.stopW = nil
}

func sockaddr(hostport string) (*syscall.SockaddrInet4, error) {
	a, err := net.ResolveTCPAddr("tcp4", hostport)
	if err != nil {
		return nil, err
	}
	sa := &syscall.SockaddrInet4{Port: a.Port}
	copy(sa.Addr[:], a.IP.To4())
	return sa, nil
}

func newLoop(la syscall.Sockaddr, ua *syscall.SockaddrInet4, wait string) (l *loop, stopW int, err error) {
	up := *ua // a copy per loop: Connect writes into the Sockaddr
	l = &loop{wait: wait, upAddr: &up, buf: make([]byte, readSize), out: make([]byte, 0, readSize+readSize/4), lfd: -1, stopR: -1}
	defer func() {
		if err != nil {
			l.closeAll()
		}
	}()
	if l.epfd, err = syscall.EpollCreate1(syscall.EPOLL_CLOEXEC); err != nil {
		return nil, 0, err
	}
	if l.lfd, err = syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_NONBLOCK|syscall.SOCK_CLOEXEC, 0); err != nil {
		return nil, 0, err
	}
	if err = syscall.SetsockoptInt(l.lfd, syscall.SOL_SOCKET, syscall.SO_REUSEADDR, 1); err != nil {
		return nil, 0, err
	}
	if err = syscall.SetsockoptInt(l.lfd, syscall.SOL_SOCKET, soReusePort, 1); err != nil {
		return nil, 0, err
	}
	if err = syscall.Bind(l.lfd, la); err != nil {
		return nil, 0, err
	}
	if err = syscall.Listen(l.lfd, 4096); err != nil {
		return nil, 0, err
	}
	var p [2]int
	if err = syscall.Pipe2(p[:], syscall.O_CLOEXEC|syscall.O_NONBLOCK); err != nil {
		return nil, 0, err
	}
	l.stopR = p[0]
	for _, fd := range []int{l.lfd, l.stopR} {
		if err = syscall.EpollCtl(l.epfd, syscall.EPOLL_CTL_ADD, fd, &syscall.EpollEvent{Events: epollFlags, Fd: int32(fd)}); err != nil {
			_ = syscall.Close(p[1])
			return nil, 0, err
		}
	}
	return l, p[1], nil
}

func (l *loop) run() {
	events := make([]syscall.EpollEvent, 256)
	for {
		n, err := epollWait(l.epfd, events, l.wait == waitRaw)
		if err != nil {
			if err == syscall.EINTR {
				continue
			}
			fmt.Fprintln(os.Stderr, "epoll_wait:", err)
			l.closeAll()
			return
		}
		if l.handle(events[:n]) {
			return
		}
	}
}

// handle handles a batch of events; it reports true when the loop was
// stopped (its sockets are closed).
func (l *loop) handle(events []syscall.EpollEvent) (stopped bool) {
	for _, ev := range events {
		fd := int(ev.Fd)
		switch {
		case fd == l.lfd:
			l.accept()
		case fd == l.stopR:
			l.closeAll()
			return true
		default:
			c := l.conns[fd]
			if c == nil || c.dead {
				continue
			}
			if c.client {
				l.clientEvent(c, ev.Events)
			} else {
				l.upEvent(c, ev.Events)
			}
		}
	}
	l.reap()
	return false
}

// runNetpoll is the loop of waitNetpoll: a plain goroutine (no thread of
// its own) that takes its ready sockets with a non-blocking epoll_wait and,
// when there are none, parks in Go's poller, where the loop's epoll
// instance is registered as one more file (an epoll fd is readable while
// its ready list is not empty). The loop shares the Ps with every other
// goroutine, as it would inside the gateway, and a wake-up is one
// goroutine's, however many sockets it brings.
func (l *loop) runNetpoll() {
	// Non-blocking before os.NewFile, which registers the fd with the
	// poller only when it is; f owns the fd from then on (closeAll leaves
	// it), and closes it last.
	if err := syscall.SetNonblock(l.epfd, true); err != nil {
		fmt.Fprintln(os.Stderr, "epoll fd:", err)
		l.closeAll()
		_ = syscall.Close(l.epfd)
		return
	}
	f := os.NewFile(uintptr(l.epfd), "epoll")
	defer f.Close()
	rc, err := f.SyscallConn()
	if err != nil {
		fmt.Fprintln(os.Stderr, "epoll fd:", err)
		l.closeAll()
		return
	}
	events := make([]syscall.EpollEvent, 256)
	stopped := false
	err = rc.Read(func(fd uintptr) bool {
		for {
			n, _, e := syscall.RawSyscall6(syscall.SYS_EPOLL_WAIT, fd, uintptr(unsafe.Pointer(&events[0])), uintptr(len(events)), 0, 0, 0)
			if e == syscall.EINTR {
				continue
			}
			if e != 0 {
				fmt.Fprintln(os.Stderr, "epoll_wait:", e)
				return true
			}
			if n == 0 {
				return false // park until the epoll fd is readable
			}
			if l.handle(events[:n]) {
				stopped = true
				return true
			}
			if int(n) < len(events) {
				// A short batch: the rest comes as a new edge on the epoll
				// fd, which wakes the wait at once if it came meanwhile.
				return false
			}
		}
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "epoll fd:", err)
	}
	if !stopped {
		l.closeAll()
	}
}

func (l *loop) add(c *econn) bool {
	if err := syscall.EpollCtl(l.epfd, syscall.EPOLL_CTL_ADD, c.fd, &syscall.EpollEvent{Events: epollFlags, Fd: int32(c.fd)}); err != nil {
		_ = syscall.Close(c.fd)
		return false
	}
	if c.fd >= len(l.conns) {
		n := max(c.fd+1, 2*len(l.conns))
		l.conns = slices.Grow(l.conns, n-len(l.conns))[:n]
	}
	l.conns[c.fd] = c
	return true
}

// kill marks c closed; its fd is closed after the batch of events, so
// that no later event of the batch finds the number reused.
func (l *loop) kill(c *econn) {
	if c == nil || c.dead {
		return
	}
	c.dead = true
	l.dead = append(l.dead, c)
	if !c.client && c.cli == nil {
		if i := slices.Index(l.idle, c); i >= 0 {
			l.idle = slices.Delete(l.idle, i, i+1)
		}
	}
}

func (l *loop) reap() {
	for i, c := range l.dead {
		l.conns[c.fd] = nil
		_ = syscall.Close(c.fd)
		l.dead[i] = nil
	}
	l.dead = l.dead[:0]
}

func (l *loop) closeAll() {
	for _, c := range l.conns {
		if c != nil && !c.dead {
			l.kill(c)
		}
	}
	l.reap()
	fds := []int{l.lfd, l.stopR, l.epfd}
	if l.wait == waitNetpoll {
		fds = fds[:2] // the epoll fd is an *os.File's (runNetpoll)
	}
	for _, fd := range fds {
		if fd > 0 {
			_ = syscall.Close(fd)
		}
	}
}

// fail closes a client and the upstream answering it (mid-response, it
// cannot be reused).
func (l *loop) fail(c *econn) {
	if u := c.up; u != nil {
		u.cli, c.up = nil, nil
		l.kill(u)
	}
	l.kill(c)
}

func (l *loop) accept() {
	for {
		fd, _, err := syscall.Accept4(l.lfd, syscall.SOCK_NONBLOCK|syscall.SOCK_CLOEXEC)
		switch {
		case err == syscall.EAGAIN:
			return
		case err == syscall.EINTR || err == syscall.ECONNABORTED:
			continue
		case err != nil:
			fmt.Fprintln(os.Stderr, "accept:", err)
			return
		}
		_ = syscall.SetsockoptInt(fd, syscall.IPPROTO_TCP, syscall.TCP_NODELAY, 1)
		l.add(&econn{fd: fd, client: true})
	}
}

func (l *loop) clientEvent(c *econn, evs uint32) {
	if evs&syscall.EPOLLERR != 0 {
		l.fail(c)
		return
	}
	if evs&syscall.EPOLLOUT != 0 && len(c.out) > 0 {
		if !l.flushOut(c) {
			l.fail(c)
			return
		}
		if len(c.out) == 0 && c.up != nil {
			l.upRead(c.up) // it stopped reading while the client was full
			if c.dead {
				return
			}
		}
	}
	if evs&(syscall.EPOLLIN|syscall.EPOLLRDHUP|syscall.EPOLLHUP) == 0 {
		return
	}
	for {
		k, e := sysRead(c.fd, l.buf)
		if e == syscall.EAGAIN {
			break
		}
		if e != 0 || k == 0 {
			l.fail(c)
			return
		}
		c.in = append(c.in, l.buf[:k]...)
		if k < len(l.buf) {
			break
		}
	}
	if c.up == nil {
		l.startRequest(c)
	}
}

// startRequest forwards the request c.in begins with, if it is complete.
func (l *loop) startRequest(c *econn) {
	n, err := requestLen(c.in)
	if err != nil {
		l.fail(c)
		return
	}
	if n == 0 {
		return
	}
	if c.s == nil {
		c.s = new(stream)
	}
	c.s.begin(time.Now())
	u := l.getUp()
	if u == nil {
		l.fail(c)
		return
	}
	u.cli, c.up = c, u
	if !l.send(u, c.in[:n]) {
		l.fail(c)
		return
	}
	c.in = c.in[:copy(c.in, c.in[n:])]
}

// getUp takes an idle upstream connection, or dials one (non-blocking: it
// is connecting until its first EPOLLOUT).
func (l *loop) getUp() *econn {
	if n := len(l.idle); n > 0 {
		u := l.idle[n-1]
		l.idle[n-1] = nil
		l.idle = l.idle[:n-1]
		return u
	}
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_NONBLOCK|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		fmt.Fprintln(os.Stderr, "socket:", err)
		return nil
	}
	_ = syscall.SetsockoptInt(fd, syscall.IPPROTO_TCP, syscall.TCP_NODELAY, 1)
	u := &econn{fd: fd}
	switch err := syscall.Connect(fd, l.upAddr); {
	case err == syscall.EINPROGRESS:
		u.connecting = true
	case err != nil:
		fmt.Fprintln(os.Stderr, "connect:", err)
		_ = syscall.Close(fd)
		return nil
	}
	if !l.add(u) {
		return nil
	}
	return u
}

func (l *loop) upEvent(u *econn, evs uint32) {
	if u.connecting {
		if evs&(syscall.EPOLLOUT|syscall.EPOLLERR|syscall.EPOLLHUP) == 0 {
			return
		}
		if soerr, err := syscall.GetsockoptInt(u.fd, syscall.SOL_SOCKET, syscall.SO_ERROR); err != nil || soerr != 0 {
			fmt.Fprintln(os.Stderr, "connect:", err, syscall.Errno(soerr))
			l.failUp(u)
			return
		}
		u.connecting = false
	}
	if evs&syscall.EPOLLOUT != 0 && len(u.out) > 0 && !l.flushOut(u) {
		l.failUp(u)
		return
	}
	if evs&(syscall.EPOLLIN|syscall.EPOLLRDHUP|syscall.EPOLLHUP|syscall.EPOLLERR) != 0 {
		l.upRead(u)
	}
}

func (l *loop) failUp(u *econn) {
	if u.cli != nil {
		l.fail(u.cli)
	} else {
		l.kill(u)
	}
}

// upRead reads the upstream until it is drained: each read is decoded,
// metered (stamped with the time it returned) and written to the client.
func (l *loop) upRead(u *econn) {
	c := u.cli
	if c == nil {
		// Idle in the pool: an edge for bytes already read is harmless;
		// anything else (end of stream, an error, stray bytes) ends it.
		if _, e := sysRead(u.fd, l.buf); e != syscall.EAGAIN {
			l.kill(u)
		}
		return
	}
	if len(c.out) > 0 {
		return // the client is full: read on when it has taken its bytes
	}
	for {
		k, e := sysRead(u.fd, l.buf)
		if e == syscall.EAGAIN {
			return
		}
		if e != 0 || k == 0 {
			l.fail(c)
			return
		}
		out, done, err := c.s.feed(l.buf[:k], time.Now(), l.out[:0])
		l.out = out[:0]
		if err != nil || !l.send(c, out) {
			l.fail(c)
			return
		}
		if done {
			c.s.finish(&l.rec)
			u.cli, c.up = nil, nil
			l.idle = append(l.idle, u)
			if len(c.in) > 0 {
				l.startRequest(c)
			}
			return
		}
		if len(c.out) > 0 || k < len(l.buf) {
			return
		}
	}
}

// send writes b to c, keeping what its socket has no room for; false: c
// failed.
func (l *loop) send(c *econn, b []byte) bool {
	if len(c.out) > 0 || c.connecting {
		c.out = append(c.out, b...)
		return true
	}
	for len(b) > 0 {
		w, e := sysWrite(c.fd, b)
		if e == syscall.EAGAIN {
			c.out = append(c.out, b...)
			return true // EPOLLOUT will come
		}
		if e != 0 {
			return false
		}
		b = b[w:]
	}
	return true
}

// flushOut writes c.out; false: c failed.
func (l *loop) flushOut(c *econn) bool {
	b := c.out
	for len(b) > 0 {
		w, e := sysWrite(c.fd, b)
		if e == syscall.EAGAIN {
			c.out = c.out[:copy(c.out, b)]
			return true
		}
		if e != 0 {
			return false
		}
		b = b[w:]
	}
	c.out = c.out[:0]
	if cap(c.out) > 4<<10 {
		c.out = nil
	}
	return true
}

// How a loop waits (protoproxy --epoll-wait).
const (
	waitRaw     = "raw"
	waitSyscall = "syscall"
	waitNetpoll = "netpoll"
)

// epollWait blocks until a socket of epfd is ready.
//
// With raw, the call is a RawSyscall: the loop's thread keeps its P while
// it sleeps in the kernel, as an nginx worker sleeps in epoll_wait. As a
// syscall.EpollWait (raw false), it enters the scheduler's syscall state,
// and with every P of the process in epoll_wait (one loop per P), sysmon
// finds no idle P and retakes a waiting loop's P after 20 µs: a hand-off,
// futex wake-ups and a slow exitsyscall on nearly every wake-up (at 32
// streams, about three times the CPU per event; docs/OVERHEAD.md). The
// cost of raw: a loop that sleeps longer than 10 ms counts for sysmon as
// a goroutine running that long, so it is preempted (a SIGURG that makes
// epoll_wait return EINTR) about 100 times a second, and a stop-the-world
// reaches it the same way. epollWait is not inlined, so that its
// prologue is where the loop honours a preemption request.
//
//go:noinline
func epollWait(epfd int, events []syscall.EpollEvent, raw bool) (int, error) {
	if !raw {
		return syscall.EpollWait(epfd, events, -1)
	}
	n, _, e := syscall.RawSyscall6(syscall.SYS_EPOLL_WAIT, uintptr(epfd), uintptr(unsafe.Pointer(&events[0])), uintptr(len(events)), ^uintptr(0), 0, 0)
	if e != 0 {
		return 0, e
	}
	return int(n), nil
}
