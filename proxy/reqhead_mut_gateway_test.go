package proxy

import (
	"fmt"
	"io"
	"math/rand"
	"net"
	"strings"
	"testing"
	"time"
)

// TestReqHeadScanMutationsThroughGateway sends the edited streams of
// TestReqHeadScanMutations to a gateway, in writes of random sizes, each
// with a chunked request whose trailer section ends in a bare LF
// ("0\r\n\n") and a request behind it: whatever the edits made of the
// requests before them (served, refused, read as a body), the scan rides
// along the connection's reads, re-armed as fasthttp waits for each next
// request (connState), and the engine gets neither of the last two.
func TestReqHeadScanMutationsThroughGateway(t *testing.T) {
	g, up := scanGateway(t)
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		for {
			select {
			case <-g.records:
			case <-stop:
				return
			}
		}
	}()
	body := `{"model":"m","messages":[{"role":"user","content":"hi"}]}`
	tail := "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nX-Tenant: bare-lf-trailer\r\nTransfer-Encoding: chunked\r\n\r\n" +
		fmt.Sprintf("%x\r\n%s\r\n", len(body), body) + "0\r\n\n" +
		"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nX-Tenant: smuggled\r\nContent-Length: 2\r\n\r\n{}\r\n\r\n"
	r := rand.New(rand.NewSource(53))
	entropy := make([]byte, 4096)
	served := 0
	for i := 0; i < 1000; i++ {
		r.Read(entropy)
		e := &diffEntropy{b: entropy}
		s := buildDiffStream(e, true).b
		if e.n(4) != 0 {
			s = mutate(e, s)
		}
		s = append(s, tail...)
		conn, err := net.Dial("tcp", g.addr)
		if err != nil {
			t.Fatal(err)
		}
		sizes := make([]int, 0, 16)
		for left := len(s); left > 0; {
			k := min(left, 1+e.n(300))
			sizes = append(sizes, k)
			left -= k
		}
		go func() {
			b := s
			for _, k := range sizes {
				if _, err := conn.Write(b[:k]); err != nil {
					return
				}
				b = b[k:]
			}
			conn.(*net.TCPConn).CloseWrite()
		}()
		conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		io.Copy(io.Discard, conn)
		conn.Close()
		up.mu.Lock()
		for _, h := range up.headers {
			if strings.Contains(h, "bare-lf-trailer") || strings.Contains(h, "smuggled") {
				up.mu.Unlock()
				t.Fatalf("stream %d: the engine got %q\n%q", i, h, s)
			}
		}
		served += len(up.headers)
		up.headers = up.headers[:0]
		up.mu.Unlock()
	}
	if served < 500 {
		t.Errorf("%d requests served before the tails of 1000 streams", served)
	}
	t.Logf("%d requests served before the tails of 1000 streams", served)
}
