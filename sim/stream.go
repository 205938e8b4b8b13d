package sim

import (
	"errors"
	"io"
	"net"
	"strconv"
	"time"
)

// pollInterval is how often a waiting or stalled response checks whether
// its client went away, when the connection allows checking.
const pollInterval = 50 * time.Millisecond

var (
	errShutdown     = errors.New("sim: server shut down")
	errClientGone   = errors.New("sim: client went away")
	errReset        = errors.New("sim: connection reset (X-Sim-Fault reset-after)")
	errClosed       = errors.New("sim: connection closed (X-Sim-Fault close-after)")
	errStallTimeout = errors.New("sim: stall reached Config.MaxStall")
	errTracingOff   = errors.New("sim: tracing is off (Config.MaxTraces < 0)")
)

// action is the next thing a response must do.
type action uint8

const (
	actNone  action = iota
	actWrite        // write st.out() at st.at
	actEnd          // the response is complete
	actReset        // fault: close the connection with RST
	actClose        // fault: close the connection with FIN
	actStall        // fault: stop writing, keep the connection open
)

type phase uint8

const (
	phStart phase = iota
	phRole
	phToken
	phFinish
	phUsage
	phDone
	phEnd
	phBody // non-streaming: one body
)

// stream writes one generation response. fasthttp calls WriteTo on the
// connection's goroutine (it implements fasthttp.BodyWriterTo), and each
// Write there becomes one HTTP chunk flushed to the socket, so the time
// taken after a Write is the flush time. Read is a fallback for servers
// that read the body instead.
type stream struct {
	s     *Server
	rec   *traceRec
	conn  net.Conn
	poll  func() bool // reports the client gone; nil if unavailable
	sched Schedule
	pend  pendingSchedule // sched, when its token times come as an engine runs
	timer *time.Timer
	start time.Time // when the request had been read

	chat         bool
	n            int    // completion tokens
	finish       string // finish_reason
	prompt       int    // prompt tokens
	includeUsage bool
	continuous   bool
	fault        fault
	seed         int64

	head    []byte // `data: {"id":…,"choices":[`
	body    []byte // phBody: the whole body
	buf     []byte // the event being written
	pending []byte // Read fallback: what the reader has not taken yet

	ph     phase
	i      int // next token to write (1-based)
	kind   EventKind
	at     time.Time
	tok    int       // pending schedule: st.at is token tok's time, not known yet (0: known)
	cur    int       // the token the event being written carries
	prevAt time.Time // the previous token's due time (ITL)

	finished bool // every token went out (the finish chunk, or the whole body)
	counted  bool // the request's ending is in the metrics

	started bool
	closed  bool
}

// SupportsBodyWriteTo tells fasthttp to call WriteTo rather than Read.
func (st *stream) SupportsBodyWriteTo() bool { return true }

// WriteTo writes the response event by event, each at its deadline.
func (st *stream) WriteTo(w io.Writer) (int64, error) {
	st.begin()
	var total int64
	for {
		switch a := st.next(); a {
		case actWrite:
			if err := st.waitDue(); err != nil {
				return total, err
			}
			n, err := w.Write(st.out())
			now := time.Now()
			total += int64(n)
			if err != nil {
				if st.s.closing() {
					st.rec.end(now, EndShutdown, false)
				} else {
					st.rec.end(now, EndClientGone, true)
				}
				return total, err
			}
			st.rec.event(now, st.kind)
			st.observe()
		case actEnd:
			st.rec.end(time.Now(), EndComplete, false)
			st.complete()
			return total, nil
		default:
			return total, st.fireAt(a)
		}
	}
}

// Read is the io.Reader fallback: it returns the same bytes at the same
// times, but the trace then records when an event was handed to the reader,
// not when it was flushed.
func (st *stream) Read(p []byte) (int, error) {
	st.begin()
	for len(st.pending) == 0 {
		switch a := st.next(); a {
		case actWrite:
			if err := st.waitDue(); err != nil {
				return 0, err
			}
			st.pending = st.out()
			st.rec.event(time.Now(), st.kind)
			st.observe()
		case actEnd:
			st.rec.end(time.Now(), EndComplete, false)
			st.complete()
			return 0, io.EOF
		default:
			return 0, st.fireAt(a)
		}
	}
	n := copy(p, st.pending)
	st.pending = st.pending[n:]
	return n, nil
}

// Close ends the response's life: fasthttp calls it once the body was
// written, or dropped.
func (st *stream) Close() error {
	if st.closed {
		return nil
	}
	st.closed = true
	st.rec.end(time.Now(), EndAborted, false) // no-op if it ended already
	st.timer.Stop()
	if !st.counted && !st.s.closing() {
		st.counted = true
		st.s.stats.success[finishAbort].Inc()
	}
	st.sched.Release()
	st.s.unregister(st)
	return nil
}

func (st *stream) begin() {
	if !st.started {
		st.started = true
		st.rec.headers(time.Now())
	}
}

func (st *stream) out() []byte {
	if st.kind == EventBody {
		return st.body
	}
	return st.buf
}

