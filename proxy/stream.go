package proxy

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime/debug"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/goodput/goodput/internal/peek"
	"github.com/goodput/goodput/internal/phases"
	"github.com/goodput/goodput/meter"
	"github.com/valyala/fasthttp"
)

// bodyMode says how a response body is metered.
type bodyMode uint8

const (
	modeRaw  bodyMode = iota // passed through, not parsed
	modeSSE                  // an event stream (or Ollama's NDJSON): framed, parsed, flushed per event
	modeJSON                 // a JSON body: kept (bounded) and its usage read at the end
)

// End causes, in order of precedence when several happen.
const (
	endNone int32 = iota
	endEOF
	endUpstream // reset, truncated chunk, read error
	endTimeout
	endLimit // cut by the tenant's token limit (see progress)
	endAbort // the client went away
)

var (
	errIdleTimeout       = errors.New("upstream idle timeout: no byte within the idle timeout")
	errFirstTokenTimeout = errors.New("upstream first-token timeout: no token within the first_token timeout")
	errTotalTimeout      = errors.New("total timeout reached")
	errClientGone        = errors.New("client went away")
	errInternal          = errors.New("gateway internal error")
)

// What a record says of a client that left while its response streamed:
// before its first token was written to it (the head may have gone, or
// been held), or after.
const (
	msgGoneBeforeFirstToken = "client went away before the first token"
	msgGoneMidResponse      = "client went away mid-response"
	msgGoneWhileQuiet       = "client went away while the engine sent nothing"
)

// stream carries one response from the upstream to the client.
//
// One goroutine per stream on the common path: fasthttp calls WriteTo on
// the client connection's goroutine, and WriteTo reads the upstream itself
// (readBody): it reads, frames and parses events, stamps each with the
// time it was read, and after each read writes what the read queued to the
// client at once. The last event of a read is written before it is parsed
// where metering cannot change it (sendsFirst), so its write does not wait
// for the metering. The first write goes through fasthttp's buffered writer,
// carrying the response head with it (one write for both, see
// headflush.go); later ones are framed here as chunks and written with one
// non-blocking write(2) on the client's socket, which never waits.
//
// A client that lags falls back to a queue: when the socket does not take
// a whole chunk, the rest of it and everything read after it go to a writer
// goroutine, started then (writeLoop), which writes with deadlines while
// the reader goes on reading and stamping. So a slow client never delays
// when an event is stamped, until it lags MaxClientLag bytes behind (the
// reader then waits for the writer). Where direct writes are not possible
// (no socket under the connection, or a body fasthttp does not chunk), the
// writer goroutine writes from the start. A caller that uses Read instead of
// WriteTo gets the reader on a goroutine of its own.
//
// A failed write is the only sign fasthttp gives that the client left: the
// writer then closes the upstream connection at once, which ends the
// reader and tells the engine to stop generating. Until the first token is
// written, the client guard watches the client instead (guard.go).
//
// Streams are pooled. Everything a request owns is in streamReq, which
// reset zeroes as a whole (acquireStream, releaseStream): no parser flag,
// count or error can carry over to the next request. Only buffers are kept,
// for their capacity, and their owners empty them (the Meter, the framer
// and the parser, whose buffer reset keeps, zero their own state as a
// whole too).
type stream struct {
	streamReq

	// Kept across requests for their capacity; reset empties them.
	meter   meter.Meter     // Reset/Start zero it, keeping its buffers
	framer  meter.SSEFramer // Reset zeroes it, keeping its buffer
	rbuf    []byte          // raw reads (not framed)
	jsonBuf []byte          // a JSON body, bounded by MaxJSONBytes
	pending []byte          // guarded by mu: bytes for the writer
	spare   []byte          // guarded by mu: the writer's previous buffer
	wire    []byte          // the reader's direct write: one chunk, framed

	// The holders of the framer's buffer, pending and wire while they are
	// lent (lend.go): a direct stream gives the three back each time it
	// waits for its upstream.
	frLend, pendLend, wireLend lentBuf

	// bwHold is an empty bufio.Writer: what carries the client writer's
	// buffer to bwPool while it is lent (headbuf.go).
	bwHold *bufio.Writer

	lateDeadlineFn func() bool        // s.lateDeadline, bound once (no allocation per stream)
	onReadableFn   func(uintptr) bool // s.onReadable, bound once
	writeFDFn      func(uintptr) bool // s.writeFD, bound once
}

// streamReq is the state of one request's stream. Its flags are grouped
// at the end by owner, so that they pack without padding (the pooled stream
// then fits the allocator's 1,536-byte size class).
type streamReq struct {
	p   *Proxy
	rec *meter.Record

	conn *upConn
	resp *fasthttp.Response // upstream response; its BodyStream is read
	body io.Reader

	// direct: the body is read from the socket by the stream itself
	// (direct.go), not through body; resp is released then, and connClose
	// keeps whether the engine asked to close the connection.
	dr directReader

	// reader-owned state
	parser     meter.StreamParser
	ev         meter.Event
	info       meter.EventInfo
	contentErr string    // first malformed/error event, if any
	presented  string    // under gateway keys, the key presented (keptPresentedKey): it, and a gp- one's fragments, are kept out of the record's message
	readAt     time.Time // when the bytes being handled were read
	readyAt    time.Time // when the current read began
	armed      time.Time // the read deadline set on conn (see readAll)
	deadline   time.Time // the total timeout; zero: none
	firstToken time.Time // the first-token deadline
	adm        admission
	// ph times the first event (a build with -tags phases; empty
	// otherwise): started at each read of a metered event stream, marked
	// by push as the head goes out with the first bytes. Reader-owned.
	ph phases.Clock

	// guard watches the client until the first token is written (the
	// writer stops it then); nil when there is none.
	guard *clientGuard

	// client is the client's connection: each write to it has a deadline
	// (see WriteTo), so a client that stops reading cannot hold the stream.
	client net.Conn

	// shared, guarded by mu (with pending and spare)
	mu           sync.Mutex
	pendingSince time.Time // when the oldest byte in pending was read
	rerr         error     // why the reader finished, nil at a clean end

	// wake and drained are made only when a second goroutine takes part
	// (twoGoroutines): the writer goroutine, or a reader started by Read.
	// A stream whose client keeps up is read and written by one goroutine,
	// which never waits on them (a send to a nil channel in a select with a
	// default does nothing).
	wake    chan struct{} // reader -> writer: bytes queued or reader done
	drained chan struct{} // writer -> reader: the queue was emptied
	quit    chan struct{} // closed when the writer gives up (client gone)

	writeDelay time.Duration // writer-owned: the longest read-to-written delay

	// headDue: fasthttp's writer holds the response head (headflush.go),
	// to be sent alone at monoBase+headDue if no bytes came to go with it;
	// -1: held with no such time; 0: sent, or not held. Reader-owned.
	headDue int64

	// The one-goroutine path (see the stream's doc): the reader runs in
	// WriteTo and writes each batch itself while the client keeps up.
	w        io.Writer       // fasthttp's chunk writer, given to WriteTo
	lentBW   *bufio.Writer   // fasthttp's buffered writer under w while its buffer is lent (headbuf.go)
	raw      syscall.RawConn // the client's socket, for non-blocking writes; nil: none
	rawN     int             // writeFD's result: bytes written
	rawErr   error           // writeFD's result: the error (EAGAIN: the socket is full)
	rawRest  []byte          // a chunk the socket took only part of: the writer's first write
	rawSince time.Duration   // when rawRest's bytes were read, after rec.Start (a time.Time would take the room of presented)
	werr     error           // the writer goroutine's result, read after writerDone
	total    int64           // bytes of body written, by whichever goroutine writes

	writerDone chan struct{}

	endErr     atomic.Pointer[string]
	readerDone sync.WaitGroup // one until the reader is done, or Close knows it never ran
	state      atomic.Int32   // how the body is read: stateIdle, stateInline, stateGoroutine, stateClosed
	end        atomic.Int32
	closed     atomic.Bool

	mode bodyMode
	api  meter.API

	// Set before the body is read.
	direct    bool
	connClose bool

	// reader-owned flags
	jsonTooBig bool
	stripUsage bool
	metering   bool
	awaitToken bool // no token event yet: reads wait until firstToken, not idle
	markNext   bool // the next queued bytes hold the first token (or body byte)
	headSent   bool // the head and a first chunk went out through w
	lagging    bool // the writer goroutine writes from now on
	rawToken   bool // rawRest holds the first token
	headArmed  bool // the read deadline armed is the held head's due time

	// flags guarded by mu
	rdone       bool // the reader has finished; pending holds the last bytes
	tokenQueued bool // pending (or what the writer took) holds the first token

	tokenWritten bool // writer-owned until Close: the first token reached the client

	// aborted: the stream was aborted (abort), quit is closed or about to
	// be. The reader looks at it at every read: a load in the struct, where
	// a select on quit (a channel elsewhere on the heap) had 0.9% of the
	// gateway's CPU samples at 1,024 streams.
	aborted atomic.Bool
}

