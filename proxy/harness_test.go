package proxy

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/goodput/goodput/meter"
	"github.com/valyala/fasthttp"
)

// scriptConn is what a scripted upstream handler gets: the parsed request
// and the raw connection, to answer byte by byte.
type scriptConn struct {
	Req  *fasthttp.Request
	Conn net.Conn
	BW   *bufio.Writer
}

// rawUpstream is a TCP server whose handler writes raw HTTP, so tests can
// send exactly the bytes (and faults) they want.
type rawUpstream struct {
	ln      net.Listener
	handler func(c *scriptConn)
	wg      sync.WaitGroup
	mu      sync.Mutex
	bodies  [][]byte
	headers []string       // as fasthttp writes the parsed header (it adds a default Content-Type)
	raw     []string       // the header lines as they came
	closed  chan time.Time // receives when a handler saw its connection closed by the peer
	accepts atomic.Int32   // connections accepted
}

func startRawUpstream(t testing.TB, h func(c *scriptConn)) *rawUpstream {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u := &rawUpstream{ln: ln, handler: h, closed: make(chan time.Time, 64)}
	u.wg.Add(1)
	go func() {
		defer u.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			u.accepts.Add(1)
			u.wg.Add(1)
			go func() {
				defer u.wg.Done()
				defer c.Close()
				br := bufio.NewReader(c)
				bw := bufio.NewWriter(c)
				for {
					req := fasthttp.AcquireRequest()
					if err := req.Read(br); err != nil {
						fasthttp.ReleaseRequest(req)
						return
					}
					u.mu.Lock()
					u.bodies = append(u.bodies, append([]byte(nil), req.Body()...))
					u.headers = append(u.headers, req.Header.String())
					u.raw = append(u.raw, string(req.Header.RawHeaders()))
					u.mu.Unlock()
					u.handler(&scriptConn{Req: req, Conn: c, BW: bw})
					closeConn := req.Header.ConnectionClose()
					fasthttp.ReleaseRequest(req) // not to be touched after this
					if closeConn {
						return
					}
				}
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		u.wg.Wait()
	})
	return u
}

func (u *rawUpstream) URL() string { return "http://" + u.ln.Addr().String() }

func (u *rawUpstream) lastBody() []byte {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.bodies[len(u.bodies)-1]
}

func (u *rawUpstream) lastHeaders() string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.headers[len(u.headers)-1]
}

// lastRawHeaders returns the header lines of the last request as the
// engine got them.
func (u *rawUpstream) lastRawHeaders() string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.raw[len(u.raw)-1]
}

