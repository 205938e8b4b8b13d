package proxy

import (
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/goodput/goodput/internal/peek"
)

// Listener wraps the proxy's listener for Server:
//
//   - An accept error that passes (out of file descriptors: EMFILE, ENFILE;
//     out of buffers: ENOBUFS, ENOMEM; a connection aborted before it was
//     accepted) does not end the server: Accept waits 5 ms, doubling up to
//     1 s, and tries again, as net/http does. fasthttp's Serve returns on
//     any accept error but a timeout, which ended the gateway with every
//     stream in flight. The connections meanwhile wait in the kernel's
//     backlog. The episode is logged when it starts and when it ends.
//   - At most max connections are open at once: at the cap Accept holds
//     the next connection until one closes, and the others wait in the
//     kernel's backlog (HAProxy's maxconn), so that the descriptors left
//     serve the upstream connections of the requests already accepted.
//     At the cap, the connection idle the longest between two requests (a
//     second at least, with nothing of a next request arrived) is closed
//     to make room (nginx reuses its idle keep-alive connections the same
//     way): otherwise clients that keep idle connections (a pool, or an
//     attacker) would hold every slot for the 90 s idle timeout while new
//     clients wait. A request that arrives just as it closes meets the
//     close, as at the idle timeout; one whose first byte was read is
//     served (reclaimIdle).
//   - CutReads ends the requests still being read, for a shutdown's cut.
type Listener struct {
	net.Listener
	logf func(format string, args ...any)

	slots     chan struct{} // one per open connection; nil: no cap
	max       int
	closed    chan struct{}
	closeOnce sync.Once

	mu        sync.Mutex
	conns     map[*listenerConn]struct{}
	allClosed chan struct{} // Closed's, closed when conns empties; nil until asked
	capSaid   time.Time     // last time the cap was logged
	retrySaid time.Time     // last time an accept error was logged

	open      atomic.Int64
	failures  atomic.Int64 // accept errors that were retried
	reclaimed atomic.Int64 // idle connections closed at the cap

	// lingerIdle bounds a lingering close's wait for the client's next
	// bytes (lingerIdle by default; tests shorten it); lingerDone, when a
	// test sets it, runs when a lingering close has closed its connection.
	lingerIdle time.Duration
	lingerDone func()
	cutting    atomic.Bool // CutReads has begun
	// minIdle: reclaimMinIdle (tests shorten it).
	minIdle time.Duration
	// plainEOF: reads end with io.EOF itself (NewAdminListener: net/http
	// takes only that for a client's close); what: the cap's name in logs.
	plainEOF bool
	what     string
	lingerN  atomic.Int64
	// scanHeads: request heads are scanned for bare LF line ends as they
	// are read (reqhead.go); not on the admin listener, whose net/http
	// server reads them as it does.
	scanHeads bool
	// readAhead: a connection's one-byte reads read ahead (readAhead);
	// not on the admin listener (net/http reads a byte to watch a
	// connection while its handler runs).
	readAhead bool
}

// Lingering returns the number of connections in a lingering close.
func (l *Listener) Lingering() int64 { return l.lingerN.Load() }

// Accept backoff bounds (net/http's).
const (
	acceptRetryMin = 5 * time.Millisecond
	acceptRetryMax = time.Second
)

// NewListener wraps ln. maxConns <= 0 means no cap; logf may be nil.
func NewListener(ln net.Listener, maxConns int, logf func(format string, args ...any)) *Listener {
	if logf == nil {
		logf = func(string, ...any) {}
	}
	l := &Listener{Listener: ln, logf: logf, max: maxConns, closed: make(chan struct{}), conns: make(map[*listenerConn]struct{}), lingerIdle: lingerIdle, minIdle: reclaimMinIdle, what: "max_connections", scanHeads: true, readAhead: true}
	if maxConns > 0 {
		l.slots = make(chan struct{}, maxConns)
	}
	return l
}

// Open returns the number of open connections.
func (l *Listener) Open() int64 { return l.open.Load() }