var streamPool = sync.Pool{New: func() any { return new(stream) }}

// acquireStream returns a pooled stream with no state of any earlier
// request.
func acquireStream() *stream {
	s := streamPool.Get().(*stream)
	s.reset()
	return s
}

// dropLag lets go of what a lagging stream still has queued for a writer
// that ended first (the client left): no longer held (holdLag). It runs
// before the stream's record is emitted (finishStream), so that once
// Proxy.Wait returns no ended stream is counted in LagMemory, and again,
// with nothing left, as the stream is released.
func (s *stream) dropLag() {
	if s.lagging && len(s.pending) > 0 {
		s.p.lagHeld.Add(-int64(len(s.pending)))
		s.pending = s.pending[:0]
	}
}

// releaseStream returns s to the pool once both its goroutines are done
// with it.
func releaseStream(s *stream) {
	s.dropLag()
	s.reset()
	s.lendBack(false) // a pooled stream holds no lent buffer, nor a grown one
	streamPool.Put(s)
}

// lendBack gives the stream's lent buffers back to lendPool (lend.go): the
// framer's, once no event is pending in it, and the queue and the framed
// chunk, which are empty while the client keeps up. A lagging client's
// queue stays: the writer goroutine owns it. Buffers grown past maxLentBuf
// are kept while the stream goes on (keepGrown), and left to the collector
// when it ends: the next request on the pooled stream starts small.
func (s *stream) lendBack(keepGrown bool) {
	if b := s.framer.TakeBuffer(); b != nil {
		if kept := s.frLend.release(b, keepGrown); kept != nil {
			s.framer.GiveBuffer(kept)
		}
	}
	s.wire = s.wireLend.release(s.wire, keepGrown)
	if s.lagging {
		return
	}
	// No writer goroutine runs: the reader owns pending and spare, and
	// releaseStream runs after both goroutines ended (no lock per park).
	if len(s.pending) == 0 {
		s.pending = s.pendLend.release(s.pending, keepGrown)
	}
	if !keepGrown && cap(s.spare) > maxLentBuf {
		s.spare = nil
	}
}

// reset zeroes every per-request field at once and empties the buffers.
func (s *stream) reset() {
	parser := s.parser // its buffer, for its capacity (Reset zeroes the rest)
	s.streamReq = streamReq{}
	s.parser = parser
	s.parser.Reset()
	s.meter.Reset()
	s.framer.Reset()
	s.jsonBuf = shrink(s.jsonBuf)
	s.pending = shrink(s.pending)
	s.spare = shrink(s.spare)
	s.wire = shrink(s.wire)
}

// minQueueBuf is the first capacity of a queue buffer: a read's events,
// for a client that keeps up (a few hundred bytes each); it grows on demand.
const minQueueBuf = 1 << 10

// keepBuf is the largest buffer a pooled stream keeps: one grown for a
// slow client or a large JSON body is left to the collector, so idle
// streams in the pool do not hold what the largest requests needed.
const keepBuf = 64 << 10

// shrink empties b, and drops it when it is larger than keepBuf.
func shrink(b []byte) []byte {
	if cap(b) > keepBuf {
		return nil
	}
	return b[:0]
}

func (s *stream) setEnd(cause int32, msg string) {
	for {
		cur := s.end.Load()
		if cur >= cause {
			return
		}
		if s.end.CompareAndSwap(cur, cause) {
			if msg != "" {
				m := msg // on the heap only when kept (&msg would move every call's)
				s.endErr.Store(&m)
			}
			return
		}
	}
}

// How a stream's body is read (stream.state): not yet; by WriteTo on the
// client connection's goroutine (the common path); by a goroutine of its
// own, for a caller that reads the stream (Read) instead; or never, the
// response closed first.
const (
	stateIdle int32 = iota
	stateInline
	stateGoroutine
	stateClosed
)

// start readies the stream; reading begins when fasthttp writes the body
// (WriteTo, or Read).
func (s *stream) start() {
	s.quit = make(chan struct{})
	s.readerDone.Add(1)
}

// twoGoroutines makes the channels between the reader and a writer: called
// before the second goroutine starts, by the one that starts it.
func (s *stream) twoGoroutines() {
	s.wake = make(chan struct{}, 1)
	s.drained = make(chan struct{}, 1)
}

// readBody reads the upstream body to its end, on WriteTo's goroutine
// (where readAll writes what each read queued, or hands it to the writer
// goroutine) or on a goroutine of its own (for Read).
func (s *stream) readBody() {
	defer s.readerDone.Done()
	defer s.containReaderPanic()
	err := s.readAll()
	s.endRead(err)
}

// testHookClientWrite, when set by a test, runs before each write of
// queued bytes to the client (the writer goroutine's, or for Read).
var testHookClientWrite func()

// containWriterPanic ends the stream when its writer goroutine panicked,
// as containReaderPanic does for the reader: the process lives on, the
// reader stops, the client's connection is dropped, one record.
func (s *stream) containWriterPanic() {
	if r := recover(); r != nil {
		s.p.cfg.Logf("proxy: panic while writing to the client of request %s: %v\n%s", s.rec.RequestID, r, debug.Stack())
		s.setEnd(endUpstream, fmt.Sprintf("gateway internal error while writing to the client: %v", r))
		s.werr = errInternal
		s.abort("")
	}
}

// testHookWriteTo, when set by a test, runs as WriteTo begins, on the
// reader's goroutine before it reads.
var testHookWriteTo func()

// containWriteToPanic ends the stream when WriteTo panicked outside the
// reader (readBody contains its own): on the way to it, or writing the
// last bytes. fasthttp recovers a body writer's panic, but then closes
// the stream only when it releases the request, and Close waited for a
// reader that never ran: no record, and a shutdown waiting for ever (a
// review found it). As containReaderPanic: one record, an upstream error,
// the client's connection dropped. It returns WriteTo's error.
func (s *stream) containWriteToPanic(r any, reading bool) error {
	s.p.cfg.Logf("proxy: panic while streaming the answer of request %s: %v\n%s", s.rec.RequestID, r, debug.Stack())
	s.setEnd(endUpstream, fmt.Sprintf("gateway internal error while streaming the answer: %v", r))
	if !reading {
		s.mu.Lock()
		s.rdone = true
		s.rerr = errInternal
		s.mu.Unlock()
	}
	s.abort("")
	if s.lagging && s.writerDone != nil { // (a writer goroutine runs)
		s.signalWriter()
		s.waitWriter()
	}
	if !reading {
		s.readerDone.Done()
	}
	return errInternal
}

