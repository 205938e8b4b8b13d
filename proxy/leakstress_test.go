package proxy

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"fmt"
	"hash/fnv"
	"io"
	"math/rand"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/goodput/goodput/meter"
)

// The stream path lends its buffers (lend.go, headbuf.go, the upstream
// reader, the pooled streams): a bug there would hand one stream's bytes to
// another client. TestNoCrossStreamBytes runs many streams at once, each of
// whose every byte names its own request, through every path a stream can
// take (a client that keeps up, one that lags so that the writer goroutine
// and the queue take over, one that leaves, HTTP/1.0, pipelined and
// keep-alive requests; an engine that is chunked, sized or close-delimited,
// that bursts, trickles, ends early, stalls, or writes bytes after the
// body's end) and checks that each client got exactly its own bytes, in
// order, and that each request left exactly one record.
//
// GOODPUT_LEAKSTRESS_N sets the number of requests per run (default 160),
// GOODPUT_LEAKSTRESS_SEED the mix of kinds (logged at each run). Built
// with -tags poolcheck, every buffer is poisoned as it goes back to its
// pool (poolcheck_on.go): a use after the put then shows in the bytes
// checked here, at once, not only when another stream has taken the
// buffer meanwhile.

// leakPlan is what one request's engine sends and how its client reads.
type leakPlan struct {
	id       string
	json     bool   // a non-streamed JSON answer (modeJSON), not an event stream
	gzip     bool   // the engine gzips the body (the gateway decodes it: not the direct path)
	bigHead  bool   // the engine's head is over upstreamBufSize (the larger reader: not the direct path)
	framing  byte   // 'c' chunked, 'l' Content-Length, 'u' until close
	end      byte   // 'n' normal, 'e' the engine dies mid-body, 's' it stalls, 'x' junk after the body
	pace     int    // 0 bursts, 1 sub-millisecond gaps, 2 a few ms between pieces
	events   []byte // what the client must receive, whole (events and [DONE])
	usage    string // the usage event the engine adds when asked (stripped by the gateway)
	cutAt    int    // end 'e'/'s': the engine stops after this many bytes of events
	seed     int64
	leaveAt  int  // > 0: the client leaves after this many body bytes
	slow     bool // the client reads slowly (small receive buffer, pauses)
	linger0  bool // a leaving client resets its connection
	version  string
	pipeline bool // sent with others on one connection, before any answer is read
}

func leakHash(s string) int64 {
	h := fnv.New64a()
	io.WriteString(h, s)
	return int64(h.Sum64() >> 1)
}

