package main

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"
)

// sseReader decodes an HTTP/1.1 response (status line, headers, then a
// chunked or length-delimited body) fed to it as it arrives, splits the
// body into SSE events at blank lines ("\n\n") and stamps each event with
// the time of the read that completed it.
type sseReader struct {
	hdr       []byte // header bytes until the blank line
	inBody    bool
	chunked   bool
	remaining int64 // chunk (or Content-Length body) bytes still to come
	st        int   // chunked state
	sizeLine  []byte
	prevLF    bool // the last body byte was '\n'
	keepAlive bool
	done      bool
	stamps    []int64 // arrival time of each event
}

const (
	stSize    = iota // reading a chunk-size line
	stData           // inside a chunk
	stDataEnd        // the CRLF after a chunk
	stTrailer        // after the last chunk, up to the blank line
)

func (r *sseReader) reset(stamps []int64) {
	*r = sseReader{hdr: r.hdr[:0], sizeLine: r.sizeLine[:0], stamps: stamps}
}

// feed consumes b, read at time t. It returns true once the response is
// complete (any bytes after it are an error: the client sends one request
// at a time).
func (r *sseReader) feed(b []byte, t int64) (bool, error) {
	for len(b) > 0 {
		if r.done {
			return true, errors.New("bytes after the end of the response")
		}
		if !r.inBody {
			old := len(r.hdr)
			r.hdr = append(r.hdr, b...)
			j := bytes.Index(r.hdr[max(0, old-3):], []byte("\r\n\r\n"))
			if j < 0 {
				if len(r.hdr) > 16<<10 {
					return false, errors.New("response headers over 16 KiB")
				}
				return false, nil
			}
			end := max(0, old-3) + j + 4 // end of the headers in r.hdr
			b = b[end-old:]
			r.hdr = r.hdr[:end]
			if err := r.parseHeader(); err != nil {
				return false, err
			}
			continue
		}
		if !r.chunked {
			n := int64(len(b))
			if n > r.remaining {
				return false, errors.New("bytes after the end of the response")
			}
			r.body(b, t)
			r.remaining -= n
			b = b[n:]
			if r.remaining == 0 {
				r.done = true
			}
			continue
		}
		switch r.st {
		case stSize, stTrailer:
			i := bytes.IndexByte(b, '\n')
			if i < 0 {
				r.sizeLine = append(r.sizeLine, b...)
				b = nil
				continue
			}
			r.sizeLine = append(r.sizeLine, b[:i]...)
			b = b[i+1:]
			line := bytes.TrimRight(r.sizeLine, "\r")
			r.sizeLine = r.sizeLine[:0]
			if r.st == stTrailer {
				if len(line) == 0 {
					r.done = true
				}
				continue
			}
			size, _, _ := bytes.Cut(line, []byte(";"))
			n, err := strconv.ParseInt(string(bytes.TrimSpace(size)), 16, 64)
			if err != nil || n < 0 {
				return false, fmt.Errorf("chunk size line %q", line)
			}
			if n == 0 {
				r.st = stTrailer
			} else {
				r.remaining, r.st = n, stData
			}
		case stData:
			n := min(int64(len(b)), r.remaining)
			r.body(b[:n], t)
			r.remaining -= n
			b = b[n:]
			if r.remaining == 0 {
				r.st, r.remaining = stDataEnd, 2
			}
		case stDataEnd:
			n := min(int64(len(b)), r.remaining)
			r.remaining -= n
			b = b[n:]
			if r.remaining == 0 {
				r.st = stSize
			}
		}
	}
	return r.done, nil
}

// body scans body bytes for event ends.
func (r *sseReader) body(b []byte, t int64) {
	for len(b) > 0 {
		if r.prevLF && b[0] == '\n' {
			r.stamps = append(r.stamps, t)
			r.prevLF = false
			b = b[1:]
			continue
		}
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			r.prevLF = false
			return
		}
		if i+1 < len(b) && b[i+1] == '\n' {
			r.stamps = append(r.stamps, t)
			r.prevLF = false
			b = b[i+2:]
			continue
		}
		r.prevLF = i == len(b)-1
		b = b[i+1:]
	}
}

func (r *sseReader) parseHeader() error {
	lines := bytes.Split(bytes.TrimRight(r.hdr, "\r\n"), []byte("\r\n"))
	status := lines[0]
	if !bytes.HasPrefix(status, []byte("HTTP/1.1 200")) {
		return fmt.Errorf("status %q", status)
	}
	r.keepAlive = true
	haveLen := false
	for _, l := range lines[1:] {
		k, v, _ := bytes.Cut(l, []byte(":"))
		v = bytes.TrimSpace(v)
		switch {
		case bytes.EqualFold(k, []byte("Transfer-Encoding")):
			r.chunked = bytes.Contains(bytes.ToLower(v), []byte("chunked"))
		case bytes.EqualFold(k, []byte("Content-Length")):
			n, err := strconv.ParseInt(string(v), 10, 64)
			if err != nil || n < 0 {
				return fmt.Errorf("Content-Length %q", v)
			}
			r.remaining, haveLen = n, true
		case bytes.EqualFold(k, []byte("Connection")):
			if bytes.EqualFold(v, []byte("close")) {
				r.keepAlive = false
			}
		}
	}
	if !r.chunked && !haveLen {
		return errors.New("response neither chunked nor with a Content-Length")
	}
	r.inBody = true
	if !r.chunked && r.remaining == 0 {
		r.done = true
	}
	return nil
}

// conn is one of the client's keep-alive connections.
type conn struct {
	addr string
	c    net.Conn
	buf  []byte
	req  []byte
	rd   sseReader
}

const requestBody = `{"model":"bench","stream":true,"stream_options":{"include_usage":true},"max_tokens":128,"messages":[{"role":"user","content":"Say something."}]}`

// do sends request id and reads its response. It returns the send time,
// the arrival time of every event (valid until the next call) and an error.
func (c *conn) do(clk clock, id uint64) (int64, []int64, error) {
	if c.c == nil {
		nc, err := net.DialTimeout("tcp", c.addr, 5*time.Second)
		if err != nil {
			return 0, nil, err
		}
		c.c = nc
	}
	c.req = append(c.req[:0], "POST /v1/chat/completions HTTP/1.1\r\nHost: bench\r\nContent-Type: application/json\r\nAccept: text/event-stream\r\nX-Bench-Id: "...)
	c.req = strconv.AppendUint(c.req, id, 10)
	c.req = append(c.req, "\r\nContent-Length: "...)
	c.req = strconv.AppendInt(c.req, int64(len(requestBody)), 10)
	c.req = append(c.req, "\r\n\r\n"...)
	c.req = append(c.req, requestBody...)
	c.rd.reset(c.rd.stamps[:0])
	sent := clk.now()
	if _, err := c.c.Write(c.req); err != nil {
		c.close()
		return 0, nil, err
	}
	if c.buf == nil {
		c.buf = make([]byte, 16<<10)
	}
	_ = c.c.SetReadDeadline(time.Now().Add(30 * time.Second))
	for {
		n, err := c.c.Read(c.buf)
		t := clk.now()
		if n > 0 {
			done, ferr := c.rd.feed(c.buf[:n], t)
			if ferr != nil {
				c.close()
				return 0, nil, ferr
			}
			if done {
				if !c.rd.keepAlive {
					c.close()
				}
				return sent, c.rd.stamps, nil
			}
		}
		if err != nil {
			c.close()
			return 0, nil, fmt.Errorf("reading the response: %w", err)
		}
	}
}

func (c *conn) close() {
	if c.c != nil {
		_ = c.c.Close()
		c.c = nil
	}
}
