package proxy

import (
	"net"
	"sync"
	"time"

	"github.com/goodput/goodput/internal/peek"
)

// guardPoll is how often a request waiting for the upstream's first byte
// checks that its client is still there. The first check is one interval
// in, so a request whose first byte comes sooner never pays for one.
const guardPoll = 50 * time.Millisecond

// firstByteGuard watches the client while the upstream has not answered.
// Before the first byte there is nothing to write, so a failed write cannot
// tell that the client left; the engine would queue, prefill and start
// decoding for nobody. When the client has gone, the guard expires the
// upstream connection's deadline, which ends the exchange at once, and the
// request is recorded as client_abort.
type firstByteGuard struct {
	mu      sync.Mutex
	gone    func() bool // peeks at the client's connection
	up      *upConn     // the upstream connection in use, nil between attempts
	timer   *time.Timer
	left    bool
	stopped bool
}

// startGuard starts watching client; it returns nil (no guard) when the
// connection cannot be peeked at.
func startGuard(client net.Conn) *firstByteGuard {
	gone := peek.Poller(client)
	if gone == nil {
		return nil
	}
	g := &firstByteGuard{gone: gone}
	g.mu.Lock()
	g.timer = time.AfterFunc(guardPoll, g.check)
	g.mu.Unlock()
	return g
}

func (g *firstByteGuard) check() {
	// The peek runs outside the lock: it is a syscall.
	gone := g.gone()
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.stopped {
		return
	}
	if !gone {
		g.timer.Reset(guardPoll)
		return
	}
	g.left = true
	if g.up != nil {
		_ = g.up.SetDeadline(aLongTimeAgo)
	}
}

// aLongTimeAgo is a deadline already past: a blocked read returns at once.
var aLongTimeAgo = time.Unix(1, 0)

// use tells the guard which upstream connection the exchange is on. It
// returns false when the client has already gone (the caller stops).
func (g *firstByteGuard) use(c *upConn) bool {
	if g == nil {
		return true
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.up = c
	return !g.left
}

// stop ends the watch and reports whether the client left meanwhile. When
// it did, the upstream connection's deadline may have been expired: it
// must not be used.
func (g *firstByteGuard) stop() (gone bool) {
	if g == nil {
		return false
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.stopped = true
	g.timer.Stop()
	g.up = nil
	return g.left
}
