package proxy

import (
	"errors"
	"io"
	"net"
	"os"
	"syscall"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/goodput/goodput/internal/peek"
)

// The direct read path: a stream reads its upstream socket itself, one
// read(2) per arrival, instead of through fasthttp's body reader over a
// bufio.Reader over the connection.
//
// Through the buffered readers every event cost two reads: the one that
// brought it and one more that failed with EAGAIN (the chunked reader asks
// for the next size line, the buffer is empty, the socket too), and only
// then did the goroutine park. Here the whole body is read inside one
// syscall.RawConn.Read: its callback (onReadable) reads into the SSE
// framer's buffer, takes the chunked framing off in place (bodyDecoder),
// meters and writes what the read brought, and when the read came back
// short (the socket is drained) returns false, so the poller parks the
// goroutine without the read that would fail. A full read is read again at
// once. Go's internal/poll resets the socket's readiness once per RawRead,
// before the first call, not between a callback and the wait after it, so
// bytes that arrive while the callback runs wake the wait at once: none is
// left unread.
//
// A short read proves the socket drained of bytes, not of the engine's
// FIN: read(2) returns the bytes before a FIN and shows the FIN only at
// the next call. Readiness is one flag, so bytes and a FIN that arrive
// together (or while the woken goroutine waits for a CPU) wake the stream
// once, and after the short read that takes the bytes nothing wakes it
// again. A body that ends at the close is therefore read until EAGAIN or
// its end, one read more per arrival. A chunked or fixed-length body ends
// in its bytes, so its stream still parks after a short read; a FIN in
// the middle of such a body (the engine died) that hides this way is
// found within finRecheck: the deadline armed on the socket is never
// further away than that, and when it expires before the stream's real
// deadline the read that begins again reads until EAGAIN and meets the
// FIN. When the real deadline expires first (a total or first-token
// timeout, or an idle timeout shorter than finRecheck), a peek tells the
// cut body (an upstream error) from an engine that merely went quiet (a
// timeout). (The epoll event's EPOLLRDHUP would tell at once, but Go's
// poller does not hand it to a RawConn.)
//
// The stream holds no buffered reader meanwhile: the connection's reader
// goes back to the pool once the body bytes it had buffered with the head
// are consumed, and is taken again for the next response's head.
type directReader struct {
	dec   bodyDecoder
	fd    uintptr // the socket (s.conn.rc's), during a callback
	pre   []byte  // body bytes the head's reader had buffered: served first
	space int     // the last Read's buffer size
	n     int     // the last Read's bytes, before decoding
	errno syscall.Errno
	eof   bool // the last read(2) returned 0
	// fresh: no wait since the RawRead began, which reset the socket's
	// readiness. What arrived before that reset wakes no wait, so the
	// socket is read until EAGAIN before the first wait.
	fresh bool
	// noLoop: no I/O loop could take the stream (ioloop_linux.go); it
	// reads on its own to its end.
	noLoop bool
	reads  int32 // read(2) calls made, for tests (testHookDirectReads)
	err    error
	// slot: the stream's registration with an I/O loop while the loop
	// reads its socket; nil otherwise.
	slot *loopSlot
}

// testHookDirectReads, when set by a test, is told how many read(2) calls
// a direct stream made.
var testHookDirectReads func(reads int)

// Read serves the pre-read bytes, then makes one read(2); it returns the
// body bytes decoded in place. EAGAIN, an error and the end of the
// connection are left in r for onReadable, with 0 bytes and a nil error; a
// framing error is returned.
func (r *directReader) Read(p []byte) (int, error) {
	if len(p) > loopReadMax && r.inLoop() {
		p = p[:loopReadMax]
	}
	r.space, r.n, r.errno, r.eof = len(p), 0, 0, false
	if len(r.pre) > 0 {
		r.n = copy(p, r.pre)
		r.pre = r.pre[r.n:]
	} else {
		n, e := sysRead(r.fd, p)
		r.reads++
		switch {
		case e != 0:
			r.errno = e
			return 0, nil
		case n == 0:
			r.eof = true
			return 0, nil
		}
		r.n = n
	}
	return r.dec.decode(p[:r.n])
}

// loopReadMax is the most an I/O loop reads at once for a stream. An I/O
// loop never waits for a client that lags (queue): the events of the read
// in which the client began to lag are queued past the lag queue's room.
// A stream's read buffer keeps what one large event grew it to (up to
// twice max_event_bytes), so that one read could queue a megabyte or more
// past a room of a few KiB, and past MaxLagMemory's lagFloor (found by the
// second review of the loops). The buffers lent to streams are smaller
// than this: only a grown one is read in parts.
const loopReadMax = lagFloor

