package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"net"
	"syscall"
)

// go-redis allocates what a reply announces before it reads it: a bulk
// string of n bytes is a make([]byte, n+2), an array of n elements a
// make([]any, n). A server (or anything at its address) that announces
// $99999999999 kills the process (runtime: out of memory), and one that
// announces a gigabyte holds it. go-redis has no limit of its own, so every
// connection it makes reads through a boundedConn, which follows the RESP
// stream as it is read and fails the read, before go-redis sees the
// announcement, when one is over these limits. go-redis then closes the
// connection (a read error), and the call fails as any backend error does.
const (
	// maxReplyBulk bounds a bulk string (and a line). The gateway's replies
	// are a few hundred bytes; CLUSTER SLOTS, NODES and INFO at most
	// hundreds of KiB.
	maxReplyBulk = 4 << 20
	// maxReplyElements bounds the elements announced and not yet read, all
	// arrays, sets, maps (two per entry) and attributes of a reply
	// together, so that nested announcements cannot add up: 16 times
	// CLUSTER SLOTS's largest reply (16384 ranges); an []any that long is
	// 4 MiB.
	maxReplyElements = 1 << 18
	// maxReplyDepth bounds how deeply aggregates nest: go-redis reads a
	// nested reply by recursion, so a chain of one-element arrays, which
	// never has more than one element pending, grows one goroutine's stack
	// with its depth until the runtime ends the process (stack overflow,
	// at 3 million levels, 12 MB on the wire). CLUSTER SLOTS and SHARDS
	// nest 4 or 5 levels.
	maxReplyDepth = 32
)

// errReplyRefused is the failure of a read that brought a reply over the
// limits, or bytes that are not RESP (see replyRefused).
var errReplyRefused = errors.New("redis reply refused")

// replyRefused is a read that the respScanner refused: errReplyRefused
// (errors.Is), saying what it refused. It has no Unwrap: go-redis unwraps
// the error of a new connection's handshake once (initPooledConn), and a
// wrapped errReplyRefused left only its own words, "redis reply refused",
// without what: a gateway pointed at a server that is not Redis logged
// just that.
type replyRefused struct{ what string }

func (e *replyRefused) Error() string        { return errReplyRefused.Error() + ": " + e.what }
func (e *replyRefused) Is(target error) bool { return target == errReplyRefused }

func refused(format string, args ...any) error {
	return &replyRefused{fmt.Sprintf(format, args...)}
}

// boundedDialer wraps dial so that every connection it makes reads through
// a boundedConn.
func boundedDialer(dial func(ctx context.Context, network, addr string) (net.Conn, error)) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return newBoundedConn(c), nil
	}
}

// newBoundedConn wraps c. A connection that gives access to its socket
// (syscall.Conn: TCP, Unix) keeps it: go-redis's pool peeks at an idle
// connection's socket to find the ones the server closed. Reads through
// the wrapper buffer nothing, so what the socket holds is still what
// go-redis has not read.
func newBoundedConn(c net.Conn) net.Conn {
	b := &boundedConn{Conn: c}
	if sc, ok := c.(syscall.Conn); ok {
		return &boundedSysConn{boundedConn: b, sc: sc}
	}
	return b
}

// boundedConn is a connection whose reads are checked by a respScanner.
// Once a read fails the check, every later read fails the same way.
type boundedConn struct {
	net.Conn
	scan respScanner
	err  error
}

func (c *boundedConn) Read(p []byte) (int, error) {
	if c.err != nil {
		return 0, c.err
	}
	n, err := c.Conn.Read(p)
	if n > 0 {
		if serr := c.scan.scan(p[:n]); serr != nil {
			// None of these bytes reach go-redis: the announcement is
			// in them, or in the line they end.
			c.err = serr
			return 0, serr
		}
	}
	return n, err
}

type boundedSysConn struct {
	*boundedConn
	sc syscall.Conn
}

func (c *boundedSysConn) SyscallConn() (syscall.RawConn, error) { return c.sc.SyscallConn() }

// respScanner follows a stream of RESP2 and RESP3 replies byte by byte,
// across reads split anywhere, and reports the first announcement over the
// limits. It keeps no bytes (a length is parsed as its digits come) and
// allocates nothing unless it refuses. It reads the stream as go-redis does
// (a line ends at '\n'; a bulk string's payload and its CRLF are counted,
// not checked) and refuses what go-redis would refuse anyway (an unknown
// type, a length that is not a number, a negative one other than -1), since
// past such bytes the two could read the stream differently. The streamed
// forms of RESP3 ($? with ; chunks, *? %? ~? ending with .) are followed,
// though go-redis refuses them: an element of a streamed aggregate counts
// against the aggregate around it, if any, which only loosens the limit.
type respScanner struct {
	state    uint8
	typ      byte  // the type of the line being read
	streamed bool  // a length line's "?" came: a streamed form's start
	n        int64 // a length line: the number so far; another line: its length so far
	skip     int64 // bytes of a bulk payload (with its CRLF) still to come
	pending  int64 // aggregate elements announced and not yet begun
	// The aggregates open around the next element, innermost last: the
	// elements each still has to begin (-1: a streamed one, ended by ".").
	open  [maxReplyDepth]int64
	depth int
}

