package meter

import "bytes"

// The NDJSON mode of SSEFramer (SSEFramer.NDJSON): a newline-delimited JSON
// body (Ollama's native API, /api/chat and /api/generate) is split into
// events one line each, with the same buffer, lending and limits as SSE.
//
// A line ends with "\n"; Data is the line without its "\n" and without a
// "\r" before it. Blank lines (empty or only spaces, tabs and "\r") are not
// events: they are folded into the Raw of the next event. HasData is true
// for every event; Type and ID are nil. At the end of the input, Flush
// returns a last line that has no "\n" as an event with Unterminated set.
// An event longer than MaxEventSize is ErrEventTooLarge (SkipLarge does not
// apply).

// nextLine is Next in NDJSON mode.
func (f *SSEFramer) nextLine(ev *Event) (bool, error) {
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
		f.emitLine(ev, b[f.s.start:end], line, false)
		return true, nil
	}
	if maxSize > 0 && len(b)-f.s.start > maxSize {
		f.s.err = ErrEventTooLarge
		return false, f.s.err
	}
	return false, nil
}

// flushLines is Flush in NDJSON mode.
func (f *SSEFramer) flushLines(ev *Event) (bool, error) {
	f.s.eof = true
	ok, err := f.nextLine(ev)
	if ok || err != nil {
		return ok, err
	}
	b := f.s.b
	line := b[f.line:]
	if isBlankLine(line) {
		return false, nil
	}
	f.emitLine(ev, b[f.s.start:], line, true)
	return true, nil
}

func (f *SSEFramer) emitLine(ev *Event, raw, line []byte, unterminated bool) {
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