// containReaderPanic ends the stream when its reader panicked. A bug met on
// some upstream bytes must not take the process, and every other stream,
// down with it: this stream ends as an upstream error (the client sees an
// abnormal end) with one record.
func (s *stream) containReaderPanic() {
	if r := recover(); r != nil {
		s.p.cfg.Logf("proxy: panic while reading the upstream of request %s: %v\n%s", s.rec.RequestID, r, debug.Stack())
		s.setEnd(endUpstream, fmt.Sprintf("gateway internal error while reading the upstream: %v", r))
		s.mu.Lock()
		s.rdone = true
		s.rerr = errInternal
		s.mu.Unlock()
		s.signalWriter()
	}
}

// readAll reads the upstream body until it ends, fails, times out, is cut,
// or the client leaves, handing what it reads to the framer (a metered
// stream) or the raw path; it returns why it stopped (io.EOF at the end).
//
// The read deadline is set when it must move earlier (the first read, the
// first token's switch from first_token to idle), not before every read:
// the idle deadline set at one read is earlier than the next read's, and
// when it expires the connection's reader asks lateDeadline, which moves it
// to the real one, idle from when the read began, and the read goes on
// (upConn.lateDeadlines). Each read still times out exactly when it did,
// without a timer update per event. A connection whose reader cannot ask
// gets its deadline set before every read.
func (s *stream) readAll() error {
	if s.direct {
		return s.readDirect()
	}
	if s.conn.lateDeadlines {
		if s.lateDeadlineFn == nil {
			s.lateDeadlineFn = s.lateDeadline // bound once per pooled stream
		}
		s.conn.onDeadline = s.lateDeadlineFn
		defer func() { s.conn.onDeadline = nil }()
	}
	for {
		s.readyAt = time.Now()
		if dl := s.headWake(s.readDeadline()); !s.conn.lateDeadlines || s.armed.IsZero() || dl.Before(s.armed) || s.headGone() {
			_ = s.conn.SetReadDeadline(dl)
			s.armed, s.headArmed = dl, s.armedHead(dl)
		}
		if s.p.up.cut.Load() {
			return errShutdown
		}
		if s.guard.clientLeft() {
			return errClientGone
		}
		n, ok, err := s.readOnce(s.body)
		if ok && n > 0 && s.state.Load() == stateInline {
			ok = s.push()
		}
		if !ok {
			return errClientGone
		}
		if err != nil {
			return err
		}
	}
}

// readOnce makes one Read from r and hands what it brought, stamped with
// the time it returned, to the framer (a metered event stream: read straight
// into the framer's buffer, no copy) or the raw path. ok is false when the
// client is gone.
func (s *stream) readOnce(r io.Reader) (n int, ok bool, err error) {
	ok = true
	if s.mode == modeSSE && s.metering {
		if s.framer.BufferCap() == 0 {
			s.framer.GiveBuffer(s.frLend.borrow())
		}
		n, err = s.framer.FillFrom(r)
		if n > 0 {
			prev := s.readAt // the read before: an Early event's
			s.readAt = time.Now()
			s.ph.Begin(s.readAt) // the first event's clock: push marks it
			ok = s.drainEvents(s.readAt, prev)
		}
		return n, ok, err
	}
	if s.rbuf == nil {
		s.rbuf = make([]byte, 4096) // SSE reads into the framer instead
	}
	n, err = r.Read(s.rbuf)
	if n > 0 {
		s.readAt = time.Now()
		ok = s.consumeRaw(s.rbuf[:n])
	}
	return n, ok, err
}

// readDeadline is the deadline of the read begun at readyAt: first_token
// until the first token, then idle from readyAt; never past the total
// deadline.
func (s *stream) readDeadline() time.Time {
	dl := s.firstToken
	if !s.awaitToken {
		dl = s.readyAt.Add(s.p.cfg.IdleTimeout)
	}
	if !s.deadline.IsZero() && s.deadline.Before(dl) {
		dl = s.deadline
	}
	return dl
}

// lateDeadline is asked by the upstream connection's reader when the
// deadline set on it expired during a read: when the read's real deadline
// is later (the one set was an earlier read's), it sets that and reports
// true, and the read goes on. Like readAll, it checks the shutdown's cut
// and the client guard after setting a deadline: their expired deadline
// is never overwritten unseen. A held response head whose hold is over
// goes out first (headflush.go): its time is one such early deadline.
func (s *stream) lateDeadline() bool {
	if testHookLateDeadline != nil {
		testHookLateDeadline()
	}
	now := time.Now()
	if !s.sendHeadWhenDue(now) {
		return false // the client is gone: endRead says so
	}
	if now.Sub(s.readAt) >= finRecheck && s.silentClientGone() {
		// Silent for a second or more (a stream still flowing learns it
		// from its next write, and pays no peek).
		return false // endRead says so
	}
	dl := s.readDeadline()
	if !now.Before(dl) {
		return false
	}
	if s.direct {
		dl = recheckBy(now, dl)
	}
	dl = s.headWake(dl)
	s.armed, s.headArmed = dl, s.armedHead(dl)
	if s.direct {
		s.armRead(dl)
	} else {
		_ = s.conn.SetReadDeadline(dl)
	}
	return !s.p.up.cut.Load() && !s.guard.clientLeft()
}

// endRead settles why the reader stopped (the stream's end cause) and
// wakes the writer to finish.
func (s *stream) endRead(err error) {
	now := time.Now()
	last := s.readAt // the last read that brought bytes: an Early event's
	s.readAt = now
	switch {
	case err == io.EOF:
		err = nil
		if s.finishBody(now, last) {
			s.setEnd(endEOF, "")
		} else {
			err = errClientGone
		}
	case s.guard.clientLeft() && !s.isAborted():
		// The guard found the client gone before its first token was
		// written (and expired the deadline the read was waiting on):
		// hang up on the engine now.
		err = errClientGone
		s.abort(msgGoneBeforeFirstToken)
	case err == errClientGone || s.isAborted():
		// The writer recorded the abort and closed the connection.
		err = errClientGone
	case err == errShutdown || s.p.up.cut.Load():
		// Cut by the shutdown: its expired deadline shows as a timeout, or
		// as whatever fasthttp wrapped it in.
		err = errShutdown
		s.setEnd(endTimeout, err.Error())
	case isReadTimeout(err) && s.silentClientGone():
		// The engine sent nothing for a while, and meanwhile the client
		// left: no write could tell. Found when the deadline fired (a
		// direct stream's wakes once a second, see finRecheck), it is the
		// client's leaving, not the engine's silence, that ends the stream.
		err = errClientGone
		s.abort(msgGoneWhileQuiet)
	case isReadTimeout(err):
		switch {
		case !s.deadline.IsZero() && !now.Before(s.deadline):
			err = errTotalTimeout
		case s.awaitToken:
			err = errFirstTokenTimeout
		default:
			err = errIdleTimeout
		}
		s.setEnd(endTimeout, err.Error())
	default:
		s.setEnd(endUpstream, "upstream read: "+err.Error())
	}
	s.mu.Lock()
	s.rdone = true
	s.rerr = err
	s.mu.Unlock()
	s.signalWriter()
}