// loopTurnReads is the most reads an I/O loop makes in one call of a
// stream's onReadable. The loop runs one stream at a time: a stream whose
// engine is ahead of the gateway, its reads coming back full, held the
// loop until its socket was drained or its armed deadline passed (up to
// finRecheck), every other stream of the loop waiting (found by the second
// review of the loops: 814 ms gaps on streams of 10 ms ones). Past it, the
// stream goes back to its goroutine, which the scheduler shares out with
// the others, until it has caught up (a read says EAGAIN: it joins a loop
// again, park). Each read takes at most the read buffer's room and
// loopReadMax: 6 KiB or so a turn for a stream of small events (a lent
// buffer of 1 KiB, lentBufSize, less the part of an event it holds: 5.8
// KiB of 330-byte events in TestLoopChurnOfJoins), at most 128 KiB (a
// grown buffer).
const loopTurnReads = 8

// loopEventMax is the most of one event an I/O loop reads: past it, the
// stream goes back to its goroutine, which reads the event to its end, and
// parses it (park: it joins a loop again once it holds less). A large
// event costs a copy of what is held at each growth of the read buffer,
// and its parse (read lean, over 64 KiB) took 160 ms for 10 MB of
// logprobs and 530 ms for 30 MB, max_event_bytes raised to 64 MiB, every
// other stream of the loop waiting (found by the second review of the
// loops).
const loopEventMax = 64 << 10

// heldEvent is how much of an event the stream's framer holds, unparsed:
// none once the metering stopped (an event over max_event_bytes), when
// the framer keeps what it held of that event, passed on, but reads no
// more (readOnce), and the stream may join a loop again.
func (s *stream) heldEvent() int {
	if !s.metering {
		return 0
	}
	return len(s.framer.Rest())
}

// useDirect switches the stream to the direct read path when its
// connection allows it: a socket, a body read as it comes (not decoded by
// gunzip), and a head read through the small reader.
func (s *stream) useDirect() bool {
	c := s.conn
	if c == nil || c.rc == nil || s.resp == nil || c.br == nil || c.br.Size() != upstreamBufSize {
		return false
	}
	if _, ok := s.body.(*gunzipBody); ok {
		return false
	}
	s.dr = directReader{}
	s.dr.dec.init(s.resp.Header.ContentLength())
	// The upstream response has given all the stream needs from it: it
	// goes back to its pool now, with fasthttp's body reader, which
	// would otherwise keep the connection's buffered reader (lent back
	// below) alive for as long as the stream is in flight.
	s.connClose = s.resp.ConnectionClose()
	_ = s.resp.CloseBodyStream()
	fasthttp.ReleaseResponse(s.resp)
	s.resp, s.body = nil, nil
	if n := c.br.Buffered(); n > 0 {
		s.dr.pre, _ = c.br.Peek(n) // lent back once served (onReadable)
	} else {
		s.p.up.lendReader(c)
	}
	s.direct = true
	return true
}

// readDirect is readAll on the direct read path. The read deadline works as
// there (set when it must move earlier, a late one moved on expiry), and
// cut and the client guard are checked after every deadline set.
func (s *stream) readDirect() error {
	r := &s.dr
	if testHookDirectReads != nil {
		defer func() { testHookDirectReads(int(r.reads)) }()
	}
	if s.onReadableFn == nil {
		s.onReadableFn = s.onReadable // bound once per pooled stream
	}
	s.readyAt = time.Now()
	s.armed = recheckBy(s.readyAt, s.headWake(s.readDeadline()))
	s.headArmed = s.armedHead(s.armed)
	_ = s.conn.SetReadDeadline(s.armed)
	for {
		if s.p.up.cut.Load() {
			return errShutdown
		}
		if s.guard.clientLeft() {
			return errClientGone
		}
		r.err = nil
		r.fresh = true
		err := s.conn.rc.Read(s.onReadableFn)
		if err == nil {
			if r.err != errJoinLoop {
				return r.err
			}
			if why, done := s.loopRead(); done {
				return why
			}
			continue // its client lags, its engine is ahead or sent a large event: it reads on its own again
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			if s.lateDeadline() {
				continue // the deadline was early: read on until the real one
			}
			if s.p.up.cut.Load() || s.guard.clientLeft() {
				return err // their expired deadline: endRead says why
			}
			if cerr := s.closedMeanwhile(); cerr != nil {
				return cerr
			}
		}
		return asNetOp(err, "read")
	}
}

