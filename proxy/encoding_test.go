package proxy

import (
	"bytes"
	"compress/gzip"
	"fmt"
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
func TestGzipStream(t *testing.T) {
	up := startRawUpstream(t, func(c *scriptConn) {
		fmt.Fprintf(c.BW, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n\r\n")
		c.BW.Flush()
		var buf bytes.Buffer
		zw := gzip.NewWriter(&buf)
		send := func(s string) {
			zw.Write([]byte(s))
			zw.Flush() // each event in its own flushed block, as a streaming server does
			writeChunk(c, buf.String())
			buf.Reset()
		}
		for _, e := range vllmEvents {
			time.Sleep(30 * time.Millisecond) // the engine's pace
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
		status, hdr, body, err := post(t, g.URL()+"/v1/chat/completions", chatBody, nil)
		if err != nil || status != 200 || hdr.Get("Content-Encoding") != "" || body != strings.Join(vllmEvents, "")+done {
			t.Fatalf("status %d err %v encoding %q body %q", status, err, hdr.Get("Content-Encoding"), body)
		}
		rec := g.record(t)
		if rec.Outcome != meter.OutcomeOK || rec.Events != 4 || rec.OSL != 2 || rec.ISL != 9 || rec.ErrorMessage != "" {
			t.Fatalf("record %+v", rec)
		}
		for _, gap := range rec.ITL { // each event decoded as it came, not at the end
			if gap < 20*time.Millisecond {
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
