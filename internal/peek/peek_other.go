//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package peek

import (
	"errors"
	"net"
	"syscall"
)

// Poller is not available on this platform: it returns nil, and callers
// notice a peer that went away only when a write fails.
func Poller(net.Conn) func() bool { return nil }

// Supported reports false: there is no peek on this platform.
func Supported(net.Conn) bool { return false }

// Idle is not available on this platform: it returns nil, and a connection
// the peer closed while idle is found when it is used.
func Idle(net.Conn) func() bool { return nil }

// End is not available on this platform: it reports the connection as
// not peekable (err).
func End(syscall.RawConn) (eof bool, e, err error) { return false, nil, errors.ErrUnsupported }

// Gone is not available on this platform: it reports false.
func Gone(syscall.RawConn) bool { return false }

// Readable reports true: there is no peek on this platform (and no RawConn
// read that would call it).
func Readable(uintptr) bool { return true }
