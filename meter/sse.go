package meter

import (
	"bytes"
	"errors"
	"io"
)

// DefaultMaxEventSize is the largest event a framer accepts when its
// MaxEventSize is zero: 1 MiB, far above any chat or completions chunk
// (the largest seen in the recorded streams is about 2 KiB).
const DefaultMaxEventSize = 1 << 20

// ErrEventTooLarge is returned by a framer's Next (and Flush) when an event,
// counting every byte of it including its line endings, is longer than the
// framer's maximum. The error is sticky: see SSEFramer.Next.
var ErrEventTooLarge = errors.New("meter: event larger than the maximum event size")

// Event is one complete framed unit of a response stream. Its slices point
// into the framer's buffers: they are valid until the next call to the
// framer's Feed, FillFrom or Reset, and must not be modified.
type Event struct {
	// Raw holds the exact bytes of the event, including the blank line that
	// ended it (SSE) or the newline (NDJSON). Blank lines that came before the
	// event's first line are part of its Raw too, so that the Raw of every
	// event plus Rest() at the end reproduces the input byte for byte.
	Raw []byte
	// Data holds the values of the event's data lines joined with "\n"
	// (WHATWG); for NDJSON, the line without its line ending.
	Data []byte
	// Type is the value of the last `event:` line, or "error" when the
	// last such line was an `error:` line (llama.cpp's streamed error, see
	// SSEFramer); nil when there is none.
	Type []byte
	// ID is the value of the last `id:` line of this event (an id value
	// containing NUL is ignored, as WHATWG says); nil when there is none. It
	// is not the stream's persistent last-event-ID.
	ID []byte
	// HasData is true when the event had at least one data line (even an
	// empty one). A comment-only block, or one with only event:, id: or
	// retry: lines, is still an event, with HasData false.
	HasData bool
	// Unterminated is true for an event returned by Flush from bytes that the
	// stream ended without terminating (no blank line, or no final newline).
	Unterminated bool
	// Early is true for an event whose blank line ended with a "\r" that was
	// the last byte fed: it was complete then (WHATWG), but is returned only
	// once the next byte came (or Flush), since a "\n" after the "\r"
	// belongs to it. Its bytes were read by the Feed (or FillFrom) before
	// the one after which it is returned: its time is that read's.
	Early bool
	// Skipped marks a piece of an event longer than the framer's maximum,
	// returned unparsed as its bytes came in (SSEFramer.SkipLarge): Raw only,
	// no Data, Type or ID. The event's last piece holds its blank line. In
	// NDJSON mode a line's last piece has Data: the line read lean
	// (ndjson.go); with SSEFramer.Lean an event's last piece has the lean
	// reading of its data lines as Data (HasData when it had one) and Type
	// "error" when its event: line said so (sselean.go).
	Skipped bool
	// SkipFirst marks the first piece of such an event: it holds the
	// event's first lines, its `event:` line and the start of its data
	// (SkippedFailure reads them).
	SkipFirst bool
}

// Framer is what a framer does (SSEFramer, in its SSE and NDJSON modes).
type Framer interface {
	Reset()
	Feed(p []byte)
	FillFrom(r io.Reader) (int, error)
	Next(ev *Event) (bool, error)
	Flush(ev *Event) (bool, error)
	Rest() []byte
}

var _ Framer = (*SSEFramer)(nil)

const (
	// FillFrom starts with a 1 KiB buffer (a chat chunk is a few hundred
	// bytes, and a read takes what the upstream connection's own buffer
	// holds, so a smaller buffer costs no system call) and grows it only
	// when less than 512 bytes are free, so a stream in flight holds
	// little memory (many are in flight at once).
	initialReadSpace = 1 << 10
	minReadSpace     = 512
	retainLimit      = 256 << 10 // Reset drops buffers that grew beyond this
)

// streamBuf is the framer's byte buffer, in both its modes: bytes fed and not yet
// returned as events live in b[start:].
type streamBuf struct {
	b        []byte
	start    int   // first byte not yet returned in an event's Raw
	probe    int   // where the search for the next line end resumes
	consumed int64 // stream offset of b[start]
	err      error // sticky ErrEventTooLarge
	eof      bool  // Flush was called: the input has ended

	// The lean reading of an event over the maximum, in eof's padding:
	// of its JSON text (an NDJSON line, ndjson.go; an event's data,
	// sselean.go), and of the event's lines (SSE).
	lean leanLine
	sse  sseLean
}