// AcceptRetries returns the number of accept errors that were waited out.
func (l *Listener) AcceptRetries() int64 { return l.failures.Load() }

// Accept waits for a connection, then for a free slot: at the cap the
// connection is accepted and held (one beyond the cap; the others wait in
// the kernel's backlog) while the connection idle the longest is closed to
// make room, or until one closes.
func (l *Listener) Accept() (net.Conn, error) {
	reserved := false
	if l.slots != nil {
		select {
		case l.slots <- struct{}{}:
			reserved = true
		default:
		}
	}
	c, err := l.accept()
	if err != nil {
		if reserved {
			l.release()
		}
		return nil, err
	}
	if l.slots != nil && !reserved {
		if err := l.waitSlot(); err != nil {
			_ = c.Close()
			return nil, err
		}
	}
	return l.track(c), nil
}

// accept accepts a connection, waiting out the errors that pass.
func (l *Listener) accept() (net.Conn, error) {
	var delay time.Duration
	var since time.Time
	said := false
	for {
		c, err := l.Listener.Accept()
		if err == nil {
			if said {
				l.logf("accepting connections again after %v", time.Since(since).Round(time.Millisecond))
			}
			return c, nil
		}
		if !retryable(err) {
			return nil, err
		}
		l.failures.Add(1)
		if delay == 0 {
			delay, since = acceptRetryMin, time.Now()
			if said = l.say(&l.retrySaid, 10*time.Second); said {
				l.logf("WARNING: accept: %v; retrying every %v to %v until it succeeds (%d connections open); new connections wait meanwhile", err, acceptRetryMin, acceptRetryMax, l.open.Load())
			}
		} else if delay *= 2; delay > acceptRetryMax {
			delay = acceptRetryMax
		}
		t := time.NewTimer(delay)
		select {
		case <-t.C:
		case <-l.closed:
			t.Stop()
			return nil, net.ErrClosed
		}
	}
}

// atCap logs, at most once a minute, that new connections wait.
func (l *Listener) atCap() {
	if l.say(&l.capSaid, time.Minute) {
		l.logf("%s (%d) reached: new connections wait to be accepted until one closes; the one idle the longest between requests is closed to make room (%d so far)", l.what, l.max, l.reclaimed.Load())
	}
}

// reclaimEvery is how often Accept, waiting at the cap with no connection
// idle, looks again for one that has become idle.
const reclaimEvery = 50 * time.Millisecond

// waitSlot waits at the cap for a slot, closing meanwhile the connection
// idle the longest between requests, if any.
func (l *Listener) waitSlot() error {
	var t *time.Timer
	defer func() {
		if t != nil {
			t.Stop()
		}
	}()
	for first := true; ; first = false {
		select {
		case l.slots <- struct{}{}: // one came free while the connection was awaited
			return nil
		default:
		}
		if first {
			l.atCap()
		}
		l.reclaimIdle()
		// No sooner than a connection may have rested enough (the admin
		// listener's 10 ms), no later than reclaimEvery.
		every := min(reclaimEvery, l.minIdle)
		if t == nil {
			t = time.NewTimer(every)
		} else {
			t.Reset(every)
		}
		select {
		case l.slots <- struct{}{}:
			return nil
		case <-l.closed:
			return net.ErrClosed
		case <-t.C:
		}
	}
}

// reclaimMinIdle is how long a connection must have waited for its next
// request before it may be closed to make room: a client that keeps its
// connection busy sends its next request at once, and a close racing that
// request would drop it unanswered and unrecorded.
const reclaimMinIdle = time.Second

