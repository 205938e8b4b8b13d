//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package sim

import "net"

// connPoller is not available on this platform: the simulator notices a
// client that went away only when a write fails.
func connPoller(net.Conn) func() bool { return nil }