// next advances the state machine and prepares the next event in st.buf.
func (st *stream) next() action {
	for {
		switch st.ph {
		case phBody:
			st.ph = phEnd
			st.due(st.n)
			if st.fault.after >= 0 {
				return st.fault.afterAct // fired at st.at, see fireAt
			}
			st.kind = EventBody
			return actWrite
		case phStart:
			st.i = 1
			st.ph = phToken
			if st.chat {
				st.ph = phRole
			}
			if a := st.fault.afterAction(0); a != actNone {
				st.ph = phEnd
				return a
			}
		case phRole:
			st.ph = phToken
			if st.fault.errorAt == 1 {
				continue // the error replaces token 1: no role chunk
			}
			st.due(1)
			st.kind = EventRole
			st.buf = append(st.buf[:0], st.head...)
			st.buf = append(st.buf, `{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]`...)
			st.buf = st.appendTail(st.buf, 0)
			return actWrite
		case phToken:
			if st.i > 1 {
				if a := st.fault.afterAction(st.i - 1); a != actNone {
					st.ph = phEnd
					return a
				}
			}
			if st.i > st.n {
				st.ph = phFinish
				continue
			}
			i := st.i
			st.i++
			st.due(i)
			st.cur = i
			if st.fault.errorAt == i {
				st.kind = EventError
				st.buf = appendStreamError(st.buf[:0], 500, "sim: injected error at token "+strconv.Itoa(i))
				st.ph = phDone
				return actWrite
			}
			st.tokenEvent(i)
			return actWrite
		case phFinish:
			st.ph = phUsage
			st.due(st.n)
			st.finishEvent()
			return actWrite
		case phUsage:
			st.ph = phDone
			if !st.includeUsage {
				continue
			}
			st.kind = EventUsage
			st.buf = append(st.buf[:0], st.head...)
			st.buf = append(st.buf, `],"usage":`...)
			st.buf = appendUsage(st.buf, st.prompt, st.n)
			st.buf = append(st.buf, "}\n\n"...)
			return actWrite
		case phDone:
			st.ph = phEnd
			st.kind = EventDone
			st.buf = append(st.buf[:0], doneEvent...)
			return actWrite
		default: // phEnd
			return actEnd
		}
	}
}

// tokenEvent prepares the chunk of token i (cut in half when the fault
// says so).
func (st *stream) tokenEvent(i int) {
	st.kind = EventToken
	st.buf = append(st.buf[:0], st.head...)
	if st.chat {
		st.buf = append(st.buf, `{"index":0,"delta":{"content":"`...)
		st.buf = append(st.buf, TokenText(st.seed, i)...)
		st.buf = append(st.buf, `"},"logprobs":null,"finish_reason":null}]`...)
	} else {
		st.buf = append(st.buf, `{"index":0,"text":"`...)
		st.buf = append(st.buf, TokenText(st.seed, i)...)
		st.buf = append(st.buf, `","logprobs":null,"finish_reason":null,"stop_reason":null}]`...)
	}
	st.buf = st.appendTail(st.buf, i)
	if st.fault.malformedAt == i {
		st.kind = EventMalformed
		st.buf = append(st.buf[:len(st.buf)/2], "\n\n"...)
	}
}

// finishEvent prepares the chunk that carries finish_reason.
func (st *stream) finishEvent() {
	st.kind = EventFinish
	st.buf = append(st.buf[:0], st.head...)
	if st.chat {
		st.buf = append(st.buf, `{"index":0,"delta":{},"logprobs":null,"finish_reason":"`...)
	} else {
		st.buf = append(st.buf, `{"index":0,"text":"","logprobs":null,"finish_reason":"`...)
	}
	st.buf = append(st.buf, st.finish...)
	st.buf = append(st.buf, `","stop_reason":null}]`...)
	st.buf = st.appendTail(st.buf, st.n)
}

// appendTail closes a chunk whose choices array was just closed, after k
// completion tokens: the usage field as vLLM writes it, then "}\n\n".
func (st *stream) appendTail(dst []byte, k int) []byte {
	switch {
	case st.continuous:
		dst = append(dst, `,"usage":`...)
		dst = appendUsage(dst, st.prompt, k)
	case !st.chat:
		// vLLM's completions stream always carries "usage":null; its chat
		// stream leaves the key out (exclude_unset), asked for or not.
		dst = append(dst, `,"usage":null`...)
	}
	return append(dst, "}\n\n"...)
}

// sleep waits d, or until shutdown (then it records the ending and returns
// false).
func (st *stream) sleep(d time.Duration) bool {
	st.timer.Reset(d)
	select {
	case <-st.timer.C:
		return true
	case <-st.s.quit:
		st.timer.Stop()
		st.rec.end(time.Now(), EndShutdown, false)
		return false
	}
}

// waitUntil sleeps until the absolute deadline t. Long waits are cut into
// pollInterval slices to notice a client that went away. After Shutdown it
// fails at once, even when t has passed.
func (st *stream) waitUntil(t time.Time) error {
	for {
		d := time.Until(t)
		if d <= 0 {
			if st.s.closing() {
				st.rec.end(time.Now(), EndShutdown, false)
				return errShutdown
			}
			return nil
		}
		poll := st.poll != nil && d > pollInterval
		if poll {
			d = pollInterval
		}
		if !st.sleep(d) {
			return errShutdown
		}
		if poll && st.poll() {
			st.rec.end(time.Now(), EndClientGone, true)
			return errClientGone
		}
	}
}