// reclaimIdle ends the connection that has waited the longest for its
// next request, at least reclaimMinIdle, with nothing of a next request
// arrived: its read deadline expires, so the server's wait for the next
// request ends and closes it (no request, no record), and its slot comes
// free. It reports whether it found one.
func (l *Listener) reclaimIdle() bool {
	var oldest *listenerConn
	var at int64
	latest := int64(time.Since(monoBase) - l.minIdle)
	l.mu.Lock()
	for c := range l.conns {
		if t := c.idleAt.Load(); t != 0 && t <= latest && (oldest == nil || t < at) {
			oldest, at = c, t
		}
	}
	l.mu.Unlock()
	if oldest == nil {
		return false
	}
	// Under the state lock: a request whose first byte has been read waits
	// in connState (StateActive) until the deadline is set, and the server
	// then sets the request's own deadline over it, so it is served.
	oldest.stateMu.Lock()
	defer oldest.stateMu.Unlock()
	if oldest.idleAt.Load() != at {
		return false // a request came meanwhile
	}
	if rc := peek.RawConn(oldest.Conn); rc != nil {
		if eof, e, err := peek.End(rc); err != nil || (!eof && !wouldBlock(e)) {
			return false // bytes of a next request wait to be read
		}
	}
	oldest.idleAt.Store(0)
	_ = oldest.SetReadDeadline(aLongTimeAgo)
	l.reclaimed.Add(1)
	return true
}

// NewAdminListener is NewListener for a net/http server (the admin
// listener): its reads end with io.EOF itself, its cap is named
// admin_connections in the log, a connection idle adminReclaimMinIdle may
// be closed at the cap, and the server's ConnState hook must tell SetIdle
// when a connection waits for its next request.
func NewAdminListener(ln net.Listener, maxConns int, logf func(format string, args ...any)) *Listener {
	l := NewListener(ln, maxConns, logf)
	l.plainEOF, l.what, l.scanHeads, l.readAhead = true, "admin_connections", false, false
	l.minIdle = adminReclaimMinIdle
	return l
}

// adminReclaimMinIdle is the admin listener's reclaimMinIdle. Its clients
// (Prometheus, browsers, health checks) send GETs, which their HTTP
// clients send again when a kept-alive connection closes under them, and
// its requests have no records to lose; so at the cap a connection that
// has waited this long for a request (or not yet sent a whole head) makes
// room for the next. With a second, connections that half-sent a head,
// opened 200 a second, held the 32 slots, and every health check behind
// them in the kernel's backlog timed out (a new user's probe); a
// kubelet's liveness probe would have restarted the gateway.
const adminReclaimMinIdle = 10 * time.Millisecond

// SetIdle notes that c, a connection of l, waits for its next request
// (idle) or no longer: for a server other than Proxy.Server, whose
// ConnState hook does it.
func (l *Listener) SetIdle(c net.Conn, idle bool) {
	if lc, ok := c.(*listenerConn); ok && lc.l == l {
		lc.setIdle(idle)
	}
}

// Reclaimed returns the number of idle connections closed at the cap.
func (l *Listener) Reclaimed() int64 { return l.reclaimed.Load() }

// connState is the server's ConnState hook (Proxy.Server sets it): it
// notes when a connection of a Listener starts to wait for its next
// request, for reclaimIdle, and when it stops.
func connState(c net.Conn, st fasthttp.ConnState) {
	lc, ok := c.(*listenerConn)
	if !ok {
		return
	}
	switch st {
	case fasthttp.StateActive:
		// A request's first byte came: what headerReceived keeps from now
		// on is this request's (heldFor).
		lc.seq++
		lc.reqSeq = lc.seq
		lc.head.active()
		lc.awaiting = false
	case fasthttp.StateIdle:
		lc.awaiting = true
		if lc.l.scanHeads {
			lc.head.arm() // the next bytes are a request head's
		}
	}
	lc.setIdle(st == fasthttp.StateIdle)
}

// setIdle notes that c waits for its next request (idle), or no longer.
func (c *listenerConn) setIdle(idle bool) {
	c.stateMu.Lock()
	if idle {
		c.idleAt.Store(int64(time.Since(monoBase)) | 1) // never 0: 0 is not idle
	} else {
		c.idleAt.Store(0)
	}
	c.stateMu.Unlock()
}

// say reports whether a message last said at *last may be said again
// (every so often, so that a flapping condition does not flood the log).
func (l *Listener) say(last *time.Time, every time.Duration) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !last.IsZero() && time.Since(*last) < every {
		return false
	}
	*last = time.Now()
	return true
}

