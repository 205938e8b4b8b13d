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
// An event longer than MaxEventSize is ErrEventTooLarge, unless SkipLarge
// is set: the line is then returned in pieces as its bytes come in
// (Event.Skipped, Raw only), and read lean as they pass (leanLine): its
// last piece (the one with its "\n", or the last bytes at Flush) has as
// Data the line without the values of its top-level members the meter
// never reads (leanDropped: Ollama's context, the conversation's token
// ids, which make /api/generate's last line as long as the conversation),
// each made null, and HasData set. A line whose lean reading is itself
// longer than MaxEventSize, or deeper than 255, is ErrEventTooLarge when
// that is known (Rest then holds the piece not returned).

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
		if !f.skipping && isBlankLine(line) {
			f.line = term + 1
			continue
		}
		end := term + 1
		if f.skipping || maxSize > 0 && end-f.s.start > maxSize {
			return f.largeLine(ev, end, term, true, maxSize)
		}
		f.emitLine(ev, b[f.s.start:end], line, false)
		return true, nil
	}
	if f.skipping || maxSize > 0 && len(b)-f.s.start > maxSize {
		return f.largeLine(ev, len(b), len(b), f.s.eof, maxSize)
	}
	return false, nil
}

// largeLine returns, with SkipLarge, the bytes of a line over maxSize read
// so far, up to end, as a piece of it, reading them lean up to dataEnd (the
// line's "\n" is not read); the line's last piece when last. Without
// SkipLarge, and when the lean reading fails, it is ErrEventTooLarge.
func (f *SSEFramer) largeLine(ev *Event, end, dataEnd int, last bool, maxSize int) (bool, error) {
	if !f.SkipLarge {
		f.s.err = ErrEventTooLarge
		return false, f.s.err
	}
	if end == f.s.start && !last {
		return false, nil // nothing new to return
	}
	first := !f.skipping
	if first {
		f.s.lean = leanLine{}
		f.dataBuf = f.dataBuf[:0]
	}
	f.skipping = true // (so that Feed keeps dataBuf)
	// From the line's first byte: the blank lines before it are not read.
	if !f.s.lean.read(&f.dataBuf, f.s.b[max(f.line, f.s.start):dataEnd], maxSize) {
		f.s.err = ErrEventTooLarge
		return false, f.s.err
	}
	*ev = Event{Raw: f.s.b[f.s.start:end], Skipped: true, SkipFirst: first, Unterminated: last && end == dataEnd}
	if last {
		if n := len(f.dataBuf); n > 0 && f.dataBuf[n-1] == '\r' {
			f.dataBuf = f.dataBuf[:n-1] // as emitLine: without its line ending
		}
		ev.Data = f.dataBuf[:len(f.dataBuf):len(f.dataBuf)]
		ev.HasData = true
		f.skipping = false
	}
	f.s.consumed += int64(end - f.s.start)
	f.s.start = end
	f.line = end
	f.s.probe = end
	return true, nil
}

// clearData empties dataBuf when bytes are fed (the Data of the events
// returned so far is then invalid), but while an event over the maximum is
// read lean (an NDJSON line, or with Lean an event stream's event): its
// lean bytes are kept there until its last piece.
func (f *SSEFramer) clearData() {
	if !((f.NDJSON || f.Lean) && f.skipping) {
		f.dataBuf = f.dataBuf[:0]
	}
}

// leanDropped names the top-level members of an event whose values an
// event over the maximum size is read without (made null; ndjson.go for an
// NDJSON line, sselean.go for an event stream's event). The meter reads
// none of them, on any API (readNames has none of them):
//   - Ollama's context, the token ids of the whole conversation on
//     /api/generate's last line, and logprobs, a line's per-token log
//     probabilities;
//   - llama.cpp's native /completion (and /completions) events: the last
//     event's prompt (the whole prompt, as text), generation_settings (the
//     request's sampling settings: its grammar, stop words and logit_bias
//     among them) and tokens (the generated token ids; builds before the
//     stream's last event was emptied repeated them all there), and a
//     token event's completion_probabilities (n_probs entries each);
//   - __verbose, which llama.cpp's server started verbose adds to its
//     OpenAI-compatible chunks: the native result, so on the last chunks
//     the prompt and the settings again.
var leanDropped = [...]string{"context", "logprobs", "prompt", "generation_settings", "tokens", "completion_probabilities", "__verbose"}

