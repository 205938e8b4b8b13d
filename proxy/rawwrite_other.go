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

// newUpReader returns nc: it is read through net.Conn.
func newUpReader(nc net.Conn) io.Reader { return nc }
