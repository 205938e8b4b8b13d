package proxy

import (
	"bufio"
	"io"
	"net"
	"strings"
	"testing"

	"github.com/goodput/goodput/meter"
	"github.com/valyala/fasthttp"
)

func TestKeptHeadRestores(t *testing.T) {
	var h fasthttp.RequestHeader
	if err := h.Read(bufio.NewReader(strings.NewReader("POST /v1/chat/completions?x=1 HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer k1\r\nX-Api-Key: k2\r\nX-Team: acme\r\nX-Request-Id: r-1\r\nContent-Length: 5\r\n\r\n"))); err != nil {
		t.Fatal(err)
	}
	stampT0(&h)
	t0 := string(h.PeekBytes(hdrT0))
	var k keptHeads
	k.keep(&h, "X-Team", h.PeekBytes(hdrT0))
	h.Reset()
	kh := k.take(&h)
	if kh == nil {
		t.Fatal("nothing kept")
	}
	if k.take(&h) != nil {
		t.Fatal("taken twice")
	}
	kh.restore(&h, "X-Team")
	k.put(kh)
	for _, c := range []struct{ got, want string }{
		{string(h.Method()), "POST"},
		{string(h.RequestURI()), "/v1/chat/completions?x=1"},
		{string(h.Peek("Authorization")), "Bearer k1"},
		{string(h.Peek("X-Api-Key")), "k2"},
		{string(h.Peek("X-Team")), "acme"},
		{string(h.Peek("X-Request-Id")), "r-1"},
		{string(h.PeekBytes(hdrT0)), t0},
	} {
		if c.got != c.want {
			t.Errorf("restored %q, want %q", c.got, c.want)
		}
	}
	// A kept head of a long header is not pooled with its buffer.
	big := &keptHead{buf: make([]byte, 0, 8<<10)}
	k.put(big)
	if big.buf != nil {
		t.Error("a long buffer was kept")
	}
}

// Every kept head is dropped or taken: requests whose body was read, and
// requests whose body failed, leave none behind.
func TestKeptHeadsDoNotAccumulate(t *testing.T) {
	up := startRawUpstream(t, vllmUpstream(0))
	g := startGateway(t, Config{Upstream: up.URL(), MaxBodyBytes: 1000})
	for i := 0; i < 5; i++ {
		if status, _, _, err := post(t, g.URL()+"/v1/chat/completions", chatBody, nil); err != nil || status != 200 {
			t.Fatalf("status %d err %v", status, err)
		}
		g.record(t)
	}
	big := strings.Repeat("a", 2000)
	raw := "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n7d0\r\n" + big + "\r\n0\r\n\r\n"
	if line := rawExchange(t, g.addr, raw); !strings.Contains(line, " 413 ") {
		t.Fatalf("chunked: %s", line)
	}
	g.record(t)
	// Clients that leave while their body is awaited: no body at all (FIN,
	// or RST), or half of it.
	for _, c := range []struct {
		sent string
		rst  bool
	}{
		{"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n", false},
		{"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n", true},
		{"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"model\"", false},
		{"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab", false},
	} {
		conn, err := net.Dial("tcp", g.addr)
		if err != nil {
			t.Fatal(err)
		}
		io.WriteString(conn, c.sent)
		if c.rst {
			conn.(*net.TCPConn).SetLinger(0)
		}
		conn.Close()
		if rec := g.record(t); rec.Outcome != meter.OutcomeRejected && rec.Outcome != meter.OutcomeClientAbort {
			t.Errorf("%q: record %+v", c.sent, rec)
		}
	}
	g.noMoreRecords(t)
	g.p.heads.mu.Lock()
	n := len(g.p.heads.m)
	g.p.heads.mu.Unlock()
	if n != 0 {
		t.Fatalf("%d kept heads left", n)
	}
}
