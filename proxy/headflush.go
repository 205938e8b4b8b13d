package proxy

import (
	"bufio"
	"io"
	"reflect"
	"time"
	"unsafe"

	"github.com/goodput/goodput/internal/peek"
	"github.com/valyala/fasthttp"
)

// A streamed response's head (status line and headers) goes out with its
// first body bytes, in one write, not in a flush of its own before them:
// fasthttp keeps the head in the connection's buffered writer, and the
// first chunk the stream writes flushes both. That saves a write syscall
// and ~10 µs per response on the first-token path.
//
// The head waits for those bytes at most headHold. Engines answer 200 and
// their headers at once and then prefill, and the first token can come
// seconds later: a head held that long turned a client's timeout for the
// response headers (the openai SDK's `timeout` option) into a limit on the
// first token, and a client whose timeout fired sent the prompt again, so
// the engine prefilled it again. Once the hold is over the head goes out
// alone, as nginx forwards it; the stream's read wakes for it as for an
// early deadline (stream.lateDeadline). A client that leaves while the head
// is held was sent no status, and its record says 499.
//
// One case needs the head on its own: a stream that ends in an error
// before it wrote a byte (the engine failed or timed out in prefill). The
// stream's WriteTo then returns the error, and fasthttp closes the
// connection without flushing what it buffered, so the client would get no
// response at all rather than the head and a body cut short. The stream
// flushes the head itself then, through the buffered writer under the
// chunk writer fasthttp passes to WriteTo. fasthttp does not export that
// writer, so headWriterOf finds it by a probe run once: a response is
// written through a known bufio.Writer, and the field of the chunk writer
// that holds exactly that writer is remembered. When the probe finds none
// (another fasthttp), streams flush their head at once, as before
// (Response.ImmediateHeaderFlush): correct, one syscall dearer.
var (
	headProbe  = probeHeadWriter(-1) // the chunk writer of a body of unknown length
	fixedProbe = probeHeadWriter(5)  // the writer of a body of known length
)

type headWriterProbe struct {
	typ reflect.Type // the chunk writer's type, a pointer to a struct
	off uintptr      // the offset of its *bufio.Writer field
	ok  bool
}

// probeBody is a body stream whose WriteTo looks, in the writer it is
// given (while that writer is in use: fasthttp may clear it afterwards),
// for the field that holds bw.
type probeBody struct {
	bw    *bufio.Writer
	probe headWriterProbe
}

func (b *probeBody) Read([]byte) (int, error)  { return 0, io.EOF }
func (b *probeBody) SupportsBodyWriteTo() bool { return true }
func (b *probeBody) WriteTo(w io.Writer) (int64, error) {
	v := reflect.ValueOf(w)
	if v.Kind() != reflect.Pointer || v.IsNil() || v.Elem().Kind() != reflect.Struct {
		return 0, nil
	}
	bwType := reflect.TypeOf(b.bw)
	st := v.Elem().Type()
	for i := 0; i < st.NumField(); i++ {
		f := st.Field(i)
		if f.Type == bwType && *(**bufio.Writer)(unsafe.Add(v.UnsafePointer(), f.Offset)) == b.bw {
			b.probe = headWriterProbe{typ: v.Type(), off: f.Offset, ok: true}
			break
		}
	}
	return 0, nil
}

// probeHeadWriter finds the writer fasthttp hands a body stream's WriteTo
// for a body of size bytes (-1: unknown, chunked), and where in it the
// connection's buffered writer is.
func probeHeadWriter(size int) (p headWriterProbe) {
	defer func() {
		if recover() != nil {
			p = headWriterProbe{}
		}
	}()
	var resp fasthttp.Response
	body := &probeBody{bw: bufio.NewWriter(io.Discard)}
	resp.SetBodyStream(body, size)
	// A body of known length that wrote nothing is an error for fasthttp,
	// after its writer was probed: the probe is all that is wanted here.
	_ = resp.Write(body.bw)
	return body.probe
}

