package meter

import (
	"bytes"
	"io"
)

// NDJSONFramer splits a newline-delimited JSON body (Ollama's native API)
// into events: one line is one event. It has the same shape as SSEFramer.
//
// A line ends with "\n"; Data is the line without its "\n" and without a
// "\r" before it. Blank lines (empty or only spaces, tabs and "\r") are not
// events: they are folded into the Raw of the next event. HasData is true
// for every event; Type and ID are nil. At the end of the input, Flush
// returns a last line that has no "\n" as an event with Unterminated set.
//
// The zero value is ready to use. An NDJSONFramer is not safe for concurrent
// use.
//
// The gateway does not use it yet: it is the framer of Ollama's native
// routes (/api/chat and /api/generate stream NDJSON), kept for those routes,
// which come next, so that they need no framer of their own. It is tested
// and held to the SSE framer's allocation bounds meanwhile, and listed in
// .ci/deadcode-allow.
type NDJSONFramer struct {
	// MaxEventSize bounds the length of one event's Raw (the line, its
	// newline and any blank lines folded before it). Zero means
	// DefaultMaxEventSize; a negative value means no limit.
	MaxEventSize int

	s    streamBuf
	line int // start of the line being scanned
}

// Reset prepares the framer for a new stream, keeping its buffer (unless it
// grew beyond 256 KiB).
func (f *NDJSONFramer) Reset() {
	f.s.reset()
	*f = NDJSONFramer{MaxEventSize: f.MaxEventSize, s: f.s}
}

// Feed appends bytes read from upstream; see SSEFramer.Feed.
func (f *NDJSONFramer) Feed(p []byte) {
	if f.s.stopped() {
		return
	}
	f.line -= f.s.compact()
	f.s.b = append(f.s.b, p...)
}

// FillFrom does one Read from r into the framer's buffer; see
// SSEFramer.FillFrom.
func (f *NDJSONFramer) FillFrom(r io.Reader) (int, error) {
	if !f.s.stopped() {
		f.line -= f.s.compact()
	}
	return f.s.fillFrom(r)
}

// Rest returns the bytes fed but not yet returned in an event; see
// SSEFramer.Rest.
func (f *NDJSONFramer) Rest() []byte { return f.s.b[f.s.start:] }

// Next returns the next complete line in ev; see SSEFramer.Next for the
// results and for ErrEventTooLarge.
func (f *NDJSONFramer) Next(ev *Event) (bool, error) {
	if f.s.err != nil {
		return false, f.s.err
	}
	maxSize := limit(f.MaxEventSize)
	b := f.s.b
	for {
		from := f.s.probe
		if from < f.line {
			from = f.line
		}
		rel := bytes.IndexByte(b[from:], '\n')
		if rel < 0 {
			f.s.probe = len(b)
			break
		}
		term := from + rel
		line := b[f.line:term]
		f.s.probe = term + 1
		if isBlankLine(line) {
			f.line = term + 1
			continue
		}
		end := term + 1
		if maxSize > 0 && end-f.s.start > maxSize {
			f.s.err = ErrEventTooLarge
			return false, f.s.err
		}
		f.emit(ev, b[f.s.start:end], line, false)
		return true, nil
	}
	if maxSize > 0 && len(b)-f.s.start > maxSize {
		f.s.err = ErrEventTooLarge
		return false, f.s.err
	}
	return false, nil
}

// Flush is called once the input has ended; it returns the remaining
// events, the last one with Unterminated set when it has no "\n". Call it
// until it returns false, then forward Rest(), which then holds at most
// blank lines.
func (f *NDJSONFramer) Flush(ev *Event) (bool, error) {
	f.s.eof = true
	ok, err := f.Next(ev)
	if ok || err != nil {
		return ok, err
	}
	b := f.s.b
	line := b[f.line:]
	if isBlankLine(line) {
		return false, nil
	}
	f.emit(ev, b[f.s.start:], line, true)
	return true, nil
}

func (f *NDJSONFramer) emit(ev *Event, raw, line []byte, unterminated bool) {
	if n := len(line); n > 0 && line[n-1] == '\r' {
		line = line[:n-1]
	}
	*ev = Event{
		Raw:          raw,
		Data:         line[:len(line):len(line)],
		HasData:      true,
		Unterminated: unterminated,
	}
	end := f.s.start + len(raw)
	f.s.consumed += int64(len(raw))
	f.s.start = end
	f.line = end
	f.s.probe = end
}

func isBlankLine(b []byte) bool {
	for _, c := range b {
		if c != ' ' && c != '\t' && c != '\r' {
			return false
		}
	}
	return true
}
