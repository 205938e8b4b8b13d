package proxy

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/goodput/goodput/meter"
)

// An engine that labels its stream text/plain: the usage chunk the gateway
// asked for must not reach a client that did not ask for it, and the stream
// is metered.
func TestTextPlainStream(t *testing.T) {
	up := startRawUpstream(t, func(c *scriptConn) {
		fmt.Fprintf(c.BW, "HTTP/1.1 200 OK\r\nContent-Type: text/plain; charset=utf-8\r\nTransfer-Encoding: chunked\r\n\r\n")
		c.BW.Flush()
		for _, e := range vllmEvents {
			writeChunk(c, e)
		}
		if wantsUsage(c.Req.Body()) {
			writeChunk(c, vllmUsage)
		}
		writeChunk(c, done)
		endChunks(c)
	})
	g := startGateway(t, Config{Upstream: up.URL()})
	status, _, body, err := post(t, g.URL()+"/v1/chat/completions", chatBody, nil)
	if err != nil || status != 200 || body != strings.Join(vllmEvents, "")+done {
		t.Fatalf("status %d err %v body %q", status, err, body)
	}
	rec := g.record(t)
	if rec.Outcome != meter.OutcomeOK || rec.Events != 4 || rec.OSL != 2 || rec.ISL != 9 {
		t.Fatalf("record %+v", rec)
	}
}

// An engine (or a middleware before it) that gzips the stream although the
// gateway asked for identity: the gateway decodes it as it streams, meters
// it (each event when its flushed block arrives), removes the usage chunk
// the client did not ask for, and sends it identity-encoded. It used to pass the gzip bytes, usage chunk inside,
// unmetered.
//
// Each event may come in a flushed block of one gzip member, or in a
// member of its own (a server that compresses each write apart): Go's
// gzip.Reader, reading members as one stream, read the next member's
// header before it returned the last bytes of the one before, so each
// event waited for the next (found by a hostile-engine probe).
func TestGzipStream(t *testing.T) {
	for _, members := range []bool{false, true} {
		name := "flushed blocks"
		if members {
			name = "a member per event"
		}
		t.Run(name, func(t *testing.T) { gzipStream(t, members) })
	}
}