// retryable reports whether an accept error passes with time.
func retryable(err error) bool {
	for _, e := range []syscall.Errno{syscall.EMFILE, syscall.ENFILE, syscall.ENOBUFS, syscall.ENOMEM,
		syscall.ECONNABORTED, syscall.ECONNRESET, syscall.EINTR, syscall.EAGAIN} {
		if errors.Is(err, e) {
			return true
		}
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func (l *Listener) release() {
	if l.slots != nil {
		<-l.slots
	}
}

func (l *Listener) track(c net.Conn) net.Conn {
	lc := &listenerConn{Conn: c, l: l, awaiting: true}
	lc.raw = useRawConnIO && lc.io.init(c)
	if l.scanHeads {
		lc.head.arm() // its first bytes are a request head's
	}
	l.mu.Lock()
	l.conns[lc] = struct{}{}
	l.mu.Unlock()
	l.open.Add(1)
	return lc
}

func (l *Listener) untrack(lc *listenerConn) {
	l.mu.Lock()
	delete(l.conns, lc)
	if len(l.conns) == 0 && l.allClosed != nil {
		close(l.allClosed)
		l.allClosed = nil
	}
	l.mu.Unlock()
	l.open.Add(-1)
	l.release()
}

// Closed returns a channel closed once no connection accepted is open,
// counting those that close lingering (a 413 being delivered) or wait on
// their client: a shutdown waits on it, within its grace, after the server
// stopped accepting (a connection accepted after the call is not waited for).
func (l *Listener) Closed() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.conns) == 0 {
		done := make(chan struct{})
		close(done)
		return done
	}
	if l.allClosed == nil {
		l.allClosed = make(chan struct{})
	}
	return l.allClosed
}

// Close closes the listener; an Accept waiting for a slot or a retry
// returns at once.
func (l *Listener) Close() error {
	l.closeOnce.Do(func() { close(l.closed) })
	return l.Listener.Close()
}

// CutReads expires the read deadline of every open connection, for a
// shutdown whose grace is over: a request still being read (a slow body)
// ends at once as a timeout, with its error answer and its record, and an
// idle connection closes. Writes are not affected (Proxy.Cut ends the
// streams).
func (l *Listener) CutReads() {
	l.cutting.Store(true) // before the deadlines: a lingering close checks it after its own
	for _, c := range l.snapshot() {
		_ = c.SetReadDeadline(aLongTimeAgo)
	}
}

// CloseAll closes every open connection.
func (l *Listener) CloseAll() {
	for _, c := range l.snapshot() {
		_ = c.Close()
	}
}

func (l *Listener) snapshot() []*listenerConn {
	l.mu.Lock()
	defer l.mu.Unlock()
	conns := make([]*listenerConn, 0, len(l.conns))
	for c := range l.conns {
		conns = append(conns, c)
	}
	return conns
}