func (s *streamBuf) reset() {
	if cap(s.b) > retainLimit {
		s.b = nil
	}
	*s = streamBuf{b: s.b[:0]}
}

// compact moves the pending bytes to the front of the buffer and returns how
// far indexes moved.
func (s *streamBuf) compact() int {
	d := s.start
	if d == 0 {
		return 0
	}
	n := copy(s.b, s.b[d:])
	s.b = s.b[:n]
	s.start = 0
	s.probe -= d
	return d
}

func (s *streamBuf) stopped() bool { return s.err != nil || s.eof }

// errFlushed is returned by FillFrom after Flush.
var errFlushed = errors.New("meter: FillFrom after Flush")

func (s *streamBuf) fillFrom(r io.Reader) (int, error) {
	if s.err != nil {
		return 0, s.err
	}
	if s.eof {
		return 0, errFlushed
	}
	if cap(s.b)-len(s.b) < minReadSpace {
		nb := make([]byte, len(s.b), 2*cap(s.b)+initialReadSpace)
		copy(nb, s.b)
		s.b = nb
	}
	n, err := r.Read(s.b[len(s.b):cap(s.b)])
	if n < 0 {
		n = 0
	}
	s.b = s.b[:len(s.b)+n]
	return n, err
}

// limit returns the effective maximum event size (0: none).
func limit(configured int) int {
	switch {
	case configured == 0:
		return DefaultMaxEventSize
	case configured < 0:
		return 0
	}
	return configured
}

// utf8BOM is stripped from the start of a stream before parsing (WHATWG);
// it stays in Raw.
var utf8BOM = []byte{0xEF, 0xBB, 0xBF}

// SSEFramer splits a text/event-stream body into events, following the
// WHATWG event-stream rules (docs/MEASURES.md, Events): an event ends at a
// blank line; lines end with "\n", "\r\n" or "\r"; `data:` with or without
// one following space; `event:`, `id:`, `retry:` and `:` comment lines.
//
// One field WHATWG does not know is read: `error:`, which llama.cpp's
// server wrote its streamed error in (`error: {"code":500,"message":...}`,
// its server_sent_event(sink, "error", ...), until its pull request #16109
// sent the error as `data: {"error":...}`), and which WHATWG's rules drop
// (the event has no data then, and the engine's message is lost). An
// `error:` line is read as llama.cpp means it: as a data line (its value
// joins the event's data) and as an `event: error` line (the event's Type
// is "error", unless a later `event:` line names another).
//
// The caller feeds the bytes it reads from upstream and then calls Next until
// it returns false; a partial event is carried over to the next Feed. The
// result never depends on how the input was split into feeds, with one
// consequence worth knowing: when the blank line that ends an event is
// terminated by a "\r" that is the last byte read so far, the event is held
// until the next byte (or Flush) shows whether a "\n" follows, because that
// "\n" belongs to the event's Raw. CRLF streams are only affected when a read
// ends exactly between that "\r" and its "\n"; only CR-only streams, which no
// known server sends, would see every event held back by one read.
//
// At the end of the input, call Flush until it returns false, then forward
// Rest(). Flush deliberately differs from WHATWG, which discards an
// unterminated last event: a server that ends the stream without the final
// blank line still sent its last event (it may carry the usage or the
// [DONE] marker), so Flush returns it with Unterminated set; if the stream
// was cut in the middle of a JSON payload, the parser reports it as
// malformed.
//
// The zero value is ready to use. An SSEFramer is not safe for concurrent
// use.
type SSEFramer struct {
	// MaxEventSize bounds the length of one event's Raw, line endings and
	// leading blank lines included. Zero means DefaultMaxEventSize; a
	// negative value means no limit.
	MaxEventSize int

	s        streamBuf
	line     int  // start of the line being scanned (index into s.b)
	hasLine  bool // the pending event has a non-blank line before f.line
	skipLF   bool // the previous line ended with a "\r" at the end of the input: a "\n" next belongs to it
	skipping bool // SkipLarge: a piece of the pending event has been returned
	midLine  bool // a returned piece ended inside the line at f.line, which is so not blank
	crHeld   bool // the pending event's blank line ended with a "\r", the last byte fed then: it is Early
	// SkipLarge: an event longer than MaxEventSize is not an error; it is
	// returned in pieces, unparsed, as its bytes come in (Event.Skipped),
	// holding no more of it than one read brings, and the events after it
	// are framed as if it had not been there. (With the flags above, so
	// that a stream, which embeds a framer, keeps its size class.)
	SkipLarge bool
	// NDJSON: the body is newline-delimited JSON (Ollama's native API), one
	// event a line (ndjson.go), not an event stream. Kept by Reset.
	NDJSON bool
	// Lean: with SkipLarge, an event over MaxEventSize still passes in
	// pieces, and is read lean as they pass (sselean.go): its last piece
	// has as Data the values of its data lines without those of the
	// top-level members the meter never reads (leanDropped: llama.cpp's
	// prompt, settings and token ids, made null). An event whose lean
	// reading is itself longer than MaxEventSize, or deeper than 255, is
	// ErrEventTooLarge when that is known (Rest then holds the piece not
	// returned). Kept by Reset. (An NDJSON line over the maximum is read
	// lean whether or not Lean is set.)
	Lean    bool
	dataBuf []byte
}

