//go:build !unix

package proxy

import (
	"io"
	"net"
	"syscall"
)

// rawConnOf returns nil: streams write through their writer goroutine.
func rawConnOf(net.Conn) syscall.RawConn { return nil }

func (s *stream) writeFD(uintptr) bool { return true }

func wouldBlock(error) bool { return false }

// newUpReader returns c's connection: it is read through net.Conn (and
// c.lateDeadlines stays false).
func newUpReader(c *upConn) io.Reader { return c.Conn }

// sysRead is never called: no connection has a RawConn here (upConn.rc is
// nil), so no stream reads directly.
func sysRead(uintptr, []byte) (int, syscall.Errno) { return 0, syscall.EINVAL }

// rawConnIO is unused here: connections are read and written through
// net.Conn.
type rawConnIO struct{}

func (*rawConnIO) init(net.Conn) bool        { return false }
func (*rawConnIO) rawConn() syscall.RawConn  { return nil }
func (*rawConnIO) Read([]byte) (int, error)  { return 0, syscall.EINVAL }
func (*rawConnIO) Write([]byte) (int, error) { return 0, syscall.EINVAL }
func (*rawConnIO) writeNow([]byte) (int, bool, error) {
	return 0, false, syscall.EINVAL
}
func (*rawConnIO) readAhead() (*[]byte, int, error) {
	return nil, 0, syscall.EINVAL
}

// writeAllRaw is never called here: no connection has a RawConn.
func writeAllRaw(net.Conn, syscall.RawConn, []byte) (int, error) { return 0, syscall.EINVAL }

// writeRaw is never called here either.
func writeRaw(net.Conn, syscall.RawConn, []byte, bool) (int, bool, error) {
	return 0, false, syscall.EINVAL
}

// useRawConnIO is false: there is no raw path here.
const useRawConnIO = false
