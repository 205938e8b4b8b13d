package proxy

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/goodput/goodput/internal/peek"
	"github.com/goodput/goodput/internal/phases"
	"github.com/valyala/fasthttp"
)

// upstream is a small HTTP/1.1 client for one upstream address that hands
// the caller the connection of each exchange.
//
// fasthttp's own client applies a single read deadline that covers both the
// wait for the response headers and the whole streamed body, and it offers no
// way to abort a request that is still waiting for headers. A metering proxy
// needs separate connect, first-byte, idle-gap and total deadlines, and must
// close the upstream connection the moment the client leaves so the engine
// stops generating. So the exchange is done here, with fasthttp's request and
// response (de)serialisation, on a connection this code owns.
type upstream struct {
	addr           string // host:port
	connectTimeout time.Duration
	maxIdle        int
	idleTTL        time.Duration

	mu   sync.Mutex
	idle []*upConn            // LIFO: the most recently used connection is reused first
	busy map[*upConn]struct{} // connections of exchanges and streams in flight
	cut  atomic.Bool          // set by cutAll: a shutdown's drain period is over
	// dialCtx is the parent of every connect, ended by cutAll: a connect
	// in progress (an engine behind a black hole) ends with the cut.
	dialCtx context.Context
	endDial context.CancelFunc
	sweep   *time.Timer // closes idle connections when no request comes (sweepIdle); nil until the first put
	// noSweep: no sweep, for tests that give get and put times of their
	// own (the sweep reads the wall clock). Set before the first put.
	noSweep bool

	readers sync.Pool // *bufio.Reader
	writers sync.Pool // *bufio.Writer
	heads   sync.Pool // *[]byte: a request's head, and its body when both fit (upstreamHeadBufSize)

	// The upstream's name and its addresses (dial.go).
	host       string
	port       uint16
	literal    netip.Addr               // the host, when it is an address
	addrs      []netip.Addr             // the name's addresses at the last lookup that found any; nil: none yet (mu)
	resolvedAt time.Time                // when addrs was last looked up (mu)
	resolving  bool                     // a background lookup is running (mu)
	next       uint32                   // the address the next connection starts at (mu)
	down       map[netip.Addr]time.Time // addresses that failed to connect, tried last until then (mu)
}

// upConn is one upstream connection.
type upConn struct {
	net.Conn
	// br reads the response head (and, unless a stream reads the
	// connection directly, the body); nil while a direct stream has lent
	// it back to the pool (see reader and lendReader).
	br       *bufio.Reader
	under    *bufio.Reader   // the small reader under br once it grew for large headers (roundTrip)
	src      io.Reader       // what br reads: newUpReader's reader
	rc       syscall.RawConn // the socket, for the direct read path; nil: none
	addr     netip.Addr      // the address connected to (invalid: unknown)
	lastUsed time.Time
	reused   bool
	usable   func() bool // peeks at an idle connection (nil: cannot peek)
	written  int         // bytes of the current request the kernel accepted

	// headReady is readyForHead, bound once (nil until the first wait);
	// headPeeked: the wait for the current head has peeked once.
	headReady  func(fd uintptr) bool
	headPeeked bool

	// A read deadline may be set early when the connection's reader asks
	// onDeadline before failing a read on it (lateDeadlines): a stream
	// then arms its idle deadline once, not before every read (see
	// stream.readAll). onDeadline, set by the stream for its duration,
	// moves the deadline to the real one and reports true (the read goes
	// on), or reports false (the read fails with the timeout).
	lateDeadlines bool
	onDeadline    func() bool

	// head follows a response head as it is read, to refuse an end
	// fasthttp's reader would not find (headScan); on only in readHead,
	// and only where the connection is read through an upReader.
	head headScan

	// loop is the registration of the stream whose reads an I/O loop
	// makes (ioloop_linux.go): nobody waits on the socket's deadline
	// then, so SetDeadline wakes the stream's goroutine instead.
	loop atomic.Pointer[loopSlot]

	// hw reads the response head while the request is still being
	// written, once the write waits on a full socket (headWatch).
	hw headWatch
}

