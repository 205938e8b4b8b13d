package proxy

import (
	"net"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"
)

// A client that asked in HTTP/1.0 cannot read a chunked body (RFC 9112,
// 6.1: a server must not send Transfer-Encoding to it), and fasthttp
// chunks every streamed body whose length is unknown, whatever the
// request's version. So a body of unknown length (an event stream, an
// engine's chunked JSON, a decoded gzip body) goes to such a client as
// HTTP/1.0 delimits it: no length, "Connection: close", and the body ends
// where the connection does. fasthttp writes nothing for the request
// (HijackSetNoResponse); the stream writes the head with its first bytes
// and the body through a plain writer, on the goroutine fasthttp runs the
// hijack on, and the connection is closed after it.
//
// Such a body has no end of its own, so how the connection closes is what
// tells the client whether it got all of it:
//   - A complete body ends with a half-close (FIN after the last byte),
//     then the gateway reads and drops what the client still sends, for up
//     to closeLinger, before it closes: closing a socket with unread input
//     (a pipelined request, the CRLF old clients send after a body) would
//     reset the connection, which is how a broken body ends.
//   - A broken one (the engine, a timeout, the gateway) ends with a reset
//     (SO_LINGER 0), which the client reads as an error, as an HTTP/1.1
//     client reads the missing last chunk. The reset waits until the
//     client has acknowledged what was written (the socket's send queue is
//     empty), for up to the idle timeout, since a reset drops what the
//     queue still holds.
//
// The record does not wait for either: the stream ends first.

// streamUntilClose hands s the client connection of an HTTP/1.0 request
// whose response body has no known length.
func (r *request) streamUntilClose(s *stream) {
	ctx := r.ctx
	h := &ctx.Response.Header
	h.SetContentLength(-1) // drops a length the engine sent for a body that is decoded
	h.Del(fasthttp.HeaderTransferEncoding)
	h.SetContentLength(-2) // no length: the body ends at the close
	// The request counts as in progress for Proxy.Wait until its
	// connection is closed (the hijack's end, or the fallback below), so a
	// shutdown does not exit before a broken body's reset, which would then
	// reach the client as an orderly close.
	r.p.wg.Add(1)
	lc, _ := s.client.(*listenerConn)
	if lc != nil {
		// fasthttp skips the hijack when the connection is closed before
		// it starts it (the drain's last resort closes every connection):
		// then the connection's Close ends the stream.
		lc.hijacked.Store(s)
	}
	ctx.HijackSetNoResponse(true)
	ctx.Hijack(func(net.Conn) {
		if lc != nil && !lc.hijacked.CompareAndSwap(s, nil) {
			return // closed first: its Close ended the stream
		}
		p, client := s.p, s.client
		defer p.wg.Done() // after the close step: see Proxy.Wait
		end := writeUntilClose(s, h)
		p.closing.Add(1) // recorded: from now on Wait waits for the close alone
		defer p.closing.Add(-1)
		if testHookCloseStep != nil {
			testHookCloseStep()
		}
		switch end {
		case bodyWhole:
			lingeringClose(client, time.Now().Add(closeLinger))
		case bodyBroken:
			resetWhenSent(client, time.Now().Add(p.cfg.IdleTimeout), p.cutCtx.Done())
		default: // the client left, or stopped reading: nobody to wait for
			resetOnClose(client)
		}
		// fasthttp closes the connection after this.
	})
}

// testHookCloseStep, when set by a test, runs once a close-delimited
// body's stream is recorded and its connection's close step begins.
var testHookCloseStep func()

// How a close-delimited body ended (writeUntilClose).
const (
	bodyWhole      = iota
	bodyBroken     // the engine, a timeout, the gateway
	bodyClientGone // a write to the client failed or timed out
)

