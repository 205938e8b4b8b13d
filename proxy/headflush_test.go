package proxy

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/goodput/goodput/meter"
)

// writeLog records each write on the connections a listener accepted.
type writeLog struct {
	mu     sync.Mutex
	writes [][]byte
}

func (l *writeLog) add(p []byte) {
	l.mu.Lock()
	l.writes = append(l.writes, append([]byte(nil), p...))
	l.mu.Unlock()
}

func (l *writeLog) all() [][]byte {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([][]byte(nil), l.writes...)
}

// wrapListener hands out the connections it accepts through wrap.
type wrapListener struct {
	net.Listener
	wrap func(net.Conn) net.Conn
}

func (l wrapListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return l.wrap(c), nil
}

// countingConn logs its writes; it keeps the raw connection's SyscallConn,
// so the client guard still peeks (and direct writes, which bypass Write,
// are not logged).
type countingConn struct {
	net.Conn
	log *writeLog
}

func (c *countingConn) Write(p []byte) (int, error) {
	c.log.add(p)
	return c.Conn.Write(p)
}

func (c *countingConn) SyscallConn() (syscall.RawConn, error) {
	return c.Conn.(syscall.Conn).SyscallConn()
}

// startGatewayOn is a gateway whose client connections are passed through
// wrap as they are accepted.
func startGatewayOn(t *testing.T, cfg Config, wrap func(net.Conn) net.Conn) *gateway {
	t.Helper()
	g := startGatewayWith(t, cfg, nil)
	// Serve a second listener, wrapped, with the same server.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go g.srv.Serve(NewListener(wrapListener{ln, wrap}, 0, nil))
	g.addr = ln.Addr().String()
	return g
}

// startCountingGateway is a gateway whose client connections log their
// writes.
func startCountingGateway(t *testing.T, cfg Config) (*gateway, *writeLog) {
	t.Helper()
	log := &writeLog{}
	g := startGatewayOn(t, cfg, func(c net.Conn) net.Conn { return &countingConn{Conn: c, log: log} })
	return g, log
}

// The probe finds the buffered writer under fasthttp's chunk writer: if a
// fasthttp upgrade moves it, streams fall back to flushing the head on its
// own, and this says so.
func TestHeadWriterProbe(t *testing.T) {
	if !headProbe.ok {
		t.Fatal("the head-writer probe found no bufio.Writer under fasthttp's chunk writer: streams flush their head separately")
	}
	if headWriterOf(nil) != nil || headWriterOf(&bytes.Buffer{}) != nil {
		t.Fatal("headWriterOf accepted a writer that is not fasthttp's chunk writer")
	}
}

// The response head goes out in the same write as the first event, not in a
// flush of its own before it (which fasthttp would do at once, whenever the
// first event comes).
func TestHeadWithFirstEvent(t *testing.T) {
	up := startRawUpstream(t, func(c *scriptConn) {
		writeSSEHead(c)
		for _, e := range vllmEvents {
			writeChunk(c, e)
		}
		writeChunk(c, vllmUsage)
		writeChunk(c, done)
		endChunks(c)
	})
	g, log := startCountingGateway(t, Config{Upstream: up.URL()})
	status, hdr, body, err := post(t, g.URL()+"/v1/chat/completions", chatBody, nil)
	if err != nil || status != 200 || body != strings.Join(vllmEvents, "")+done {
		t.Fatalf("status %d err %v body %q", status, err, body)
	}
	if hdr.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("headers %v", hdr)
	}
	if rec := g.record(t); rec.Outcome != meter.OutcomeOK || rec.Events != 4 {
		t.Fatalf("record %+v", rec)
	}
	writes := log.all()
	if len(writes) == 0 {
		t.Fatal("no write logged")
	}
	first := writes[0]
	if !bytes.HasPrefix(first, []byte("HTTP/1.1 200")) || !bytes.Contains(first, []byte("\r\n\r\n")) {
		t.Fatalf("first write is not the response head: %q", first)
	}
	if !bytes.Contains(first, []byte(vllmEvents[0])) {
		t.Fatalf("the first write holds the head but not the first event (%d writes): %q", len(writes), first)
	}
	t.Logf("%d writes for %d events", len(writes), len(vllmEvents)+2)
}