// headWatch reads an answer that comes while its request's write waits:
// an engine may answer before it reads the body (a 413, a 400) and keep
// the connection open, reading nothing more, so that the write would
// wait out the first-byte deadline and the client would get a 504 for
// the engine's answer. The watch reads the head as the write goes on
// (interim 1xx heads skipped, as readHead does), and a final head other
// than a 2xx ends the write at once (endsWrite): the rest of the request
// is never sent, and the connection carries no other. It starts only once the write waits on a
// full socket (upWriter), so a request the socket takes at once costs
// nothing more; where a full socket cannot be seen (no raw socket, the
// race detector's build), a large request starts it before its write.
type headWatch struct {
	u    *upstream // nil: no watch may start (outside roundTrip's write)
	resp *fasthttp.Response
	skip bool
	done chan error // the head's read's result; nil: no watch started
	// wrote: the write ended (the head's read then ends nothing);
	// early: the head came before it did.
	wrote, early atomic.Bool
}

// watchHead starts c's head watch.
func (c *upConn) watchHead() {
	w := &c.hw
	w.done = make(chan error, 1)
	go func() {
		err := w.u.readHead(c, w.resp, w.skip)
		if err == nil && !w.wrote.Load() {
			w.early.Store(true)
			if endsWrite(w.resp) {
				_ = c.Conn.SetWriteDeadline(aLongTimeAgo) // the write ends, failing
			}
		}
		w.done <- err
	}()
}

// endsWrite reports a final head that ends its request's write: a
// refusal. A 2xx may come before the body is read by an engine that reads
// it after (a full-duplex server, one that flushes its head at once): the
// write goes on, or that engine would wait for the rest of a body that
// never comes.
func endsWrite(resp *fasthttp.Response) bool {
	s := resp.StatusCode()
	return s < 200 || s >= 300
}

// SetDeadline is net.Conn's; while an I/O loop reads the connection, it
// also wakes the stream's goroutine, which looks at the shutdown's cut and
// the client guard, the two that expire the deadline to end a stream.
func (c *upConn) SetDeadline(t time.Time) error {
	err := c.Conn.SetDeadline(t)
	if sl := c.loop.Load(); sl != nil {
		sl.poke()
	}
	return err
}

// upWriter counts what is written to an upConn: a request the upstream may
// have received, even in part, is never sent again (see exchange).
type upWriter upConn

func (w *upWriter) Write(p []byte) (int, error) {
	var n int
	var err error
	if w.rc != nil && useRawConnIO && w.hw.u != nil && w.hw.done == nil {
		// Until the socket is full, then with the head watched.
		var blocked bool
		n, blocked, err = writeRaw(w.Conn, w.rc, p, false)
		if blocked {
			(*upConn)(w).watchHead()
			var m int
			m, err = writeAllRaw(w.Conn, w.rc, p[n:])
			n += m
		}
	} else if w.rc != nil && useRawConnIO {
		n, err = writeAllRaw(w.Conn, w.rc, p) // see rawConnIO
	} else {
		n, err = w.Conn.Write(p)
	}
	w.written += n
	return n, err
}

// upstreamBufSize sizes the buffered reader of an upstream connection; it
// is held for as long as a stream is in flight, so it is small. Engines send
// a few hundred bytes of response headers; headers that do not fit (hosted
// APIs behind CDNs) are read again through a larger reader, see roundTrip.
const upstreamBufSize = 2048

// upstreamWriteBufSize sizes the buffered writer a request is written
// upstream through: a request up to this size (head and body) goes in one
// write, so the engine is woken once, by the whole request. The writer is
// pooled and taken only for the write, never held by a stream.
const upstreamWriteBufSize = 64 << 10

// upstreamHeadBufSize sizes the pooled buffer a request's head is written
// into, with its body when both fit (one write without the writer's copy).
// It is taken only for the write.
const upstreamHeadBufSize = 4 << 10