// Reset prepares the framer for a new stream, keeping its buffers (unless
// one grew beyond 256 KiB).
func (f *SSEFramer) Reset() {
	f.s.reset()
	dataBuf := f.dataBuf[:0]
	if cap(dataBuf) > retainLimit {
		dataBuf = nil
	}
	// Zero every field at once, so that none can be forgotten.
	*f = SSEFramer{MaxEventSize: f.MaxEventSize, SkipLarge: f.SkipLarge, NDJSON: f.NDJSON, Lean: f.Lean, s: f.s, dataBuf: dataBuf}
}

// Feed appends bytes read from upstream. It invalidates the slices of every
// Event returned so far. Bytes fed after Next returned ErrEventTooLarge, or
// after Flush, are dropped.
func (f *SSEFramer) Feed(p []byte) {
	if f.s.stopped() {
		return
	}
	f.line -= f.s.compact()
	f.s.b = append(f.s.b, p...)
	f.clearData()
}

// FillFrom does one Read from r directly into the framer's buffer (saving
// the copy Feed makes) and returns its result; the bytes read are then
// handled as if they had been passed to Feed. It reads nothing and returns
// ErrEventTooLarge after that error, and an error after Flush.
func (f *SSEFramer) FillFrom(r io.Reader) (int, error) {
	if f.s.stopped() {
		return f.s.fillFrom(r)
	}
	f.line -= f.s.compact()
	f.clearData()
	return f.s.fillFrom(r)
}

// TakeBuffer hands the framer's read buffer, emptied, to the caller and
// leaves the framer without one, when every byte fed has been returned in
// an event (nothing is pending) and no error or Flush stopped it; it
// returns nil, keeping the buffer, otherwise. A caller that runs many
// streams lends one pool of buffers among them: a stream waiting for its
// next bytes holds none. The next FillFrom reads into a buffer given back
// with GiveBuffer, or into a new one. The slices of every Event returned
// so far are invalid after it.
func (f *SSEFramer) TakeBuffer() []byte {
	if f.s.stopped() || f.s.start != len(f.s.b) || cap(f.s.b) == 0 {
		return nil
	}
	f.line -= f.s.compact()
	b := f.s.b[:0]
	f.s.b = nil
	return b
}

// BufferCap returns the capacity of the framer's read buffer: 0 when it
// holds none.
func (f *SSEFramer) BufferCap() int { return cap(f.s.b) }

// GiveBuffer gives a framer that holds no read buffer (BufferCap is 0)
// b, emptied, to read into; a framer that holds one ignores it.
func (f *SSEFramer) GiveBuffer(b []byte) {
	if cap(f.s.b) == 0 {
		f.s.b = b[:0]
	}
}

// Rest returns the bytes fed but not yet returned in an event: at the end of
// the input (after Flush), what the caller still has to forward. After
// ErrEventTooLarge, it returns the bytes of the oversized event read so far,
// so that a caller that chooses to pass the rest of the stream through
// unparsed can forward them first. Valid until the next Feed, FillFrom or
// Reset.
func (f *SSEFramer) Rest() []byte { return f.s.b[f.s.start:] }