// writeSSEHead writes a chunked text/event-stream response head.
func writeSSEHead(c *scriptConn) {
	fmt.Fprintf(c.BW, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\nConnection: keep-alive\r\nKeep-Alive: timeout=5\r\n\r\n")
	c.BW.Flush()
}

// writeChunk writes one HTTP chunk and flushes; it returns the write error.
func writeChunk(c *scriptConn, s string) error {
	fmt.Fprintf(c.BW, "%x\r\n%s\r\n", len(s), s)
	return c.BW.Flush()
}

func endChunks(c *scriptConn) {
	io.WriteString(c.BW, "0\r\n\r\n")
	c.BW.Flush()
}

// writeHeldStream writes vllmEvents as a stream whose first event comes at
// once and the rest, with [DONE], once wait is closed (or sent on).
func writeHeldStream(c *scriptConn, wait <-chan struct{}) {
	writeSSEHead(c)
	writeChunk(c, vllmEvents[0])
	<-wait
	for _, e := range vllmEvents[1:] {
		writeChunk(c, e)
	}
	writeChunk(c, done)
	endChunks(c)
}

// gateway is a proxy under test on loopback.
type gateway struct {
	p       *Proxy
	srv     *fasthttp.Server
	addr    string
	ln      *Listener
	records chan meter.Record
}

// drainOK reads an answer's body to its end and closes it, and fails the
// test unless the request got a 200 (err: the request's error).
func drainOK(t testing.TB, resp *http.Response, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
}

func startGateway(t testing.TB, cfg Config) *gateway {
	t.Helper()
	return startGatewayWith(t, cfg, nil)
}

// startGatewayWith is startGateway with a chance to change the server's
// settings before it serves.
func startGatewayWith(t testing.TB, cfg Config, tune func(*fasthttp.Server)) *gateway {
	t.Helper()
	return startTunedGateway(t, cfg, func(g *gateway) {
		if tune != nil {
			tune(g.srv)
		}
	})
}

// startTunedGateway is startGateway with a chance to change the server's
// and the listener's settings before it serves.
func startTunedGateway(t testing.TB, cfg Config, tune func(*gateway)) *gateway {
	t.Helper()
	g := &gateway{records: make(chan meter.Record, 4096)}
	rec := RecordFunc(func(rec *meter.Record) {
		c := *rec
		c.ITL = append([]time.Duration(nil), rec.ITL...)
		c.ITLRest.Buckets = append([]uint32(nil), rec.ITLRest.Buckets...)
		c.TokensPerEvent = append([]int(nil), rec.TokensPerEvent...)
		g.records <- c
	})
	if cfg.Sink != nil {
		// The test's own sink first, then the channel of records.
		cfg.Sink = Sinks{cfg.Sink, rec}
	} else {
		cfg.Sink = rec
	}
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	g.p = p
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g.addr = ln.Addr().String()
	g.srv = p.Server()
	g.ln = NewListener(ln, 0, nil)
	tune(g)
	go g.srv.Serve(g.ln) // as goodput serve does
	t.Cleanup(func() {
		g.srv.Shutdown()
		// A test that ends before Serve has started: Shutdown found no
		// listener to close, and Serve would then accept for ever (a
		// leaked goroutine goleak found in CI). Closed, its Accept fails
		// at once and Serve returns.
		_ = g.ln.Close()
		p.Wait()
		p.CloseIdle()
		g.ln.CloseAll() // lingering closes (listener.go)
	})
	return g
}

// startLoggedGateway is startGateway with the gateway's log kept: logged
// returns what it wrote so far.
func startLoggedGateway(t testing.TB, cfg Config) (g *gateway, logged func() string) {
	t.Helper()
	var mu sync.Mutex
	var b strings.Builder
	cfg.Logf = func(f string, a ...any) {
		mu.Lock()
		fmt.Fprintf(&b, f+"\n", a...)
		mu.Unlock()
	}
	return startGateway(t, cfg), func() string {
		mu.Lock()
		defer mu.Unlock()
		return b.String()
	}
}

func (g *gateway) URL() string { return "http://" + g.addr }

// record waits for the next record.
func (g *gateway) record(t *testing.T) meter.Record {
	t.Helper()
	select {
	case r := <-g.records:
		return r
	case <-time.After(10 * time.Second):
		t.Fatal("no record within 10s")
		return meter.Record{}
	}
}

// noMoreRecords checks that no extra record arrives: once every request
// has ended (Proxy.Wait), every record there will be is in the channel.
func (g *gateway) noMoreRecords(t *testing.T) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		g.p.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatalf("%d requests still without a record after 10s", g.p.InFlight())
	}
	select {
	case r := <-g.records:
		t.Fatalf("unexpected extra record: %+v", r)
	default:
	}
}

// stream is a streamed response whose headers and first line have been
// read: the request is in flight at the gateway.
type clientStream struct {
	status int
	first  string
	rest   chan streamEnd
}

type streamEnd struct {
	body string // everything after the first line
	err  error  // the body read error
}

// startStream sends a request with net/http and returns once the response's
// headers and first line are in; the rest is read in the background.
func startStream(t *testing.T, url, body string, hdr map[string]string) *clientStream {
	t.Helper()
	resp, err := testClient.Do(newPost(t, url, body, hdr))
	if err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(resp.Body)
	first, err := br.ReadString('\n')
	if err != nil {
		resp.Body.Close()
		t.Fatalf("status %d, first line %q: %v", resp.StatusCode, first, err)
	}
	s := &clientStream{status: resp.StatusCode, first: first, rest: make(chan streamEnd, 1)}
	go func() {
		defer resp.Body.Close()
		b, err := io.ReadAll(br)
		s.rest <- streamEnd{string(b), err}
	}()
	return s
}

