//go:build !linux

package proxy

import "net"

// clientGone is not implemented here: a client that leaves while its request
// waits in the gateway's queue is noticed only when the queue wait ends.
func clientGone(net.Conn) bool { return false }
