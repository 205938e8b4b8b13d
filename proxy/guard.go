package proxy

import (
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/goodput/goodput/internal/peek"
)

// guardPoll is how often a request whose first token has not yet been
// written checks that its client is still there. The first check is one
// interval after the guard is armed, so a request whose first token comes
// sooner never pays for one.
const guardPoll = 50 * time.Millisecond

// clientGuard watches the client until the first token is written to it.
// Until then there is nothing to write (the engine is queueing or in
// prefill, whether or not it already sent its response headers), so a
// failed write cannot tell that the client left, and the engine would
// prefill and start decoding for nobody. When the client has gone, the
// guard expires the upstream connection's deadline, which ends the
// exchange, or the stream's read, at once; the request is recorded as
// client_abort.
type clientGuard struct {
	mu      sync.Mutex
	client  net.Conn
	gone    func() bool // peeks at client; made at the first check
	up      *upConn     // the upstream connection in use, nil between attempts
	timer   *time.Timer // nil until armed
	left    atomic.Bool // set before the upstream deadline is expired
	stopped bool
}

// startGuard returns a guard of client, which watches it once armed; it
// returns nil (no guard) when the connection has no socket to peek at. The
// peek's state is made at the first check (a request whose first token
// comes within guardPoll never needs it), and a socket refused then ends
// the watch there (peekGone).
func startGuard(client net.Conn) *clientGuard {
	if !peek.Supported(client) {
		return nil
	}
	return &clientGuard{client: client}
}

// arm starts the watch, if it has not started (or stopped). The exchange
// arms it once the request is written upstream, or before it dials a
// connection: until then the client is only waiting for the gateway's own
// work, and a timer started before the write would be work on the
// request's way to the engine (the profile at 32 streams gave starting it
// about a tenth of the gateway's time before the write).
func (g *clientGuard) arm() {
	if g == nil {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.timer == nil && !g.stopped {
		g.timer = time.AfterFunc(guardPoll, g.check)
	}
}

func (g *clientGuard) check() {
	// The peek runs outside the lock: it is a syscall.
	gone, ok := g.peekGone()
	if !ok {
		return // nothing to watch: the timer is not armed again
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.stopped {
		return
	}
	if !gone {
		g.timer.Reset(guardPoll)
		return
	}
	g.left.Store(true)
	if testHookGuardLeft != nil {
		testHookGuardLeft()
	}
	if g.up != nil {
		_ = g.up.SetDeadline(aLongTimeAgo)
	}
}

// peekGone peeks at the client. Checks run one after another (each arms
// the next), so g.gone is only ever touched here; it is made at the first.
// ok is false when the connection cannot be peeked at after all: a
// wrapper's SyscallConn can refuse (NewListener's, over a connection that
// is not a socket), and a failed write is then what tells that the client
// left, as for a connection with no guard.
func (g *clientGuard) peekGone() (gone, ok bool) {
	if g.gone == nil {
		if g.gone = peek.Poller(g.client); g.gone == nil {
			return false, false
		}
	}
	return g.gone(), true
}

// testHookGuardLeft, when set by a test, is called when a guard finds its
// client gone.
var testHookGuardLeft func()

// aLongTimeAgo is a deadline already past: a blocked read returns at once.
var aLongTimeAgo = time.Unix(1, 0)

// use tells the guard which upstream connection the exchange is on. It
// returns false when the client has already gone (the caller stops).
func (g *clientGuard) use(c *upConn) bool {
	if g == nil {
		return true
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.up = c
	return !g.left.Load()
}

// clientLeft reports whether the guard found the client gone. A reader that
// sets a deadline on the upstream connection checks it afterwards: the
// guard sets it before expiring the deadline, so one of the two sees the
// other.
func (g *clientGuard) clientLeft() bool {
	return g != nil && g.left.Load()
}

// stop ends the watch and reports whether the client left meanwhile. When
// it did, the upstream connection's deadline may have been expired: it
// must not be used. stop may be called more than once.
func (g *clientGuard) stop() (gone bool) {
	if g == nil {
		return false
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.stopped {
		g.stopped = true
		if g.timer != nil {
			g.timer.Stop()
		}
		g.up = nil
	}
	return g.left.Load()
}