// leanLine is the state of the lean reading of one JSON text (an NDJSON
// line, an event's data): read piece by piece, copied but for the values
// of its top-level members named in leanDropped, each made null. It holds
// no bytes: four, so that the framer, which a pooled stream embeds, keeps
// its size.
type leanLine struct {
	depth uint8 // of objects and arrays, outside strings
	flags uint8
	key   uint8 // the top-level key being read: 0 none yet, i+1 still leanDropped[i], leanNoKey neither
	kpos  uint8 // its bytes read (saturates)
}

const (
	leanInString  = 1 << iota
	leanEscape    // a backslash in a string: the next byte is escaped
	leanExpectKey // in the top-level object, where a member's key comes next
	leanInKey     // reading a top-level key
	leanSkip      // reading a dropped value: not copied
	leanObject    // the text is an object
	leanBegun     // its first byte other than white space has been read

	leanNoKey = 0xff
)

// read reads p, the next bytes of the line, appending what it keeps of them
// to *dst. It reports false when *dst would pass most (when most > 0) or the
// text nests deeper than 255. Malformed JSON is copied as it comes: the
// parser of the lean line says so.
func (l *leanLine) read(dst *[]byte, p []byte, most int) bool {
	out := *dst
	from := 0 // start of the bytes to copy
	if l.flags&leanSkip != 0 {
		from = -1
	}
	for i, c := range p {
		if l.flags&leanInString != 0 {
			switch {
			case l.flags&leanEscape != 0:
				l.flags &^= leanEscape
			case c == '\\':
				l.flags |= leanEscape
				if l.flags&leanInKey != 0 {
					l.key = leanNoKey // an escaped key is none of leanDropped's
				}
			case c == '"':
				l.flags &^= leanInString
				if l.flags&leanInKey != 0 {
					l.flags &^= leanInKey
					if l.key == 0 || l.key == leanNoKey || int(l.kpos) != len(leanDropped[l.key-1]) {
						l.key = 0
					}
				}
			case l.flags&leanInKey != 0:
				l.keyByte(c)
			}
			continue
		}
		switch c {
		case ' ', '\t', '\r', '\n':
			continue
		case '"':
			l.flags |= leanInString
			if l.flags&leanExpectKey != 0 && l.depth == 1 {
				l.flags = l.flags&^leanExpectKey | leanInKey
				l.key, l.kpos = 0, 0
			}
		case '{', '[':
			if l.flags&leanBegun == 0 && c == '{' {
				l.flags |= leanObject | leanExpectKey
			}
			if l.depth == 255 {
				return false
			}
			l.depth++
		case ':':
			if l.depth == 1 && l.key != 0 && l.key != leanNoKey && l.flags&leanSkip == 0 {
				if most > 0 && len(out)+i+1-from+len("null") > most {
					return false
				}
				out = append(out, p[from:i+1]...)
				out = append(out, "null"...)
				l.flags |= leanSkip
				from = -1
			}
			l.key = 0
		case ',', '}', ']':
			if l.depth == 1 && l.flags&leanSkip != 0 && c != ']' {
				l.flags &^= leanSkip // the dropped value ended
				from = i
			}
			if c == ',' && l.depth == 1 && l.flags&leanObject != 0 {
				l.flags |= leanExpectKey
			} else if c != ',' && l.depth > 0 {
				l.depth--
			}
		}
		l.flags |= leanBegun
	}
	if from >= 0 {
		if most > 0 && len(out)+len(p)-from > most {
			return false
		}
		out = append(out, p[from:]...)
	}
	*dst = out
	return true
}

// keyByte reads the next byte c of a top-level key.
func (l *leanLine) keyByte(c byte) {
	if l.key != leanNoKey {
		// cur: the name of leanDropped matched so far (its first l.kpos
		// bytes); none before the first byte. When c does not follow, the
		// name that begins as much and then c, if any: names may share a
		// beginning (context, completion_probabilities).
		cur := ""
		if l.kpos > 0 {
			cur = leanDropped[l.key-1]
		}
		if int(l.kpos) >= len(cur) || cur[l.kpos] != c {
			prefix := cur[:l.kpos]
			l.key = leanNoKey
			for i, name := range leanDropped {
				if len(name) > int(l.kpos) && name[l.kpos] == c && name[:l.kpos] == prefix {
					l.key = uint8(i + 1)
					break
				}
			}
		}
	}
	if l.kpos < 0xff {
		l.kpos++
	}
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