// A stream that ends cleanly with no event at all still gets its head (and
// an empty, complete body).
func TestHeadOfEmptyStream(t *testing.T) {
	up := startRawUpstream(t, func(c *scriptConn) {
		writeSSEHead(c)
		endChunks(c)
	})
	g, _ := startCountingGateway(t, Config{Upstream: up.URL()})
	conn := rawPost(t, g.addr, chatBody, "")
	defer conn.Close()
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	_, err = b.ReadFrom(resp.Body)
	if err != nil || resp.StatusCode != 200 || b.Len() != 0 {
		t.Fatalf("status %d, body %q, err %v", resp.StatusCode, b.String(), err)
	}
	g.record(t)
}

// Engines send 200 and their headers at once, then prefill: the client gets
// the head while the first token is still to come (within headHold, not at
// the first token), as straight from the engine. Holding it to the first
// token turned the openai SDK's `timeout` (a wait for the headers) into a
// limit on the first token: the SDK timed out, and sent the prompt again.
// Both ways a stream reads its engine: directly (the common path), and
// through the connection's reader (here, for a gzipped stream, which the
// gateway decodes). An HTTP/1.0 client's head still waits for the first
// bytes (http10.go).
func TestHeadGoesOutBeforeTheFirstToken(t *testing.T) {
	for _, tc := range []struct {
		name string
		gzip bool // the engine gzips its stream: read through the gunzip reader
	}{
		{"direct", false},
		{"through the reader", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			release := make(chan struct{})
			var once sync.Once
			let := func() { once.Do(func() { close(release) }) }
			up := startRawUpstream(t, func(c *scriptConn) {
				enc := ""
				if tc.gzip {
					enc = "Content-Encoding: gzip\r\n"
				}
				fmt.Fprintf(c.BW, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n%s\r\n", enc)
				c.BW.Flush()
				<-release // prefill, until the client has its head
				body := strings.Join(vllmEvents, "") + done
				if tc.gzip {
					var b bytes.Buffer
					zw := gzip.NewWriter(&b)
					zw.Write([]byte(body))
					zw.Close()
					body = b.String()
				}
				writeChunk(c, body)
				endChunks(c)
			})
			g := startGateway(t, Config{Upstream: up.URL()})
			t.Cleanup(let) // first: a failed test lets the engine end too
			conn := rawPost(t, g.addr, chatBody, "")
			defer conn.Close()
			_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
			br := bufio.NewReader(conn)
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatalf("no response head while the engine prefills: %v", err)
			}
			let()
			body, err := io.ReadAll(resp.Body)
			if err != nil || resp.StatusCode != 200 || string(body) != strings.Join(vllmEvents, "")+done {
				t.Fatalf("status %d err %v body %q", resp.StatusCode, err, body)
			}
			if rec := g.record(t); rec.Outcome != meter.OutcomeOK || rec.Status != 200 || rec.Events != 4 {
				t.Fatalf("record %+v", rec)
			}
		})
	}
}

// A client that leaves while the gateway still holds the engine's head was
// sent no status: its record says 499, not the engine's 200 (and, as for a
// client gone before the engine answered, it is judged only if its wait had
// already broken a bound).
func TestClientGoneWhileTheHeadIsHeld(t *testing.T) {
	headed := make(chan struct{})
	hungUp := make(chan time.Time, 1)
	up := startRawUpstream(t, func(c *scriptConn) {
		writeSSEHead(c)
		close(headed)
		hungUp <- hungUpWithin(c, 10*time.Second)
	})
	g := startTunedGateway(t, Config{Upstream: up.URL()}, func(g *gateway) { g.p.headHold = time.Hour })
	conn := rawPost(t, g.addr, chatBody, "")
	<-headed
	conn.Close()
	if at := <-hungUp; at.IsZero() {
		t.Fatal("the engine's connection was not closed after the client left")
	}
	if rec := g.record(t); rec.Outcome != meter.OutcomeClientAbort || rec.Status != meter.StatusClientClosed || rec.TTFT != meter.Unknown ||
		rec.ErrorMessage != "client went away before the first token" {
		t.Fatalf("record %+v", rec)
	}
}

