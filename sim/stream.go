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
	phHead        // Responses API: response.created and response.in_progress, at once
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

	api          apiKind
	n            int    // completion tokens
	finish       string // finish_reason
	prompt       int    // prompt tokens
	includeUsage bool
	continuous   bool
	fault        fault
	seed         int64

	head    []byte // `data: {"id":…,"choices":[`; for the event APIs, a token event up to its text
	mid     []byte // Responses API: a token event from the end of its text to its sequence number
	resp    respInfo
	msgID   string // Messages API: the message id
	body    []byte // phBody: the whole body
	buf     []byte // the event being written
	pending []byte // Read fallback: what the reader has not taken yet

	ph     phase
	sub    int // the event API's event within a phase of several
	seq    int // Responses API: the next event's sequence_number
	i      int // next token to write (1-based)
	kind   EventKind
	at     time.Time
	tok    int       // pending schedule: st.at is token tok's time, not known yet (0: known)
	cur    int       // the token the event being written carries
	prevAt time.Time // the previous token's due time (ITL)

	finished bool // every token went out (the finish chunk, or the whole body)
	closing  bool // the event being written is the first after the last token
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
			switch st.api {
			case apiChat, apiMessages:
				st.ph = phRole
			case apiResponses:
				st.ph = phHead
			default:
				st.ph = phToken
			}
			if a := st.fault.afterAction(0); a != actNone {
				st.ph = phEnd
				return a
			}
		case phHead:
			// vLLM announces the response before it has any output.
			st.at, st.tok = st.start, 0
			st.frame()
			if st.sub == 0 {
				st.ph = phRole
			}
			return actWrite
		case phRole:
			if st.fault.errorAt == 1 {
				st.ph = phToken
				continue // the error replaces token 1: no role chunk (nor the API's opening events)
			}
			st.due(1)
			if st.api.events() {
				st.frame()
				if st.sub == 0 {
					st.ph = phToken
				}
				return actWrite
			}
			st.ph = phToken
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
				st.errorEvent(i)
				return actWrite
			}
			st.tokenEvent(i)
			return actWrite
		case phFinish:
			st.due(st.n)
			if st.api.events() {
				st.closing = st.sub == 0
				st.frame()
				if st.sub == 0 {
					st.ph = phUsage
				}
				return actWrite
			}
			st.ph = phUsage
			st.finishEvent()
			return actWrite
		case phUsage:
			st.ph = phDone
			if !st.includeUsage {
				continue
			}
			if st.api.events() {
				st.frame()
				st.kind = EventUsage
				return actWrite
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
			switch st.api {
			case apiResponses:
				continue // response.completed ended it
			case apiMessages:
				st.buf = append(appendEventLine(st.buf[:0], "message_stop"), "{\"type\":\"message_stop\"}\n\n"...)
			default:
				st.buf = append(st.buf[:0], doneEvent...)
			}
			return actWrite
		default: // phEnd
			return actEnd
		}
	}
}

// errorEvent prepares the error event that replaces token i, in the API's
// shape, after which the stream ends: vLLM's chat and completions error
// chunk then [DONE]; the Responses API's error event; the Messages API's
// (vLLM's stream converter types it internal_error).
func (st *stream) errorEvent(i int) {
	st.kind = EventError
	msg := "sim: injected error at token " + strconv.Itoa(i)
	switch st.api {
	case apiResponses:
		st.buf = appendResponsesError(st.buf[:0], st.seq, msg)
		st.ph = phEnd
	case apiMessages:
		st.buf = appendAnthropicError(appendEventLine(st.buf[:0], "error"), "internal_error", msg)
		st.buf = append(st.buf, "\n\n"...)
		st.ph = phEnd
	default:
		st.buf = appendStreamError(st.buf[:0], 500, msg)
		st.ph = phDone
	}
}

// tokenEvent prepares the chunk of token i (cut in half when the fault
// says so).
func (st *stream) tokenEvent(i int) {
	st.kind = EventToken
	st.buf = append(st.buf[:0], st.head...)
	switch st.api {
	case apiResponses:
		st.buf = append(st.buf, TokenText(st.seed, i)...)
		st.buf = append(st.buf, st.mid...)
		st.buf = appendSeq(st.buf, st.seq, "response.output_text.delta")
		st.seq++
	case apiMessages:
		st.buf = append(st.buf, TokenText(st.seed, i)...)
		st.buf = append(st.buf, "\"},\"index\":0}\n\n"...)
	case apiChat:
		st.buf = append(st.buf, `{"index":0,"delta":{"content":"`...)
		st.buf = append(st.buf, TokenText(st.seed, i)...)
		st.buf = append(st.buf, `"},"logprobs":null,"finish_reason":null}]`...)
		st.buf = st.appendTail(st.buf, i)
	default:
		st.buf = append(st.buf, `{"index":0,"text":"`...)
		st.buf = append(st.buf, TokenText(st.seed, i)...)
		st.buf = append(st.buf, `","logprobs":null,"finish_reason":null,"stop_reason":null}]`...)
		st.buf = st.appendTail(st.buf, i)
	}
	if st.fault.malformedAt == i {
		st.kind = EventMalformed
		st.buf = append(st.buf[:len(st.buf)/2], "\n\n"...)
	}
}

