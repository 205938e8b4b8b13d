package proxy

import (
	"net"
	"runtime/debug"

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
// Such a body has no end of its own, so a client cannot tell a stream cut
// short from a complete one by its bytes. A stream that fails (the engine,
// a timeout, the gateway) therefore ends with a reset instead of an
// orderly close, which the client reads as an error, as an HTTP/1.1 client
// reads the missing last chunk.

// streamUntilClose hands s the client connection of an HTTP/1.0 request
// whose response body has no known length.
func (r *request) streamUntilClose(s *stream) {
	ctx := r.ctx
	h := &ctx.Response.Header
	h.SetContentLength(-1) // drops a length the engine sent for a body that is decoded
	h.Del(fasthttp.HeaderTransferEncoding)
	h.SetContentLength(-2) // no length: the body ends at the close
	ctx.HijackSetNoResponse(true)
	ctx.Hijack(func(net.Conn) {
		defer func() {
			// fasthttp recovers a panic in a body stream's WriteTo (and
			// drops the connection); its hijack goroutine does not, so
			// this does as fasthttp would.
			if v := recover(); v != nil {
				s.p.cfg.Logf("proxy: panic while writing the response of request %s: %v\n%s", s.rec.RequestID, v, debug.Stack())
				resetOnClose(s.client)
				_ = s.Close()
			}
		}()
		w := &untilClose{c: s.client, head: h.AppendBytes(nil)}
		_, err := s.WriteTo(w)
		if w.head != nil && !s.isAborted() {
			// Nothing of the body was written: the client still gets
			// the status the record has.
			s.setWriteDeadline()
			_, _ = w.c.Write(w.head)
		}
		if err != nil {
			resetOnClose(s.client)
		}
		_ = s.Close() // the record; fasthttp closes the connection after this
	})
}

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

// resetOnClose makes the close of c a reset (SO_LINGER 0) where the
// connection allows it.
func resetOnClose(c net.Conn) {
	if lc, ok := c.(*listenerConn); ok {
		c = lc.Conn
	}
	if l, ok := c.(interface{ SetLinger(int) error }); ok {
		_ = l.SetLinger(0)
	}
}

// http11 is the version the gateway speaks to the engine.
var http11 = []byte("HTTP/1.1")
