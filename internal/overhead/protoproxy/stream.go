//go:build linux

package main

import (
	"bytes"
	"errors"
	"strconv"
	"time"

	"github.com/goodput/goodput/meter"
)

// The part both I/O models share: the request head, parsed once, and the
// response, decoded and metered event by event as its bytes are read.

var (
	errRequest  = errors.New("malformed or unsupported request")
	errResponse = errors.New("malformed or unsupported response")
	errTooLarge = errors.New("request or response head over 16 KiB")
)

const maxHead = 16 << 10

// requestLen returns the length of the complete request (head and
// Content-Length body) at the start of b, 0 when b holds only part of one.
// It reads the request line and Content-Length only: the head is
// forwarded as it came (HTTP/1.1 keep-alive, no hop-by-hop headers in the
// yardstick's requests).
func requestLen(b []byte) (int, error) {
	end := bytes.Index(b, []byte("\r\n\r\n"))
	if end < 0 {
		if len(b) > maxHead {
			return 0, errTooLarge
		}
		return 0, nil
	}
	head := b[:end+2]
	line, rest, _ := bytes.Cut(head, []byte("\r\n"))
	if !bytes.HasPrefix(line, []byte("POST ")) || !bytes.HasSuffix(line, []byte(" HTTP/1.1")) {
		return 0, errRequest
	}
	clen := 0
	for len(rest) > 0 {
		var l []byte
		l, rest, _ = bytes.Cut(rest, []byte("\r\n"))
		k, v, ok := bytes.Cut(l, []byte(":"))
		if !ok {
			return 0, errRequest
		}
		switch {
		case bytes.EqualFold(k, []byte("Content-Length")):
			n, err := strconv.Atoi(string(bytes.TrimSpace(v)))
			if err != nil || n < 0 || n > 1<<20 {
				return 0, errRequest
			}
			clen = n
		case bytes.EqualFold(k, []byte("Transfer-Encoding")), bytes.EqualFold(k, []byte("Connection")):
			return 0, errRequest // not what the yardstick sends
		}
	}
	if n := end + 4 + clen; n <= len(b) {
		return n, nil
	}
	return 0, nil
}

// Response decoding states.
const (
	rsHead    = iota // reading the response head
	rsSize           // a chunk-size line
	rsData           // inside a chunk
	rsDataEnd        // the CRLF after a chunk's data
	rsTrailer        // after the last chunk, up to the empty line
	rsDone
)

// stream is one response in flight: its chunked body decoded, each SSE
// event framed, parsed and metered with the time of the read that
// completed it, and re-chunked for the client.
type stream struct {
	st      int
	head    []byte // a response head split across reads (rare)
	size    int64  // chunk bytes still to come
	lineLen int    // bytes of the current trailer line
	framer  meter.SSEFramer
	parser  meter.StreamParser
	meter   meter.Meter
	ev      meter.Event
	info    meter.EventInfo
}

// begin starts a stream for a request read at t0.
func (s *stream) begin(t0 time.Time) {
	s.st, s.head, s.size, s.lineLen = rsHead, s.head[:0], 0, 0
	s.framer.Reset()
	s.parser.Reset()
	s.meter.Start(t0)
}

// finish ends the stream's measures (what the gateway would log).
func (s *stream) finish(rec *meter.Record) { s.meter.Finish(rec) }

