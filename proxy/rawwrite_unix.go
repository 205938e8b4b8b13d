//go:build unix

package proxy

import (
	"errors"
	"io"
	"net"
	"os"
	"syscall"

	"github.com/goodput/goodput/internal/peek"
)

// rawConnOf returns c's socket for non-blocking writes; nil when c has none.
func rawConnOf(c net.Conn) syscall.RawConn { return peek.RawConn(c) }

// writeFD is the stream's one write(2) of s.wire, never waiting: a full
// socket gives EAGAIN, or a short count.
func (s *stream) writeFD(fd uintptr) bool {
	n, e := sysWrite(fd, s.wire)
	s.rawN = n
	if e != 0 {
		s.rawErr = e
	}
	return true
}

func wouldBlock(err error) bool { return errors.Is(err, syscall.EAGAIN) }

// upReader reads an upstream connection for its buffered reader as
// net.Conn's Read does (one read(2), and on EAGAIN a wait for the poller,
// under the connection's read deadline), with the read made by sysRead.
// Errors are net.Conn's: io.EOF at the end, a *net.OpError "read" else.
// At the read deadline it asks the connection's onDeadline, if set,
// whether the read goes on (see upConn.lateDeadlines).
type upReader struct {
	c     *upConn
	conn  net.Conn
	rc    syscall.RawConn
	read  func(fd uintptr) bool // readFD, bound once: no allocation per read
	p     []byte
	n     int
	errno syscall.Errno
}

// newUpReader returns what reads c: an upReader, or c's connection itself
// when it has no socket.
func newUpReader(c *upConn) io.Reader {
	rc := rawConnOf(c.Conn)
	if rc == nil {
		return c.Conn
	}
	c.rc = rc
	r := &upReader{c: c, conn: c.Conn, rc: rc}
	r.read = r.readFD
	c.lateDeadlines = true
	return r
}

func (r *upReader) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	r.p, r.n, r.errno = p, 0, 0
	err := r.rc.Read(r.read)
	for err != nil && r.c.onDeadline != nil && errors.Is(err, os.ErrDeadlineExceeded) && r.c.onDeadline() {
		err = r.rc.Read(r.read) // the deadline was early: read on until the real one
	}
	r.p = nil
	switch {
	case err != nil:
		if op, ok := err.(*net.OpError); ok {
			op.Op = "read" // not "raw-read": the error reads as net.Conn's
		}
		return 0, err
	case r.errno != 0:
		return 0, readErrno(r.conn, r.errno)
	case r.n == 0:
		return 0, io.EOF
	}
	return r.n, nil
}

func (r *upReader) readFD(fd uintptr) bool {
	n, e := sysRead(fd, r.p)
	if e == syscall.EAGAIN {
		return false // wait until the socket is readable (or the deadline)
	}
	r.n, r.errno = n, e
	return true
}