// newLeakPlan derives a request's plan from its id and kind (the engine
// rebuilds it from the id alone: kind is in the id).
func newLeakPlan(id string) *leakPlan {
	seed := leakHash(id)
	rng := rand.New(rand.NewSource(seed))
	p := &leakPlan{id: id, seed: seed, version: "HTTP/1.1"}
	kind := id[strings.LastIndexByte(id, '-')+1:]
	// kind letters: [clujgh] framing (j: JSON, g: gzip, h: a large head;
	// all three chunked), [nesx] end, [fskv0pq] client
	p.framing = kind[0]
	switch p.framing {
	case 'j':
		p.json, p.framing = true, 'c'
	case 'g':
		p.gzip, p.framing = true, 'c'
	case 'h':
		p.bigHead, p.framing = true, 'c'
	}
	p.end = kind[1]
	client := kind[2]
	p.pace = rng.Intn(3)
	// Event sizes: small, around the lent buffer's size, past it (4 KiB,
	// maxLentBuf and maxHeadChunk), and large.
	sizes := []int{16, 120, 700, 1000, 3000, 5000, 9000}
	nev := 5 + rng.Intn(40)
	big := rng.Intn(4) == 0
	if client == 's' || client == 'v' {
		nev += 60 // enough to fill the socket of a lagging client
		big = true
	}
	var ev bytes.Buffer
	for k := 0; k < nev; k++ {
		size := sizes[rng.Intn(4)]
		if big {
			size = sizes[rng.Intn(len(sizes))]
		}
		payload := fmt.Sprintf("%s#%d#", id, k)
		if len(payload) < size {
			// id+"." appended until size is reached, in one allocation (a
			// loop of += took a quarter of a second a plan under -race, and
			// a loaded machine's engine then read requests seconds late).
			unit := len(id) + 1
			payload += strings.Repeat(id+".", (size-len(payload)+unit-1)/unit)
		}
		if p.json {
			ev.WriteString(payload)
			continue
		}
		fmt.Fprintf(&ev, "data: {\"id\":\"%s\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"%s\"},\"finish_reason\":null}]}\n\n", id, payload)
	}
	if p.json {
		content := ev.String()
		ev.Reset()
		fmt.Fprintf(&ev, `{"id":"%s","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"%s"},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":%d,"total_tokens":%d}}`, id, content, nev, nev+3)
	} else {
		p.usage = fmt.Sprintf("data: {\"id\":\"%s\",\"object\":\"chat.completion.chunk\",\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":%d,\"total_tokens\":%d}}\n\n", id, nev, nev+3)
	}
	evLen := ev.Len()
	if !p.json {
		ev.WriteString("data: [DONE]\n\n")
	}
	p.events = ev.Bytes()
	if p.end == 'e' || p.end == 's' {
		p.cutAt = 1 + rng.Intn(evLen-1)
	}
	switch client {
	case 's':
		p.slow = true
	case 'k': // leaves
		p.leaveAt = 1 + rng.Intn(len(p.events))
		p.linger0 = rng.Intn(2) == 0
	case 'v': // slow, and leaves
		p.slow = true
		p.leaveAt = len(p.events) / (2 + rng.Intn(4))
		p.linger0 = rng.Intn(2) == 0
	case '0':
		p.version = "HTTP/1.0"
	case 'p':
		p.pipeline = true
	}
	return p
}

// engineBody is what the engine sends: the events, the usage event before
// [DONE] when the gateway asked for it.
func (p *leakPlan) engineBody(wantUsage bool) []byte {
	if p.json || !wantUsage {
		return p.events
	}
	done := len(p.events) - len("data: [DONE]\n\n")
	b := append([]byte(nil), p.events[:done]...)
	b = append(b, p.usage...)
	return append(b, p.events[done:]...)
}

func (p *leakPlan) requestBody() string {
	if p.json {
		return `{"model":"m","stream":false,"messages":[{"role":"user","content":"` + p.id + `"}]}`
	}
	return `{"model":"m","stream":true,"messages":[{"role":"user","content":"` + p.id + `"}]}`
}