// Drained reports whether every byte fed has been returned in an event: after
// Next returned one, that it was the last of the bytes read, with no part of
// another behind it.
func (f *SSEFramer) Drained() bool { return f.s.start == len(f.s.b) }

// Next returns the next complete event in ev. It returns false, nil when no
// complete event is buffered (feed more bytes). It returns false,
// ErrEventTooLarge when the pending event is longer than MaxEventSize; the
// error is sticky until Reset (Next and Flush keep returning it and further
// input is dropped), and Rest returns the bytes held.
func (f *SSEFramer) Next(ev *Event) (bool, error) {
	if f.NDJSON {
		return f.nextLine(ev)
	}
	if f.s.err != nil {
		return false, f.s.err
	}
	maxSize := limit(f.MaxEventSize)
	b := f.s.b
	i := f.line
	for {
		if f.skipLF {
			if i == len(b) {
				break
			}
			if b[i] == '\n' {
				i++
			}
			f.skipLF = false
			f.s.probe = i
		}
		from := f.s.probe
		if from < i {
			from = i
		}
		rel := indexLineEnd(b[from:])
		if rel < 0 {
			f.s.probe = len(b)
			break
		}
		term := from + rel
		blank := (term == i && !f.midLine) || (term-i == 3 && f.atStreamStart(i) && bytes.Equal(b[i:term], utf8BOM))
		next := term + 1
		if b[term] == '\r' {
			switch {
			case next < len(b):
				if b[next] == '\n' {
					next++
				}
			case f.s.eof:
				// end of input: nothing can follow the "\r"
			case blank && f.hasLine:
				// The event ends here, but whether a "\n" follows (and so
				// belongs to its Raw) is not known yet: wait. It was
				// complete with these bytes (Early).
				f.crHeld = true
				f.line = i
				f.s.probe = term
				return f.tooLarge(ev, maxSize, i)
			default:
				f.skipLF = true
			}
		}
		i = next
		f.s.probe = next
		f.midLine = false
		if !blank {
			f.hasLine = true
			continue
		}
		if !f.hasLine {
			continue // a blank line before any line: folded into the next event
		}
		end := next
		if f.skipping || maxSize > 0 && end-f.s.start > maxSize {
			if !f.SkipLarge {
				f.s.err = ErrEventTooLarge
				return false, f.s.err
			}
			if !f.skipPiece(ev, end, !f.skipping, true, maxSize) { // its last piece
				return false, f.s.err
			}
			ev.Early, f.crHeld = f.crHeld, false
			f.skipping = false
			f.line = end
			f.hasLine = false
			return true, nil
		}
		f.emit(ev, b[f.s.start:end], false)
		ev.Early, f.crHeld = f.crHeld, false
		f.s.consumed += int64(end - f.s.start)
		f.s.start = end
		f.line = end
		f.hasLine = false
		return true, nil
	}
	f.line = i
	return f.tooLarge(ev, maxSize, len(b))
}

// tooLarge is asked when no event is complete in the buffer: the pending
// one has grown past maxSize (it is an error, or with SkipLarge a piece of
// it is returned), or not yet. A piece ends at upTo: the end of the bytes
// read, or the start of a blank line whose line end is not known yet.
func (f *SSEFramer) tooLarge(ev *Event, maxSize, upTo int) (bool, error) {
	n := len(f.s.b)
	if !f.skipping && !(maxSize > 0 && n-f.s.start > maxSize) {
		return false, nil
	}
	if !f.SkipLarge {
		f.s.err = ErrEventTooLarge
		return false, f.s.err
	}
	if upTo == f.s.start {
		return false, nil // nothing new to return
	}
	first := !f.skipping
	if !f.skipPiece(ev, upTo, first, false, maxSize) {
		return false, f.s.err
	}
	f.skipping = true
	f.midLine = f.line < upTo // the piece ends inside the line at f.line
	if f.line < upTo {
		f.line = upTo
	}
	if f.s.probe < upTo {
		f.s.probe = upTo
	}
	return true, nil
}

