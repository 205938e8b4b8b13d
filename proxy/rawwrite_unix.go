//go:build unix

package proxy

import (
	"errors"
	"io"
	"net"
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
// net.Conn's Read does (rawConnIO), and at the read deadline asks the
// connection's onDeadline, if set, whether the read goes on (see
// upConn.lateDeadlines).
type upReader struct {
	c  *upConn
	io rawConnIO
}

// newUpReader returns what reads c: an upReader, or c's connection itself
// when it has no socket.
func newUpReader(c *upConn) io.Reader {
	r := &upReader{c: c}
	if !r.io.init(c.Conn) {
		return c.Conn
	}
	c.rc = r.io.rc
	c.lateDeadlines = true
	return r
}

func (r *upReader) Read(p []byte) (int, error) {
	n, err := r.io.read(p, &r.c.onDeadline)
	if r.c.head.on && n > 0 {
		if e := r.c.head.scan(p[:n]); e != nil {
			return n, e // the bytes are read; the connection goes no further
		}
	}
	return n, err
}
