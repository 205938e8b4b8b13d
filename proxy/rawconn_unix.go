//go:build unix

package proxy

import (
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"syscall"
)

// rawConnIO reads and writes a connection as net.Conn's Read and Write do
// (one read(2); write(2) until all is written; on EAGAIN a wait in the
// poller, under the connection's deadlines), with the calls made by sysRead
// and sysWrite, which do not enter the scheduler's syscall state. Each call
// that does wakes sysmon out of its long sleep when every P was idle, and
// sysmon then polls every 20 µs for at least a millisecond; a request made
// six of them (the client's request read, the head's and the body end's
// flushes, the upstream request's write, the idle upstream connection's
// peek).
//
// Not under the race detector (useRawConnIO): net.Conn's Read and Write
// tell it that what a goroutine did before it wrote to a socket happened
// before whatever reads the bytes (internal/poll annotates each write and
// each read), and tests rely on that edge to hand values to a handler
// through a request; the raw calls cannot make it. The tests' normal build
// (CI's timing and allocation runs) takes the raw path.
//
// A write's state is taken from a pool for the call (rawWrite), so
// one goroutine may read while another writes, and a connection keeps
// only its read's.
type rawConnIO struct {
	conn    net.Conn
	rc      syscall.RawConn
	readFn  func(fd uintptr) bool // readFD, bound once
	aheadFn func(fd uintptr) bool // readAheadFD, bound once
	rp      []byte
	ab      *[]byte // readAhead's buffer
	rn      int
	re      syscall.Errno
}

// useRawConnIO: connections use rawConnIO (see above).
const useRawConnIO = !raceEnabled

// init readies x for c; it reports false when c is not a TCP or Unix
// socket of the net package (x is then unused and c's own Read and Write
// serve: a wrapper's, such as TLS's, must not be bypassed).
func (x *rawConnIO) init(c net.Conn) bool {
	switch c.(type) {
	case *net.TCPConn, *net.UnixConn:
	default:
		return false
	}
	rc := rawConnOf(c)
	if rc == nil {
		return false
	}
	x.conn, x.rc = c, rc
	x.readFn, x.aheadFn = x.readFD, x.readAheadFD
	return true
}

func (x *rawConnIO) Read(p []byte) (int, error) { return x.read(p, nil) }

// rawConn is the connection's RawConn, nil before init (or when it failed).
func (x *rawConnIO) rawConn() syscall.RawConn { return x.rc }

// read is Read; at the read deadline it asks *late, when set, whether the
// read goes on (an upstream connection's early deadline, see
// upConn.lateDeadlines).
func (x *rawConnIO) read(p []byte, late *func() bool) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	x.rp, x.rn, x.re = p, 0, 0
	err := x.rc.Read(x.readFn)
	for err != nil && late != nil && *late != nil && errors.Is(err, os.ErrDeadlineExceeded) && (*late)() {
		err = x.rc.Read(x.readFn) // the deadline was early: read on until the real one
	}
	x.rp = nil
	switch {
	case err != nil:
		return 0, asNetOp(err, "read")
	case x.re != 0:
		return 0, sockErr(x.conn, "read", x.re)
	case x.rn == 0:
		return 0, io.EOF
	}
	return x.rn, nil
}

func (x *rawConnIO) readFD(fd uintptr) bool {
	n, e := sysRead(fd, x.rp)
	if e == syscall.EAGAIN {
		return false
	}
	x.rn, x.re = n, e
	return true
}

// readAhead is Read into a buffer of aheadBufs, taken only once the socket
// has bytes (a wait in the poller holds none): it returns the buffer and
// how much of it was read, or an error (and no buffer).
func (x *rawConnIO) readAhead() (*[]byte, int, error) {
	x.ab, x.rn, x.re = nil, 0, 0
	err := x.rc.Read(x.aheadFn)
	bp, n := x.ab, x.rn
	x.ab = nil
	if err == nil && x.re == 0 && n > 0 {
		return bp, n, nil
	}
	if bp != nil {
		aheadBufs.Put(bp)
	}
	switch {
	case err != nil:
		return nil, 0, asNetOp(err, "read")
	case x.re != 0:
		return nil, 0, sockErr(x.conn, "read", x.re)
	}
	return nil, 0, io.EOF
}

func (x *rawConnIO) readAheadFD(fd uintptr) bool {
	bp := aheadBufs.Get().(*[]byte)
	n, e := sysRead(fd, *bp)
	if e == syscall.EAGAIN {
		aheadBufs.Put(bp)
		return false
	}
	x.ab, x.rn, x.re = bp, n, e
	return true
}

func (x *rawConnIO) Write(p []byte) (int, error) { return writeAllRaw(x.conn, x.rc, p) }

// writeNow writes what of p the socket takes without waiting: blocked
// reports that it stopped at a full socket with n < len(p) (no error).
func (x *rawConnIO) writeNow(p []byte) (n int, blocked bool, err error) {
	return writeRaw(x.conn, x.rc, p, false)
}

// rawWrite is the state of one writeRaw call.
type rawWrite struct {
	p       []byte
	n       int
	e       syscall.Errno
	wait    bool // on EAGAIN, wait in the poller (else return, blocked)
	blocked bool
	fn      func(fd uintptr) bool // writeFD, bound once per pooled value
}

var rawWrites = sync.Pool{New: func() any {
	w := new(rawWrite)
	w.fn = w.writeFD
	return w
}}

func (w *rawWrite) writeFD(fd uintptr) bool {
	n, e := sysWrite(fd, w.p)
	if e == syscall.EAGAIN {
		// wait: until the socket takes more (or the deadline).
		w.blocked = !w.wait
		return w.blocked
	}
	w.n, w.e = n, e
	return true
}

// writeAllRaw writes p to c's socket rc as net.Conn's Write does: all of
// it, waiting in the poller while the socket is full, under c's write
// deadline; the error is net.Conn's.
func writeAllRaw(c net.Conn, rc syscall.RawConn, p []byte) (int, error) {
	n, _, err := writeRaw(c, rc, p, true)
	return n, err
}

// writeRaw is writeAllRaw, which with wait false stops at a full socket
// instead of waiting (blocked).
func writeRaw(c net.Conn, rc syscall.RawConn, p []byte, wait bool) (total int, blocked bool, err error) {
	w := rawWrites.Get().(*rawWrite)
	defer rawWrites.Put(w)
	for len(p) > 0 {
		w.p, w.n, w.e, w.wait, w.blocked = p, 0, 0, wait, false
		err := rc.Write(w.fn)
		w.p = nil
		switch {
		case err != nil:
			return total, false, asNetOp(err, "write")
		case w.blocked:
			return total, true, nil
		case w.e != 0:
			return total, false, sockErr(c, "write", w.e)
		case w.n == 0:
			return total, false, io.ErrUnexpectedEOF // as net.Conn's Write: a socket that takes nothing without an error
		}
		total += w.n
		p = p[w.n:]
	}
	return total, false, nil
}