// bigHeaderBufSize is the reader for response headers over upstreamBufSize.
const bigHeaderBufSize = 64 << 10

func newUpstream(addr string, connectTimeout time.Duration, maxIdle int, idleTTL time.Duration) *upstream {
	u := &upstream{connectTimeout: connectTimeout, maxIdle: maxIdle, idleTTL: idleTTL, busy: make(map[*upConn]struct{})}
	u.dialCtx, u.endDial = context.WithCancel(context.Background())
	u.setAddr(addr)
	return u
}

// errShutdown ends what is still in flight when a shutdown's drain period
// is over (Proxy.Cut).
var errShutdown = errors.New("gateway shutting down: cut when the shutdown grace ran out or a second signal came")

// cutAll makes every exchange and stream in flight fail at once, and every
// later one fail at its start: it expires the deadlines of the busy
// connections. Readers check cut after setting a deadline, so none can set a
// later one over it unseen.
func (u *upstream) cutAll() {
	u.cut.Store(true)
	u.endDial()
	u.mu.Lock()
	defer u.mu.Unlock()
	for c := range u.busy {
		_ = c.SetDeadline(aLongTimeAgo)
	}
}

// markBusy records c as in use.
func (u *upstream) markBusy(c *upConn) {
	u.mu.Lock()
	u.busy[c] = struct{}{}
	u.mu.Unlock()
}

// unread reports whether c's readers hold bytes no response has read: the
// engine sent them past the end of the last one, and they would be read as
// the next request's answer. Both readers count once the small one is
// under a large one: the large one's refill asks the small one for less
// than its size, and the small one then reads the socket into its own
// buffer and keeps what it could not hand over.
func (c *upConn) unread() bool {
	return (c.br != nil && c.br.Buffered() > 0) || (c.under != nil && c.under.Buffered() > 0)
}

// errConnect wraps a dial failure, so the handler can answer 502.
type errConnect struct{ err error }

func (e errConnect) Error() string { return "connect to upstream: " + e.err.Error() }
func (e errConnect) Unwrap() error { return e.err }

func (u *upstream) get(now time.Time, ev exchangeEvents) (*upConn, error) {
	u.mu.Lock()
	if len(u.idle) > 0 && u.refreshDue(now) {
		// Reused connections would follow no change of the name's
		// addresses: look it up again, off the request's path.
		go u.refresh()
	}
	for n := len(u.idle); n > 0; n = len(u.idle) {
		c := u.idle[n-1]
		u.idle[n-1] = nil
		u.idle = u.idle[:n-1]
		fresh := now.Sub(c.lastUsed) < u.idleTTL && !c.unread() && !u.retired(c)
		if fresh {
			u.busy[c] = struct{}{} // for cutAll, from now on
		}
		u.mu.Unlock()
		// A connection the server closed (or wrote to) while it was idle is
		// found here, before a request is written on it. The peek is a
		// system call, made with the pool free: every request takes its
		// connection from the pool, and under load they queued behind it.
		if fresh && (c.usable == nil || c.usable()) {
			c.reused = true
			return c, nil
		}
		u.discard(c)
		u.mu.Lock()
	}
	u.mu.Unlock()
	if ev != nil {
		ev.dialing()
	}
	c, err := u.dial()
	if err == nil {
		u.markBusy(c)
	}
	return c, err
}

func (u *upstream) dial() (*upConn, error) {
	if testHookDial != nil {
		testHookDial()
	}
	nc, addr, err := u.connect(u.dialCtx)
	if err != nil {
		return nil, errConnect{err}
	}
	if tc, ok := nc.(*net.TCPConn); ok {
		// Go enables TCP_NODELAY by default; say so explicitly, since a
		// delayed small write adds up to 40 ms to a token's arrival.
		_ = tc.SetNoDelay(true)
	}
	c := &upConn{Conn: nc, addr: addr, usable: peek.Idle(nc)}
	c.src = newUpReader(c)
	return c, nil
}

