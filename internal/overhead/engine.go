package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// clock is the one monotonic clock the engine and the client stamp with
// (nanoseconds since the benchmark started).
type clock struct{ base time.Time }

func (c clock) now() int64 { return int64(time.Since(c.base)) }

// plan is what the scripted engine generates for one request: its time to
// first token and the gap before each later token, all drawn from the
// seed and the request's id, so that the same id gets the same stream
// through every proxy.
type plan struct {
	ttft time.Duration
	gaps []time.Duration // len = tokens-1
}

const (
	minTokens, maxTokens = 30, 100
	minGap, maxGap       = 10 * time.Millisecond, 20 * time.Millisecond
	// trailing events after the last token: the finish chunk, the usage
	// chunk and [DONE], written at once, one write each.
	trailingEvents = 3
)

func makePlan(seed, id uint64) plan {
	r := rand.New(rand.NewPCG(seed, id))
	n := minTokens + r.IntN(maxTokens-minTokens+1)
	draw := func() time.Duration { return minGap + time.Duration(r.Int64N(int64(maxGap-minGap)+1)) }
	p := plan{ttft: draw(), gaps: make([]time.Duration, n-1)}
	for i := range p.gaps {
		p.gaps[i] = draw()
	}
	return p
}

func (p plan) tokens() int { return len(p.gaps) + 1 }
func (p plan) events() int { return p.tokens() + trailingEvents }

// streamRec is one request's shared record: the engine fills in when it
// read the request and when it wrote each event, then closes done; the
// client reads them after done.
type streamRec struct {
	engineRecv int64
	engineT    []int64
	done       chan struct{}
}

// registry maps a request id (the X-Bench-Id header) to its record.
type registry struct {
	shards [16]struct {
		mu sync.Mutex
		m  map[uint64]*streamRec
	}
}

func newRegistry() *registry {
	r := &registry{}
	for i := range r.shards {
		r.shards[i].m = make(map[uint64]*streamRec)
	}
	return r
}

func (r *registry) add(id uint64) *streamRec {
	rec := &streamRec{done: make(chan struct{})}
	s := &r.shards[id%16]
	s.mu.Lock()
	s.m[id] = rec
	s.mu.Unlock()
	return rec
}

func (r *registry) take(id uint64) *streamRec {
	s := &r.shards[id%16]
	s.mu.Lock()
	rec := s.m[id]
	delete(s.m, id)
	s.mu.Unlock()
	return rec
}

// engine is the scripted OpenAI-compatible engine: plain HTTP/1.1 over
// TCP, keep-alive, a chunked text/event-stream response per request, one
// write (and one chunk) per event, each write stamped just before it is
// made.
type engine struct {
	ln   net.Listener
	clk  clock
	seed uint64
	reg  *registry
	// accepted counts the connections accepted: a proxy that does not
	// keep its upstream connections alive opens many.
	accepted atomic.Int64
}

func (e *engine) serve() {
	for {
		c, err := e.ln.Accept()
		if err != nil {
			return
		}
		e.accepted.Add(1)
		go e.handle(c)
	}
}

const engineHeader = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\nTransfer-Encoding: chunked\r\n\r\n"

func (e *engine) handle(c net.Conn) {
	defer c.Close()
	br := bufio.NewReaderSize(c, 4096)
	var out []byte
	for {
		id, err := readRequest(br)
		if err != nil {
			if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
				fmt.Fprintf(c, "HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
			}
			return
		}
		recv := e.clk.now()
		p := makePlan(e.seed, id)
		rec := e.reg.take(id) // nil for a request no client registered
		var stamps []int64
		if rec != nil {
			rec.engineRecv = recv
			stamps = make([]int64, p.events())
		}
		if _, err := io.WriteString(c, engineHeader); err != nil {
			closeRec(rec)
			return
		}
		next := time.Duration(recv) + p.ttft
		ev := 0
		write := func(payload []byte) error {
			out = appendChunk(out[:0], payload)
			if stamps != nil {
				stamps[ev] = e.clk.now()
			}
			ev++
			_, err := c.Write(out)
			return err
		}
		var buf []byte
		var werr error
		for i := 0; i < p.tokens() && werr == nil; i++ {
			if d := next - time.Duration(e.clk.now()); d > 0 {
				time.Sleep(d)
			}
			buf = appendTokenEvent(buf[:0], id, i)
			werr = write(buf)
			if i < len(p.gaps) {
				next += p.gaps[i]
			}
		}
		if werr == nil {
			werr = write(appendFinishEvent(buf[:0], id))
		}
		if werr == nil {
			werr = write(appendUsageEvent(buf[:0], id, p.tokens()))
		}
		if werr == nil {
			werr = write([]byte("data: [DONE]\n\n"))
		}
		if werr == nil {
			_, werr = io.WriteString(c, "0\r\n\r\n")
		}
		if rec != nil {
			rec.engineT = stamps
			close(rec.done)
		}
		if werr != nil {
			return
		}
	}
}

