package proxy

import (
	"bytes"
	"fmt"
)

// errBareLF: the engine ended its response head with a blank line that is
// not CRLF CRLF. RFC 9112 (2.2) lets a recipient take a bare LF as a line
// end, and nginx and Go's client do; fasthttp's reader takes one inside a
// head but finds its end only at CRLF CRLF, so such a head would be held
// until the first-byte deadline (or, with a chunked body, until the body's
// last chunk, whose CRLF CRLF ends it, with every event read as a header
// before). It is refused as it arrives instead.
var errBareLF = fmt.Errorf("%w: its blank line ends with a bare LF, not CRLF (the gateway reads the end of a head as CRLF CRLF)", errUpstreamHead)

// headScan follows the bytes of a response head as the connection's
// reader reads them, and finds its end as a lenient reader would (the
// first empty line, its line ends LF or CRLF). An end that is not CRLF
// CRLF is errBareLF; at the end of a final head it stops looking (the body
// is not its business); after an interim (1xx) head the next head is
// followed. It looks only at the LF bytes and allocates nothing.
type headScan struct {
	on      bool // a head is being read (readHead)
	line    int  // the current line's bytes so far, its CR included
	cr      bool // the byte before the next one is a CR
	bare    bool // the line before ended with a bare LF
	status  bool // the status line has ended
	interim bool // its code is 1xx
}

// start follows a new response head.
func (h *headScan) start() { *h = headScan{on: true} }

// scan reads b, the next bytes read from the connection.
func (h *headScan) scan(b []byte) error {
	for h.on && len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		seg := b
		if i >= 0 {
			seg = b[:i]
		}
		if !h.status && h.line <= statusCodeAt && statusCodeAt < h.line+len(seg) {
			// "HTTP/1.1 " and the code's first digit.
			h.interim = seg[statusCodeAt-h.line] == '1'
		}
		if len(seg) > 0 {
			h.cr = seg[len(seg)-1] == '\r'
		}
		h.line += len(seg)
		if i < 0 {
			return nil
		}
		b = b[i+1:]
		bare := !h.cr
		empty := h.line == 0 || (h.line == 1 && h.cr)
		switch {
		case empty && !h.status:
			// Blank lines before the status line are skipped.
		case empty:
			if bare || h.bare {
				h.on = false
				return errBareLF
			}
			if h.interim {
				h.start()
				continue
			}
			h.on = false
		default:
			h.status = true
		}
		h.bare, h.line, h.cr = bare, 0, false
	}
	return nil
}

// statusCodeAt is where a status line's code starts.
const statusCodeAt = len("HTTP/1.1 ")