// reader returns c's buffered reader, taking one from the pool when c has
// none (a new connection, or one whose stream lent its reader back).
func (u *upstream) reader(c *upConn) *bufio.Reader {
	if c.br == nil {
		br, _ := u.readers.Get().(*bufio.Reader)
		if br == nil {
			br = bufio.NewReaderSize(c.src, upstreamBufSize)
		} else {
			br.Reset(c.src)
		}
		c.br = br
	}
	return c.br
}

// lendReader gives c's buffered reader back to the pool while c streams a
// body it reads directly: a stream in flight holds no reader. The reader
// must hold no unread byte; one grown for large headers is kept.
func (u *upstream) lendReader(c *upConn) {
	if br := c.br; br != nil && br.Size() == upstreamBufSize && br.Buffered() == 0 {
		br.Reset(nil)
		if poolCheck {
			poisonReader(br)
		}
		u.readers.Put(br)
		c.br = nil
	}
}

// put returns a connection whose exchange ended cleanly to the idle pool.
//
// The pool is a stack (the warmest connection is reused first), so the
// oldest sit at its bottom: put closes those past the idle TTL, which get
// would not reach while traffic is low, instead of leaving them open (in
// CLOSE_WAIT once the engine closed them).
func (u *upstream) put(c *upConn, now time.Time) {
	_ = c.SetDeadline(time.Time{})
	c.lastUsed = now
	u.mu.Lock()
	delete(u.busy, c)
	expired := 0
	for expired < len(u.idle) && now.Sub(u.idle[expired].lastUsed) >= u.idleTTL {
		expired++
	}
	var stale []*upConn
	if expired > 0 {
		stale = append(stale, u.idle[:expired]...)
		n := copy(u.idle, u.idle[expired:])
		clear(u.idle[n:])
		u.idle = u.idle[:n]
	}
	keep := len(u.idle) < u.maxIdle && !u.retired(c)
	if keep {
		u.idle = append(u.idle, c)
		if u.sweep == nil && !u.noSweep {
			u.sweep = time.AfterFunc(sweepEvery(u.idleTTL), u.sweepIdle)
		}
	}
	u.mu.Unlock()
	for _, sc := range stale {
		u.discard(sc)
	}
	if !keep {
		u.discard(c)
	}
}

// sweepEvery is how often the idle pool is swept when no request comes:
// a tenth of the idle TTL, at most 5 s (an engine's own keep-alive, such
// as uvicorn's 5 s, closes its side first: the socket then sits in
// CLOSE_WAIT until the gateway closes it).
func sweepEvery(ttl time.Duration) time.Duration {
	return min(max(ttl/10, 10*time.Millisecond), 5*time.Second)
}

// sweepIdle closes the idle connections past the idle TTL and those the
// engine closed or wrote to (a peek each): get and put do so only as
// requests come, so with none they stayed open (and in CLOSE_WAIT, holding
// a file descriptor each, once the engine had closed them). It runs again
// while idle connections remain.
func (u *upstream) sweepIdle() {
	now := time.Now()
	u.mu.Lock()
	kept := u.idle[:0]
	var stale []*upConn
	for _, c := range u.idle {
		if now.Sub(c.lastUsed) >= u.idleTTL || u.retired(c) || (c.usable != nil && !c.usable()) {
			stale = append(stale, c)
		} else {
			kept = append(kept, c)
		}
	}
	clear(u.idle[len(kept):])
	u.idle = kept
	if len(u.idle) > 0 {
		u.sweep.Reset(sweepEvery(u.idleTTL))
	} else {
		u.sweep = nil // the next put arms a new one
	}
	u.mu.Unlock()
	for _, c := range stale {
		u.discard(c)
	}
}

// discard closes a connection and recycles its buffer.
func (u *upstream) discard(c *upConn) {
	u.mu.Lock()
	delete(u.busy, c)
	u.mu.Unlock()
	_ = c.Close()
	if c.br != nil && c.br.Size() == upstreamBufSize {
		c.br.Reset(nil)
		if poolCheck {
			poisonReader(c.br)
		}
		u.readers.Put(c.br)
	}
	if c.under != nil && c.under.Size() == upstreamBufSize {
		c.under.Reset(nil)
		if poolCheck {
			poisonReader(c.under)
		}
		u.readers.Put(c.under)
	}
	c.br, c.under = nil, nil
}