// headWriterOf returns the buffered writer that holds the response head
// under w, the writer fasthttp passes to WriteTo; nil when it cannot.
func headWriterOf(w io.Writer) *bufio.Writer { return headProbe.writerOf(w) }

// writerOf returns the *bufio.Writer under w when w is the probed writer's
// type; nil otherwise.
func (headProbe *headWriterProbe) writerOf(w io.Writer) *bufio.Writer {
	if !headProbe.ok || w == nil || reflect.TypeOf(w) != headProbe.typ {
		return nil
	}
	v := reflect.ValueOf(w)
	if v.IsNil() {
		return nil
	}
	return *(**bufio.Writer)(unsafe.Add(v.UnsafePointer(), headProbe.off))
}

// headHold bounds how long a response head waits for the stream's first
// bytes before it goes out alone (Proxy.headHold; see the top of this
// file). Long enough for a first token that comes at once to share the
// head's write, short next to any client's timeout for the headers.
const headHold = 50 * time.Millisecond

// holdHead notes that w's buffered writer holds the response head, when it
// does, and when it is due: headHold from now, if the stream's read can
// wake for it (direct, or through a reader that asks lateDeadline), else
// with no due time (it goes with the first bytes).
func (s *stream) holdHead(w io.Writer) {
	bw := headWriterOf(w)
	if bw == nil || bw.Buffered() == 0 || s.lagging {
		return
	}
	if !s.direct && (s.conn == nil || !s.conn.lateDeadlines) {
		s.headDue = -1
		return
	}
	s.headDue = int64(time.Since(monoBase) + s.p.headHold)
	if s.headDue <= 0 {
		s.headDue = 1
	}
}

// headWake returns dl, or the held head's due time when it is sooner.
func (s *stream) headWake(dl time.Time) time.Time {
	if s.headDue > 0 {
		if due := monoBase.Add(time.Duration(s.headDue)); due.Before(dl) {
			return due
		}
	}
	return dl
}

// testHookLateDeadline, when set by a test, runs each time a stream's
// read wakes at a deadline armed early (stream.lateDeadline).
var testHookLateDeadline func()

// armedHead reports whether dl, a deadline armed, is the held head's due
// time.
func (s *stream) armedHead(dl time.Time) bool {
	return s.headDue > 0 && dl.Equal(monoBase.Add(time.Duration(s.headDue)))
}

// headGone reports whether the deadline armed is a held head's due time and
// the head has gone out since (with the first bytes): the read's deadline
// can be set to its own at once, sparing the wake-up.
func (s *stream) headGone() bool { return s.headArmed && s.headDue == 0 }

// sendHeadWhenDue sends the held head alone once it is due (now), on the
// reader's goroutine, while the reader writes to the client itself. It
// returns false when the write failed: the client is gone, or stopped
// reading (writeFailed has ended the stream).
func (s *stream) sendHeadWhenDue(now time.Time) bool {
	if s.headDue <= 0 || now.Before(monoBase.Add(time.Duration(s.headDue))) {
		return true
	}
	bw := headWriterOf(s.w)
	if s.headSent || s.lagging || s.state.Load() != stateInline || bw == nil {
		// Not the reader's to write: it goes with the first bytes.
		s.headDue = -1
		if s.headSent {
			s.headDue = 0
		}
		return true
	}
	if eof, e, err := peek.End(s.raw); err == nil && (eof || (e != nil && !wouldBlock(e))) {
		// The client has gone (closed, or reset) while the head was held:
		// a write would still succeed into its socket, and say the status
		// went out when nobody read it.
		s.abort(msgGoneBeforeFirstToken)
		return false
	}
	if err := s.flushBound(bw); err != nil {
		s.writeFailed(err)
		return false
	}
	s.headSent, s.headDue = true, 0
	s.lendHeadWriter()
	return true
}