// writeUntilClose writes s's response (head h) to its client and ends the
// stream (its record); it reports how the body ended.
func writeUntilClose(s *stream, h *fasthttp.ResponseHeader) (end int) {
	recorded := false
	defer func() {
		// fasthttp recovers a panic in a body stream's WriteTo (and drops
		// the connection); its hijack goroutine does not, so this does as
		// fasthttp would. After Close, s may serve another request.
		if v := recover(); v != nil {
			end = bodyBroken
			if !recorded {
				s.p.cfg.Logf("proxy: panic while writing the response of request %s: %v\n%s", s.rec.RequestID, v, debug.Stack())
				_ = s.Close()
			}
		}
	}()
	w := &untilClose{c: s.client, head: h.AppendBytes(nil)}
	_, err := s.WriteTo(w)
	if w.head != nil && !s.isAborted() {
		// Nothing of the body was written: the client still gets the
		// status the record has.
		s.setWriteDeadline()
		_, _ = w.c.Write(w.head)
	}
	switch {
	case err == nil:
		end = bodyWhole
	case s.end.Load() == endAbort: // not a panic's or a timeout's abort
		end = bodyClientGone
	default:
		end = bodyBroken
	}
	if w.head != nil && s.isAborted() {
		// The client left before its head was written (it waits for the
		// first bytes here): it was sent no status.
		s.headDue = -1
	}
	recorded = true
	_ = s.Close() // the record; s goes back to its pool
	return end
}

// closeLinger bounds how long a connection whose body ended at its close
// reads what the client still sends (nginx's lingering_close; net/http
// waits 500 ms).
const closeLinger = time.Second

// untilClose writes a close-delimited body to c, the response head with its
// first bytes (one write, as the chunked path sends them).
type untilClose struct {
	c    net.Conn
	head []byte // unsent, or nil once written
}

func (w *untilClose) Write(b []byte) (int, error) {
	if w.head == nil {
		return w.c.Write(b)
	}
	hl := len(w.head)
	n, err := w.c.Write(append(w.head, b...))
	w.head = nil
	if n -= hl; n < 0 {
		n = 0
	}
	return n, err
}

// tcpOf returns the TCP connection under c, or nil.
func tcpOf(c net.Conn) *net.TCPConn {
	if lc, ok := c.(*listenerConn); ok {
		c = lc.Conn
	}
	tc, _ := c.(*net.TCPConn)
	return tc
}

// resetOnClose makes the close of c a reset (SO_LINGER 0) where the
// connection allows it.
func resetOnClose(c net.Conn) {
	if tc := tcpOf(c); tc != nil {
		_ = tc.SetLinger(0)
	}
}

// resetWhenSent waits until the client has acknowledged every byte written
// to c, until the connection is no longer open, until deadline, or until
// cut is closed (the shutdown's cut), then makes c's close a reset.
func resetWhenSent(c net.Conn, deadline time.Time, cut <-chan struct{}) {
	tc := tcpOf(c)
	if tc == nil {
		return
	}
	var t *time.Timer
poll:
	for wait := time.Millisecond; ; wait = min(2*wait, 50*time.Millisecond) {
		if n, ok := unsentBytes(tc); !ok || n == 0 || !time.Now().Before(deadline) {
			break
		}
		if t == nil {
			t = time.NewTimer(wait)
			defer t.Stop()
		} else {
			t.Reset(wait)
		}
		select {
		case <-cut:
			break poll
		case <-t.C:
		}
	}
	_ = tc.SetLinger(0)
}

// lingeringClose half-closes c after what was written, then reads and drops
// what the client sends until it closes its side or deadline passes.
func lingeringClose(c net.Conn, deadline time.Time) {
	drainThenClose(c, deadline, 0, nil)
}

// drainThenClose half-closes c after what was written, then reads and drops
// what the client sends until it closes its side, deadline passes, or (idle
// > 0) nothing came for idle. The caller closes c. The deadline is set once
// when idle is 0; otherwise at each read, and cut (when not nil) is checked
// after each: a shutdown that expired the deadline meanwhile (CutReads) is
// not overwritten unseen.
func drainThenClose(c net.Conn, deadline time.Time, idle time.Duration, cut *atomic.Bool) {
	tc := tcpOf(c)
	if tc == nil || tc.CloseWrite() != nil {
		return
	}
	bp := drainBufs.Get().(*[]byte)
	defer drainBufs.Put(bp)
	if tc.SetReadDeadline(deadline) != nil {
		return
	}
	for {
		if idle > 0 {
			dl := deadline
			if by := time.Now().Add(idle); by.Before(dl) {
				dl = by
			}
			if tc.SetReadDeadline(dl) != nil || (cut != nil && cut.Load()) {
				return
			}
		}
		if _, err := tc.Read(*bp); err != nil {
			return
		}
	}
}

// drainBufs holds the buffers lingering closes read into: an upload over
// the limit may still bring megabytes.
var drainBufs = sync.Pool{New: func() any { b := make([]byte, 16<<10); return &b }}