func (s *stream) isAborted() bool { return s.aborted.Load() }

// silentClientGone reports whether the client has closed or reset its
// connection, by a peek at its socket, once its first token has been
// written: until then the guard watches it. A stream learns that its
// client left from a failed write, and an engine that sends nothing (a
// stall mid-stream, a reasoning model thinking) gives it nothing to write:
// so when its read deadline fires after a second without a byte (once a
// second on the direct path, else at the idle timeout) the stream looks. A
// client that only half-closed looks gone, as to the guard. A stream whose
// writes go through the writer goroutine (no direct writes: a body of
// known length, which fasthttp's buffered writer holds until it is full)
// is peeked at all the same: its writes, held there, fail no sooner than
// the direct ones, so a client that left was found only at the idle
// timeout, recorded as the engine's timeout.
func (s *stream) silentClientGone() bool {
	if s.awaitToken {
		return false
	}
	raw := s.raw
	if raw == nil && s.client != nil {
		raw = rawConnOf(s.client)
	}
	return raw != nil && peek.Gone(raw)
}

// drainEvents meters and queues every complete event buffered in the
// framer, all stamped now: the time their last byte was read; an event
// that was complete with the read before (Event.Early: its blank line
// ended with a "\r", the last byte of that read) is stamped prev, that
// read's time. It returns false when the client is gone.
func (s *stream) drainEvents(now, prev time.Time) bool {
	for {
		ok, err := s.framer.Next(&s.ev)
		if err != nil {
			return s.tooLarge()
		}
		if !ok {
			return true
		}
		t := earlyAt(&s.ev, now, prev)
		if s.sendsFirst() {
			if !s.sendThenMeter(t) {
				return false
			}
			continue
		}
		if !s.handleEvent(t) {
			return false
		}
	}
}

// earlyAt is the time of the event ev framed after a read at now: the
// time of the read that completed it, at, when it is Early (the read
// before), else now.
func earlyAt(ev *meter.Event, now, at time.Time) time.Time {
	if ev.Early && !at.IsZero() {
		return at
	}
	return now
}

// sendsFirst reports whether the event just framed is written to the client
// before it is metered: it is the last of the bytes read (what came before
// it in the same read goes out in the same write), the reader writes
// inline, and nothing metering finds can change the event's bytes or hold
// them back: no usage chunk the client did not ask for to drop or null
// usage to strip (stripUsage: the event names no usage, under no escape),
// no token limit that cuts a stream as it passes (progress). The event is
// stamped when read either way: the order moves only the write, earlier by
// the metering's time, from the client's first token on.
func (s *stream) sendsFirst() bool {
	if !s.framer.Drained() || s.lagging || s.state.Load() != stateInline {
		return false
	}
	if n := len(s.pending); n > 0 && n+len(s.ev.Raw) > s.p.cfg.MaxClientLag/2 {
		// queue would write what the read queued before it first, and
		// the client may lag from that write: the event would then be
		// the writer goroutine's, not written here.
		return false
	}
	if s.adm.admitted && s.adm.ticket.MayCut() {
		return false
	}
	return !s.stripUsage || !mayRewrite(s.ev.Raw)
}

// mayRewrite reports whether an event may hold a usage member, the only
// thing the gateway rewrites in a stream (stripUsage): its name, or an
// escape that could spell it.
func mayRewrite(raw []byte) bool {
	return bytes.Contains(raw, usageName) || bytes.Contains(raw, escapeMark)
}

var usageName, escapeMark = []byte("usage"), []byte(`\u`)

// sendThenMeter writes the framed event to the client, then meters it
// (sendsFirst). It returns false when the client is gone.
func (s *stream) sendThenMeter(now time.Time) bool {
	sent := s.queue(s.ev.Raw) && s.pushHold(true)
	metered := s.meterEvent(now, true)
	// The socket took part of it: the writer waits (pushHold). Nothing
	// else starts one here (sendsFirst: queue did not push).
	held := !s.lagging && s.rawRest != nil
	if sent && s.markNext {
		// The event just written held the first token: it reached the
		// client, as push would have noted had the metering come first;
		// or, when the socket took only part of it, it does once the
		// writer goroutine has written the rest.
		s.markNext = false
		if held {
			s.rawToken = true
		} else {
			s.tokenReached() // its write's delay was noted by push
		}
	}
	if held {
		s.holdLag(len(s.rawRest))
		s.startWriter()
	}
	return sent && metered
}

// tooLarge handles an event over MaxEventBytes: metering stops and the rest
// of the body passes through unparsed.
func (s *stream) tooLarge() bool {
	s.noteContentErr(errEventTooLarge)
	s.metering = false
	if s.awaitToken {
		s.awaitToken = false // no token will be seen: idle applies
		s.markNext = true
	}
	return s.queue(s.framer.Rest())
}

const errEventTooLarge = "stream event larger than the maximum event size"

// errFailureSkipped is the record's error for a failure event (error,
// response.failed) over max_event_bytes: the engine failed, though what it
// said is not known.
const errFailureSkipped = "an error event larger than max_event_bytes (not parsed: its message is not known)"

// errEventSkipped notes, in the record of a Responses or Messages API
// stream, an event over the size limit that passed unmetered (the framer
// skips it: SkipLarge): the engine is not at fault, the events around it
// are metered.
const errEventSkipped = "an event larger than max_event_bytes passed unmetered (the Responses API's last events repeat the whole response); what it said (the usage, for a final event) is not known"

// handleEvent meters the framed event in s.ev and queues its bytes, unless
// it is the usage chunk the gateway asked for on the client's behalf.
// testHookEvent, when set by a test, sees every event the reader handles.
var testHookEvent func(raw []byte)

func (s *stream) handleEvent(now time.Time) bool { return s.meterEvent(now, false) }

// meterEvent is handleEvent; sent: the event's bytes were written already
// (sendThenMeter), so it meters them and queues nothing of them.
func (s *stream) meterEvent(now time.Time, sent bool) bool {
	raw := s.ev.Raw
	out := raw // what goes to the client
	if sent {
		out = nil
	}
	if testHookEvent != nil {
		testHookEvent(raw)
	}
	if s.ev.Skipped && !s.ev.HasData && s.ev.Type == nil {
		if s.framer.NDJSON || s.framer.Lean {
			// A piece of an Ollama line, or of a chat, completions or
			// llama.cpp event, over max_event_bytes, read lean as it
			// passes: its last piece has the lean line or data, parsed
			// below (an event with no data line has nothing to parse).
			return s.queue(out)
		}
		if s.ev.SkipFirst && meter.SkippedFailure(raw) {
			// A failure that large (its message, or the failed response it
			// repeats): not parsed, but an error all the same.
			s.noteContentErr(errFailureSkipped)
		}
		s.noteContentErr(errEventSkipped)
		return s.queue(out)
	}
	if !s.rec.Stream && !s.ev.HasData && s.ev.Type == nil && !s.meter.BodyObserved() {
		// Under another type than an event stream (bodyMode), no event
		// yet: an engine that ignored "stream" and answered one JSON body
		// (its bytes, framed as SSE, make an event of no field) is read as
		// the body it is. Anything else is no answer (finishStream).
		s.readAsBody(raw, now)
	}
	if s.ev.HasData || len(s.ev.Type) > 0 {
		if s.ev.HasData && !s.rec.Stream {
			s.rec.Stream = true // an event stream under another type (bodyMode)
		}
		if err := s.parse(); err != nil {
			if s.contentErr == "" { // only the first is kept: build no other message
				s.noteContentErr("malformed stream event: " + err.Error())
			}
		} else {
			if s.info.Error && s.contentErr == "" {
				s.noteContentErr(engineError("error event in stream", s.info.ErrorMessage))
			}
			contentBefore := s.meter.ContentEvents()
			s.meter.Observe(&s.info, now)
			if contentBefore == 0 && s.meter.ContentEvents() == 1 {
				s.rec.LeadEvents = s.meter.TokenEvents() - 1 // the first with content
			}
			if gap, ok := s.meter.SummarisedGap(); ok && s.info.Token && s.p.gapSink != nil {
				s.p.gapSink.Gap(s.rec, gap)
			}
			if s.awaitToken && s.meter.TokenEvents() > 0 {
				s.awaitToken = false // idle applies from now on
				s.markNext = true
			}
			if s.ev.Skipped {
				// The last piece of an event over max_event_bytes, read
				// lean as it passed: its first pieces went out, so it goes
				// too, before what a cut adds (progress: the error event,
				// which would otherwise run on from a half-sent line).
				if !s.queue(out) {
					return false
				}
				out = nil
			}
			if !s.progress() {
				return false
			}
			if s.stripUsage && !s.ev.Skipped {
				// (An event over max_event_bytes passed in pieces: what
				// was sent of it stays whole.)
				if s.info.UsageOnly {
					return true // the client never asked for it: it never sees it
				}
				if !s.info.HasUsage && s.api == meter.APIChat {
					// Chat only: engines that add "usage":null to chat
					// chunks (OpenAI, several simulators) do so only once
					// usage is requested, while vLLM's completions chunks
					// carry "usage":null whether asked or not, so there it
					// is the engine's own byte and stays.
					out = stripNullUsage(out)
				}
			}
		}
	}
	return s.queue(out)
}