// leakEngine answers each request as its plan says.
func leakEngine(errs *leakErrs) func(c *scriptConn) {
	return func(c *scriptConn) {
		id := string(c.Req.Header.Peek("X-Request-Id"))
		if id == "" || !bytes.Contains(c.Req.Body(), []byte(`"content":"`+id+`"`)) {
			errs.add("engine: request id %q with body %q", id, c.Req.Body())
			c.Conn.Close()
			return
		}
		p := newLeakPlan(id)
		body := p.engineBody(wantsUsage(c.Req.Body()))
		limit := len(body)
		if p.cutAt > 0 {
			limit = p.cutAt
		}
		ctype := "text/event-stream"
		if p.json {
			ctype = "application/json"
		}
		if p.bigHead {
			ctype += "\r\nX-Pad: " + strings.Repeat(id+".", 3000/len(id))
		}
		if p.gzip {
			var z bytes.Buffer
			zw := gzip.NewWriter(&z)
			if p.cutAt > 0 {
				zw.Write(body[:p.cutAt])
				zw.Flush() // what was written decodes; the rest never comes
				limit = z.Len()
			} else {
				zw.Write(body)
				zw.Close()
				limit = z.Len()
			}
			body = z.Bytes()
			ctype += "\r\nContent-Encoding: gzip"
		}
		switch p.framing {
		case 'c':
			fmt.Fprintf(c.BW, "HTTP/1.1 200 OK\r\nContent-Type: %s\r\nTransfer-Encoding: chunked\r\n\r\n", ctype)
		case 'l':
			fmt.Fprintf(c.BW, "HTTP/1.1 200 OK\r\nContent-Type: %s\r\nContent-Length: %d\r\n\r\n", ctype, len(body))
		case 'u':
			fmt.Fprintf(c.BW, "HTTP/1.1 200 OK\r\nContent-Type: %s\r\nConnection: close\r\n\r\n", ctype)
		}
		rng := rand.New(rand.NewSource(p.seed ^ 0x5eed))
		if rng.Intn(3) == 0 {
			c.BW.Flush() // the head alone; otherwise it goes with the first piece
			if rng.Intn(2) == 0 {
				// A prefill past the gateway's head hold: the head goes to
				// the client alone, then the body by the lent buffers.
				time.Sleep(headHold + time.Duration(5+rng.Intn(40))*time.Millisecond)
			}
		}
		for off := 0; off < limit; {
			n := 1 + rng.Intn(3000)
			if rng.Intn(8) == 0 {
				n = 1 + rng.Intn(20000)
			}
			n = min(n, limit-off)
			piece := body[off : off+n]
			off += n
			if p.framing == 'c' {
				fmt.Fprintf(c.BW, "%x\r\n", len(piece))
				c.BW.Write(piece)
				c.BW.WriteString("\r\n")
			} else {
				c.BW.Write(piece)
			}
			if off == limit && p.end == 'x' && p.framing == 'c' {
				// The body's end, then bytes no request asked for, in the
				// same write: a response to a request that was never sent.
				c.BW.WriteString("0\r\n\r\n")
				c.BW.WriteString("HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: 32\r\n\r\ndata: SMUGGLED SMUGGLED SMUG\n\n\n")
			}
			if err := c.BW.Flush(); err != nil {
				c.Conn.Close()
				return
			}
			switch p.pace {
			case 1:
				if rng.Intn(2) == 0 {
					time.Sleep(time.Duration(rng.Intn(500)) * time.Microsecond)
				}
			case 2:
				time.Sleep(time.Duration(1+rng.Intn(4)) * time.Millisecond)
			}
		}
		switch {
		case p.end == 'e':
			if tc, ok := c.Conn.(*net.TCPConn); ok && rng.Intn(2) == 0 {
				tc.SetLinger(0)
			}
			c.Conn.Close()
		case p.end == 's':
			// Stalls until the gateway hangs up (its idle timeout).
			hungUpWithin(c, 20*time.Second)
			c.Conn.Close()
		case p.framing == 'c' && p.end != 'x':
			c.BW.WriteString("0\r\n\r\n")
			c.BW.Flush()
		case p.framing == 'u':
			c.Conn.Close()
		}
	}
}

type leakErrs struct {
	mu   sync.Mutex
	msgs []string
}

func (e *leakErrs) add(f string, a ...any) {
	e.mu.Lock()
	if len(e.msgs) < 50 {
		e.msgs = append(e.msgs, fmt.Sprintf(f, a...))
	}
	e.mu.Unlock()
}

// leakResult is what a client got.
type leakResult struct {
	plan     *leakPlan
	body     []byte
	err      error // the body's read error (nil: it ended cleanly)
	headerID string
	status   int
	left     bool // the client left before the end
}

func leakRequest(p *leakPlan) string {
	body := p.requestBody()
	return fmt.Sprintf("POST /v1/chat/completions %s\r\nHost: x\r\nX-Request-Id: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", p.version, p.id, len(body), body)
}

