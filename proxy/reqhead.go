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
// (connState), up to the blank line that ends it: a body is never
// scanned. A request whose head was already read with the previous one's
// bytes (pipelined) began where the scan cannot see: the handler checks
// its header lines as they came (hasBareLF). Leading empty lines are skipped, as fasthttp skips
// them (RFC 9112, 2.2: a stray CRLF after an earlier body). It allocates
// nothing.
type reqHeadScan struct {
	on    bool // following a head
	read  bool // a byte was read since the scan was armed
	begun bool // the request line has begun
	cr    bool // the byte before the next one is a CR
	bad   bool // a bare LF was found: the connection reads nothing more
	line  int  // the current line's bytes so far, its CR included
}

// arm follows the next bytes read as a new request head.
func (h *reqHeadScan) arm() { *h = reqHeadScan{on: true} }

// active is told that a request's first byte has come: if none was read
// since the scan was armed, the request came with an earlier read, and
// the scan does not follow it.
func (h *reqHeadScan) active() {
	if !h.read {
		h.on = false
	}
}

// scan reads b, the next bytes read from the connection. It returns how
// many of them to pass on: all of them, or those before a bare LF line end
// (then bad is set).
func (h *reqHeadScan) scan(b []byte) int {
	h.read = true
	off := 0
	for h.on && off < len(b) {
		i := bytes.IndexByte(b[off:], '\n')
		seg := b[off:]
		if i >= 0 {
			seg = seg[:i]
		}
		if len(seg) > 0 {
			h.cr = seg[len(seg)-1] == '\r'
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
		case empty:
			h.on = false // the head's end: its body is not looked at
		default:
			h.begun = true
		}
		h.line, h.cr = 0, false
	}
	return len(b)
}