// consumeRaw queues bytes of a body that is not framed.
func (s *stream) consumeRaw(p []byte) bool {
	if s.mode == modeJSON && !s.jsonTooBig {
		if len(s.jsonBuf)+len(p) > s.p.cfg.MaxJSONBytes {
			s.jsonTooBig = true
			s.jsonBuf = s.jsonBuf[:0]
		} else {
			s.jsonBuf = append(s.jsonBuf, p...)
		}
	}
	return s.queue(p)
}

func (s *stream) parse() error { return s.parser.Parse(s.api, &s.ev, &s.info) }

// engineError describes an error the engine reported: what (an error
// event, an error in a body) and its message, or that it gave none.
func engineError(what string, msg []byte) string {
	if len(msg) == 0 {
		return what + " (no message)"
	}
	return what + ": " + string(msg)
}

func (s *stream) noteContentErr(msg string) {
	if s.contentErr == "" || s.contentErr == errEventSkipped {
		s.contentErr = msg // a skipped event is the least of errors
	}
}

// headCountsNote ends the message of a non-streamed body too large to
// read: not metered, unless the answer's head gave its counts (TGI's, the
// only head the meter reads: ObserveHead), which the record keeps.
func headCountsNote(prompt, completion int) string {
	switch {
	case prompt != meter.Unknown && completion != meter.Unknown:
		return "not read: its ISL and OSL are the engine's x-prompt-tokens and x-generated-tokens headers"
	case prompt != meter.Unknown:
		return "not read: its ISL is the engine's x-prompt-tokens header, its OSL unknown"
	case completion != meter.Unknown:
		return "not read: its OSL is the engine's x-generated-tokens header, its ISL unknown"
	}
	return "not metered"
}

// finishBody runs once the upstream body ended cleanly, at now, the last
// bytes read at last. It returns false when the client is gone.
func (s *stream) finishBody(now, last time.Time) bool {
	switch s.mode {
	case modeSSE:
		if !s.metering {
			return true
		}
		// Events the server did not terminate with a blank line.
		for {
			ok, err := s.framer.Flush(&s.ev)
			if err != nil {
				return s.tooLarge()
			}
			if !ok {
				break
			}
			if !s.handleEvent(earlyAt(&s.ev, now, last)) {
				return false
			}
		}
		return s.queue(s.framer.Rest())
	case modeJSON:
		// A body that cannot be metered has passed through untouched; the
		// record keeps what is known (status, E2E) and says why.
		switch {
		case s.jsonTooBig:
			s.meter.ObserveBody(nil, now)
			s.metering = false // passed through: not an engine fault
			s.noteContentErr("response body larger than " + strconv.Itoa(s.p.cfg.MaxJSONBytes) + " bytes, the most the gateway reads to meter a non-streamed body; " + headCountsNote(s.meter.Usage()))
		case len(s.jsonBuf) == 0:
			s.meter.ObserveBody(nil, now)
			if st := s.rec.Status; st < 300 && st != fasthttp.StatusNoContent {
				s.noteContentErr("empty response body")
			}
		default:
			if err := meter.ParseResponseBody(s.api, s.jsonBuf, s.meter.ChoicesPerPrompt(), &s.info); err != nil {
				if s.rec.Status < 300 {
					s.noteContentErr("malformed response body: " + err.Error())
				}
				s.meter.ObserveBody(nil, now)
				return true
			}
			s.meter.ObserveBody(&s.info, now)
			ok := s.rec.Status < 300
			switch {
			case ok && s.info.Error:
				// An error in a successful answer's body (a failed
				// response, an Anthropic error object): the engine's
				// fault, as the same error in a stream is.
				s.noteContentErr(engineError("error in the response body", s.info.ErrorMessage))
			case ok && s.info.Pending && s.rec.Background:
				// A background request's acknowledgement: the output
				// comes later, read back on another route; nothing here
				// to judge. Only a request that asked for it, and only a
				// success: a queued status in any other answer hides
				// nothing from the judging.
				s.rec.Deferred = true
			case ok && s.info.ModelOp != meter.ModelOpNone:
				// Ollama's answer to a load or an unload (an empty
				// prompt or messages): the model's load time, not an
				// inference request's.
				s.rec.ModelOp = s.info.ModelOp
			case s.rec.Status == fasthttp.StatusOK && (s.api == meter.APIChat || s.api == meter.APICompletions) &&
				!s.info.Token && !s.info.HasUsage && !s.info.Finish && !s.info.Pending && choicesOrNothing(s.jsonBuf):
				// A chat or completions answer of no choice and no usage
				// ({}, "choices": []): nothing was generated. (llama.cpp's
				// native answer on /completions, whose fields the request
				// picks, names no choices: it is not one.)
				s.noteContentErr(errNoChoices)
			}
		}
	}
	return true
}

// readAsBody reads raw, the bytes of an answer mislabelled as a stream
// that held no event, as a JSON body: metered as one when it is the API's
// answer (choices, usage, or an error it carries).
func (s *stream) readAsBody(raw []byte, now time.Time) {
	b := bytes.TrimSpace(raw)
	if len(b) == 0 || (b[0] != '{' && b[0] != '[') {
		return
	}
	if meter.ParseResponseBody(s.api, b, s.meter.ChoicesPerPrompt(), &s.info) != nil ||
		!(s.info.Token || s.info.HasUsage || s.info.Finish || s.info.Error) {
		return
	}
	s.meter.ObserveBody(&s.info, now)
	if s.info.Error {
		s.noteContentErr(engineError("error in the response body", s.info.ErrorMessage))
	}
}

// choicesOrNothing reports whether a JSON body names "choices", or is an
// object of no member at all ({}): an OpenAI answer, or nothing.
func choicesOrNothing(body []byte) bool {
	b := bytes.TrimSpace(body)
	if len(b) >= 2 && b[0] == '{' && b[len(b)-1] == '}' && len(bytes.TrimSpace(b[1:len(b)-1])) == 0 {
		return true
	}
	return bytes.Contains(b, []byte(`"choices"`))
}

