//go:build unix

package proxy

import (
	"bufio"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
)

// A request goes to the engine in one write, head and body together, up
// to 64 KiB: an engine woken by a first piece would parse a partial
// request and wait for the rest, a second system call and wake-up on the
// way to the first token. (The writer was the 2 KiB of the response
// reader: a prompt over about 1.7 KiB took two writes.)
func TestRequestGoesUpstreamInOneWrite(t *testing.T) {
	for _, size := range []int{100, 20 << 10, 60 << 10} {
		nc, engine := tcpPair(t)
		var log writeLog
		cc := &countingConn{Conn: nc, log: &log}
		c := &upConn{Conn: cc}
		c.src = newUpReader(c)
		u := newUpstream(nc.RemoteAddr().String(), time.Second, 1, time.Minute)
		got := make(chan int, 1)
		go func() {
			req, err := http.ReadRequest(bufio.NewReader(engine))
			if err != nil {
				got <- -1
				return
			}
			n, _ := io.Copy(io.Discard, req.Body)
			got <- int(n)
			io.WriteString(engine, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
		}()
		req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
		req.Header.SetMethod("POST")
		req.SetRequestURI("/v1/chat/completions")
		req.Header.SetHost("engine")
		req.Header.SetContentType("application/json")
		req.SetBodyString(`{"prompt":"` + strings.Repeat("x", size) + `"}`)
		if err := u.roundTrip(c, fastUp{req}, resp, time.Now().Add(5*time.Second), false, nil, nil); err != nil {
			t.Fatalf("%d bytes: %v", size, err)
		}
		if n := <-got; n != size+13 {
			t.Fatalf("%d bytes: the engine read a body of %d", size, n)
		}
		if n := len(log.all()); n != 1 {
			t.Errorf("%d bytes: the request took %d writes, want 1", size, n)
		}
		resp.CloseBodyStream()
		fasthttp.ReleaseRequest(req)
		fasthttp.ReleaseResponse(resp)
	}
}

// fastUp is a request of fasthttp's as the upRequest an exchange sends,
// for the tests that build one.
type fastUp struct{ *fasthttp.Request }

func (f fastUp) appendUpHead(dst []byte) []byte {
	f.Header.SetContentLength(len(f.Body()))
	return f.Header.AppendBytes(dst)
}
func (f fastUp) upBody() []byte { return f.Body() }
func (f fastUp) upReplay() bool { return replayable(f.Header.Method(), f.Body()) }