// feed decodes p, read from the upstream at t, and appends what the client
// is to receive to out: the response head, then one chunk per event, then
// the terminating chunk. done is true once the response has ended.
func (s *stream) feed(p []byte, t time.Time, out []byte) (_ []byte, done bool, _ error) {
	for len(p) > 0 {
		switch s.st {
		case rsHead:
			h := p
			if len(s.head) > 0 {
				s.head = append(s.head, p...)
				h = s.head
			}
			end := bytes.Index(h, []byte("\r\n\r\n"))
			if end < 0 {
				if len(h) > maxHead {
					return out, false, errTooLarge
				}
				if len(s.head) == 0 {
					s.head = append(s.head, p...)
				}
				return out, false, nil
			}
			head := h[:end+4]
			if !bytes.HasPrefix(head, []byte("HTTP/1.1 200 ")) || !chunked(head) {
				return out, false, errResponse
			}
			out = append(out, head...) // chunked in, re-chunked out: forwarded as it came
			p = h[end+4:]
			s.head = s.head[:0]
			s.st = rsSize
		case rsSize, rsTrailer:
			i := bytes.IndexByte(p, '\n')
			line := p
			if i >= 0 {
				line = p[:i]
			}
			if s.st == rsTrailer {
				s.lineLen += len(bytes.TrimRight(line, "\r"))
				if i >= 0 {
					if s.lineLen == 0 {
						s.st = rsDone
						if len(p) > i+1 {
							return out, true, errResponse // bytes after the response
						}
						out = s.flush(t, out)
						return append(out, "0\r\n\r\n"...), true, nil
					}
					s.lineLen = 0
				}
			} else {
				for _, c := range line {
					switch {
					case c >= '0' && c <= '9':
						s.size = s.size<<4 | int64(c-'0')
					case c|0x20 >= 'a' && c|0x20 <= 'f':
						s.size = s.size<<4 | int64(c|0x20-'a'+10)
					case c == '\r':
					default:
						return out, false, errResponse // extensions: not sent by the engine
					}
					if s.size > 1<<30 {
						return out, false, errResponse
					}
				}
				if i >= 0 {
					if s.size == 0 {
						s.st, s.lineLen = rsTrailer, 0
					} else {
						s.st = rsData
					}
				}
			}
			if i < 0 {
				return out, false, nil
			}
			p = p[i+1:]
		case rsData:
			n := int(min(int64(len(p)), s.size))
			s.framer.Feed(p[:n])
			p, s.size = p[n:], s.size-int64(n)
			var err error
			if out, err = s.events(t, out); err != nil {
				return out, false, err
			}
			if s.size == 0 {
				s.st, s.size = rsDataEnd, 2
			}
		case rsDataEnd:
			n := int(min(int64(len(p)), s.size))
			p, s.size = p[n:], s.size-int64(n)
			if s.size == 0 {
				s.st = rsSize
			}
		case rsDone:
			return out, true, errResponse
		}
	}
	return out, s.st == rsDone, nil
}

// events meters every complete event the framer holds and re-chunks it.
func (s *stream) events(t time.Time, out []byte) ([]byte, error) {
	for {
		ok, err := s.framer.Next(&s.ev)
		if err != nil {
			return out, err
		}
		if !ok {
			return out, nil
		}
		out = s.event(t, out)
	}
}

func (s *stream) event(t time.Time, out []byte) []byte {
	// A malformed event is forwarded and metered as an event without
	// information, as the gateway does.
	_ = s.parser.Parse(meter.APIChat, &s.ev, &s.info)
	s.meter.Observe(&s.info, t)
	return appendChunk(out, s.ev.Raw)
}

// flush forwards what the framer still holds at the end of the body.
func (s *stream) flush(t time.Time, out []byte) []byte {
	for {
		ok, err := s.framer.Flush(&s.ev)
		if err != nil || !ok {
			break
		}
		out = s.event(t, out)
	}
	if rest := s.framer.Rest(); len(rest) > 0 {
		out = appendChunk(out, rest)
	}
	return out
}

func appendChunk(out, data []byte) []byte {
	out = strconv.AppendUint(out, uint64(len(data)), 16)
	out = append(out, '\r', '\n')
	out = append(out, data...)
	return append(out, '\r', '\n')
}

// chunked reports whether a response head has Transfer-Encoding: chunked.
func chunked(head []byte) bool {
	_, rest, _ := bytes.Cut(head, []byte("\r\n"))
	for len(rest) > 0 {
		var l []byte
		l, rest, _ = bytes.Cut(rest, []byte("\r\n"))
		k, v, _ := bytes.Cut(l, []byte(":"))
		if bytes.EqualFold(k, []byte("Transfer-Encoding")) {
			return bytes.EqualFold(bytes.TrimSpace(v), []byte("chunked"))
		}
	}
	return false
}