// errNoChoices is the record's error for a chat or completions body, under
// a 200, with no choice, no usage and no finish: no output.
const errNoChoices = "response body has no choices and no usage: no output"

// testHookLagFull, when set by a test, is called each time the reader
// waits for a client that lags too far.
var testHookLagFull func(s *stream)

// queue hands bytes to the writer, waiting while the client lags too far.
//
// The bytes held for the client are bounded by MaxClientLag as memory, not
// only as length: the writer writes one buffer while the reader fills the
// other, so each holds at most half of it (its capacity grown here, never
// past the half), and a buffer that had to hold a larger event is not kept.
// One event larger than the half still passes, alone in its buffer. While
// the clients that lag hold MaxLagMemory in all, one that lags is held to
// lagFloor queued (lagRoom).
func (s *stream) queue(b []byte) bool {
	if len(b) == 0 {
		return true
	}
	half := s.p.cfg.MaxClientLag / 2
	if !s.lagging && s.state.Load() == stateInline && len(s.pending) > 0 && len(s.pending)+len(b) > half {
		// One read held more than the queue takes: what is queued goes
		// out (or to the writer goroutine) first.
		if !s.push() {
			return false
		}
	}
	s.mu.Lock()
	for len(s.pending) > 0 && len(s.pending)+len(b) > s.lagRoom(half) {
		if s.dr.inLoop() {
			// An I/O loop never waits for one stream: every stream on
			// it would wait too. The bytes are queued past the room,
			// onReadable reads no more, and the stream goes back to its
			// goroutine, whose next read waits here for the room. The
			// queue holds at most the rest of one read past it (an I/O
			// loop reads at most loopReadMax at once).
			break
		}
		s.mu.Unlock()
		if testHookLagFull != nil {
			testHookLagFull(s)
		}
		select {
		case <-s.drained:
		case <-s.quit:
			return false
		case <-s.p.cutCtx.Done():
			// The shutdown's cut: the client that lags is not waited for
			// (it would hold the stream past the 5 s serve waits for the
			// cut requests' records). WriteTo then ends the writer's write.
			s.setEnd(endTimeout, errShutdown.Error())
			return false
		}
		s.mu.Lock()
	}
	if len(s.pending) == 0 {
		s.pendingSince = s.readAt
	}
	if s.markNext {
		s.markNext = false
		s.tokenQueued = true
	}
	if cap(s.pending) == 0 {
		s.pending = s.pendLend.borrow()
	}
	if need := len(s.pending) + len(b); need > cap(s.pending) {
		c := max(2*cap(s.pending), minQueueBuf)
		c = max(min(c, half), need)
		grown := make([]byte, len(s.pending), c)
		copy(grown, s.pending)
		s.pending = grown
	}
	s.pending = append(s.pending, b...)
	if s.lagging {
		s.holdLag(len(b))
	}
	s.mu.Unlock()
	if s.lagging || s.state.Load() != stateInline {
		// Someone waits for the bytes: the writer goroutine, or Read.
		// Inline, the reader writes them itself (push) and nobody waits.
		s.signalWriter()
	}
	return true
}

func (s *stream) signalWriter() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// SupportsBodyWriteTo tells fasthttp to call WriteTo, which frames each
// write as one flushed chunk.
func (s *stream) SupportsBodyWriteTo() bool { return true }

// WriteTo writes the response body to the client as it arrives. A nil error
// ends the body cleanly; a non-nil error makes fasthttp drop the connection
// without the terminating chunk, so the client cannot mistake a broken
// stream for a complete one.
//
// It runs on the client connection's goroutine, and reads the upstream
// itself (see the stream's doc): each read's events are written at once
// while the client's socket takes them, and only a client that lags gets
// the writer goroutine.
func (s *stream) WriteTo(w io.Writer) (n int64, err error) {
	// The deadlines are this stream's: a later response on the same
	// keep-alive connection starts without one. fasthttp writes the body's
	// end through its buffered writer: its buffer is back by then.
	defer s.clearWriteDeadline()
	defer s.restoreHeadWriter()
	if !s.state.CompareAndSwap(stateIdle, stateInline) {
		if s.state.Load() == stateGoroutine {
			return s.writeQueued(w) // read through Read already: its reader goes on
		}
		return 0, errClientGone
	}
	reading := false // readBody ran, or runs: it marks the reader done itself
	defer func() {
		if r := recover(); r != nil {
			n, err = s.total, s.containWriteToPanic(r, reading)
		}
	}()
	if testHookWriteTo != nil {
		testHookWriteTo()
	}
	s.w = w
	if headWriterOf(w) != nil {
		// The body is chunked by fasthttp's writer: chunks framed here go
		// straight to the socket after it.
		s.raw = rawConnOf(s.client)
	}
	if s.raw != nil {
		if s.writeFDFn == nil {
			s.writeFDFn = s.writeFD // bound once per pooled stream
		}
	} else {
		s.startWriter() // no direct writes: the writer goroutine writes all
	}
	s.useDirect()
	if s.raw != nil {
		s.holdHead(w)
	}
	reading = true
	s.readBody()
	if !s.lagging {
		s.push() // the last bytes; a failure is the end cause
	}
	if s.lagging {
		s.signalWriter()
		s.waitWriter()
		if s.werr != nil && !s.isAborted() {
			s.flushHead(w) // as below
		}
		return s.total, s.werr
	}
	s.mu.Lock()
	rerr := s.rerr
	s.mu.Unlock()
	if rerr == nil && s.isAborted() {
		rerr = errClientGone // the last write failed
	}
	if rerr != nil && !s.isAborted() {
		// The body failed: what the client was sent so far (the head, and
		// of a body of known length the bytes fasthttp's writer holds)
		// goes out before the connection closes, so the client sees the
		// status the record has and a body cut short, never an empty reply.
		s.flushHead(w)
	}
	return s.total, rerr
}

// push writes what the reader queued to the client, on the reader's
// goroutine, when the client's socket takes it at once; what it does not
// take, and everything after it, goes to the writer goroutine (the client
// lags), so no read waits for the client. It returns false when the client
// is gone.
func (s *stream) push() bool { return s.pushHold(false) }