func closeRec(rec *streamRec) {
	if rec != nil {
		close(rec.done)
	}
}

func appendChunk(dst, payload []byte) []byte {
	dst = strconv.AppendInt(dst, int64(len(payload)), 16)
	dst = append(dst, '\r', '\n')
	dst = append(dst, payload...)
	return append(dst, '\r', '\n')
}

func appendTokenEvent(dst []byte, id uint64, i int) []byte {
	dst = append(dst, `data: {"id":"chatcmpl-`...)
	dst = strconv.AppendUint(dst, id, 10)
	dst = append(dst, `","object":"chat.completion.chunk","created":1767225600,"model":"bench","choices":[{"index":0,"delta":{`...)
	if i == 0 {
		dst = append(dst, `"role":"assistant",`...)
	}
	dst = append(dst, `"content":" tok`...)
	dst = strconv.AppendInt(dst, int64(i), 10)
	return append(dst, `"},"logprobs":null,"finish_reason":null}]}`+"\n\n"...)
}

func appendFinishEvent(dst []byte, id uint64) []byte {
	dst = append(dst, `data: {"id":"chatcmpl-`...)
	dst = strconv.AppendUint(dst, id, 10)
	return append(dst, `","object":"chat.completion.chunk","created":1767225600,"model":"bench","choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"stop"}]}`+"\n\n"...)
}

func appendUsageEvent(dst []byte, id uint64, tokens int) []byte {
	dst = append(dst, `data: {"id":"chatcmpl-`...)
	dst = strconv.AppendUint(dst, id, 10)
	dst = append(dst, `","object":"chat.completion.chunk","created":1767225600,"model":"bench","choices":[],"usage":{"prompt_tokens":8,"completion_tokens":`...)
	dst = strconv.AppendInt(dst, int64(tokens), 10)
	dst = append(dst, `,"total_tokens":`...)
	dst = strconv.AppendInt(dst, int64(tokens+8), 10)
	return append(dst, "}}\n\n"...)
}

// readRequest reads one request (headers and a Content-Length or chunked
// body) and returns its X-Bench-Id.
func readRequest(br *bufio.Reader) (uint64, error) {
	var id uint64
	clen := 0
	chunked := false
	first := true
	for {
		line, err := br.ReadSlice('\n')
		if err != nil {
			if first && len(line) == 0 {
				return 0, io.EOF
			}
			return 0, fmt.Errorf("reading request headers: %w", err)
		}
		line = bytes.TrimRight(line, "\r\n")
		if first {
			first = false
			if !bytes.HasPrefix(line, []byte("POST ")) {
				return 0, fmt.Errorf("request line %q", line)
			}
			continue
		}
		if len(line) == 0 {
			break
		}
		k, v, ok := bytes.Cut(line, []byte(":"))
		if !ok {
			return 0, fmt.Errorf("header line %q", line)
		}
		v = bytes.TrimSpace(v)
		switch {
		case bytes.EqualFold(k, []byte("X-Bench-Id")):
			id, err = strconv.ParseUint(string(v), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("X-Bench-Id %q", v)
			}
		case bytes.EqualFold(k, []byte("Content-Length")):
			clen, err = strconv.Atoi(string(v))
			if err != nil || clen < 0 {
				return 0, fmt.Errorf("Content-Length %q", v)
			}
		case bytes.EqualFold(k, []byte("Transfer-Encoding")):
			chunked = bytes.EqualFold(v, []byte("chunked"))
		}
	}
	if !chunked {
		_, err := br.Discard(clen)
		return id, err
	}
	for {
		line, err := br.ReadSlice('\n')
		if err != nil {
			return 0, err
		}
		size, _, _ := bytes.Cut(bytes.TrimRight(line, "\r\n"), []byte(";"))
		n, err := strconv.ParseInt(string(size), 16, 64)
		if err != nil || n < 0 {
			return 0, fmt.Errorf("chunk size %q", size)
		}
		if n == 0 {
			for { // trailers up to the empty line
				l, err := br.ReadSlice('\n')
				if err != nil {
					return 0, err
				}
				if len(bytes.TrimRight(l, "\r\n")) == 0 {
					return id, nil
				}
			}
		}
		if _, err := br.Discard(int(n) + 2); err != nil {
			return 0, err
		}
	}
}
