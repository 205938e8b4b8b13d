package proxy

import (
	"bytes"
	"errors"
)

// errBareLFRequest: a client's request head has a line that ends with a
// bare LF instead of CRLF. fasthttp reads a bare LF inside a head, but
// finds a head's end only where a CRLF CRLF is, so such a head waited for
// timeouts.read_header before it got its 408 (or, with a CRLF CRLF further
// on, in a body, was read with the bare LF blank line as its end). RFC 9112
// (2.2) lets a recipient take a bare LF as a line end, or not; when two
// HTTP readers on a request's way differ there (a proxy in front that
// keeps a bare LF inside a field value, where the gateway would end the
// line), the request can be read as two (request smuggling: CVE-2022-32214
// in Node.js, whose parser refuses a bare LF since). No HTTP client
// library sends one, so the gateway refuses such a head at once (400, and
// a record) rather than read it either way.
var errBareLFRequest = errors.New("a line of the request head ends with a bare LF, not CRLF")

// reqHeadScan follows the bytes of a client's request head as the
// connection reads them (listenerConn.Read), and finds a line that ends
// with a bare LF before fasthttp sees it. It follows a head from the
// connection's first byte and from each wait for a next request
// (connState), up to the blank line that ends it, and then its body:
// a chunked body's framing, up to the blank line that ends its trailer
// section (the chunk-size lines and the trailer's lines are lines too, RFC
// 9112, 7.1, and fasthttp, strict on the others, took a bare LF for the
// trailer section's end, "0\r\n\n", reading what followed as the next
// request where a proxy in front that reads lines only at CRLF reads it as
// the trailer), its chunks' data skipped; a body of known length
// (Content-Length) skipped whole. A request read with the bytes of the one
// before it (pipelined) is then followed from its first byte too, and
// the next wait for a request (arm) goes on with it. Framing fields are
// read as fasthttp reads them, whatever their length, folded lines (RFC
// 9112, 5.2: obs-fold) joined to them: a request behind one the scan could
// not read would not be followed. A head whose framing the scan cannot
// tell (a length it does not read, which fasthttp refuses) ends the scan
// at the head's end; a request whose first byte came with an earlier read
// that the scan did not follow began where it cannot see: the handler
// checks its header lines as they came (hasBareLF). Leading empty lines are
// skipped, as fasthttp skips them (RFC 9112, 2.2: a stray CRLF after an
// earlier body). It allocates nothing.
type reqHeadScan struct {
	on    bool // following a request
	read  bool // a byte was read since the scan was armed
	begun bool // the request line has begun
	cr    bool // the byte before the next one is a CR
	bad   bool // a bare LF was found: the connection reads nothing more
	line  int  // the current line's bytes so far, its CR included
	// next: this request was reached by following the one before it to its
	// end, not armed: the scan knows where it begins (arm goes on with it).
	next bool
	// The current field line's first bytes (ln[:lnN]), to find its framing
	// (framingField): chunked, a Transfer-Encoding of chunked; clen, a
	// Content-Length (-1: none); lost, a framing field the scan cannot read.
	ln                    [48]byte
	lnN                   int
	chunked, lost, hasLen bool
	clen                  int64
	// A field line longer than ln: long, its name told (longKind: a
	// framing field's, framingCL or framingTE, a folded line that
	// continues one, framingFold, or none), and a framing field's value
	// read as it comes (val). pend: the last field line's framing field,
	// told once the lines that fold into it have come (settle).
	long           bool
	longKind, pend int8
	val            fieldValue
	// body: following the body (after the head's blank line). left: a
	// body of known length, or the current chunk's data and its CRLF, still
	// to skip; in a chunk-size line, size is the size read so far (sizeEnd:
	// its digits have ended); trailer: the last chunk has come.
	body, sizeEnd, trailer bool
	left, size             int64
}

// arm follows the next bytes read as a new request head, unless the scan
// already follows the request after the one just served (next: it
// followed that one to its end, and knows where the next begins, read or
// not), or has found a bare LF in a request read with it (bad: the
// connection reads nothing more).
func (h *reqHeadScan) arm() {
	if h.bad {
		return // found in a request read with one served since: it stays refused
	}
	if h.on && h.next {
		h.read = true
		return
	}
	*h = reqHeadScan{on: true}
}

// active is told that a request's first byte has come: if none was read
// since the scan was armed, the request came with an earlier read, and
// the scan does not follow it.
func (h *reqHeadScan) active() {
	if !h.read {
		h.on = false
	}
}