// pushHold is push; hold: when the client lags, the writer goroutine is not
// started yet (nor the rest of the chunk counted in lagHeld): the caller
// starts it (sendThenMeter, once the metering has said whether the chunk
// held the first token, which the writer goroutine then notes).
func (s *stream) pushHold(hold bool) bool {
	if s.lagging {
		return true // queue woke the writer
	}
	// No writer runs: the reader owns pending (the lock is for form). It
	// is emptied, not swapped with spare, so a stream whose client keeps
	// up holds one small queue buffer, and spare stays unallocated.
	s.mu.Lock()
	out := s.pending
	since := s.pendingSince
	token := s.tokenQueued && !s.tokenWritten
	s.mu.Unlock()
	if len(out) == 0 {
		return true
	}
	if !s.headSent && len(out) > maxHeadChunk && headWriterOf(s.w) != nil {
		// A first read that brought much (an engine far ahead, a pooled
		// stream's grown buffer): the head goes alone, and the bytes as a
		// chunk by the non-blocking write below, so a client slow from
		// its first byte falls back to the writer goroutine instead of
		// holding the reader in a blocking write.
		if err := s.flushBound(headWriterOf(s.w)); err != nil {
			s.writeFailed(err)
			return false
		}
		s.headSent, s.headDue = true, 0
		s.lendHeadWriter()
	}
	if !s.headSent {
		// The first chunk goes with the response head, which fasthttp
		// holds in its buffered writer: one write for both. The socket of
		// a new response is empty and the chunk small (maxHeadChunk), so
		// this write does not wait (its deadline, set only if it does,
		// bounds a client that left earlier responses unread).
		s.ph.Mark(phases.FirstMetered) // from the read that brought them
		n, err := s.writeFirst(out)
		s.total += int64(n)
		if err != nil {
			s.writeFailed(err)
			return false
		}
		s.ph.Mark(phases.FirstWritten)
		s.headSent, s.headDue = true, 0
		s.lendHeadWriter()
		s.emptyPending()
		s.written(token, since)
		return true
	}
	if cap(s.wire) == 0 {
		s.wire = s.wireLend.borrow()
	}
	s.wire = appendChunk(s.wire[:0], out)
	s.emptyPending() // framed in wire
	n, err := s.writeRaw()
	if err != nil && !wouldBlock(err) {
		s.writeFailed(err)
		return false
	}
	if n == len(s.wire) {
		s.total += int64(len(out))
		s.written(token, since)
		return true
	}
	// The client lags: the rest of this chunk, then all that follows, is
	// the writer goroutine's to write.
	s.rawRest = append([]byte(nil), s.wire[n:]...)
	s.rawSince, s.rawToken = since.Sub(s.rec.Start), token
	s.total += int64(len(out))
	if hold {
		return true
	}
	s.holdLag(len(s.rawRest)) // no writer yet: the lock is not needed
	s.startWriter()
	return true
}

// lagFloor is what a client that lags may have queued while the clients
// that lag hold MaxLagMemory in all (lagRoom).
const lagFloor = 16 << 10

// lagRoom is how much a stream may queue for its writer goroutine: half
// of MaxClientLag, or lagFloor while the clients that lag hold
// MaxLagMemory in all. Found by a memory probe: each client that stops
// reading a fast stream held about 0.6 MiB (MaxClientLag is 1 MiB), so
// that max_connections of them (up to 16,384) could hold gigabytes; a
// client asks for fast output (n choices, top_logprobs) as it likes. The
// reader then waits for the writer sooner: the engine's stream waits for
// that client, whose events are stamped when read, as past MaxClientLag.
// s.mu is held.
func (s *stream) lagRoom(half int) int {
	if s.lagging && half > lagFloor && s.p.cfg.MaxLagMemory > 0 && s.p.lagHeld.Load() > s.p.cfg.MaxLagMemory {
		if testHookLagBound != nil {
			testHookLagBound(s)
		}
		return lagFloor
	}
	return half
}

// testHookLagBound, when set by a test, is called when a stream is held to
// lagFloor because the clients that lag hold MaxLagMemory.
var testHookLagBound func(s *stream)

// holdLag counts n bytes queued for the writer goroutine in what clients
// that lag are held (Proxy.lagHeld): every byte a lagging stream queues
// (push emptied the queue before the writer started), and the chunk the
// writer starts with. They are let go once written, or tried (freeLag),
// and those left queued when the stream ends by releaseStream.
func (s *stream) holdLag(n int) { s.p.lagHeld.Add(int64(n)) }

// freeLag lets go of n bytes the writer goroutine of a lagging stream has
// written, or failed to write. The Read path's writer (no writer
// goroutine: s.lagging is false, set only before one starts) counted none.
func (s *stream) freeLag(n int) {
	if s.lagging {
		s.p.lagHeld.Add(-int64(n))
	}
}

// maxHeadChunk is the most the first chunk carries in the response head's
// write, which blocks; a new connection's socket takes it at once.
const maxHeadChunk = 4 << 10

// emptyPending empties the queue after push wrote it (or copied it for the
// writer goroutine).
func (s *stream) emptyPending() {
	s.mu.Lock()
	s.pending = s.pending[:0]
	if cap(s.pending) > s.p.cfg.MaxClientLag/2 {
		s.pending = nil // it held one large event: not kept
	}
	s.mu.Unlock()
}

// appendChunk frames b as one HTTP/1.1 chunk, as fasthttp's chunk writer
// does.
func appendChunk(dst, b []byte) []byte {
	dst = strconv.AppendUint(dst, uint64(len(b)), 16)
	dst = append(dst, "\r\n"...)
	dst = append(dst, b...)
	return append(dst, "\r\n"...)
}

// writeRaw makes one non-blocking write of s.wire to the client's socket:
// it returns what the socket took, and EAGAIN when it took nothing.
func (s *stream) writeRaw() (int, error) {
	s.rawN, s.rawErr = 0, nil
	if err := s.raw.Write(s.writeFDFn); err != nil {
		return 0, err
	}
	return s.rawN, s.rawErr
}

// written notes that bytes read at since reached the client; token: they
// held the first token.
func (s *stream) written(token bool, since time.Time) {
	if token {
		s.tokenReached()
	}
	if d := time.Since(since); d > s.writeDelay {
		s.writeDelay = d
	}
}

// tokenReached notes that the first token reached the client: from now on
// a failed write tells that it left.
func (s *stream) tokenReached() {
	s.tokenWritten = true
	if !s.guard.stop() && !s.lagging && s.state.Load() == stateInline {
		// Written by the reader itself (inline, no writer goroutine), the
		// only goroutine that reads s.guard: the stopped guard and its
		// timer go to the collector now, not when the stream ends.
		s.guard = nil
	}
}

// waitWriter waits for the writer goroutine to end. It writes what is
// queued to a client that lags, for up to the idle timeout per write: the
// shutdown's cut ends that at once, its write in progress by an expired
// deadline, and the writes after it by the check that follows every
// deadline it sets (writerDeadline).
func (s *stream) waitWriter() {
	select {
	case <-s.writerDone:
		return
	case <-s.p.cutCtx.Done():
	}
	if s.client != nil {
		_ = s.client.SetWriteDeadline(aLongTimeAgo)
	}
	if testHookWriterCut != nil {
		testHookWriterCut()
	}
	<-s.writerDone
}

// testHookWriterCut, when set by a test, is called once waitWriter has
// expired the write deadline for the cut; testHookWriterDeadline before
// the writer goroutine sets the deadline of its next write.
var testHookWriterCut, testHookWriterDeadline func()

// writerDeadline sets the deadline of the writer goroutine's next write to
// the client, and reports false once the shutdown's cut has come: the
// write is not made. It looks at the cut after setting the deadline, as
// readers do (upstream.cutAll), so a deadline the cut expired meanwhile
// (waitWriter) is never replaced unseen.
func (s *stream) writerDeadline() bool {
	if testHookWriterDeadline != nil {
		testHookWriterDeadline()
	}
	s.setWriteDeadline()
	return !s.p.up.cut.Load()
}

// startWriter starts the writer goroutine: from now on it writes what the
// reader queues, and the reader waits for it only when the client lags
// MaxClientLag behind.
func (s *stream) startWriter() {
	s.lagging = true
	s.restoreHeadWriter() // the writer goroutine writes through it
	s.twoGoroutines()
	s.writerDone = make(chan struct{})
	go s.writeLoop()
}

func (s *stream) writeLoop() {
	defer close(s.writerDone)
	defer s.containWriterPanic()
	if len(s.rawRest) > 0 {
		err := errShutdown
		if s.writerDeadline() {
			_, err = s.client.Write(s.rawRest)
		}
		s.freeLag(len(s.rawRest))
		s.rawRest = nil
		if err != nil {
			s.writeFailed(err)
			s.werr = err
			return
		}
		s.written(s.rawToken, s.rec.Start.Add(s.rawSince))
	}
	n, err := s.writeQueued(s.w)
	s.total += n
	s.werr = err
}