// closeIdle closes every pooled connection.
func (u *upstream) closeIdle() {
	u.mu.Lock()
	idle := u.idle
	u.idle = nil
	u.mu.Unlock()
	for _, c := range idle {
		u.discard(c)
	}
}

// exchange writes req on a pooled or new connection and reads the response
// headers, waiting at most until firstByte for them. The response body is
// left on the connection: resp.BodyStream reads it (resp.StreamBody is set).
//
// A request is sent again, on another connection, only when the failed
// connection was reused and the upstream cannot have acted on it: nothing of
// it was written, or it is idempotent (GET, HEAD, OPTIONS, TRACE) and has no
// body; net/http's rule (Transport shouldRetryRequest). A POST that may
// have reached the engine is never re-sent: the engine would generate twice.
// Idle connections the server closed are found before use (get), so this
// costs a request only when the server closes one in the instant it is
// reused.
//
// guard, when not nil, is told each connection used, and may expire its
// deadline when the client leaves; nil = no guard. sent, when not nil, is
// told each time the request has been written, before the answer is read,
// and before a connection is dialled. ph, when not nil, times the first
// attempt's steps (a build with -tags phases): a retry's are not timed.
func (u *upstream) exchange(req upRequest, resp *fasthttp.Response, firstByte time.Time, skipBody bool, guard *clientGuard, sent exchangeEvents, ph *phases.Clock) (*upConn, error) {
	for attempt := 0; ; attempt++ {
		c, err := u.get(time.Now(), sent)
		if err != nil {
			return nil, err
		}
		if !guard.use(c) {
			u.put(c, time.Now()) // unused: still clean
			return nil, errClientGone
		}
		err = u.roundTrip(c, req, resp, firstByte, skipBody, sent, ph)
		if err == nil {
			return c, nil
		}
		if !isTimeout(err) && !time.Now().Before(firstByte) {
			// fasthttp wraps some read errors in types without Unwrap.
			err = errFirstByteTimeout{err}
		}
		retry := c.reused && isStaleConn(err) && (c.written == 0 || req.upReplay())
		u.discard(c)
		if retry && attempt < maxRetries {
			ph = nil // its steps are timed once, as the first attempt's
			continue
		}
		return nil, err
	}
}

// testHookDial, when set by a test, is called as a dial begins.
var testHookDial func()

// maxRetries bounds how often one request is sent again after a reused
// connection failed (each retry takes another pooled connection, or a new one).
const maxRetries = 3

// upRequest is a request exchange sends to the engine.
type upRequest interface {
	// appendUpHead appends the request's head to dst, its blank line
	// included. Each attempt writes it anew, so no buffer is held for it
	// while the answer is awaited.
	appendUpHead(dst []byte) []byte
	upBody() []byte
	// upReplay: the request may be sent again even when it may have
	// reached the engine (replayable).
	upReplay() bool
}

// replayable reports a request that may be sent again even when it may have
// reached the upstream: a method without effects, and no body.
func replayable(method, body []byte) bool {
	switch string(method) {
	case fasthttp.MethodGet, fasthttp.MethodHead, fasthttp.MethodOptions, fasthttp.MethodTrace:
		return len(body) == 0
	}
	return false
}

// exchangeEvents is told of an exchange's steps: a connection about to be
// dialled (dialing), and the request written to its connection, before the
// answer is awaited (upstreamSent); each at every attempt.
type exchangeEvents interface {
	dialing()
	upstreamSent()
}

