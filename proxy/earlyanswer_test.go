package proxy

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/goodput/goodput/meter"
	"github.com/valyala/fasthttp"
)

// An engine may answer a request before it has read its body (a 413 for a
// body over its own limit) and close the connection: the gateway's write
// of the body then fails, with the answer already on the connection. The
// client gets that answer, not a 502, its record says so, and the
// connection is not used again. A request whose write fails with no
// answer behind it is still a 502 (the engine never had all of it, so the
// client may send it again).
func TestEarlyAnswerBeforeTheBody(t *testing.T) {
	const size = 24 << 20 // more than loopback's send and receive buffers take
	const refusal = `{"error":{"message":"request body too large","type":"invalid_request_error"}}`
	for _, answer := range []bool{true, false} {
		t.Run(fmt.Sprintf("answer=%v", answer), func(t *testing.T) {
			var accepts atomic.Int32
			ln, err := listenLoopback()
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { ln.Close() })
			go func() {
				for {
					c, err := ln.Accept()
					if err != nil {
						return
					}
					accepts.Add(1)
					go func() {
						defer c.Close()
						br := bufio.NewReader(c)
						var h fasthttp.RequestHeader
						if h.Read(br) != nil {
							return
						}
						if h.ContentLength() < size {
							// The request after: read and answered.
							req := fasthttp.AcquireRequest()
							defer fasthttp.ReleaseRequest(req)
							body := make([]byte, h.ContentLength())
							if _, err := io.ReadFull(br, body); err != nil {
								return
							}
							fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(jsonReply), jsonReply)
							return
						}
						// Refused on its head: the body is never read, and the
						// close with it unread resets the connection.
						if answer {
							fmt.Fprintf(c, "HTTP/1.1 413 Payload Too Large\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(refusal), refusal)
						}
						c.(*net.TCPConn).SetLinger(0)
					}()
				}
			}()
			g := startGateway(t, Config{Upstream: "http://" + ln.Addr().String(), MaxBodyBytes: size + 1024, FirstByteTimeout: time.Minute})
			body := `{"model":"m","messages":[{"role":"user","content":"` + strings.Repeat("x", size) + `"}]}`
			status, hdr, got, err := post(t, g.URL()+"/v1/chat/completions", body, nil)
			if err != nil {
				t.Fatal(err)
			}
			rec := g.record(t)
			if answer {
				if status != 413 || got != refusal {
					t.Fatalf("client got %d %q, want the engine's 413", status, got)
				}
				if rec.Status != 413 || rec.UpstreamStatus != 413 {
					t.Fatalf("record %+v", rec)
				}
			} else {
				// The engine never had the whole request: the client may
				// send it again.
				if status != 502 || hdr.Get("X-Should-Retry") != "" {
					t.Fatalf("client got %d %v %q, want 502 that may be retried", status, hdr, got)
				}
				if rec.Outcome != meter.OutcomeUpstreamError || rec.Status != 502 {
					t.Fatalf("record %+v", rec)
				}
			}
			// The connection is gone: the next request gets a new one.
			if status, _, _, err := post(t, g.URL()+"/v1/chat/completions", `{"model":"m","messages":[]}`, nil); err != nil || status != 200 {
				t.Fatalf("next request: %d %v", status, err)
			}
			if rec := g.record(t); rec.Outcome != meter.OutcomeOK {
				t.Fatalf("next record %+v", rec)
			}
			if n := accepts.Load(); n != 2 {
				t.Errorf("%d upstream connections, want 2", n)
			}
			g.noMoreRecords(t)
		})
	}
}