// due makes token i's time the next deadline, st.at: at once from a plain
// Schedule, in waitDue from a pending one.
func (st *stream) due(i int) {
	if st.pend != nil {
		st.tok = i
		return
	}
	st.at = st.sched.TokenTime(i)
}

// waitDue waits for the next deadline to be known (a pending schedule) and
// then until it.
func (st *stream) waitDue() error {
	if st.tok > 0 {
		if err := st.await(); err != nil {
			return err
		}
	}
	return st.waitUntil(st.at)
}

// await waits until the pending schedule knows token st.tok's time and puts
// it in st.at, checking meanwhile for shutdown and, every pollInterval, for
// a client that went away.
func (st *stream) await() error {
	for {
		t, ok, wake := st.pend.tokenReady(st.tok)
		if ok {
			st.at, st.tok = t, 0
			return nil
		}
		var tick <-chan time.Time
		if st.poll != nil {
			st.timer.Reset(pollInterval)
			tick = st.timer.C
		}
		select {
		case <-wake:
			st.timer.Stop()
		case <-st.s.quit:
			st.timer.Stop()
			st.rec.end(time.Now(), EndShutdown, false)
			return errShutdown
		case <-tick:
			if st.poll() {
				st.rec.end(time.Now(), EndClientGone, true)
				return errClientGone
			}
		}
	}
}

// observe puts the event just written in the metrics.
func (st *stream) observe() {
	m := st.s.stats
	switch st.kind {
	case EventToken, EventMalformed:
		if st.cur == 1 {
			m.ttft.Observe(st.at.Sub(st.start).Seconds())
			m.promptTokens.Add(float64(st.prompt))
		} else {
			m.itl.Observe(st.at.Sub(st.prevAt).Seconds())
		}
		st.prevAt = st.at
		m.genTokens.Inc()
	case EventFinish:
		st.finished = true
	case EventBody:
		if st.fault.errorAt >= 0 {
			return
		}
		st.finished = true
		if o, ok := st.sched.(tokenObserver); ok {
			o.observeTokens(st.start, m)
		}
		m.promptTokens.Add(float64(st.prompt))
		m.genTokens.Add(float64(st.n))
	}
}

// complete counts a response that ended normally: a success when every
// token went out (not an error-at fault), with its latencies.
func (st *stream) complete() {
	if !st.finished || st.counted {
		return
	}
	st.counted = true
	m := st.s.stats
	reason := finishLength
	if st.finish == "stop" {
		reason = finishStop
	}
	m.success[reason].Inc()
	m.e2e.Observe(st.at.Sub(st.start).Seconds())
	var q time.Duration
	if qt, ok := st.sched.(queueTimer); ok {
		q = qt.queueTime()
	}
	m.queue.Observe(q.Seconds())
}

// fireAt carries out a connection fault once st.at has come: at once in a
// stream (st.at is the last token's time, or zero), when the body was due
// for a non-streaming response.
func (st *stream) fireAt(a action) error {
	if err := st.waitDue(); err != nil {
		return err
	}
	return st.fire(a)
}

// fire carries out a connection fault.
func (st *stream) fire(a action) error {
	switch a {
	case actReset:
		st.rec.end(time.Now(), EndReset, false)
		connDo(st.conn, func(c net.Conn) {
			if l, ok := c.(interface{ SetLinger(int) error }); ok {
				_ = l.SetLinger(0) // Close sends RST
			}
			_ = c.Close()
		})
		return errReset
	case actClose:
		st.rec.end(time.Now(), EndClosed, false)
		connDo(st.conn, func(c net.Conn) { _ = c.Close() })
		return errClosed
	default: // actStall
		return st.stall()
	}
}

// stall keeps the connection open without writing until the client goes
// away, the server shuts down or Config.MaxStall passes.
func (st *stream) stall() error {
	limit := time.Now().Add(st.s.maxStall)
	for {
		d := time.Until(limit)
		if d <= 0 {
			st.rec.end(time.Now(), EndStallTimeout, false)
			connDo(st.conn, func(c net.Conn) { _ = c.Close() })
			return errStallTimeout
		}
		if st.poll != nil && d > pollInterval {
			d = pollInterval
		}
		if !st.sleep(d) {
			return errShutdown
		}
		if st.poll != nil && st.poll() {
			st.rec.end(time.Now(), EndClientGone, true)
			return errClientGone
		}
	}
}

// connDo runs f on c unless c is nil, tolerating a connection that panics
// when used: fasthttp's RequestCtx.Init gives handlers such a fake one.
// Without a usable connection a fault falls back to returning an error,
// which makes fasthttp close the connection itself.
func connDo(c net.Conn, f func(net.Conn)) {
	if c == nil {
		return
	}
	defer func() { _ = recover() }()
	f(c)
}