// listenerConn gives its slot back when it closes.
type listenerConn struct {
	net.Conn
	l    *Listener
	once sync.Once
	sent atomic.Bool // the client has sent at least one byte
	raw  bool        // io reads and writes the socket (rawconn_unix.go)
	io   rawConnIO
	// hijacked: a stream handed this connection through fasthttp's hijack
	// (http10.go) that has not started yet; the connection's Close ends it
	// if fasthttp never does.
	hijacked atomic.Pointer[stream]
	// linger: the gateway answered without reading the request to its
	// end (an error answer: errorHandler), so the client may still be
	// sending; lingering: the close has begun to drain it (lingerThenClose).
	linger, lingering atomic.Bool
	// idleAt: when the connection began to wait for its next request
	// (nanoseconds since monoBase), 0 while it is not waiting (ConnState).
	idleAt  atomic.Int64
	stateMu sync.Mutex // orders setIdle and reclaimIdle
	// seq counts the connection's request starts and heads read (seq,
	// reqSeq, t0Seq and heldHead.seq are the serving goroutine's: fasthttp
	// calls connState's StateActive and the header hook on it). reqSeq:
	// seq when the current request's first byte came (connState), 0
	// before the first; a stamp or a heldHead kept later is its (heldFor).
	seq, reqSeq uint64
	// head follows a request head as it is read (reqhead.go); only the
	// connection's serving goroutine reads it and sets its state.
	head reqHeadScan
	// continueLost: the write of fasthttp's "100 Continue" failed (the
	// client reset its connection after a head with Expect:
	// 100-continue); set and read by the serving goroutine (Write, Read).
	continueLost bool
	// readTimedOut: the last read that failed ran out of time (its
	// deadline); the serving goroutine's (Read, errorHandler).
	readTimedOut bool
	// t0, t0Seq: the last request head's stamp (nanoseconds since
	// monoBase) and seq when it was read (stampT0); held: what was kept of
	// the last head with a body (heldhead.go). Only the serving goroutine
	// reads and writes them.
	t0    int64
	t0Seq uint64
	held  heldHead
	// bound: while set (stream.boundWrites), a write that finds the
	// socket full sets the write deadline bound.writeDeadline gives before
	// it waits, and boundSet notes it for unbind to clear; a write the
	// socket takes at once sets none. The serving goroutine's.
	bound *stream
	// ahead: bytes read ahead (readAhead) that Read has not returned yet,
	// in aheadBuf, a buffer of aheadBufs; awaiting: the connection waits
	// for a request's first byte (from its accept, and from StateIdle to
	// StateActive), the one read that reads ahead (not a head's read of
	// its buffer's last byte, which would take a pipelined request out of
	// the socket while the response streams). The serving goroutine's.
	ahead    []byte
	aheadBuf *[]byte
	awaiting bool
	boundSet bool // see bound
}

// aheadBufs are the buffers of readAhead, as large as the read buffer
// Proxy.Server gives fasthttp (clientReadBuf): fasthttp's first read after
// the byte then takes all that was read ahead, and the buffer goes back
// before the request is handled.
var aheadBufs = sync.Pool{New: func() any { b := make([]byte, clientReadBuf); return &b }}

// readAhead is a one-byte read made as a read of all the socket has, up to
// an aheadBufs buffer: b gets the first byte, and the rest waits in c.ahead
// for the reads that follow. fasthttp reads a connection's next request
// so, between requests (acquireByteReader: it holds no buffer while the
// connection is idle), one byte, then at once into its read buffer (16 KiB
// less that byte): that read then takes what was read ahead, without a
// system call of its own (a system call is 1.5 µs on the 2-CPU VM of
// docs/OVERHEAD.md, and the request's way in made three reads: the byte,
// the rest, and the EAGAIN that ended the last request's). The wait for
// the byte holds no buffer (rawConnIO.readAhead), and the buffer goes back
// to its pool once Read has returned all of it.
func (c *listenerConn) readAhead(b []byte) (int, error) {
	bp, n, err := c.io.readAhead()
	if err != nil {
		return 0, err
	}
	b[0] = (*bp)[0]
	if n == 1 {
		aheadBufs.Put(bp)
		return 1, nil
	}
	c.ahead, c.aheadBuf = (*bp)[1:n], bp
	return 1, nil
}

// takeAhead returns to b what was read ahead (readAhead).
func (c *listenerConn) takeAhead(b []byte) int {
	n := copy(b, c.ahead)
	c.ahead = c.ahead[n:]
	if len(c.ahead) == 0 {
		if poolCheck {
			poison(*c.aheadBuf)
		}
		aheadBufs.Put(c.aheadBuf)
		c.ahead, c.aheadBuf = nil, nil
	}
	return n
}

