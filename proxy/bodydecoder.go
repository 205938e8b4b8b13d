package proxy

import (
	"errors"
	"strconv"
)

// bodyDecoder takes the HTTP/1.1 framing off a response body as it is read,
// in place: decode turns the bytes one read(2) brought into the body bytes
// they carry, in the same buffer, keeping its state across reads, so a size
// line, a CRLF or a trailer split anywhere between two reads decodes as if
// it came in one. It needs no buffer of its own and never allocates, so the
// direct read path (direct.go) reads the socket straight into the SSE
// framer's buffer and decodes there.
//
// Its zero value is not ready: init sets the framing from the response
// head. Bytes that follow the body's end in the same read (a server that
// writes past its own framing, or pipelines) are not body: decode drops
// them and sets extra, and the connection must not be reused.
type bodyDecoder struct {
	left  uint64 // fixed: body bytes still to come; chunked: bytes left of the current chunk's data
	line  int    // chunked: bytes of the current size line, or of the trailer section
	kind  int8   // bodyFixed, bodyChunked or bodyUntilClose
	state uint8  // chunked: where in the framing the next byte is
	digit bool   // chunked: the size line has at least one hex digit
	done  bool   // the body ended: decode takes no more
	extra bool   // bytes came after the body's end
}

// Body framings, from fasthttp's ResponseHeader.ContentLength: a length
// (≥ 0), -1 for Transfer-Encoding: chunked, -2 for a body that ends when the
// server closes the connection.
const (
	bodyFixed int8 = iota
	bodyChunked
	bodyUntilClose
)

// Chunked framing states: the byte decode meets next is...
const (
	chSize         uint8 = iota // a hex digit of the chunk size (or what ends the size)
	chSizeSpace                 // after the size: whitespace, ';' or the CR/LF
	chExt                       // in a chunk extension, up to the CR/LF
	chSizeLF                    // the LF after the size line's CR
	chData                      // chunk data (left bytes of it)
	chDataCR                    // the CR (or bare LF) after the data
	chDataLF                    // the LF after the data's CR
	chTrailerStart              // the start of a trailer line, or of the empty line that ends the body
	chTrailer                   // in a trailer line
	chTrailerLF                 // the LF after a trailer line's CR
	chEndLF                     // the LF after the final empty line's CR
)

// Limits on framing bytes that carry no body: a size line (with its
// extensions) and the trailer section. A server that sends more is broken or
// hostile; the stream ends as an upstream error.
const (
	maxChunkLine    = 4 << 10
	maxTrailerBytes = 16 << 10
	maxChunkSize    = 1 << 60 // a size that would overflow is refused long before
)

// errBodyFraming is the class of every malformed-framing error decode
// returns (errors.Is).
var errBodyFraming = errors.New("malformed chunked body")

// errBodyCut is the end of a body its framing says is not complete: the
// connection closed mid-body.
var errBodyCut = errors.New("upstream closed the connection before the end of the body")

type framingError string

func (e framingError) Error() string   { return "malformed chunked body: " + string(e) }
func (e framingError) Is(t error) bool { return t == errBodyFraming }

// withByte names the byte that broke the framing.
func (e framingError) withByte(c byte) error {
	return framingError(string(e) + " (byte " + strconv.QuoteRune(rune(c)) + ")")
}

// init readies the decoder for a body of the given framing:
// contentLength ≥ 0, or -1 (chunked), or -2 (until close).
func (d *bodyDecoder) init(contentLength int) {
	*d = bodyDecoder{}
	switch {
	case contentLength >= 0:
		d.kind = bodyFixed
		d.left = uint64(contentLength)
		d.done = contentLength == 0
	case contentLength == -1:
		d.kind = bodyChunked
	default:
		d.kind = bodyUntilClose
	}
}

// decode takes the framing off p, which holds the next bytes read from the
// connection, in place: the body bytes they carry end up in p[:n]. Once
// the body has ended (done), later bytes are dropped and set extra. An
// error is the framing's: the body cannot be read further.
func (d *bodyDecoder) decode(p []byte) (n int, err error) {
	if d.done {
		if len(p) > 0 {
			d.extra = true
		}
		return 0, nil
	}
	switch d.kind {
	case bodyUntilClose:
		return len(p), nil
	case bodyFixed:
		if uint64(len(p)) <= d.left {
			d.left -= uint64(len(p))
			d.done = d.left == 0
			return len(p), nil
		}
		n = int(d.left)
		d.left, d.done, d.extra = 0, true, true
		return n, nil
	}
	return d.chunked(p)
}

