package proxy

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/goodput/goodput/meter"
)

// headScan finds the end of a head as a lenient reader would, refuses one
// that is not CRLF CRLF, follows interim heads, and never looks at a body,
// however the bytes are split across reads.
func TestHeadScan(t *testing.T) {
	cases := []struct {
		wire string
		bad  bool
	}{
		{"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\ndata: x\n\n", false},
		{"HTTP/1.1 200 OK\r\n\r\n\n\n", false},
		{"HTTP/1.1 200 OK\r\nA: b\nC: d\r\n\r\n\n", false}, // a bare LF inside: fasthttp reads it
		{"\r\nHTTP/1.1 200 OK\r\n\r\n\n\n", false},
		{"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nA: b\r\n\r\ndata: x\n\n", false},
		{"HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\nHTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\n\r\n\n", false},
		{"HTTP/1.1 200 OK\nContent-Type: text/event-stream\n\n", true},
		{"HTTP/1.1 200 OK\n\n", true},
		{"HTTP/1.1 200 OK\r\nA: b\n\r\n", true},
		{"HTTP/1.1 200 OK\r\nA: b\r\n\n", true},
		{"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\nA: b\n\n", true},
		{"HTTP/1.1 100 Continue\n\n", true},
	}
	for _, c := range cases {
		// Whole, at every split point, and a byte per read.
		splits := [][]string{{c.wire}}
		for i := 1; i < len(c.wire); i++ {
			splits = append(splits, []string{c.wire[:i], c.wire[i:]})
		}
		var bytewise []string
		for i := range c.wire {
			bytewise = append(bytewise, c.wire[i:i+1])
		}
		splits = append(splits, bytewise)
		for _, parts := range splits {
			var h headScan
			h.start()
			var err error
			for _, p := range parts {
				if err = h.scan([]byte(p)); err != nil {
					break
				}
			}
			if c.bad != errors.Is(err, errBareLF) {
				t.Fatalf("%q in %d reads: %v", c.wire, len(parts), err)
			}
			if !c.bad && h.on {
				t.Fatalf("%q in %d reads: the head's end was not found", c.wire, len(parts))
			}
		}
	}
}

// An engine whose response head ends with a bare LF blank line gets a
// prompt 502 and an upstream_error record that says why: fasthttp's reader
// would have waited for a CRLF CRLF until the first-byte deadline (a
// minute here; the record comes within the harness's 10 s or the test
// fails). An engine that ends its head with CRLF CRLF, bare LFs inside it
// or not, streams as before.
func TestBareLFHeadRefusedAtOnce(t *testing.T) {
	for _, head := range []string{
		"HTTP/1.1 200 OK\nContent-Type: text/event-stream\nTransfer-Encoding: chunked\n\n",
		"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\nTransfer-Encoding: chunked\r\n\r\n",
	} {
		bad := strings.HasSuffix(head, "\n\n")
		t.Run(fmt.Sprintf("bad=%v", bad), func(t *testing.T) {
			release := make(chan struct{})
			up := startRawUpstream(t, func(c *scriptConn) {
				ev := "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"}}]}\n\n"
				fmt.Fprintf(c.BW, "%s%x\r\n%s\r\n", head, len(ev), ev)
				c.BW.Flush()
				<-release // the stream's end never comes before the test's
				fmt.Fprintf(c.BW, "e\r\ndata: [DONE]\n\n\r\n0\r\n\r\n")
				c.BW.Flush()
			})
			g := startGateway(t, Config{Upstream: up.URL(), FirstByteTimeout: time.Minute, FirstTokenTimeout: time.Minute})
			type result struct {
				status int
				body   string
				err    error
			}
			done := make(chan result, 1)
			go func() {
				status, _, body, err := post(t, g.URL()+"/v1/chat/completions", `{"model":"m","stream":true,"messages":[]}`, nil)
				done <- result{status, body, err}
			}()
			if !bad {
				close(release)
				if rec := g.record(t); rec.Outcome != meter.OutcomeOK || rec.OSL == 0 {
					t.Fatalf("record %+v", rec)
				}
				if r := <-done; r.err != nil || r.status != 200 {
					t.Fatalf("client %+v", r)
				}
				return
			}
			defer close(release)
			rec := g.record(t)
			if rec.Outcome != meter.OutcomeUpstreamError || rec.Status != 502 || !strings.Contains(rec.ErrorMessage, "bare LF") {
				t.Fatalf("record %+v", rec)
			}
			if r := <-done; r.err != nil || r.status != 502 || !strings.Contains(r.body, "invalid response head") {
				t.Fatalf("client %+v", r)
			}
		})
	}
}