func (c *listenerConn) Read(b []byte) (int, error) {
	if c.head.bad {
		return 0, errBareLFRequest // the head is refused: nothing more of it
	}
	if c.continueLost {
		return 0, errClientClosed{} // its body's read: the client is gone
	}
	var n int
	var err error
	switch {
	case len(c.ahead) > 0:
		n = c.takeAhead(b)
	case c.raw && len(b) == 1 && c.awaiting && c.l.readAhead:
		if n, err = c.readAhead(b); n > 0 && c.idleAt.Load() != 0 {
			// The next request came, whole or in part, out of the socket,
			// where reclaimIdle's peek looks for it: no longer idle.
			c.setIdle(false)
		}
	case c.raw:
		n, err = c.io.Read(b)
	default:
		n, err = c.Conn.Read(b)
	}
	if n > 0 && !c.sent.Load() {
		c.sent.Store(true)
	}
	if c.head.on && n > 0 {
		if n = c.head.scan(b[:n]); c.head.bad {
			// fasthttp gets what came before the bare LF, then the error
			// (errorHandler answers 400), at once.
			return n, errBareLFRequest
		}
	}
	if err != nil {
		var ne net.Error
		c.readTimedOut = errors.As(err, &ne) && ne.Timeout()
	}
	if err == io.EOF && !c.l.plainEOF {
		err = errClientClosed{}
	}
	return n, err
}

// stalledChunk reports whether err, fasthttp's error from reading a
// request on c, is a chunked body's that ran out of time: its trailer
// read, having nothing but a CR of its last line, takes the read's
// timeout for the end of the connection (io.EOF), and reports a broken
// chunk.
func stalledChunk(c net.Conn, err error) bool {
	lc, ok := c.(*listenerConn)
	var broken fasthttp.ErrBrokenChunk
	return ok && lc.readTimedOut && errors.As(err, &broken)
}

// errClientClosed is the io.EOF of a client connection under another name
// (errors.Is still finds io.EOF in it). fasthttp takes a bare io.EOF for a
// connection closed between requests, even where it ends a chunked request
// body at a chunk boundary (an upload cancelled between two chunks), and
// then calls no error handler: that request would end without a record.
// Under this name the body's read fails like any other, and errorHandler
// records it; between requests fasthttp's first-byte read takes any error
// for the close it is.
type errClientClosed struct{}

func (errClientClosed) Error() string        { return "client closed the connection" }
func (errClientClosed) Is(target error) bool { return target == io.EOF }

func (c *listenerConn) Write(b []byte) (int, error) {
	var n int
	var err error
	switch {
	case c.bound != nil:
		n, err = c.writeBound(b)
	case c.raw:
		n, err = c.io.Write(b)
	default:
		n, err = c.Conn.Write(b)
	}
	if err != nil && !c.l.plainEOF && string(b) == continue100 {
		// fasthttp ends the connection when its 100 Continue cannot be
		// written, calling neither the handler nor errorHandler: a request
		// whose head was read would leave no record. Taken as written, the
		// body's read that follows fails as the client's leaving does
		// (Read), and errorHandler records the request (client_abort,
		// under the identity its head gave: heldhead.go). Not on the
		// admin listener (net/http's, plainEOF).
		c.continueLost = true
		return len(b), nil
	}
	return n, err
}

// writeBound is Write while c.bound is set (raw only): the deadline is
// set once a write finds the socket full, before it waits. Setting the
// deadline took 4.5 µs (and clearing it 0.5) of the 25 µs from a stream's
// first event metered to its write at 32 streams (-tags phases), for a
// write that nearly never waits: the first event's, with the response head, to a
// socket a new response finds empty.
func (c *listenerConn) writeBound(b []byte) (int, error) {
	n, blocked, err := c.io.writeNow(b)
	if !blocked {
		return n, err
	}
	if !c.boundSet {
		c.boundSet = true
		_ = c.Conn.SetWriteDeadline(c.bound.writeDeadline())
		if testHookBoundBlocked != nil {
			testHookBoundBlocked()
		}
	}
	m, err := c.io.Write(b[n:])
	return n + m, err
}

// testHookBoundBlocked, when set by a test, runs when a bound write sets
// the deadline.
var testHookBoundBlocked func()