// finRecheck bounds how long a FIN hidden behind a framed body's last bytes
// goes unseen (see directReader): a direct stream's socket deadline is
// armed at most this far ahead, so a stream whose engine went quiet begins
// its read again, reading until EAGAIN, once in this time. Every direct
// stream pays it (the deadline is not moved at each event): a timer, a
// RawRead begun again and one read(2) a second, against the one read(2)
// per event that reading every body until EAGAIN would cost.
const finRecheck = time.Second

// recheckBy is the deadline to arm on a direct stream's socket for a read
// whose real deadline is dl: dl, or finRecheck from now when that is
// sooner.
func recheckBy(now, dl time.Time) time.Time {
	if r := now.Add(finRecheck); r.Before(dl) {
		return r
	}
	return dl
}

// onReadable is the RawConn.Read callback of the direct path: it reads,
// meters and writes until the socket is drained (false: wait until it is
// readable again, or the deadline) or the body ends, fails or is cut (true,
// with why in s.dr.err: io.EOF at the body's end).
func (s *stream) onReadable(fd uintptr) bool {
	r := &s.dr
	r.fd = fd
	got := false // bytes came in this call
	reads := r.reads
	for {
		if r.inLoop() && (s.lagging || r.reads-reads >= loopTurnReads || s.heldEvent() > loopEventMax) {
			// The client lags: the writer goroutine writes from now on,
			// and queue may have to wait for it, which an I/O loop must
			// never do. Or the engine is ahead, or sends a large event:
			// the loop's other streams are not to wait for this one
			// (loopTurnReads, loopEventMax). The stream's goroutine
			// reads on (r.err is nil: loopSlot.run hands the stream
			// back).
			return true
		}
		if s.p.up.cut.Load() {
			r.err = errShutdown
			return true
		}
		if s.guard.clientLeft() || s.isAborted() {
			// The client left (before its first token, or a write to it
			// failed, or the token limit cut the stream): nothing more is
			// read or metered, as when the connection was closed.
			r.err = errClientGone
			return true
		}
		fromPre := len(r.pre) > 0
		got = got || fromPre
		n, ok, err := s.readOnce(r)
		if n > 0 {
			// Bytes came: the idle timeout runs from their read, also
			// through full reads that never wait (an engine far ahead).
			s.readyAt = s.readAt
		}
		if fromPre && len(r.pre) == 0 {
			r.pre = nil
			br := s.conn.br
			_, _ = br.Discard(br.Buffered()) // served
			s.p.up.lendReader(s.conn)
		}
		if ok && n > 0 && s.state.Load() == stateInline {
			ok = s.push()
		}
		got = got || r.n > 0
		switch {
		case !ok:
			r.err = errClientGone
			return true
		case err != nil:
			r.err = err
			return true
		case r.dec.done:
			if len(r.pre) > 0 {
				r.dec.extra = true
			}
			r.err = io.EOF
			return true
		case r.errno == syscall.EAGAIN:
			// Nothing to read. After bytes in this call, the wait for the
			// next begins now; at the call's first read (the first, or one
			// after a late deadline was moved) it began before.
			if !got || s.wait() {
				return s.park()
			}
		case r.errno != 0:
			r.err = sockErr(s.conn, "read", r.errno)
			return true
		case r.eof:
			r.err = r.dec.eof()
			if r.err == nil {
				r.err = io.EOF
			}
			return true
		case !fromPre && r.n < r.space && s.wait() && !r.fresh && r.dec.kind != bodyUntilClose:
			// A short read drained the socket of its bytes: the next read
			// begins now (wait moves the idle timeout on, whether or not
			// the stream parks), and it waits without the read that would
			// say EAGAIN. A short read does not prove that no FIN is
			// behind the bytes (see directReader), so before the first
			// wait (fresh), and on a body that ends at the close, the
			// socket is read on until EAGAIN or its end instead.
			return s.park()
		case !time.Now().Before(s.armed):
			// The deadline armed has passed while reads came back full
			// (an engine ahead of the gateway): the poller says so, at
			// once, and readDirect moves it on or ends the stream. Going
			// on reading would run past a total or first_token deadline
			// for as long as the engine keeps ahead.
			return s.park()
		}
		// A full read (or the pre-read bytes) may have left more: read on.
	}
}

// closedMeanwhile is asked when the stream's deadline has expired: it
// peeks at the socket for a FIN (or a reset) that came behind the last
// bytes read and woke no wait (see directReader). It returns why the body
// ended (errBodyCut, or io.EOF for a body that ends at the close) or the
// socket's error (a reset), and nil when the engine only went quiet.
func (s *stream) closedMeanwhile() error {
	eof, e, err := peek.End(s.conn.rc)
	var errno syscall.Errno
	switch {
	case err != nil:
		return nil
	case eof:
		if err := s.dr.dec.eof(); err != nil {
			return err
		}
		return io.EOF
	case errors.As(e, &errno) && errno != syscall.EAGAIN && errno != syscall.EWOULDBLOCK:
		return sockErr(s.conn, "read", errno) // a reset, or another error the next read would return
	}
	return nil
}

