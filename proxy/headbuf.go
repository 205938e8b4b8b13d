package proxy

import (
	"bufio"
	"sync"
)

// The client connection's write buffer is lent while a stream goes on.
// fasthttp writes a response through a buffered writer of its own
// (WriteBufferSize, 1 KiB), which it holds until the body ends. A stream
// uses it for the response head and its first chunk only: every later
// chunk goes to the socket by the non-blocking write, and fasthttp writes
// nothing until WriteTo returns. So once the head and the first chunk are
// out (the writer holds nothing), its buffer goes to bwPool, and it is
// given a buffer again before anything writes through it: when a lagging
// client's writer goroutine takes over, and when WriteTo returns (fasthttp
// then writes the body's end). A stream in flight then holds no write
// buffer; the pool holds the ones lent and not yet taken back, and the
// collector empties it.
//
// bwPool holds *bufio.Writer values with a buffer and no destination. A
// writer's buffer moves with its struct (a bufio.Writer is copied whole,
// which the bufio package allows): a stream swaps fasthttp's writer with
// an empty one it keeps (stream.bwHold), so neither lending nor taking
// back allocates once the pool and the holders are warm.
var bwPool sync.Pool

// clientWriteBuf is the client connection's write buffer size
// (fasthttp's WriteBufferSize, set by Server): the one size lent.
const clientWriteBuf = 1 << 10

// lendHeadWriter lends the buffer of fasthttp's writer under s.w, when
// there is one, it holds no byte and it is not lent already.
func (s *stream) lendHeadWriter() {
	bw := headWriterOf(s.w)
	if bw == nil || s.lentBW != nil || bw.Buffered() != 0 || bw.Size() != clientWriteBuf {
		return
	}
	h := s.bwHold
	if h == nil {
		h = new(bufio.Writer)
	}
	s.bwHold = nil
	*h, *bw = *bw, bufio.Writer{}
	h.Reset(nil) // the pool does not keep the client's connection
	if poolCheck {
		poison(h.AvailableBuffer())
	}
	bwPool.Put(h)
	s.lentBW = bw
}

// restoreHeadWriter gives fasthttp's writer a buffer of its size,
// writing to the client's connection, when its own was lent.
func (s *stream) restoreHeadWriter() {
	bw := s.lentBW
	if bw == nil {
		return
	}
	s.lentBW = nil
	h, _ := bwPool.Get().(*bufio.Writer)
	if h == nil {
		h = bufio.NewWriterSize(nil, clientWriteBuf)
	}
	h.Reset(s.client)
	*bw, *h = *h, bufio.Writer{}
	s.bwHold = h
}