// A client found gone by the failed write of its held head and first event
// (it reset its connection before the engine's first token) is said to
// have left before the first token, as the guard's peek says it, not
// mid-response: nothing of the response reached it (seen once in a soak).
func TestClientResetBeforeTheHeadWentOut(t *testing.T) {
	headed, reset := make(chan struct{}), make(chan struct{})
	up := startRawUpstream(t, func(c *scriptConn) {
		writeSSEHead(c)
		close(headed)
		<-reset
		for i := 0; i < 3; i++ {
			if writeChunk(c, `data: {"choices":[{"delta":{"content":"a"}}]}`+"\n\n") != nil {
				return
			}
		}
		hungUpWithin(c, 10*time.Second)
	})
	g := startTunedGateway(t, Config{Upstream: up.URL()}, func(g *gateway) { g.p.headHold = time.Hour })
	conn := rawPost(t, g.addr, chatBody, "")
	<-headed
	conn.(*net.TCPConn).SetLinger(0)
	conn.Close()
	close(reset)
	rec := g.record(t)
	if rec.Outcome != meter.OutcomeClientAbort || rec.Status != meter.StatusClientClosed || rec.TTFT != meter.Unknown ||
		rec.ErrorMessage != "client went away before the first token" {
		t.Fatalf("record %+v", rec)
	}
}

// Once the head went out, a client that leaves before its first token is
// recorded with the status it was sent.
func TestClientGoneAfterTheHead(t *testing.T) {
	hungUp := make(chan time.Time, 1)
	up := startRawUpstream(t, func(c *scriptConn) {
		writeSSEHead(c)
		hungUp <- hungUpWithin(c, 10*time.Second)
	})
	g := startGateway(t, Config{Upstream: up.URL()})
	conn := rawPost(t, g.addr, chatBody, "")
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := http.ReadResponse(bufio.NewReader(conn), nil); err != nil {
		t.Fatalf("no response head: %v", err)
	}
	conn.Close()
	if at := <-hungUp; at.IsZero() {
		t.Fatal("the engine's connection was not closed after the client left")
	}
	if rec := g.record(t); rec.Outcome != meter.OutcomeClientAbort || rec.Status != 200 {
		t.Fatalf("record %+v", rec)
	}
}

// A head that went out with the first event leaves no wake-up behind: the
// read's deadline, armed for the head's due time, is set to its own at the
// next wait (an extra wake-up per request otherwise, 50 ms after the head).
// Both ways a stream reads its engine, as above.
func TestHeadSentWithTheFirstEventArmsNoWake(t *testing.T) {
	for _, gz := range []bool{false, true} {
		t.Run(fmt.Sprintf("gzip=%v", gz), func(t *testing.T) {
			var wakes atomic.Int32
			testHookLateDeadline = func() { wakes.Add(1) }
			t.Cleanup(func() { testHookLateDeadline = nil })
			up := startRawUpstream(t, func(c *scriptConn) {
				enc := ""
				if gz {
					enc = "Content-Encoding: gzip\r\n"
				}
				fmt.Fprintf(c.BW, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n%s\r\n", enc)
				var b bytes.Buffer
				zw := gzip.NewWriter(&b)
				send := func(s string) {
					if gz {
						zw.Write([]byte(s))
						zw.Flush()
						s = b.String()
						b.Reset()
					}
					writeChunk(c, s)
				}
				send(vllmEvents[0])
				time.Sleep(4 * headHold) // the engine's pace: a gap past the head's due time
				for _, e := range vllmEvents[1:] {
					send(e)
				}
				send(done)
				if gz {
					zw.Close()
					writeChunk(c, b.String())
				}
				endChunks(c)
			})
			g := startGateway(t, Config{Upstream: up.URL()})
			status, _, body, err := post(t, g.URL()+"/v1/chat/completions", chatBody, nil)
			if err != nil || status != 200 || body != strings.Join(vllmEvents, "")+done {
				t.Fatalf("status %d err %v body %q", status, err, body)
			}
			if rec := g.record(t); rec.Outcome != meter.OutcomeOK {
				t.Fatalf("record %+v", rec)
			}
			if n := wakes.Load(); n != 0 {
				t.Fatalf("%d wake-ups at an early deadline", n)
			}
		})
	}
}
