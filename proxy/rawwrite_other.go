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