const (
	scanType   uint8 = iota // the next byte starts a line: its type
	scanLine                // in a line without a length (+ - : _ , # ( .)
	scanLen                 // a length line's first byte
	scanDigits              // in a length line's digits
	scanMinus               // a length line's '-' came; only "-1" is a length
	scanNone                // a length line's "-1" or "?" came: no payload, no elements
	scanCR                  // a length line's '\r' came; '\n' ends it
	scanBulk                // in a bulk payload
)

func (s *respScanner) scan(p []byte) error {
	for i := 0; i < len(p); i++ {
		c := p[i]
		switch s.state {
		case scanBulk:
			k := min(int64(len(p)-i), s.skip)
			s.skip -= k
			i += int(k) - 1
			if s.skip == 0 {
				s.state = scanType
			}
		case scanType:
			s.typ, s.n = c, 0
			switch c {
			case '+', '-', ':', '_', ',', '#', '(':
				s.state = scanLine
			case '$', '!', '=', '*', '~', '>', '%':
				s.state = scanLen
			case '|', ';': // an attribute, a streamed string's chunk: not elements
				s.state = scanLen
				continue
			case '.': // the end of a streamed aggregate: not an element
				s.state = scanLine
				s.closeDone()
				if s.depth > 0 && s.open[s.depth-1] < 0 {
					s.depth--
				}
				continue
			default:
				return refused("a reply of unknown type %q (not Redis's protocol: is a Redis at that address?)", c)
			}
			if s.pending > 0 {
				s.pending--
			}
			// An element begins: of the innermost aggregate still open.
			s.closeDone()
			if s.depth > 0 && s.open[s.depth-1] > 0 {
				s.open[s.depth-1]--
			}
		case scanLine:
			if c == '\n' {
				s.state = scanType
			} else if s.n++; s.n > maxReplyBulk {
				return refused("a %q line of more than %d bytes", s.typ, maxReplyBulk)
			}
		case scanLen:
			switch {
			case c >= '0' && c <= '9':
				s.state, s.n = scanDigits, int64(c-'0')
			case c == '-' && s.typ != ';':
				s.state = scanMinus
			case c == '?' && s.typ != ';' && s.typ != '|':
				s.state, s.streamed = scanNone, true
			default:
				return s.malformed()
			}
		case scanDigits:
			switch {
			case c >= '0' && c <= '9':
				s.n = s.n*10 + int64(c-'0')
				if err := s.check(); err != nil {
					return err
				}
			case c == '\r':
				s.state = scanCR
			default:
				return s.malformed()
			}
		case scanMinus:
			if c != '1' {
				return s.malformed()
			}
			s.state = scanNone
		case scanNone:
			if c != '\r' {
				return s.malformed()
			}
			s.state, s.n = scanCR, -1
		case scanCR:
			if c != '\n' {
				return s.malformed()
			}
			s.state = scanType
			streamed := s.streamed
			s.streamed = false
			switch {
			case s.n < 0 && streamed && s.typ != '$': // a streamed aggregate's start
				if err := s.openAggregate(-1); err != nil {
					return err
				}
			case s.n < 0: // a null, or a streamed string's start
			case s.typ == '*' || s.typ == '~' || s.typ == '>':
				s.pending += s.n
				if err := s.openAggregate(s.n); err != nil {
					return err
				}
			case s.typ == '%' || s.typ == '|':
				s.pending += 2 * s.n
				if err := s.openAggregate(2 * s.n); err != nil {
					return err
				}
			case s.typ == ';' && s.n == 0: // a streamed string's last chunk
			default:
				s.state, s.skip = scanBulk, s.n+2
			}
		}
	}
	return nil
}

// closeDone closes the innermost aggregates whose every element has begun
// (and so, as an element begins or a streamed aggregate ends, ended).
func (s *respScanner) closeDone() {
	for s.depth > 0 && s.open[s.depth-1] == 0 {
		s.depth--
	}
}

// openAggregate opens an aggregate of n elements (-1: streamed) inside the
// ones open, or refuses one nested too deeply. One of no elements opens
// nothing.
func (s *respScanner) openAggregate(n int64) error {
	if n == 0 {
		return nil
	}
	// The aggregates around it stay open though this is their last
	// element: go-redis reads it inside them (closeDone closes them at
	// the next element).
	if s.depth == maxReplyDepth {
		return refused("it nests aggregates more than %d deep", maxReplyDepth)
	}
	s.open[s.depth] = n
	s.depth++
	return nil
}

// check refuses a length, as its digits come, that is already over the
// limits.
func (s *respScanner) check() error {
	switch s.typ {
	case '*', '~', '>':
		if s.pending+s.n > maxReplyElements {
			return refused("it announces more than %d elements", maxReplyElements)
		}
	case '%', '|':
		if s.pending+2*s.n > maxReplyElements {
			return refused("it announces more than %d elements", maxReplyElements)
		}
	default:
		if s.n > maxReplyBulk {
			return refused("it announces a %q of more than %d bytes", s.typ, maxReplyBulk)
		}
	}
	return nil
}

func (s *respScanner) malformed() error {
	return refused("a malformed %q length", s.typ)
}