// finishEvent prepares the chunk that carries finish_reason.
func (st *stream) finishEvent() {
	st.kind = EventFinish
	st.buf = append(st.buf[:0], st.head...)
	if st.api == apiChat {
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
	case st.api != apiChat:
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
	case EventFrame:
		if st.closing {
			st.finished = true
		}
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

// frame prepares the next event of a Responses or Messages API stream that
// carries no output (EventFrame): the events that open the response and
// its output (phHead, phRole), close them (phFinish), and report the
// usage (phUsage). A phase of several events takes them in turn (st.sub);
// st.sub is back to 0 once the phase's last event is prepared.
func (st *stream) frame() {
	st.kind = EventFrame
	b := st.buf[:0]
	last := true
	if st.api == apiMessages {
		switch st.ph {
		case phRole:
			if st.sub == 0 {
				b = appendEventLine(b, "message_start")
				b = append(b, `{"type":"message_start","message":{"id":`...)
				b = appendJSONString(b, st.msgID)
				b = append(b, `,"content":[],"model":`...)
				b = appendJSONString(b, st.s.model)
				b = append(b, `,"stop_reason":null,"stop_sequence":null,"usage":`...)
				b = appendMessagesUsage(b, st.prompt, 0)
				b = append(b, "}}\n\n"...)
				last = false
			} else {
				b = appendEventLine(b, "content_block_start")
				b = append(b, "{\"type\":\"content_block_start\",\"content_block\":{\"type\":\"text\",\"text\":\"\"},\"index\":0}\n\n"...)
			}
		case phFinish:
			b = appendEventLine(b, "content_block_stop")
			b = append(b, "{\"type\":\"content_block_stop\",\"index\":0}\n\n"...)
		default: // phUsage
			b = appendEventLine(b, "message_delta")
			b = append(b, `{"type":"message_delta","delta":{"stop_reason":"`...)
			b = append(b, anthropicStop(st.finish)...)
			b = append(b, `"},"usage":`...)
			b = appendMessagesUsage(b, st.prompt, st.n)
			b = append(b, "}\n\n"...)
		}
	} else {
		r := &st.resp
		var typ string
		switch {
		case st.ph == phHead && st.sub == 0:
			typ, last = "response.created", false
			b = append(appendEventLine(b, typ), `{"response":`...)
			b = r.appendResponse(b, false, st.finish, st.prompt, st.n)
		case st.ph == phHead:
			typ = "response.in_progress"
			b = append(appendEventLine(b, typ), `{"response":`...)
			b = r.appendResponse(b, false, st.finish, st.prompt, st.n)
		case st.ph == phRole && st.sub == 0:
			typ, last = "response.output_item.added", false
			b = append(appendEventLine(b, typ), `{"item":`...)
			b = r.appendItem(b, "in_progress", 0)
			b = append(b, `,"output_index":0`...)
		case st.ph == phRole:
			typ = "response.content_part.added"
			b = st.appendPartEvent(appendEventLine(b, typ), 0)
		case st.ph == phFinish && st.sub == 0:
			typ, last = "response.output_text.done", false
			b = append(appendEventLine(b, typ), `{"content_index":0,"item_id":`...)
			b = appendJSONString(b, r.itemID)
			b = append(b, `,"logprobs":[],"output_index":0,"text":"`...)
			b = appendText(b, st.seed, st.n)
			b = append(b, '"')
		case st.ph == phFinish && st.sub == 1:
			typ, last = "response.content_part.done", false
			b = st.appendPartEvent(appendEventLine(b, typ), st.n)
		case st.ph == phFinish:
			typ = "response.output_item.done"
			b = append(appendEventLine(b, typ), `{"item":`...)
			b = r.appendItem(b, "completed", st.n)
			b = append(b, `,"output_index":0`...)
		default: // phUsage
			typ = "response.completed"
			b = append(appendEventLine(b, typ), `{"response":`...)
			b = r.appendResponse(b, true, st.finish, st.prompt, st.n)
		}
		b = appendSeq(b, st.seq, typ)
		st.seq++
	}
	st.buf = b
	if last {
		st.sub = 0
	} else {
		st.sub++
	}
}

// appendPartEvent appends the body of a content_part event of the
// Responses API up to its sequence number, its part holding n tokens.
func (st *stream) appendPartEvent(b []byte, n int) []byte {
	b = append(b, `{"content_index":0,"item_id":`...)
	b = appendJSONString(b, st.resp.itemID)
	b = append(b, `,"output_index":0,"part":`...)
	return st.resp.appendPart(b, n)
}