// end waits for the rest of the stream.
func (s *clientStream) end(t *testing.T) streamEnd {
	t.Helper()
	select {
	case e := <-s.rest:
		return e
	case <-time.After(10 * time.Second):
		t.Fatal("stream still open after 10s")
		return streamEnd{}
	}
}

// post sends a request with net/http (a client independent of fasthttp)
// and returns the status, headers, body and the body read error.
func post(t *testing.T, url, body string, hdr map[string]string) (int, http.Header, string, error) {
	t.Helper()
	resp, err := testClient.Do(newPost(t, url, body, hdr))
	if err != nil {
		return 0, nil, "", err
	}
	defer resp.Body.Close()
	b, rerr := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b), rerr
}

// posted is what post returned, for a request postAsync sent.
type posted struct {
	status int
	body   string
	err    error
}

// postAsync sends a request with post on a goroutine of its own and
// returns where its result comes.
func postAsync(t *testing.T, url, body string, hdr map[string]string) <-chan posted {
	done := make(chan posted, 1)
	go func() {
		status, _, b, err := post(t, url, body, hdr)
		done <- posted{status, b, err}
	}()
	return done
}

// rawPost sends a chat completions request on a raw connection of its own,
// which the test then reads or drops as it likes. hdr is extra header lines,
// each ending in CRLF.
func rawPost(t *testing.T, addr, body, hdr string) net.Conn {
	t.Helper()
	return rawPostIn(t, "HTTP/1.1", addr, body, hdr)
}

// rawPost10 is rawPost from a client that speaks HTTP/1.0; the connection
// is closed when the test ends.
func rawPost10(t *testing.T, addr, body, hdr string) net.Conn {
	t.Helper()
	conn := rawPostIn(t, "HTTP/1.0", addr, body, hdr)
	t.Cleanup(func() { conn.Close() })
	return conn
}

func rawPostIn(t *testing.T, proto, addr, body, hdr string) net.Conn {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fmt.Fprintf(conn, "POST /v1/chat/completions %s\r\nHost: x\r\n%sContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", proto, hdr, len(body), body); err != nil {
		t.Fatal(err)
	}
	return conn
}

// rawStreamBody posts chatBody to g on a connection of its own (closed at
// the test's end) and returns a reader of the 200 response's body, its
// chunked framing taken off.
func rawStreamBody(t *testing.T, g *gateway) *bufio.Reader {
	t.Helper()
	conn := rawPost(t, g.addr, chatBody, "")
	t.Cleanup(func() { conn.Close() })
	return streamBodyOf(t, conn)
}

// streamBodyOf reads a 200 response's head from conn and returns a reader
// of its body, its chunked framing taken off.
func streamBodyOf(t *testing.T, conn net.Conn) *bufio.Reader {
	t.Helper()
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("%v %v", resp, err)
	}
	return bufio.NewReaderSize(resp.Body, 64<<10)
}

var testClient = &http.Client{Transport: &http.Transport{DisableCompression: true, MaxIdleConnsPerHost: 64}}

type meterRecord = meter.Record

func listenLoopback() (net.Listener, error) { return net.Listen("tcp", "127.0.0.1:0") }

// RecordFunc adapts a function that wants only finished records to Sink.
type RecordFunc func(rec *meter.Record)

// Begin does nothing.
func (f RecordFunc) Begin(*meter.Record) {}

// Record calls f(rec).
func (f RecordFunc) Record(rec *meter.Record) { f(rec) }

// newPost builds a JSON POST with extra headers.
func newPost(t *testing.T, url, body string, hdr map[string]string) *http.Request {
	t.Helper()
	req, err := http.NewRequest("POST", url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	return req
}

// hungUpWithin waits up to d for the gateway to hang up on the upstream
// connection, and returns when it did; zero when it did not within d.
func hungUpWithin(c *scriptConn, d time.Duration) time.Time {
	c.Conn.SetReadDeadline(time.Now().Add(d))
	var b [1]byte
	if _, err := c.Conn.Read(b[:]); err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
		return time.Now()
	}
	return time.Time{}
}

// dial opens a client connection to g, closed when the test ends.
func (g *gateway) dial(t *testing.T) net.Conn {
	t.Helper()
	conn, err := net.Dial("tcp", g.addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}