// chunked decodes chunked framing; see decode.
func (d *bodyDecoder) chunked(p []byte) (int, error) {
	w := 0 // body bytes are moved down to p[:w]
	for i := 0; i < len(p); {
		if d.state == chData {
			k := len(p) - i
			if uint64(k) > d.left {
				k = int(d.left)
			}
			w += copy(p[w:], p[i:i+k])
			i += k
			d.left -= uint64(k)
			if d.left == 0 {
				d.state = chDataCR
			}
			continue
		}
		c := p[i]
		i++
		switch d.state {
		case chSize:
			if v, ok := unhex(c); ok {
				if d.left >= maxChunkSize>>4 {
					return w, framingError("chunk size too large")
				}
				d.left = d.left<<4 | uint64(v)
				d.digit = true
				if err := d.lineByte(); err != nil {
					return w, err
				}
				continue
			}
			if !d.digit {
				return w, framingError("chunk size is not hexadecimal").withByte(c)
			}
			if err := d.endSize(c); err != nil {
				return w, err
			}
		case chSizeSpace:
			if err := d.endSize(c); err != nil {
				return w, err
			}
		case chExt:
			if err := d.lineByte(); err != nil {
				return w, err
			}
			switch c {
			case '\r':
				d.state = chSizeLF
			case '\n':
				d.sizeDone()
			}
		case chSizeLF:
			if c != '\n' {
				return w, framingError("chunk size line not ended by CRLF").withByte(c)
			}
			d.sizeDone()
		case chDataCR:
			switch c {
			case '\r':
				d.state = chDataLF
			case '\n':
				d.state = chSize
			default:
				return w, framingError("chunk data not followed by CRLF").withByte(c)
			}
		case chDataLF:
			if c != '\n' {
				return w, framingError("chunk data not followed by CRLF").withByte(c)
			}
			d.state = chSize
		case chTrailerStart, chTrailer:
			if err := d.trailerByte(); err != nil {
				return w, err
			}
			switch {
			case c == '\r' && d.state == chTrailerStart:
				d.state = chEndLF
			case c == '\n' && d.state == chTrailerStart:
				d.finish(len(p) - i)
				return w, nil
			case c == '\r':
				d.state = chTrailerLF
			case c == '\n':
				d.state = chTrailerStart
			default:
				d.state = chTrailer
			}
		case chTrailerLF:
			if err := d.trailerByte(); err != nil {
				return w, err
			}
			if c != '\n' {
				return w, framingError("trailer line not ended by CRLF").withByte(c)
			}
			d.state = chTrailerStart
		case chEndLF:
			if c != '\n' {
				return w, framingError("body not ended by CRLF").withByte(c)
			}
			d.finish(len(p) - i)
			return w, nil
		}
	}
	return w, nil
}

// endSize handles the byte after a chunk size's last digit.
func (d *bodyDecoder) endSize(c byte) error {
	if err := d.lineByte(); err != nil {
		return err
	}
	switch c {
	case ' ', '\t':
		d.state = chSizeSpace
	case ';':
		d.state = chExt
	case '\r':
		d.state = chSizeLF
	case '\n':
		d.sizeDone()
	default:
		return framingError("chunk size is not hexadecimal").withByte(c)
	}
	return nil
}

// lineByte counts a byte of a size line against maxChunkLine.
func (d *bodyDecoder) lineByte() error {
	d.line++
	if d.line > maxChunkLine {
		return framingError("chunk size line longer than " + strconv.Itoa(maxChunkLine) + " bytes")
	}
	return nil
}

// trailerByte counts a byte of the trailer section against maxTrailerBytes.
func (d *bodyDecoder) trailerByte() error {
	d.line++
	if d.line > maxTrailerBytes {
		return framingError("trailer section longer than " + strconv.Itoa(maxTrailerBytes) + " bytes")
	}
	return nil
}

// sizeDone starts the chunk whose size line just ended: its data, or, for
// the last chunk (size 0), the trailer section.
func (d *bodyDecoder) sizeDone() {
	d.line, d.digit = 0, false
	if d.left == 0 {
		d.state = chTrailerStart
		return
	}
	d.state = chData
}

// finish ends the body; rest bytes of the read follow it.
func (d *bodyDecoder) finish(rest int) {
	d.done = true
	d.extra = rest > 0
}

// eof is the connection's end (read returned 0): nil when the body ended
// there or before, errBodyCut when its framing wanted more.
func (d *bodyDecoder) eof() error {
	if d.done {
		return nil
	}
	if d.kind == bodyUntilClose {
		d.done = true
		return nil
	}
	return errBodyCut
}

func unhex(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}
