//go:build !linux

package proxy

import "sync"

// The I/O loops are Linux's (ioloop_linux.go): elsewhere every direct
// stream reads its socket on its own goroutine.

const ioLoopSupported = false

// loopSlot is a stream's registration with an I/O loop: none here.
type loopSlot struct {
	mu     sync.Mutex
	inLoop bool
}

func (sl *loopSlot) poke() {}

// loopRead is never called: no stream joins a loop (Proxy.ioLoop is
// false).
func (s *stream) loopRead() (why error, done bool) {
	s.dr.noLoop = true
	return nil, false
}