// emitSkipped returns b[start:end] as a piece of an event over the maximum
// size (see SkipLarge), the event's first when first is true.
func (f *SSEFramer) emitSkipped(ev *Event, end int, first bool) {
	*ev = Event{Raw: f.s.b[f.s.start:end], Skipped: true, SkipFirst: first}
	f.s.consumed += int64(end - f.s.start)
	f.s.start = end
}

// skipPiece returns b[start:end] as a piece of an event over the maximum
// size (emitSkipped), the event's first when first is true, its last when
// last is. With Lean it reads the piece lean first, and gives the last
// piece the event's lean data (sselean.go); it reports false, the piece
// not returned, when that reading fails: ErrEventTooLarge, sticky.
func (f *SSEFramer) skipPiece(ev *Event, end int, first, last bool, maxSize int) bool {
	if !f.Lean {
		f.emitSkipped(ev, end, first)
		return true
	}
	if first {
		f.s.lean, f.s.sse = leanLine{}, sseLean{}
		f.dataBuf = f.dataBuf[:0]
	}
	p := f.s.b[f.s.start:end]
	if first && f.s.consumed == 0 {
		p = bytes.TrimPrefix(p, utf8BOM) // as emit
	}
	// The last piece ends the event's last line (unterminated at Flush: a
	// lone "data" is then an empty data line, as emit reads it).
	if !f.s.sse.read(&f.s.lean, &f.dataBuf, p, maxSize) || last && !f.s.sse.endLine(&f.s.lean, &f.dataBuf, maxSize) {
		f.s.err = ErrEventTooLarge
		return false
	}
	f.emitSkipped(ev, end, first)
	if last {
		if f.s.sse.hasData() {
			ev.Data = f.dataBuf[:len(f.dataBuf):len(f.dataBuf)]
			ev.HasData = true
		}
		if f.s.sse.typeError() {
			ev.Type = eventError[:len(eventError):len(eventError)]
		}
	}
	return true
}

// atStreamStart reports whether index i of the buffer is the first byte of
// the stream.
func (f *SSEFramer) atStreamStart(i int) bool {
	return f.s.consumed == 0 && i == f.s.start
}

// Flush is called once the input has ended (no more Feed). It returns the
// remaining events one by one, as Next does, treating the end of the input
// as the end of the last line and of the last event: a pending event made of
// at least one non-blank line (terminated or not) is returned with
// Unterminated set. Call it until it returns false, then forward Rest(),
// which then holds at most trailing blank lines.
func (f *SSEFramer) Flush(ev *Event) (bool, error) {
	if f.NDJSON {
		return f.flushLines(ev)
	}
	f.s.eof = true
	ok, err := f.Next(ev)
	if ok || err != nil {
		return ok, err
	}
	b := f.s.b
	// An event over the maximum read lean has a last piece, the one with
	// its data, even when its bytes all passed in the pieces before; not
	// when what passed was only blank lines (hasLine: a line ended;
	// midLine: a piece ended inside one): the leading blank lines of an
	// event that never came are no event.
	leanLast := f.skipping && f.Lean && (f.hasLine || f.midLine)
	if f.s.start == len(b) && !leanLast {
		return false, nil
	}
	tail := b[f.line:]
	if f.atStreamStart(f.line) {
		tail = bytes.TrimPrefix(tail, utf8BOM)
	}
	if !f.hasLine && len(tail) == 0 && !leanLast {
		return false, nil
	}
	if f.skipping {
		if !f.skipPiece(ev, len(b), false, true, limit(f.MaxEventSize)) { // its last piece, unterminated
			return false, f.s.err
		}
		ev.Unterminated = true
		f.skipping = false
	} else {
		f.emit(ev, b[f.s.start:], true)
		f.s.consumed += int64(len(b) - f.s.start)
	}
	f.s.start = len(b)
	f.line = len(b)
	f.s.probe = len(b)
	f.hasLine = false
	f.skipLF = false
	return true, nil
}