// readLeakBody reads one response's body from r as the plan's client does.
func readLeakBody(conn net.Conn, r io.Reader, p *leakPlan, res *leakResult) {
	buf := make([]byte, 1024)
	rng := rand.New(rand.NewSource(p.seed ^ 0xc1))
	pauseAt := -1
	if p.slow {
		pauseAt = rng.Intn(len(p.events)/2 + 1)
	}
	for {
		if p.leaveAt > 0 && len(res.body) >= p.leaveAt {
			res.left = true
			if tc, ok := conn.(*net.TCPConn); ok && p.linger0 {
				tc.SetLinger(0)
			}
			conn.Close()
			return
		}
		want := buf
		if p.leaveAt > 0 {
			want = buf[:min(len(buf), p.leaveAt-len(res.body))]
		}
		n, err := r.Read(want)
		res.body = append(res.body, want[:n]...)
		if err != nil {
			if err != io.EOF {
				res.err = err
			}
			return
		}
		if p.slow {
			if pauseAt >= 0 && len(res.body) >= pauseAt {
				pauseAt = -1
				if rng.Intn(2) == 0 {
					pauseAt = len(res.body) + rng.Intn(len(p.events)/2+1) // and once more
				}
				time.Sleep(time.Duration(100+rng.Intn(300)) * time.Millisecond) // the socket fills meanwhile
			} else if rng.Intn(4) == 0 {
				time.Sleep(time.Duration(rng.Intn(1500)) * time.Microsecond)
			}
		}
	}
}

// runLeakConn sends plans on one connection (pipelined when the first
// says so, else one after another) and reads each answer.
func runLeakConn(addr string, plans []*leakPlan, out []*leakResult) {
	for i, p := range plans {
		out[i] = &leakResult{plan: p}
	}
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		out[0].err = err
		return
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(60 * time.Second))
	// A slow client keeps the default receive buffer: one below the
	// loopback MSS stalls on zero-window probes (hundreds of ms) however
	// fast it reads. The gateway's small send buffer (smallSendBuf) and the
	// client's pauses make the gateway's writes come back short.
	if plans[0].pipeline {
		var all strings.Builder
		for _, p := range plans {
			all.WriteString(leakRequest(p))
		}
		if _, err := io.WriteString(conn, all.String()); err != nil {
			out[0].err = err
			return
		}
	}
	br := bufio.NewReader(conn)
	for i, p := range plans {
		res := out[i]
		if !p.pipeline {
			if _, err := io.WriteString(conn, leakRequest(p)); err != nil {
				res.err = err
				return
			}
		}
		if p.version == "HTTP/1.0" {
			// The head, then a body that ends at the close.
			tp, err := http.ReadResponse(br, nil)
			if err != nil {
				res.err = err
				return
			}
			res.status, res.headerID = tp.StatusCode, tp.Header.Get("X-Request-Id")
			if te := tp.TransferEncoding; len(te) > 0 {
				res.err = fmt.Errorf("HTTP/1.0 client got Transfer-Encoding %v", te)
			}
			readLeakBody(conn, br, p, res)
			return
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			res.err = err
			return
		}
		res.status, res.headerID = resp.StatusCode, resp.Header.Get("X-Request-Id")
		readLeakBody(conn, resp.Body, p, res)
		if res.left || res.err != nil {
			return // the connection is gone
		}
	}
}

// smallSendBuf accepts connections whose send buffer is small, so that a
// client that pauses makes the gateway's direct write come back short (the
// writer goroutine and the queue take over) after kilobytes, not the
// megabytes a loopback socket's autotuned buffer holds.
type smallSendBuf struct{ net.Listener }

func (l smallSendBuf) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetWriteBuffer(8 << 10)
	}
	return c, err
}

// startLeakGateway is startGateway over a smallSendBuf listener.
func startLeakGateway(t *testing.T, cfg Config) *gateway {
	t.Helper()
	return startTunedGateway(t, cfg, func(g *gateway) {
		g.ln = NewListener(smallSendBuf{g.ln.Listener}, 0, nil)
	})
}