func gzipStream(t *testing.T, members bool) {
	// The engine sends an event only once the client has read the one
	// before (got), and then after a pause: if the gateway held the decoded
	// events until the end, the engine would wait in vain; each event is
	// stamped when read, before it is passed on, so the gap between two
	// stamps is at least the pause, however loaded the machine.
	const pause = 20 * time.Millisecond
	got := make(chan struct{}, 1)
	held := make(chan int, 8)
	up := startRawUpstream(t, func(c *scriptConn) {
		fmt.Fprintf(c.BW, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n\r\n")
		c.BW.Flush()
		var buf bytes.Buffer
		zw := gzip.NewWriter(&buf)
		send := func(s string) {
			zw.Write([]byte(s))
			if members {
				zw.Close() // the member's end, its trailer
				writeChunk(c, buf.String())
				buf.Reset()
				zw.Reset(&buf)
				return
			}
			zw.Flush() // each event in its own flushed block, as a streaming server does
			writeChunk(c, buf.String())
			buf.Reset()
		}
		for i, e := range vllmEvents {
			if i > 0 {
				select {
				case <-got:
				case <-time.After(10 * time.Second):
					held <- i - 1
				}
				time.Sleep(pause)
			}
			send(e)
		}
		if wantsUsage(c.Req.Body()) {
			send(vllmUsage)
		}
		send(done)
		zw.Close()
		writeChunk(c, buf.String())
		endChunks(c)
	})
	g := startGateway(t, Config{Upstream: up.URL()})
	for i := 0; i < 2; i++ { // the second on the reused connection
		resp, err := testClient.Do(newPost(t, g.URL()+"/v1/chat/completions", chatBody, nil))
		if err != nil || resp.StatusCode != 200 || resp.Header.Get("Content-Encoding") != "" {
			t.Fatalf("%v %v", resp, err)
		}
		br := bufio.NewReader(resp.Body)
		var body strings.Builder
		for {
			line, err := br.ReadString('\n')
			body.WriteString(line)
			if line == "\n" { // an event's end
				select {
				case got <- struct{}{}:
				default: // the last two, which the engine does not wait for
				}
			}
			if err != nil {
				if err != io.EOF {
					t.Fatal(err)
				}
				break
			}
		}
		resp.Body.Close()
		select {
		case k := <-held:
			t.Fatalf("event %d did not reach the client before the next was sent: the stream was held", k)
		default:
		}
		select {
		case <-got: // not to be taken by the next request's engine
		default:
		}
		if body.String() != strings.Join(vllmEvents, "")+done {
			t.Fatalf("body %q", body.String())
		}
		rec := g.record(t)
		if rec.Outcome != meter.OutcomeOK || rec.Events != 4 || rec.OSL != 2 || rec.ISL != 9 || rec.ErrorMessage != "" {
			t.Fatalf("record %+v", rec)
		}
		for _, gap := range rec.ITL { // each event decoded as it came, not at the end
			if gap < pause {
				t.Fatalf("gaps %v: events were not decoded as they streamed", rec.ITL)
			}
		}
	}
}

// A gzip body that is not gzip ends as an upstream error.
func TestGzipCorrupt(t *testing.T) {
	up := startRawUpstream(t, func(c *scriptConn) {
		fmt.Fprintf(c.BW, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Encoding: gzip\r\nContent-Length: 10\r\n\r\nnot gzip!!")
		c.BW.Flush()
	})
	g := startGateway(t, Config{Upstream: up.URL()})
	status, _, _, err := post(t, g.URL()+"/v1/chat/completions", chatBody, nil)
	if err == nil || status != 200 {
		t.Fatalf("status %d err %v: want an abnormal end", status, err)
	}
	if rec := g.record(t); rec.Outcome != meter.OutcomeUpstreamError {
		t.Fatalf("record %+v", rec)
	}
}

// An encoding the gateway cannot decode (br) passes through untouched and
// unmetered, and the record says the usage chunk the gateway requested went
// to the client.
func TestUndecodableEncoding(t *testing.T) {
	payload := "\x8b\x01\x80opaque brotli bytes\x03"
	up := startRawUpstream(t, func(c *scriptConn) {
		if len(c.Req.Header.Peek("X-Json")) > 0 {
			fmt.Fprintf(c.BW, "HTTP/1.1 400 Bad Request\r\nContent-Type: application/json\r\nContent-Encoding: br\r\nContent-Length: %d\r\n\r\n%s", len(payload), payload)
		} else {
			fmt.Fprintf(c.BW, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Encoding: br\r\nContent-Length: %d\r\n\r\n%s", len(payload), payload)
		}
		c.BW.Flush()
	})
	g := startGateway(t, Config{Upstream: up.URL()})
	status, hdr, body, err := post(t, g.URL()+"/v1/chat/completions", chatBody, nil)
	if err != nil || status != 200 || body != payload || hdr.Get("Content-Encoding") != "br" {
		t.Fatalf("status %d err %v body %q", status, err, body)
	}
	rec := g.record(t)
	if rec.Outcome != meter.OutcomeOK || !strings.Contains(rec.ErrorMessage, "br-encoded; not metered") || !strings.Contains(rec.ErrorMessage, "usage chunk") || !rec.Stream {
		t.Fatalf("record %+v", rec)
	}
	// The record's stream is the answer's: a JSON error to a request that
	// asked for a stream is not one.
	if status, _, _, err := post(t, g.URL()+"/v1/chat/completions", chatBody, map[string]string{"X-Json": "1"}); err != nil || status != 400 {
		t.Fatalf("status %d err %v", status, err)
	}
	if rec := g.record(t); rec.Stream || rec.Outcome != meter.OutcomeClientError {
		t.Fatalf("a br-encoded JSON 400: stream %v outcome %v", rec.Stream, rec.Outcome)
	}
}