// bind bounds c's writes by s's write deadline once they would wait
// (writeBound), and reports true; false, binding nothing, when c does not
// write raw.
func (c *listenerConn) bind(s *stream) bool {
	if !c.raw {
		return false
	}
	c.bound = s
	return true
}

// unbind ends bind, clearing the deadline a write set.
func (c *listenerConn) unbind() {
	c.bound = nil
	if c.boundSet {
		c.boundSet = false
		_ = c.Conn.SetWriteDeadline(time.Time{})
	}
}

// continue100 is what fasthttp writes to invite a request's body (Expect:
// 100-continue); it writes it alone, its writer empty (ReduceMemoryUsage).
const continue100 = "HTTP/1.1 100 Continue\r\n\r\n"

// bareLFRead reports whether c's scan found a bare LF line end
// (reqhead.go): in a chunked body's framing, fasthttp reports its read
// error as another (the trailer's read ends in io.EOF).
func bareLFRead(c net.Conn) bool {
	lc, ok := c.(*listenerConn)
	return ok && lc.head.bad
}

// clientSent reports whether the client of c (accepted by a Listener) has
// sent any byte; false when c does not say.
func clientSent(c net.Conn) bool {
	lc, ok := c.(*listenerConn)
	return ok && lc.sent.Load()
}

// Close closes the connection, or, for one marked to linger (lingerOnClose),
// starts its lingering close and returns: the client may still be sending
// the body the gateway did not read, and a close with unread bytes is a
// reset, which makes the client's kernel drop the answer it has not read yet
// (an upload over the limit then ends in "connection reset" instead of its
// 413). A second Close (the shutdown's CloseAll) closes at once.
func (c *listenerConn) Close() error {
	if c.linger.Load() && c.l.mayLinger() && c.lingering.CompareAndSwap(false, true) {
		c.l.lingerN.Add(1)
		go c.lingerThenClose()
		return nil
	}
	return c.closeNow()
}

// mayLinger reports whether a connection may linger: not once CutReads has
// begun, nor when three quarters of max_connections are open, so that
// lingering connections (each holds its slot for up to lingerTotal) cannot
// keep new clients waiting at the cap.
func (l *Listener) mayLinger() bool {
	return !l.cutting.Load() && (l.max <= 0 || l.open.Load() < int64(l.max)*3/4)
}

// lingerOnClose marks c to drain what the client still sends before it
// closes (nginx's lingering close).
func lingerOnClose(c net.Conn) {
	if lc, ok := c.(*listenerConn); ok {
		lc.linger.Store(true)
	}
}

// Bounds of a lingering close, nginx's defaults: it reads what the client
// sends for at most lingerTotal, and stops once nothing came for lingerIdle.
const (
	lingerTotal = 30 * time.Second
	lingerIdle  = 5 * time.Second
)

// lingerThenClose half-closes c after the answer written, reads and drops
// what the client sends until it closes its side, goes quiet for the
// listener's lingerIdle or lingerTotal has passed, and closes c.
func (c *listenerConn) lingerThenClose() {
	drainThenClose(c.Conn, time.Now().Add(lingerTotal), c.l.lingerIdle, &c.l.cutting)
	_ = c.closeNow()
	c.l.lingerN.Add(-1)
	if c.l.lingerDone != nil {
		c.l.lingerDone()
	}
}

func (c *listenerConn) closeNow() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.l.untrack(c) })
	if s := c.hijacked.Swap(nil); s != nil {
		p := s.p
		go func() {
			_ = s.Close() // never written to: the client is recorded as gone
			p.wg.Done()   // the hijack's, which never ran (http10.go)
		}()
	}
	return err
}

// SyscallConn exposes the descriptor (the client-gone peek uses it, and a
// stream's direct writes): the one the connection reads through when it
// has one, so a request's stream makes none (net's makes one each call).
func (c *listenerConn) SyscallConn() (syscall.RawConn, error) {
	if rc := c.io.rawConn(); rc != nil {
		return rc, nil
	}
	if sc, ok := c.Conn.(syscall.Conn); ok {
		return sc.SyscallConn()
	}
	return nil, errors.ErrUnsupported
}
