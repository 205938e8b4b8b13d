package meter

// The lean reading of an event stream's event over the maximum size
// (SSEFramer.Lean): llama.cpp's server sends, as the last event of a
// native /completion (or /completions) stream, its whole result but the
// text: the prompt, as text, and the request's settings with it
// (server_task_result_cmpl_final::to_json_non_oaicompat), so a long prompt
// makes that event as long; a server started verbose adds the same to its
// OpenAI-compatible chunks (__verbose). Such an event passes in pieces as
// its bytes come (Event.Skipped, as SkipLarge does), and its lines are
// read as they pass, as the framer reads an event's lines (WHATWG: a line
// ends with "\n", "\r\n" or "\r"; a field's name is what comes before the
// line's first ":", its value what comes after, without one leading
// space; a line without ":" is a field with an empty value; ":" begins a
// comment): the values of its data lines, joined with "\n", are read lean
// (leanLine: the values of the top-level members named in leanDropped made
// null) into the framer's dataBuf, and the last `event:` line is kept for
// whether it says error; an `error:` line (llama.cpp's streamed error, read
// as the framer reads it: a data line, and an `event: error` line) is read
// so too. The event's last piece (the one with its blank line, or the last
// bytes at Flush) has that as its Data (HasData when it had a data line)
// and Type "error" when its last event: (or error:) line said so (no other
// type: chat, completions and llama.cpp's native API read none other); no
// ID.

// sseLean is the state of the lean reading of an event's lines: two bytes,
// in the padding of the framer's streamBuf (a pooled stream embeds the
// framer), beside the leanLine that reads the data.
type sseLean struct {
	state uint8 // the line's place (sseKind bits) and the flags below
	pos   uint8 // bytes of the field's name, or of "error" in an event: value, matched so far; sseNoMatch when they did not match
}

// The place in a line (state&sseKind).
const (
	sseLineStart  = iota // at a line's first byte
	sseName              // in a field's name
	sseDataStart         // at a data line's value's first byte (a space there is not the value's)
	sseData              // in a data line's value
	sseEventStart        // at an event: line's value's first byte
	sseEventValue        // in an event: line's value
	sseIgnore            // in a comment, or another field's value

	sseKind = 7
)

// The flags of sseLean.state.
const (
	sseCR        = 1 << (iota + 3) // the previous line ended with "\r": a "\n" next ends it too
	sseHasData                     // a data line was read
	sseTypeError                   // the last event: line's value is "error" (or the last such line was an error: line)
	sseNameEvent                   // the field's name read so far is event's
	sseNameError                   // the field's name read so far is error's (neither: data's)

	sseNoMatch = 0xff
)

var (
	sseDataName  = "data"
	sseEventName = "event"
	sseErrorName = "error" // llama.cpp's streamed error (SSEFramer)
	sseError     = "error"
	sseJoin      = []byte{'\n'}
	// eventError is the Type of a lean event whose last event: line said
	// error.
	eventError = []byte(sseError)
)

// read reads p, the next bytes of the event, appending the lean reading of
// its data to *dst with l. It reports false when that reading fails
// (leanLine.read: longer than most, or nested deeper than 255).
func (r *sseLean) read(l *leanLine, dst *[]byte, p []byte, most int) bool {
	for i := 0; i < len(p); {
		c := p[i]
		if r.state&sseCR != 0 {
			r.state &^= sseCR
			if c == '\n' {
				i++
				continue
			}
		}
		if c == '\r' || c == '\n' {
			if !r.endLine(l, dst, most) {
				return false
			}
			if c == '\r' {
				r.state |= sseCR
			}
			i++
			continue
		}
		switch r.state & sseKind {
		case sseLineStart:
			if c == ':' {
				r.set(sseIgnore)
				break
			}
			r.set(sseName)
			r.state &^= sseNameEvent | sseNameError
			if c == sseEventName[0] {
				r.state |= sseNameEvent // or error's: its second byte tells
			}
			r.pos = 0
			r.match(r.name(), c)
		case sseName:
			if c != ':' {
				if r.state&sseNameEvent != 0 && r.pos == 1 && c == sseErrorName[1] {
					r.state = r.state&^sseNameEvent | sseNameError
				}
				r.match(r.name(), c)
				break
			}
			switch {
			case !r.matched(r.name()):
				r.set(sseIgnore)
			case r.state&sseNameEvent != 0:
				r.set(sseEventStart)
			default:
				if !r.dataLine(l, dst, most) {
					return false
				}
				r.set(sseDataStart)
			}
		case sseDataStart, sseData:
			if r.state&sseKind == sseDataStart {
				r.set(sseData)
				if c == ' ' {
					break
				}
			}
			// The value's bytes up to the line's end, read at once.
			n := indexLineEnd(p[i:])
			if n < 0 {
				n = len(p) - i
			}
			if !l.read(dst, p[i:i+n], most) {
				return false
			}
			i += n
			continue
		case sseEventStart, sseEventValue:
			if r.state&sseKind == sseEventStart {
				r.set(sseEventValue)
				r.pos = 0
				if c == ' ' {
					break
				}
			}
			r.match(sseError, c)
		}
		i++
	}
	return true
}

// set sets the place in the line, keeping the flags.
func (r *sseLean) set(kind uint8) { r.state = r.state&^sseKind | kind }

// name is the field name the name read so far can still be.
func (r *sseLean) name() string {
	switch {
	case r.state&sseNameEvent != 0:
		return sseEventName
	case r.state&sseNameError != 0:
		return sseErrorName
	}
	return sseDataName
}

// match reads c, the next byte of a name or value to be matched with s.
func (r *sseLean) match(s string, c byte) {
	if r.pos != sseNoMatch && int(r.pos) < len(s) && s[r.pos] == c {
		r.pos++
		return
	}
	r.pos = sseNoMatch
}

// matched reports whether what was read is s, whole.
func (r *sseLean) matched(s string) bool { return int(r.pos) == len(s) }

// beginData starts a data line's value: after an earlier data line's, the
// "\n" that joins them is read first.
func (r *sseLean) beginData(l *leanLine, dst *[]byte, most int) bool {
	if r.state&sseHasData != 0 && !l.read(dst, sseJoin, most) {
		return false
	}
	r.state |= sseHasData
	return true
}

// dataLine starts the value of a data line, or of an error: line, which
// is read as one and makes the event's type error (SSEFramer).
func (r *sseLean) dataLine(l *leanLine, dst *[]byte, most int) bool {
	if r.state&sseNameError != 0 {
		r.state |= sseTypeError
	}
	return r.beginData(l, dst, most)
}

// endLine ends the line read: a line that was only a field's name has an
// empty value ("data", "error": an empty data line; "event": no type).
func (r *sseLean) endLine(l *leanLine, dst *[]byte, most int) bool {
	switch r.state & sseKind {
	case sseName:
		if r.matched(r.name()) {
			if r.state&sseNameEvent != 0 {
				r.state &^= sseTypeError
			} else if !r.dataLine(l, dst, most) {
				return false
			}
		}
	case sseEventStart:
		r.state &^= sseTypeError
	case sseEventValue:
		r.state &^= sseTypeError
		if r.matched(sseError) {
			r.state |= sseTypeError
		}
	}
	r.set(sseLineStart)
	return true
}

// hasData reports whether the event read had a data line; typeError,
// whether its last event: line said error.
func (r *sseLean) hasData() bool   { return r.state&sseHasData != 0 }
func (r *sseLean) typeError() bool { return r.state&sseTypeError != 0 }