func (u *upstream) roundTrip(c *upConn, req upRequest, resp *fasthttp.Response, firstByte time.Time, skipBody bool, sent exchangeEvents, ph *phases.Clock) error {
	c.written = 0
	if err := c.SetDeadline(firstByte); err != nil {
		return err
	}
	if u.cut.Load() {
		return errShutdown
	}
	ph.Mark(phases.Connection)
	hb, _ := u.heads.Get().(*[]byte)
	if hb == nil {
		hb = new([]byte)
		*hb = make([]byte, 0, upstreamHeadBufSize)
	}
	b := req.appendUpHead((*hb)[:0])
	body := req.upBody()
	c.hw.u, c.hw.resp, c.hw.skip = u, resp, skipBody // the writes may watch for an early answer
	var err error
	if len(body) <= cap(b)-len(b) {
		// Head and body in one write, so the engine is woken once, by
		// the whole request.
		b = append(b, body...)
		ph.Mark(phases.Serialise)
		_, err = (*upWriter)(c).Write(b)
		ph.Mark(phases.Write)
	} else {
		// Through the writer: a request up to its size goes in one write.
		bw, _ := u.writers.Get().(*bufio.Writer)
		if bw == nil {
			bw = bufio.NewWriterSize((*upWriter)(c), upstreamWriteBufSize)
		} else {
			bw.Reset((*upWriter)(c))
		}
		if !useRawConnIO || c.rc == nil {
			c.watchHead() // a full socket would not be seen
		}
		_, _ = bw.Write(b)
		_, _ = bw.Write(body) // an error stays in bw, for Flush
		ph.Mark(phases.Serialise)
		err = bw.Flush()
		ph.Mark(phases.Write)
		bw.Reset(nil)
		if poolCheck {
			poison(bw.AvailableBuffer())
		}
		u.writers.Put(bw)
	}
	if poolCheck {
		poison(b)
	}
	*hb = b[:0]
	u.heads.Put(hb)
	if c.hw.done != nil {
		return u.joinWatch(c, resp, sent, err)
	}
	c.hw.u, c.hw.resp = nil, nil
	if err != nil {
		return u.earlyAnswer(c, resp, skipBody, sent, err)
	}
	if sent != nil {
		sent.upstreamSent()
	}
	if c.br == nil && c.rc != nil {
		// Wait for the answer holding no buffer: the engine may take its
		// time (a queue, a prefill), and a burst of new streams would each
		// hold a reader meanwhile. A failed wait (the deadline, a closed
		// connection) is left to the read below, which fails the same way.
		if c.headReady == nil {
			c.headReady = c.readyForHead
		}
		c.headPeeked = false
		_ = c.rc.Read(c.headReady)
	}
	return u.readHead(c, resp, skipBody)
}

// testHookHeadPeek, when set by a test, runs at each peek readyForHead
// makes.
var testHookHeadPeek func()

// readyForHead is the wait for a response head's first byte, a
// RawConn.Read callback that reads nothing. Its first call peeks: the
// wait reset the socket's readiness, so what came before it would wake
// nothing. A later call follows a wake by the poller, which nearly always
// reports the socket readable (a byte, the engine's FIN or an error, each
// for the head's read to meet): so it returns true without a second peek,
// one system call less per request whose head was not there at once. A
// readiness the poller had collected before the reset, for bytes already
// read, can still wake it (rarely): the head's read then finds nothing and
// waits in the poller as any read does, holding its reader meanwhile.
func (c *upConn) readyForHead(fd uintptr) bool {
	if c.headPeeked {
		return true
	}
	c.headPeeked = true
	if testHookHeadPeek != nil {
		testHookHeadPeek()
	}
	return peek.Readable(fd)
}

// earlyAnswer is the exchange of a request whose write failed (werr) after
// the engine had some of it: an engine may answer before it has read the
// whole request (a 413 for a body over its limit) and close, and the write
// then fails on the close, with the answer already on the connection. That
// answer, not the failed write, is what the client gets, as net/http's
// transport does. The connection's read fails at once when there is none
// (the close, or the deadline the write failed at, is there), so this
// waits for nothing more than the failed write did. Nothing written: a
// connection the engine closed while idle, which exchange may retry; its
// stray bytes (an idle connection's 408) answer nothing, and neither does
// a 408 on a reused connection (net/http's transport ignores it too).
func (u *upstream) earlyAnswer(c *upConn, resp *fasthttp.Response, skipBody bool, sent exchangeEvents, werr error) error {
	if c.written == 0 || u.readHead(c, resp, skipBody) != nil {
		return werr
	}
	return acceptEarly(c, resp, sent, werr)
}

