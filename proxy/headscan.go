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
// first empty line, its line ends LF or CRLF). A final head's end that
// fasthttp would not find is errBareLF: a bare LF blank line, or a CRLF
// one after a field line that ended with a bare LF (a status line alone,
// then CRLF, it reads); at the end of a final head it stops looking (the
// body is not its business). An interim (1xx) head may end either way
// (fasthttp reads it once the final head's CRLF CRLF is there), and the
// next head is followed. It looks only at the LF bytes (and the status
// line's first bytes) and allocates nothing.
type headScan struct {
	on     bool // a head is being read (readHead)
	bad    bool // errBareLF was found: the head is refused, however fasthttp read it
	line   int  // the current line's bytes so far, its CR included
	cr     bool // the byte before the next one is a CR
	bare   bool // the line before ended with a bare LF
	status bool // the status line has ended
	fields bool // a field line has ended
	// The status line's first bytes, for its code (statusInterim).
	st  [24]byte
	stn int
	// cl: the final head has a Content-Length field. With Transfer-Encoding
	// beside it the body is read as chunked (RFC 9112, 6.3: the
	// Transfer-Encoding overrides), and the connection is not used again:
	// a reader that took the Content-Length would see the next answer
	// elsewhere than the gateway does (response splitting). clm is how far
	// the current field line's start matches "content-length", -1 once it
	// cannot.
	cl  bool
	clm int8
	// te: the final head has a Transfer-Encoding field, and tem follows
	// its name as clm does. fasthttp ignores the field in an HTTP/1.0
	// head, whose framing is then in doubt (RFC 9112, 6.1): the
	// connection is not used again.
	te  bool
	tem int8
}

// The field names cl and te look for, in lower case.
const (
	clName = "content-length"
	teName = "transfer-encoding"
)

// matchField follows seg, the next bytes of a field line, against name
// (m: how far the line's start matched it, -1 once it cannot) and then the
// spaces or tabs before its colon (fasthttp reads a name with spaces there
// as the field, and refuses the head for a tab: noting it too does no
// harm); it sets *hit at the colon.
func matchField(seg []byte, name string, m *int8, hit *bool) {
	for _, c := range seg {
		if int(*m) < len(name) {
			if 'A' <= c && c <= 'Z' {
				c += 'a' - 'A'
			}
			if c != name[*m] {
				*m = -1
				return
			}
			*m++
			continue
		}
		switch c {
		case ':':
			*hit = true
			*m = -1
			return
		case ' ', '\t':
		default:
			*m = -1
			return
		}
	}
}

// errHTTP2 is an answer that began with an HTTP/2 frame.
var errHTTP2 = fmt.Errorf("%w: it began with an HTTP/2 frame (an engine that speaks only HTTP/2, h2c); the gateway speaks HTTP/1.1 to the engine: give an upstream that serves HTTP/1.1", errUpstreamHead)

// http2 reports a head whose first bytes are an HTTP/2 frame header on
// stream 0, a SETTINGS or GOAWAY frame: what a server that speaks only
// HTTP/2 sends first (its preface), then as it refuses an HTTP/1.1
// request. An HTTP/1.x head begins with "HTTP/".
func (h *headScan) http2() bool {
	st := h.st[:h.stn]
	return len(st) >= 9 && st[0] == 0 && (st[3] == 4 || st[3] == 7) && st[5]&0x7f|st[6]|st[7]|st[8] == 0
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
		if !h.status {
			h.stn += copy(h.st[h.stn:], seg)
		} else {
			if h.clm >= 0 {
				matchField(seg, clName, &h.clm, &h.cl)
			}
			if h.tem >= 0 {
				matchField(seg, teName, &h.tem, &h.te)
			}
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
			h.stn = 0
		case empty && statusInterim(h.st[:h.stn]):
			h.start()
			continue
		case empty:
			h.on = false
			if bare || (h.bare && h.fields) {
				h.bad = true
				return errBareLF
			}
		case h.status:
			h.fields = true
		default:
			h.status = true
		}
		h.bare, h.line, h.cr, h.clm, h.tem = bare, 0, false, 0, 0
	}
	return nil
}

// statusInterim reports whether a status line's start ("HTTP/1.1 100
// Continue") holds a 1xx code: the first digit after the spaces that
// follow the version, as fasthttp reads it.
func statusInterim(st []byte) bool {
	i := bytes.IndexByte(st, ' ')
	if i < 0 {
		return false
	}
	for i < len(st) && st[i] == ' ' {
		i++
	}
	return i < len(st) && st[i] == '1'
}