func TestNoCrossStreamBytes(t *testing.T) {
	if testing.Short() {
		t.Skip("stress test")
	}
	n := 160
	if v, err := strconv.Atoi(os.Getenv("GOODPUT_LEAKSTRESS_N")); err == nil && v > 0 {
		n = v
	}
	var errs leakErrs
	up := startRawUpstream(t, leakEngine(&errs))
	g := startLeakGateway(t, Config{
		Upstream: up.URL(),
		// A slow client pauses up to 400 ms; the idle timeout, which also
		// bounds how long a lagging client may take no byte, leaves room
		// for a loaded CI machine (at 2 s, a slow client was once cut as
		// one that stopped reading, on a machine running other tests).
		IdleTimeout:       5 * time.Second,
		FirstTokenTimeout: 10 * time.Second,
		TotalTimeout:      50 * time.Second,
		MaxClientLag:      64 << 10,
		MaxIdleConns:      32,
	})

	// How often the lagging paths ran: the writer goroutine's writes, and
	// the reader waiting for a client MaxClientLag behind.
	var writerWrites, lagFull atomic.Int64
	testHookClientWrite = func() { writerWrites.Add(1) }
	testHookLagFull = func(*stream) { lagFull.Add(1) }
	defer func() {
		g.p.Wait() // the hooks go once no stream can call them
		testHookClientWrite, testHookLagFull = nil, nil
	}()

	// A request's plan follows from its id; the mix of kinds from seed
	// (GOODPUT_LEAKSTRESS_SEED replays one).
	prefix := "lk"
	seed := time.Now().UnixNano()
	if v, err := strconv.ParseInt(os.Getenv("GOODPUT_LEAKSTRESS_SEED"), 10, 64); err == nil {
		seed = v
	}
	rng := rand.New(rand.NewSource(seed))
	t.Logf("seed %d", seed)
	framings := "cccclujgh"
	ends := "nnnnnesx"
	clients := "fffsskkv0pq" // f fast, s slow, k leaves, v slow+leaves, 0 HTTP/1.0, p pipelined, q keep-alive
	var groups [][]*leakPlan
	made := 0
	for made < n {
		f := framings[rng.Intn(len(framings))]
		e := ends[rng.Intn(len(ends))]
		c := clients[rng.Intn(len(clients))]
		if f == 'u' && e == 'x' {
			e = 'n'
		}
		if f != 'c' && e == 'x' {
			e = 'n'
		}
		mk := func(c, e byte) *leakPlan {
			made++
			return newLeakPlan(fmt.Sprintf("%s-%04d-%c%c%c", prefix, made, f, e, c))
		}
		switch c {
		case 'p', 'q':
			// Several requests on one connection; only the last may end
			// the connection (a broken body, a client that leaves).
			k := 2 + rng.Intn(3)
			var grp []*leakPlan
			for j := 0; j < k; j++ {
				ee := byte('n')
				if j == k-1 {
					ee = e
				}
				cc := c
				if c == 'q' {
					cc = 'f'
					if j == k-1 && rng.Intn(3) == 0 {
						cc = 'k'
					}
				}
				f = framings[rng.Intn(len(framings))]
				if f == 'u' || (f != 'c' && ee == 'x') {
					f = 'c' // the engine's close would end the group early
				}
				grp = append(grp, mk(cc, ee))
			}
			groups = append(groups, grp)
		default:
			groups = append(groups, []*leakPlan{mk(c, e)})
		}
	}

	results := make([][]*leakResult, len(groups))
	var wg sync.WaitGroup
	for i, grp := range groups {
		results[i] = make([]*leakResult, len(grp))
		wg.Add(1)
		go func() {
			defer wg.Done()
			runLeakConn(g.addr, grp, results[i])
		}()
	}
	wg.Wait()

	// Every request that reached the gateway leaves one record: a
	// pipelined one too, unless an answer before it on its connection
	// broke (only a loaded machine's timeout does that to the first
	// ones of a group), when the gateway closed the connection without
	// reading it; it may then have no record.
	want := map[string]*leakResult{}
	behindBroken := map[string]bool{}
	for _, rs := range results {
		whole := true // every answer before r on its connection came whole
		for _, r := range rs {
			switch {
			case r.status != 0 || r.left || (r.plan.pipeline && whole):
				want[r.plan.id] = r
			case r.plan.pipeline:
				behindBroken[r.plan.id] = true
			}
			whole = whole && r.status != 0 && r.err == nil && !r.left
		}
	}
	recs := map[string]meter.Record{}
	wanted := 0 // of recs
	deadline := time.After(30 * time.Second)
	for wanted < len(want) {
		select {
		case rec := <-g.records:
			if _, dup := recs[rec.RequestID]; dup {
				t.Errorf("two records for %s", rec.RequestID)
			}
			recs[rec.RequestID] = rec
			if want[rec.RequestID] != nil {
				wanted++
			}
		case <-deadline:
			// Each request without a record, with what its client and
			// those before it on its connection saw.
			var missing []string
			for _, rs := range results {
				for i, r := range rs {
					if _, ok := recs[r.plan.id]; ok || want[r.plan.id] == nil {
						continue
					}
					var seen []string
					for _, e := range rs[:i+1] {
						seen = append(seen, fmt.Sprintf("%s: status %d left %v err %v", e.plan.id, e.status, e.left, e.err))
					}
					missing = append(missing, strings.Join(seen, "; "))
				}
			}
			t.Fatalf("%d records of %d after 30 s (%d in flight); none for:\n%s", wanted, len(want), g.p.InFlight(), strings.Join(missing, "\n"))
		}
	}
	g.noMoreRecords(t)

	counts := map[string]int{}
	for _, rs := range results {
		for _, r := range rs {
			p := r.plan
			counts[string(p.id[len(p.id)-3:])]++
			if r.status == 0 && !r.plan.pipeline {
				t.Errorf("%s: no answer: %v", p.id, r.err)
				continue
			}
			if r.status == 0 {
				// A pipelined request behind one whose answer failed.
				continue
			}
			if r.headerID != p.id {
				t.Errorf("%s: answer's X-Request-Id is %q", p.id, r.headerID)
			}
			if r.status != 200 {
				t.Errorf("%s: status %d", p.id, r.status)
			}
			if bytes.Contains(r.body, []byte("SMUGGLED")) {
				t.Errorf("%s: got bytes the engine sent after another body", p.id)
			}
			if !bytes.HasPrefix(p.events, r.body) {
				i := 0
				for i < len(r.body) && i < len(p.events) && r.body[i] == p.events[i] {
					i++
				}
				t.Errorf("%s: body differs from its own at byte %d of %d (want %d): got %q...",
					p.id, i, len(r.body), len(p.events), r.body[i:min(len(r.body), i+160)])
				continue
			}
			whole := len(r.body) == len(p.events)
			rec, ok := recs[p.id]
			if !ok {
				t.Errorf("%s: no record", p.id)
				continue
			}
			switch {
			case r.left:
			case p.end == 'n' || p.end == 'x' || (p.end == 'e' && p.framing == 'u'):
				if p.end == 'e' {
					break // a close-delimited body cut short looks whole
				}
				if !whole || r.err != nil {
					t.Errorf("%s: got %d of %d bytes, err %v; record %s %q", p.id, len(r.body), len(p.events), r.err, rec.Outcome, rec.ErrorMessage)
				} else if rec.Outcome != meter.OutcomeOK {
					t.Errorf("%s: whole body, record %s %q", p.id, rec.Outcome, rec.ErrorMessage)
				}
			default: // cut or stalled: the client must see a broken body
				if whole {
					t.Errorf("%s: a %c body arrived whole", p.id, p.end)
				}
				if r.err == nil {
					t.Errorf("%s: a %c body ended cleanly for the client (%d of %d bytes); record %s", p.id, p.end, len(r.body), len(p.events), rec.Outcome)
				}
				wantOutcome := meter.OutcomeUpstreamError
				if p.end == 's' {
					wantOutcome = meter.OutcomeTimeout
				}
				if rec.Outcome != wantOutcome {
					t.Errorf("%s: record %s %q, want %s", p.id, rec.Outcome, rec.ErrorMessage, wantOutcome)
				}
			}
		}
	}
	for id := range recs {
		if _, ok := want[id]; !ok && !behindBroken[id] {
			t.Errorf("record for %s, which no client saw reach the gateway", id)
		}
	}
	errs.mu.Lock()
	for _, m := range errs.msgs {
		t.Error(m)
	}
	errs.mu.Unlock()
	t.Logf("%d requests on %d connections; kinds %v; writer goroutine writes %d, lag-full waits %d", made, len(groups), counts, writerWrites.Load(), lagFull.Load())
}