// follow starts on the request after one followed to its end.
func (h *reqHeadScan) follow() { *h = reqHeadScan{on: true, read: true, next: true} }

// maxChunkFollow: a chunk size or a length past which the body is no
// longer followed (fasthttp refuses sizes of more than 16 hex digits, and
// the body limit far smaller ones).
const maxChunkFollow = 1 << 40

// scan reads b, the next bytes read from the connection. It returns how
// many of them to pass on: all of them, or those before a bare LF line end
// (then bad is set).
func (h *reqHeadScan) scan(b []byte) int {
	h.read = true
	off := 0
	for h.on && off < len(b) {
		if h.body && h.left > 0 {
			// A body of known length, or a chunk's data and the CRLF
			// after it (fasthttp checks that).
			n := int64(len(b) - off)
			if n > h.left {
				n = h.left
			}
			h.left -= n
			off += int(n)
			if h.left == 0 && !h.chunked {
				h.follow()
			}
			continue
		}
		i := bytes.IndexByte(b[off:], '\n')
		seg := b[off:]
		if i >= 0 {
			seg = seg[:i]
		}
		if len(seg) > 0 {
			h.cr = seg[len(seg)-1] == '\r'
		}
		switch {
		case h.body && !h.trailer:
			h.chunkSize(seg)
		case !h.body && h.begun:
			n := copy(h.ln[h.lnN:], seg)
			if h.lnN += n; n < len(seg) {
				h.longField(seg[n:])
			}
		}
		h.line += len(seg)
		if i < 0 {
			break
		}
		lf := off + i
		off = lf + 1
		empty := h.line == 0 || (h.line == 1 && h.cr)
		switch {
		case empty && !h.begun:
			// An empty line before the request line: skipped.
		case !h.cr:
			h.on, h.bad = false, true
			return lf
		case h.body && !h.trailer:
			// A chunk-size line: its data follows, or the trailer.
			if h.size == 0 {
				h.trailer = true
			}
			h.left, h.size, h.sizeEnd = h.size+2, 0, false
			if h.trailer {
				h.left = 0
			}
		case empty && h.body:
			h.follow() // the trailer section's end: the request's
			continue
		case empty:
			// The head's end: its body follows, if it has one.
			h.settle()
			switch {
			case h.lost:
				h.on = false
			case h.chunked:
				h.body = true
			case h.hasLen && h.clen > 0:
				h.body, h.left = true, h.clen
			default:
				h.follow()
				continue
			}
		case h.body:
			// A trailer field line (the handler refuses the request).
		default:
			if h.begun {
				h.framingField()
			}
			h.begun = true
		}
		h.line, h.cr, h.lnN, h.long = 0, false, 0, false
	}
	return len(b)
}

// chunkSize reads seg, the next bytes of a chunk-size line: the size's
// hex digits, then an extension (not read). A size too large to follow
// ends the scan (fasthttp refuses it, or the body limit does).
func (h *reqHeadScan) chunkSize(seg []byte) {
	for _, c := range seg {
		if h.sizeEnd {
			return
		}
		var d int64
		switch {
		case '0' <= c && c <= '9':
			d = int64(c - '0')
		case 'a' <= c && c <= 'f':
			d = int64(c-'a') + 10
		case 'A' <= c && c <= 'F':
			d = int64(c-'A') + 10
		default:
			h.sizeEnd = true
			return
		}
		if h.size = h.size<<4 | d; h.size > maxChunkFollow {
			h.on = false
			return
		}
	}
}

// framingField reads a field line that has ended (its first bytes in
// h.ln, its length h.line, its CR included) for the request's framing, as
// fasthttp reads it: a name in any case, spaces or tabs around the colon
// and the value; a Transfer-Encoding of chunked (in any case), a
// Content-Length of digits. A Transfer-Encoding of another value, which
// fasthttp serves only beside a Content-Length, leaves the length to
// frame the body. A line longer than ln has had its value read as it came
// (longField). A folded line (obs-fold) continues the field before it:
// fasthttp joins their values, trimmed, with a space; a framing field's
// is told once no more lines fold into it (settle). A framing field the
// scan cannot read (a length of other bytes) is lost: fasthttp refuses it.
func (h *reqHeadScan) framingField() {
	line := h.ln[:h.lnN]
	if len(line) > 0 && (line[0] == ' ' || line[0] == '\t') {
		if h.pend != framingNone && !h.long {
			h.val.feed(line) // a long one was fed as it came (longField)
		}
		return
	}
	h.settle()
	kind := h.longKind
	if !h.long {
		var value []byte
		if kind, value = framingName(line); kind != framingNone {
			h.val = fieldValue{}
			h.val.feed(value)
		}
	}
	h.pend = kind
}