// joinWatch ends the exchange of a request whose write ended (werr its
// error, nil when whole) with its head watched (headWatch): it waits for
// the watch's read of the head, which the write's end does not stop (it
// fails at the first-byte deadline as readHead does), and takes it as
// roundTrip would have read it, or as earlyAnswer takes an answer that
// came before the request was whole.
func (u *upstream) joinWatch(c *upConn, resp *fasthttp.Response, sent exchangeEvents, werr error) error {
	w := &c.hw
	w.wrote.Store(true)
	herr := <-w.done
	early := w.early.Load()
	w.u, w.resp, w.done = nil, nil, nil
	w.wrote.Store(false)
	w.early.Store(false)
	if werr != nil {
		if herr != nil {
			return werr
		}
		if c.written == 0 {
			_ = resp.CloseBodyStream() // an idle connection's stray bytes: no answer
			return werr
		}
		if early && endsWrite(resp) {
			// The write failed at the watch's own deadline: were the
			// answer refused (a reused connection's 408), that deadline
			// would be no timeout of the engine's.
			werr = errClosedEarly
		}
		return acceptEarly(c, resp, sent, werr)
	}
	if sent != nil {
		sent.upstreamSent()
	}
	// The whole request was written: a 2xx the watch read before the
	// write's end was seen (early) is no sign the engine answered before
	// it had it. The write's last bytes reach a loopback engine within the
	// write's own system call, and one that answers at once is read
	// before the write returns, often where the watch starts before the
	// write; its connection is kept, as one whose write never waited
	// (readHead's rules alone end it). A refusal so read may have come
	// before the engine read the body, which would then be on the
	// connection as its next request: that connection goes no further.
	if herr == nil && early && endsWrite(resp) {
		resp.SetConnectionClose()
	}
	return herr
}

// errClosedEarly is the failed write of a request whose answer came
// before it was whole and answers nothing (acceptEarly): the engine
// closed the connection, as it does after such an answer.
var errClosedEarly = fmt.Errorf("upstream answered 408 before the request was whole, closing the reused connection: %w", io.ErrUnexpectedEOF)

// acceptEarly takes the answer earlyAnswer read (werr the write's
// error), unless it answers nothing.
func acceptEarly(c *upConn, resp *fasthttp.Response, sent exchangeEvents, werr error) error {
	if c.reused && resp.StatusCode() == fasthttp.StatusRequestTimeout {
		// A server's 408 as it closes an idle connection, come after the
		// peek: no answer to this request, which the engine never had.
		_ = resp.CloseBodyStream()
		return werr
	}
	// The rest of the request never reached the engine: the connection
	// carries no other.
	resp.SetConnectionClose()
	if sent != nil {
		sent.upstreamSent() // the engine acted on it
	}
	return nil
}

