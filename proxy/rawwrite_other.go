//go:build !unix

package proxy

import (
	"net"
	"syscall"
)

// rawConnOf returns nil: streams write through their writer goroutine.
func rawConnOf(net.Conn) syscall.RawConn { return nil }

func (s *stream) writeFD(uintptr) bool { return true }

func wouldBlock(error) bool { return false }