// settle tells the framing field of the last field line, its folded lines
// read (h.pend, its value in h.val), if it has one.
func (h *reqHeadScan) settle() {
	switch h.pend {
	case framingTE:
		if h.val.isChunked() {
			h.chunked = true
		}
	case framingCL:
		n, ok := h.val.length()
		if !ok || h.hasLen {
			h.lost = true // fasthttp refuses it
		} else {
			h.hasLen, h.clen = true, n
		}
	}
	h.pend = framingNone
}

// The framing fields framingName tells.
const (
	framingNone int8 = iota
	framingCL
	framingTE
	framingFold // longField: a folded line that continues one of them
)

// framingName tells whether line, a field line's first bytes, is a
// Content-Length's or a Transfer-Encoding's, and returns the bytes after
// its colon.
func framingName(line []byte) (kind int8, value []byte) {
	// Other fields, most lines, are told apart by their first letter,
	// then their name's length, before a name is compared: the scan runs
	// on every request's head.
	if len(line) == 0 || line[0]|0x20 != 'c' && line[0]|0x20 != 't' {
		return framingNone, nil
	}
	c := bytes.IndexByte(line, ':')
	if c < 0 {
		// No colon in what the scan keeps: a name longer than any framing
		// field's (fasthttp refuses spaces before the colon).
		return framingNone, nil
	}
	name := line[:c]
	for len(name) > 0 && (name[len(name)-1] == ' ' || name[len(name)-1] == '\t') {
		name = name[:len(name)-1]
	}
	switch {
	case len(name) == len("transfer-encoding") && bytes.EqualFold(name, []byte("transfer-encoding")):
		return framingTE, line[c+1:]
	case len(name) == len("content-length") && bytes.EqualFold(name, []byte("content-length")):
		return framingCL, line[c+1:]
	}
	return framingNone, nil
}

// longField reads rest, the next bytes of a field line longer than ln
// (which holds its first bytes): a framing field's value is read as it
// comes, whatever its length (spaces before it, a length's leading zeros).
func (h *reqHeadScan) longField(rest []byte) {
	if !h.long {
		h.long = true
		switch {
		case h.ln[0] == ' ' || h.ln[0] == '\t':
			// A folded line: it goes on with a framing field's value,
			// or with another field's.
			h.longKind = framingNone
			if h.pend != framingNone {
				h.longKind = framingFold
				h.val.feed(h.ln[:])
			}
		default:
			// A field line of its own: the field before it has had all
			// its folded lines, and is told before h.val is this one's.
			h.settle()
			var value []byte
			if h.longKind, value = framingName(h.ln[:]); h.longKind != framingNone {
				h.val = fieldValue{}
				h.val.feed(value)
			}
		}
	}
	if h.longKind != framingNone {
		h.val.feed(rest)
	}
}

// fieldValue reads a framing field's value, after its colon, in pieces:
// spaces and tabs around it (and the line's CR) are not of it, as
// fasthttp trims them; a byte after them is (fasthttp refuses such a
// value, with a space or a tab inside it, for either field).
type fieldValue struct {
	n          int   // the value's bytes so far
	after      bool  // a space, a tab or a CR after the value's bytes
	inner      bool  // a byte after those: a value with a space inside
	num        int64 // its digits, as a length
	nonDigit   bool
	over       bool // a length past maxChunkFollow
	notChunked bool
}

func (v *fieldValue) feed(b []byte) {
	for _, c := range b {
		if c == ' ' || c == '\t' || c == '\r' {
			v.after = v.n > 0
			continue
		}
		if v.after {
			v.inner = true
		}
		if v.n >= len("chunked") || c|0x20 != "chunked"[v.n] {
			v.notChunked = true
		}
		v.n++
		if c < '0' || c > '9' {
			v.nonDigit = true
		} else if !v.over {
			if v.num = v.num*10 + int64(c-'0'); v.num > maxChunkFollow {
				v.over = true
			}
		}
	}
}

// isChunked reports whether the value is chunked, in any case.
func (v *fieldValue) isChunked() bool {
	return v.n == len("chunked") && !v.notChunked && !v.inner
}

// length returns the value as a length; ok is false for one fasthttp
// refuses, or one too large to follow.
func (v *fieldValue) length() (n int64, ok bool) {
	return v.num, v.n > 0 && !v.nonDigit && !v.inner && !v.over
}