// writeQueued writes queued bytes to w until the reader is done, as the
// writer goroutine (or for a stream read through Read).
func (s *stream) writeQueued(w io.Writer) (int64, error) {
	var total int64
	for {
		s.mu.Lock()
		out := s.pending
		since := s.pendingSince
		s.pending = s.spare[:0]
		if cap(s.pending) > s.p.cfg.MaxClientLag/2 {
			s.pending = nil // it held one large event: not kept
		}
		s.spare = out
		done, rerr := s.rdone, s.rerr
		token := s.tokenQueued && !s.tokenWritten
		s.mu.Unlock()
		if len(out) > 0 {
			select {
			case s.drained <- struct{}{}:
			default:
			}
			if !s.writerDeadline() {
				s.freeLag(len(out))
				s.writeFailed(errShutdown)
				return total, errShutdown
			}
			if testHookClientWrite != nil {
				testHookClientWrite()
			}
			n, err := w.Write(out)
			s.freeLag(len(out))
			total += int64(n)
			if err != nil {
				s.writeFailed(err)
				return total, err
			}
			s.headSent = true
			s.written(token, since)
			continue
		}
		if done {
			if rerr != nil {
				if total == 0 && s.total == 0 && !s.headSent {
					s.flushHead(w)
				}
				return total, rerr
			}
			return total, nil
		}
		<-s.wake
	}
}

// flushHead sends what fasthttp's writer still buffers of a stream that
// fails: the response head of a stream that fails before its first byte
// (see headflush.go), and the first bytes of a body of known length, which
// fasthttp writes through its buffer. The client gets the status and
// headers, then a body cut short, as when they go out on time.
func (s *stream) flushHead(w io.Writer) {
	bw := headWriterOf(w) // a chunked body
	if bw == nil {
		bw = fixedProbe.writerOf(w) // a body of known length
	}
	if bw != nil && bw.Buffered() > 0 {
		s.setWriteDeadline()
		_ = bw.Flush()
	}
}

// Read is the io.Reader fasthttp requires of a body stream; it is used only
// where fasthttp does not call WriteTo.
func (s *stream) Read(p []byte) (int, error) {
	if s.state.CompareAndSwap(stateIdle, stateGoroutine) {
		s.twoGoroutines()
		go s.readBody()
	}
	for {
		s.mu.Lock()
		if len(s.pending) > 0 {
			n := copy(p, s.pending)
			s.pending = s.pending[:copy(s.pending, s.pending[n:])]
			if s.tokenQueued && !s.tokenWritten && len(s.pending) == 0 {
				// The first token was handed to fasthttp (as WriteTo does).
				s.tokenWritten = true
				s.guard.stop()
			}
			s.mu.Unlock()
			select {
			case s.drained <- struct{}{}:
			default:
			}
			return n, nil
		}
		done, rerr := s.rdone, s.rerr
		s.mu.Unlock()
		if done {
			if rerr != nil {
				return 0, rerr
			}
			return 0, io.EOF
		}
		<-s.wake
	}
}

// setWriteDeadline bounds the next write to the client: a client that
// takes no byte for the idle timeout (nginx's send_timeout) has stopped
// reading, and the total timeout bounds the whole response. Without it a
// client that keeps its connection open but never reads would block the
// writer, then the reader (its queue full), and hold the engine's request.
func (s *stream) setWriteDeadline() {
	if s.client == nil {
		return
	}
	_ = s.client.SetWriteDeadline(s.writeDeadline())
}

// writeDeadline is the deadline setWriteDeadline sets, from now.
func (s *stream) writeDeadline() time.Time {
	dl := time.Now().Add(s.p.cfg.IdleTimeout)
	if !s.deadline.IsZero() && s.deadline.Before(dl) {
		dl = s.deadline
	}
	return dl
}

// writeFirst writes out, a stream's first bytes, through fasthttp's writer,
// which holds the response head: one write for both, under the write
// deadline (boundWrites), which is cleared after it (the direct writes
// that follow never wait).
func (s *stream) writeFirst(out []byte) (int, error) {
	defer s.unboundWrites(s.boundWrites())
	return s.w.Write(out)
}

// flushBound flushes bw, fasthttp's writer holding the response head, as
// writeFirst writes.
func (s *stream) flushBound(bw *bufio.Writer) error {
	defer s.unboundWrites(s.boundWrites())
	return bw.Flush()
}

// boundWrites bounds the writes to the client that follow as
// setWriteDeadline does; on a Listener's connection that writes raw, only
// once one would wait (listenerConn.bind), which it reports (true). End
// it with unboundWrites.
func (s *stream) boundWrites() bool {
	if lc, ok := s.client.(*listenerConn); ok && lc.bind(s) {
		return true
	}
	s.setWriteDeadline()
	return false
}

// unboundWrites ends boundWrites (bound: what it returned): the client's
// write deadline is cleared.
func (s *stream) unboundWrites(bound bool) {
	if bound {
		s.client.(*listenerConn).unbind()
	} else {
		s.clearWriteDeadline()
	}
}

func (s *stream) clearWriteDeadline() {
	if s.client != nil {
		_ = s.client.SetWriteDeadline(time.Time{})
	}
}

// writeFailed ends the stream whose write to the client failed: the
// client left, stopped reading (its write timed out), or the total timeout
// came while it lagged.
//
// A write the shutdown's cut failed (its deadline expired: waitWriter;
// or not made: errShutdown) ends the stream as cut, not as a client that
// stopped reading.
func (s *stream) writeFailed(err error) {
	switch {
	case s.p.up.cut.Load() && (err == errShutdown || isTimeout(err)):
		s.setEnd(endTimeout, errShutdown.Error()) // before abort, which cannot override it
		s.abort("")
	case !isTimeout(err):
		s.abort(msgGoneMidResponse)
	case !s.deadline.IsZero() && !time.Now().Before(s.deadline):
		s.setEnd(endTimeout, errTotalTimeout.Error()) // before abort, which cannot override it
		s.abort("")
	default:
		s.abort("client stopped reading: no byte taken for " + s.p.cfg.IdleTimeout.String())
	}
}

// abort records that the client left and closes the upstream connection so
// the engine stops generating.
func (s *stream) abort(msg string) {
	if msg != "" {
		s.setEnd(endAbort, msg)
	}
	// The first abort closes quit and hangs up. A second, on the other
	// goroutine, returns at once: the stream ends (finishStream) only once
	// both goroutines are done, so after the hang-up.
	if s.aborted.CompareAndSwap(false, true) {
		close(s.quit)
		s.hangUp()
	}
}

// Close is called by fasthttp once the response is written, or abandoned.
// It waits for the reader, settles the outcome and emits the record.
func (s *stream) Close() error {
	if !s.closed.CompareAndSwap(false, true) {
		return nil
	}
	never := s.state.CompareAndSwap(stateIdle, stateClosed) // the body was never read
	s.mu.Lock()
	unwritten := !s.rdone || len(s.pending) > 0
	s.mu.Unlock()
	if unwritten {
		// fasthttp stopped writing before the body ended: the client is
		// gone, unless the end is already known (a write timed out).
		msg := msgGoneMidResponse
		if s.end.Load() != endNone {
			msg = ""
		}
		s.abort(msg)
	}
	if never {
		s.readerDone.Done()
	}
	s.readerDone.Wait()
	s.p.finishStream(s)
	return nil
}