// asNetOp names a RawConn error's operation as net.Conn's would ("read",
// not "raw-read").
func asNetOp(err error, op string) error {
	var oe *net.OpError
	if errors.As(err, &oe) {
		oe.Op = op
	}
	return err
}

// sockErr is the error of a failed read(2) or write(2) (op) on c's socket,
// as net.Conn's Read or Write would return it.
func sockErr(c net.Conn, op string, errno syscall.Errno) error {
	return &net.OpError{Op: op, Net: "tcp", Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: os.NewSyscallError(op, errno)}
}

// park ends an onReadable call that waits for the upstream's next bytes:
// the stream gives its lent buffers back meanwhile (lend.go).
func (s *stream) park() bool {
	s.dr.fresh = false
	s.lendBack(true)
	if testHookPark != nil {
		s.mu.Lock()
		held := cap(s.pending)
		s.mu.Unlock()
		if bw := headWriterOf(s.w); bw != nil && !s.lagging && s.headSent {
			held += bw.Size() // the client connection's write buffer, once the head is out
		}
		testHookPark(held + cap(s.wire) + s.framer.BufferCap())
	}
	if s.p.ioLoop && s.dr.slot == nil && !s.dr.noLoop && !s.lagging && s.headSent && len(s.dr.pre) == 0 && s.state.Load() == stateInline && s.heldEvent() <= loopEventMax {
		// (lagging first: once it is set, the writer goroutine owns
		// headSent.)
		// The head is out and the client keeps up: an I/O loop reads
		// the socket from now on (ioloop_linux.go). readDirect hands it
		// over once this RawRead has ended.
		s.dr.err = errJoinLoop
		return true
	}
	return false
}

// inLoop: the stream's I/O loop slot runs its callback now (loopSlot.run,
// with the slot's mutex held: on the loop's goroutine, or on the stream's
// own when it drains what the loop left to it), which must not wait.
func (r *directReader) inLoop() bool { return r.slot != nil && r.slot.inLoop }

// errJoinLoop ends a direct stream's RawRead when the stream's reads are to
// go to an I/O loop (park).
var errJoinLoop = errors.New("the stream's reads go to an I/O loop")

// armRead arms dl, the read deadline of the stream (in s.armed), on its
// socket; a stream in an I/O loop has its goroutine wait for it instead,
// woken to look again when the loop moved it earlier.
func (s *stream) armRead(dl time.Time) {
	if sl := s.dr.slot; sl != nil {
		if sl.inLoop {
			sl.poke()
		}
		return
	}
	_ = s.conn.SetReadDeadline(dl)
}

// testHookPark, when set by a test, is told at each park how many bytes of
// buffers the stream still holds.
var testHookPark func(held int)

// hangUp closes the upstream connection so that the engine stops
// generating. A direct stream's connection is shut down both ways instead
// (the engine sees the same FIN, and a read in progress ends): Close waits
// for the read lock, which onReadable holds while it meters and writes, and
// may be the caller. The connection is closed when the stream ends (a
// stream that did not end cleanly discards it).
func (s *stream) hangUp() {
	if s.direct {
		if sc, ok := s.conn.Conn.(interface {
			CloseRead() error
			CloseWrite() error
		}); ok {
			_ = sc.CloseWrite()
			_ = sc.CloseRead()
			return
		}
	}
	_ = s.conn.Close()
}

// wait readies the wait for the next read: that read begins now (the idle
// deadline runs from here), and a deadline earlier than the one armed (the
// first token switched first_token to idle) is set. It reports false when
// the shutdown's cut or the client guard came meanwhile: the deadline just
// set may have overwritten the one they expired.
func (s *stream) wait() bool {
	s.readyAt = time.Now()
	if s.headGone() {
		// The head went out with the first bytes: the wake armed for it
		// would only find a deadline to move on.
		s.armed, s.headArmed = recheckBy(s.readyAt, s.readDeadline()), false
		s.armRead(s.armed)
		return !s.p.up.cut.Load() && !s.guard.clientLeft()
	}
	if dl := s.readDeadline(); dl.Before(s.armed) {
		s.armed = dl
		s.armRead(dl)
		return !s.p.up.cut.Load() && !s.guard.clientLeft()
	}
	return true
}
