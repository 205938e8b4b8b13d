package proxy

import "sync"

// Lent buffers: a stream on the direct read path needs its framer's read
// buffer, its queue for the client and the chunk it frames for the socket
// only while it handles what one read brought. Each time it waits for its
// upstream again (and when it ends) it gives the three back to one pool
// shared by every stream, and takes them again when bytes come. So a
// stream waiting for its next event, most of its life at an inter-token
// gap of tens of milliseconds, holds none of them: the gateway's memory
// for them follows the streams being handled at once (at most a few per
// core), not the streams in flight. A stream whose client lags keeps its
// queue, which its writer goroutine owns; its framed chunk still goes back
// (what the socket did not take of it was copied for the writer).
//
// The pool holds *[]byte; a lentBuf keeps the holder it borrowed with the
// buffer, and gives the buffer back in it, so neither lending nor giving
// back allocates.
var lendPool sync.Pool // *[]byte

// lentBufSize is the size of a new lent buffer: one read's events of a
// stream of small events (a few hundred bytes each); a buffer that grows
// goes back grown.
const lentBufSize = 1 << 10

// maxLentBuf is the largest buffer lent. A stream whose events made its
// buffers grow past it keeps them until it ends (it would otherwise take a
// new one at every read), and they are dropped then, not pooled: a stream
// never gets a buffer that another stream's large events grew, which would
// have it read (and queue, and write) far more at once than it needs.
const maxLentBuf = 4 << 10

// lentBuf is the holder of one buffer borrowed from lendPool.
type lentBuf struct{ h *[]byte }

// borrow returns an empty buffer from the pool, or a new one.
func (l *lentBuf) borrow() []byte {
	if l.h == nil {
		l.h, _ = lendPool.Get().(*[]byte)
		if l.h == nil {
			b := make([]byte, 0, lentBufSize)
			l.h = &b
		}
	}
	b := (*l.h)[:0]
	*l.h = nil
	return b
}

// giveBack returns b, emptied, to the pool; b is at most maxLentBuf.
func (l *lentBuf) giveBack(b []byte) {
	if l.h == nil {
		l.h = new([]byte) // b was not borrowed (a stream's own, or grown)
	}
	if poolCheck {
		poison(b)
	}
	*l.h = b[:0]
	lendPool.Put(l.h)
	l.h = nil
}

// release gives b, empty, back to the pool when it is at most maxLentBuf,
// and returns what the stream keeps of it: nothing, or b itself when it
// grew past maxLentBuf and keepGrown is set (a grown b is otherwise left to
// the collector).
func (l *lentBuf) release(b []byte, keepGrown bool) []byte {
	switch c := cap(b); {
	case c == 0:
		return nil
	case c <= maxLentBuf:
		l.giveBack(b)
		return nil
	case keepGrown:
		return b
	}
	return nil
}