// readHead reads the response head of the request written on c.
func (u *upstream) readHead(c *upConn, resp *fasthttp.Response, skipBody bool) error {
	c.head.start()
	resp.Reset()
	resp.StreamBody = true
	resp.SkipBody = skipBody
	err := resp.Read(u.reader(c))
	if err != nil && isSmallBuffer(err) && c.under == nil {
		// The headers did not fit; nothing was consumed (fasthttp peeks).
		// Read them again through a larger reader over the small one, which
		// then serves the connection to its end.
		c.under = c.br
		c.br = bufio.NewReaderSize(c.br, bigHeaderBufSize)
		resp.Reset()
		resp.StreamBody = true
		resp.SkipBody = skipBody
		err = resp.Read(c.br)
	}
	c.head.on = false
	if err != nil && c.head.http2() {
		// An engine that speaks only HTTP/2 answers the request with its
		// own preface and closes: fasthttp's error would say EOF.
		return errHTTP2
	}
	if err == nil && c.head.bad {
		// fasthttp read the head from what it had before the scan's error
		// (it ends a head at a CRLF CRLF anywhere in its buffer, a chunked
		// body's end too), which the reader still holds for the next read:
		// the head is refused all the same, and the connection with it.
		_ = resp.CloseBodyStream()
		err = errBareLF
	}
	if err == nil && c.head.te && (c.head.cl || !resp.Header.IsHTTP11()) {
		// A Transfer-Encoding beside a Content-Length (read as chunked), or
		// in an HTTP/1.0 head (which fasthttp ignores, reading the body by
		// its length or to the close): the framing is in doubt, and the
		// connection goes no further (headScan).
		resp.SetConnectionClose()
	}
	if err == nil && resp.StatusCode() == fasthttp.StatusRequestEntityTooLarge {
		// The engine would not read the body: one the socket took whole
		// (no write waited, so no head watch saw the answer come first)
		// may be on the connection still, unread, with the engine keeping
		// it open and reading no more, and the next request would wait on
		// it for a 504. The connection goes no further.
		resp.SetConnectionClose()
	}
	if err == nil && resp.StatusCode() == fasthttp.StatusNoContent && (c.head.te || c.head.cl && resp.Header.ContentLength() != 0) {
		// A 204 that announces a body has none (RFC 9110, 15.3.5), and
		// nothing after its head is read: bytes the engine sends as that
		// body after the next request's peek would be read as the next
		// answer. The connection goes no further.
		resp.SetConnectionClose()
	}
	return err
}

// isSmallBuffer tells fasthttp's "headers larger than the read buffer".
// Its own function: the target errors.As needs is on the heap, and only
// a failed read should pay for it.
func isSmallBuffer(err error) bool {
	var small *fasthttp.ErrSmallBuffer
	return errors.As(err, &small)
}

// errFirstByteTimeout is a failure at or after the first-byte deadline.
type errFirstByteTimeout struct{ err error }

func (e errFirstByteTimeout) Error() string   { return "no response headers in time: " + e.err.Error() }
func (e errFirstByteTimeout) Unwrap() error   { return e.err }
func (e errFirstByteTimeout) Timeout() bool   { return true }
func (e errFirstByteTimeout) Temporary() bool { return false }

// isStaleConn reports an error that means "the server closed this idle
// connection before reading our request".
func isStaleConn(err error) bool {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) {
		return true
	}
	var ne fasthttp.ErrNothingRead
	if errors.As(err, &ne) {
		return true
	}
	var op *net.OpError
	return errors.As(err, &op) && !op.Timeout()
}

// isReadTimeout is isTimeout for a body's read, which may also fail with
// fasthttp.ErrTimeout: fasthttp's body reader returns it when the deadline
// expires before a trailer section's first byte, and it is no net.Error
// (it has no Temporary method), so isTimeout does not see it.
func isReadTimeout(err error) bool {
	return isTimeout(err) || errors.Is(err, fasthttp.ErrTimeout)
}

// isTimeout reports a deadline error.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// OutOfDescriptors reports a connect that failed for want of the gateway's
// own file descriptors (or the kernel's buffers and memory for a socket):
// no packet left this process, so the engine is not at fault.
func OutOfDescriptors(err error) bool {
	for _, e := range []syscall.Errno{syscall.EMFILE, syscall.ENFILE, syscall.ENOBUFS, syscall.ENOMEM} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// shortage counts requests refused for want of a resource, and says when
// to log it: the first time, and then at most once a minute.
type shortage struct {
	n    atomic.Int64
	said atomic.Int64 // when it was last logged (nanoseconds since monoBase), 0: never
}

// add counts one more refusal; say is whether to log it, with n so far.
func (s *shortage) add() (n int64, say bool) {
	n = s.n.Add(1)
	now := int64(time.Since(monoBase))
	last := s.said.Load()
	if last != 0 && time.Duration(now-last) < time.Minute {
		return n, false
	}
	return n, s.said.CompareAndSwap(last, now)
}
