//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

// Package peek tells whether the peer of a connection has gone, without
// reading anything from it.
package peek

import (
	"errors"
	"net"
	"syscall"
)

// Poller returns a function that reports whether the peer of c has closed
// the connection (or reset it), without consuming any byte a client may have
// pipelined: it peeks with MSG_PEEK|MSG_DONTWAIT, as nginx tests a waiting
// client. It returns nil when c does not expose its file descriptor or the
// platform has no such peek. A peer that only half-closed (shutdown of its
// write side) looks gone too.
//
// The peek ignores c's deadlines: a read deadline set for reading the
// request (and long past while the response is awaited) does not make a
// live peer look gone. It goes through RawConn.Control, which only holds
// the descriptor open, where RawConn.Read would first fail on the expired
// deadline. The socket is non-blocking and MSG_DONTWAIT never waits.
func Poller(c net.Conn) func() bool {
	rc := RawConn(c)
	if rc == nil {
		return nil
	}
	p := newPeeker(rc)
	return func() bool {
		n, e, err := p.peek()
		switch {
		case err != nil:
			return true // the connection is closed here
		case e == nil:
			return n == 0 // orderly shutdown by the peer
		default:
			return !wouldBlock(e) // ECONNRESET and friends
		}
	}
}

// Supported reports whether c says it has a socket to peek at (it is a
// syscall.Conn), without making anything. A wrapper's SyscallConn may
// still refuse: Poller and Idle then return nil.
func Supported(c net.Conn) bool {
	_, ok := c.(syscall.Conn)
	return ok
}

// Idle returns a function that reports whether an idle connection may still
// carry a request: false once the peer has closed or reset it, or has sent
// bytes nobody asked for (a late or unsolicited response, such as a 408
// before closing), which would otherwise be read as the answer to the next
// request. Like Poller it consumes nothing and ignores deadlines. It
// returns nil when c does not expose its file descriptor.
func Idle(c net.Conn) func() bool {
	rc := RawConn(c)
	if rc == nil {
		return nil
	}
	p := newPeeker(rc)
	return func() bool {
		_, e, err := p.peek()
		return err == nil && wouldBlock(e)
	}
}

// End peeks at what the socket rc has to read next, without taking it and
// without waiting: eof when the peer's FIN is next (no byte before it), e
// the error a read would return (EAGAIN when there is nothing yet), err
// when the connection is closed here. It is asked once in a while (a
// stream's deadline expired), so it makes its peeker each time.
func End(rc syscall.RawConn) (eof bool, e, err error) {
	n, e, err := newPeeker(rc).peek()
	return err == nil && e == nil && n == 0, e, err
}

// Gone reports whether the peer of the socket rc has closed (or
// half-closed) or reset the connection, as Poller's function does, by one
// peek that takes nothing and does not wait; false when the connection is
// closed here. Like End, it makes its peeker each time: for a look once in
// a while.
func Gone(rc syscall.RawConn) bool {
	eof, e, err := End(rc)
	return err == nil && (eof || (e != nil && !wouldBlock(e)))
}

// peeker peeks at one byte of one socket, allocating nothing per peek: the
// callback handed to RawConn.Control is bound once, with the result's
// fields. Not for concurrent use (Poller's and Idle's functions are each
// called by one goroutine at a time).
type peeker struct {
	rc  syscall.RawConn
	ctl func(fd uintptr)
	n   int
	e   error
	buf [1]byte
}

func newPeeker(rc syscall.RawConn) *peeker {
	p := &peeker{rc: rc}
	p.ctl = p.control
	return p
}

func (p *peeker) control(fd uintptr) { p.n, p.e = recvPeekRetry(fd, p.buf[:]) }

// peek peeks at one byte without waiting: n and e are recvfrom's result
// (EINTR retried), err is Control's (the connection is closed here).
func (p *peeker) peek() (n int, e, err error) {
	err = p.rc.Control(p.ctl)
	n, e = p.n, p.e
	p.e = nil
	return n, e, err
}

// recvPeekRetry is recvPeek, retried on EINTR.
func recvPeekRetry(fd uintptr, buf []byte) (int, error) {
	for {
		n, e := recvPeek(fd, buf)
		if !errors.Is(e, syscall.EINTR) {
			return n, e
		}
	}
}

func wouldBlock(e error) bool {
	return errors.Is(e, syscall.EAGAIN) || errors.Is(e, syscall.EWOULDBLOCK)
}

// Readable is a RawConn.Read callback that reads nothing: it returns true
// once a read of the socket would not block (a byte, the peer's FIN or an
// error is there to read), as a one-byte peek tells.
func Readable(fd uintptr) bool {
	var b [1]byte
	_, e := recvPeekRetry(fd, b[:])
	return !wouldBlock(e)
}
