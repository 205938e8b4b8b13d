//go:build unix

package proxy

import (
	"errors"
	"net"
	"syscall"
)

// rawConnOf returns c's socket for non-blocking writes; nil when c has none.
func rawConnOf(c net.Conn) syscall.RawConn {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return nil
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return nil
	}
	return rc
}

// writeFD is the stream's one write(2) of s.wire, never waiting: a full
// socket gives EAGAIN, or a short count.
func (s *stream) writeFD(fd uintptr) bool {
	for {
		n, err := syscall.Write(int(fd), s.wire)
		if err == syscall.EINTR {
			continue
		}
		s.rawN, s.rawErr = max(n, 0), err
		return true
	}
}

func wouldBlock(err error) bool { return errors.Is(err, syscall.EAGAIN) }
