package proxy

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/goodput/goodput/meter"
)

// A client that asks in HTTP/1.0 cannot read a chunked body: a response
// of unknown length reaches it without Transfer-Encoding, ending where the
// connection closes, and metered as any other; one that fails ends with a
// reset, so the client cannot take a cut stream for a whole one. It used
// to get "Transfer-Encoding: chunked" and the chunks' framing.
func TestHTTP10ClientGetsNoChunks(t *testing.T) {
	up := startRawUpstream(t, func(c *scriptConn) {
		body := string(c.Req.Body())
		switch {
		case strings.Contains(body, `"m-gzip"`): // decoded by the gateway: its length no longer holds
			var buf bytes.Buffer
			zw := gzip.NewWriter(&buf)
			io.WriteString(zw, strings.Join(vllmEvents, "")+done)
			zw.Close()
			fmt.Fprintf(c.BW, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Encoding: gzip\r\nContent-Length: %d\r\n\r\n%s", buf.Len(), buf.Bytes())
			c.BW.Flush()
		case strings.Contains(body, `"m-json"`):
			js := `{"id":"c1","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"Hello"},"finish_reason":"stop"}],"usage":{"prompt_tokens":9,"completion_tokens":1,"total_tokens":10}}`
			fmt.Fprintf(c.BW, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(js), js)
			c.BW.Flush()
		case strings.Contains(body, `"m-die"`): // the engine dies after the first event
			writeSSEHead(c)
			writeChunk(c, vllmEvents[0])
			c.Conn.Close()
		default:
			writeSSEHead(c)
			for _, e := range vllmEvents {
				writeChunk(c, e)
			}
			writeChunk(c, done)
			endChunks(c)
		}
	})
	g := startGateway(t, Config{Upstream: up.URL()})
	// ask sends one HTTP/1.0 request for model and reads the answer to the
	// connection's end.
	ask := func(t *testing.T, model, extra string) (*http.Response, string, error) {
		t.Helper()
		conn, err := net.Dial("tcp", g.addr)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		conn.SetDeadline(time.Now().Add(10 * time.Second))
		body := strings.Replace(chatBody, `"m"`, `"`+model+`"`, 1)
		if model == "m-json" {
			body = strings.Replace(body, `"stream":true`, `"stream":false`, 1)
		}
		fmt.Fprintf(conn, "POST /v1/chat/completions HTTP/1.0\r\nHost: x\r\n%sContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", extra, len(body), body)
		resp, err := http.ReadResponse(bufio.NewReader(conn), &http.Request{Method: "POST", ProtoMajor: 1, ProtoMinor: 0})
		if err != nil {
			t.Fatalf("reading the head: %v", err)
		}
		b, err := io.ReadAll(resp.Body)
		return resp, string(b), err
	}
	noChunks := func(t *testing.T, resp *http.Response) {
		t.Helper()
		if resp.StatusCode != 200 || len(resp.TransferEncoding) != 0 || resp.ContentLength != -1 || !resp.Close {
			t.Fatalf("head: %d, transfer-encoding %v, length %d, close %v; want 200, none, none, close", resp.StatusCode, resp.TransferEncoding, resp.ContentLength, resp.Close)
		}
	}
	want := strings.Join(vllmEvents, "") + done
	t.Run("an event stream", func(t *testing.T) {
		for _, extra := range []string{"", "Connection: keep-alive\r\n"} { // keep-alive cannot hold without a length
			resp, body, err := ask(t, "m", extra)
			if err != nil || body != want {
				t.Fatalf("body %q, err %v; want the engine's events and a clean end", body, err)
			}
			noChunks(t, resp)
			rec := g.record(t)
			if rec.Outcome != meter.OutcomeOK || rec.Events != 4 || rec.OSL != 2 || rec.ErrorMessage != "" {
				t.Fatalf("record %+v", rec)
			}
			// The engine is asked in HTTP/1.1, on a connection kept for
			// the next request: the client's HTTP/1.0 went upstream as
			// such, with "Connection: close".
			if h := up.lastHeaders(); !strings.HasPrefix(h, "POST /v1/chat/completions HTTP/1.1\r\n") || strings.Contains(strings.ToLower(h), "connection:") {
				t.Fatalf("the engine was asked %q", h)
			}
		}
	})
	t.Run("a gzip body the gateway decodes", func(t *testing.T) {
		resp, body, err := ask(t, "m-gzip", "")
		if err != nil || body != want || resp.Header.Get("Content-Encoding") != "" {
			t.Fatalf("body %q, encoding %q, err %v", body, resp.Header.Get("Content-Encoding"), err)
		}
		noChunks(t, resp)
		if rec := g.record(t); rec.Outcome != meter.OutcomeOK || rec.Events != 4 {
			t.Fatalf("record %+v", rec)
		}
	})
	t.Run("an engine that dies mid-stream", func(t *testing.T) {
		if n := up.accepts.Load(); n != 1 {
			t.Fatalf("%d upstream connections for 3 requests, want 1", n)
		}
		resp, body, err := ask(t, "m-die", "")
		if !errors.Is(err, syscall.ECONNRESET) {
			t.Fatalf("body %q, err %v; want the connection reset", body, err)
		}
		noChunks(t, resp)
		if rec := g.record(t); rec.Outcome != meter.OutcomeUpstreamError {
			t.Fatalf("record %+v, want upstream_error", rec)
		}
	})
	t.Run("a body of known length keeps it", func(t *testing.T) {
		resp, body, err := ask(t, "m-json", "")
		if err != nil || resp.StatusCode != 200 || resp.ContentLength != int64(len(body)) || !strings.Contains(body, `"Hello"`) {
			t.Fatalf("%d, length %d, body %q, err %v", resp.StatusCode, resp.ContentLength, body, err)
		}
		if rec := g.record(t); rec.Outcome != meter.OutcomeOK || rec.OSL != 1 {
			t.Fatalf("record %+v", rec)
		}
	})
	g.noMoreRecords(t)
}