// emit parses the fields of the event whose bytes are raw.
func (f *SSEFramer) emit(ev *Event, raw []byte, unterminated bool) {
	*ev = Event{Raw: raw, Unterminated: unterminated}
	rest := raw
	if f.s.consumed == 0 {
		rest = bytes.TrimPrefix(rest, utf8BOM)
	}
	var (
		data      []byte
		dataLines int
		dataStart int
	)
	for len(rest) > 0 {
		n := indexLineEnd(rest)
		var line []byte
		if n < 0 {
			line, rest = rest, nil
		} else {
			line = rest[:n]
			if rest[n] == '\r' && n+1 < len(rest) && rest[n+1] == '\n' {
				n++
			}
			rest = rest[n+1:]
		}
		if len(line) == 0 || line[0] == ':' {
			continue // blank line or comment
		}
		name, value := line, []byte(nil)
		if c := bytes.IndexByte(line, ':'); c >= 0 {
			name, value = line[:c], line[c+1:]
			if len(value) > 0 && value[0] == ' ' {
				value = value[1:]
			}
		}
		switch string(name) {
		case "error":
			// llama.cpp's streamed error (see SSEFramer): a data line
			// of an event of type error.
			ev.Type = eventError[:len(eventError):len(eventError)]
			fallthrough
		case "data":
			dataLines++
			switch dataLines {
			case 1:
				data = value
			case 2:
				dataStart = len(f.dataBuf)
				f.dataBuf = append(f.dataBuf, data...)
				fallthrough
			default:
				f.dataBuf = append(f.dataBuf, '\n')
				f.dataBuf = append(f.dataBuf, value...)
			}
		case "event":
			ev.Type = value[:len(value):len(value)]
		case "id":
			if bytes.IndexByte(value, 0) < 0 {
				ev.ID = value[:len(value):len(value)]
			}
		}
		// retry: and unknown fields are ignored (they stay in Raw).
	}
	if dataLines > 0 {
		ev.HasData = true
		if dataLines == 1 {
			ev.Data = data[:len(data):len(data)]
		} else {
			ev.Data = f.dataBuf[dataStart:len(f.dataBuf):len(f.dataBuf)]
		}
		if ev.Data == nil {
			ev.Data = raw[:0:0]
		}
	}
}

// indexLineEnd returns the index of the first "\r" or "\n" in b, or -1.
// It searches windows of growing size so that the cost is proportional to
// the distance to the line end even when one of the two bytes is absent
// from the rest of b (a CR-only stream, or a large LF stream buffer).
func indexLineEnd(b []byte) int {
	w := 512
	for off := 0; off < len(b); w *= 2 {
		end := min(off+w, len(b))
		chunk := b[off:end]
		n := bytes.IndexByte(chunk, '\n')
		if n >= 0 {
			chunk = chunk[:n]
		}
		if r := bytes.IndexByte(chunk, '\r'); r >= 0 {
			return off + r
		}
		if n >= 0 {
			return off + n
		}
		off = end
	}
	return -1
}

// SkippedFailure reports whether raw, the first piece of an event skipped
// for its size (Event.SkipFirst), is a failure of the Responses or
// Messages API: its `event:` line, or without one the first "type" member
// of its data, says error or response.failed, or its first field before
// them is llama.cpp's `error:` (SSEFramer). An event that large is
// skipped because the Responses API's final events repeat the whole
// response; a failure must not pass for one of those.
func SkippedFailure(raw []byte) bool {
	for len(raw) > 0 {
		line := raw
		i := bytes.IndexAny(raw, "\r\n")
		if i >= 0 {
			line, raw = raw[:i], raw[i+1:]
		} else {
			raw = nil
		}
		if v, ok := bytes.CutPrefix(line, []byte("event:")); ok {
			return failureType(bytes.TrimPrefix(v, []byte(" ")))
		}
		if bytes.HasPrefix(line, []byte("error:")) {
			return true // llama.cpp's streamed error (SSEFramer)
		}
		if v, ok := bytes.CutPrefix(line, []byte("data:")); ok {
			// The data's first "type" member: the event's own, as both
			// APIs put it first (a "type" inside a string is escaped).
			j := bytes.Index(v, []byte(`"type"`))
			if j < 0 {
				return false
			}
			v = bytes.TrimLeft(v[j+len(`"type"`):], " \t")
			v, ok = bytes.CutPrefix(v, []byte(":"))
			v = bytes.TrimLeft(v, " \t")
			if !ok || len(v) == 0 || v[0] != '"' {
				return false
			}
			end := bytes.IndexByte(v[1:], '"')
			return end >= 0 && failureType(v[1:1+end])
		}
	}
	return false
}

func failureType(t []byte) bool {
	return string(t) == "error" || string(t) == "response.failed"
}
