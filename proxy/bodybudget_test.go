package proxy

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/goodput/goodput/meter"
	"github.com/valyala/fasthttp"
)

// paddedChat returns a streamed chat body of exactly n bytes.
func paddedChat(n int) string {
	const head, tail = `{"model":"m","stream":true,"messages":[{"role":"user","content":"`, `"}]}`
	return head + strings.Repeat("a", n-len(head)-len(tail)) + tail
}

// The request bodies the gateway holds at once are bounded (found by a
// memory probe: heads alone announcing 16 MiB made `goodput serve` hold and
// clear 16 MiB each, 4 GB for 1,000 connections within 10 s, and
// max_connections allows 16,384). A head whose body finds no room is
// answered at once, 503 with Retry-After, without its body being read, and
// recorded (rejected, with its tenant); a body of 16 KiB or less is not
// counted. Room comes back when a request has gone upstream, and when a
// body's read fails.
func TestBodyMemoryBounded(t *testing.T) {
	up := startRawUpstream(t, vllmUpstream(0))
	g := startGateway(t, Config{Upstream: up.URL(), MaxBodyBytes: 64 << 10, MaxBodyMemory: 128 << 10})
	heads := make(chan struct{}, 16)
	testHookHeaders = func() { heads <- struct{}{} }
	defer func() { testHookHeaders = nil }()
	// send opens a connection and sends a head (and a body, if any).
	send := func(hdr, body string) (net.Conn, *bufio.Reader) {
		t.Helper()
		c, err := net.Dial("tcp", g.addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		io.WriteString(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nX-Tenant: acme\r\nContent-Type: application/json\r\n"+hdr+"\r\n"+body)
		<-heads // read, and its body's room reserved or refused
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		return c, bufio.NewReader(c)
	}
	body := paddedChat(64 << 10)
	head := "Content-Length: " + strconv.Itoa(len(body)) + "\r\n"
	c1, br1 := send(head, "")
	c2, _ := send(head, "")
	// No room left: refused at once, its body never awaited, whether its
	// length is announced (and rounded up as it would be allocated) or
	// not (chunked, counted at max_body_bytes).
	for _, hdr := range []string{"Content-Length: 40000\r\n", "Content-Length: 40000\r\nExpect: 100-continue\r\n", "Transfer-Encoding: chunked\r\n"} {
		_, br := send(hdr, "")
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("%q: no answer before the body: %v", hdr, err)
		}
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 503 || resp.Header.Get("Retry-After") != "1" || !strings.Contains(string(b), "max_body_memory") {
			t.Fatalf("%q: %d Retry-After %q %s, want 503 with Retry-After 1", hdr, resp.StatusCode, resp.Header.Get("Retry-After"), b)
		}
		rec := g.record(t)
		if rec.Outcome != meter.OutcomeRejected || rec.Status != 503 || rec.Tenant != "acme" || !strings.Contains(rec.ErrorMessage, "max_body_memory") {
			t.Fatalf("%q: record %+v", hdr, rec)
		}
	}
	if n, held := g.p.BodiesRefused(), g.p.BodyMemory(); n != 3 || held != 128<<10 {
		t.Fatalf("%d refused, want 3; %d bytes held, want the two heads' %d", n, held, 128<<10)
	}
	// A small body is not counted: served.
	_, br := send("Content-Length: "+strconv.Itoa(len(chatBody))+"\r\nConnection: close\r\n", chatBody)
	if resp, err := http.ReadResponse(br, nil); err != nil || resp.StatusCode != 200 {
		t.Fatalf("a small body while full: %v %v", resp, err)
	}
	if rec := g.record(t); rec.Outcome != meter.OutcomeOK {
		t.Fatalf("small body: %+v", rec)
	}
	// The first body comes: served, and its room (and its rewritten
	// copy's) is let go once it went upstream.
	io.WriteString(c1, body)
	resp, err := http.ReadResponse(br1, nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("the first body: %v %v", resp, err)
	}
	io.Copy(io.Discard, resp.Body)
	if rec := g.record(t); rec.Outcome != meter.OutcomeOK {
		t.Fatalf("first body: %+v", rec)
	}
	if n := g.p.BodyMemory(); n != 64<<10 {
		t.Fatalf("after the first request: %d bytes held, want %d", n, 64<<10)
	}
	// The second client leaves before its body: its room is let go.
	c2.Close()
	if rec := g.record(t); rec.Outcome != meter.OutcomeClientAbort {
		t.Fatalf("second: %+v", rec)
	}
	if n := g.p.BodyMemory(); n != 0 {
		t.Fatalf("after the read failed: %d bytes held, want 0", n)
	}
	// Room again: a body of the largest size is invited and served.
	c, br := send(head+"Expect: 100-continue\r\n", "")
	if line, err := br.ReadString('\n'); err != nil || !strings.HasPrefix(line, "HTTP/1.1 100") {
		t.Fatalf("with room: %q %v, want 100 Continue", line, err)
	}
	br.ReadString('\n')
	io.WriteString(c, body)
	if resp, err := http.ReadResponse(br, nil); err != nil || resp.StatusCode != 200 {
		t.Fatalf("with room: %v %v", resp, err)
	}
	if rec := g.record(t); rec.Outcome != meter.OutcomeOK {
		t.Fatalf("with room: %+v", rec)
	}
	g.noMoreRecords(t)
}

// A reservation no handler took (its connection closed under fasthttp
// before the handler or the error handler ran) is let go once read_body
// and a margin have passed and room is short; a header's next request lets
// go its last one. A budget never refuses a body when nothing is held.
func TestBodyBudgetStale(t *testing.T) {
	b := newBodyBudget(100<<10, time.Second, func(string, ...any) {})
	var h1, h2, h3 fasthttp.RequestHeader
	if !b.reserve(&h1, 64<<10) || b.reserve(&h2, 64<<10) {
		t.Fatal("a second body fitted in no room")
	}
	// h1's reservation is stale: made long before now.
	s := b.shard(&h1)
	s.mu.Lock()
	r := s.m[&h1]
	r.at -= int64(b.stale + time.Second)
	s.m[&h1] = r
	s.mu.Unlock()
	if !b.reserve(&h2, 64<<10) {
		t.Fatal("a stale reservation kept its room")
	}
	if n := b.used.Load(); n != 64<<10 {
		t.Fatalf("%d held, want %d", n, 64<<10)
	}
	if !b.reserve(&h2, 32<<10) || b.used.Load() != 32<<10 {
		t.Fatalf("a header's next request: %d held, want its own %d", b.used.Load(), 32<<10)
	}
	b.release(b.take(&h2))
	if b.used.Load() != 0 || b.take(&h2) != 0 {
		t.Fatalf("%d held after release", b.used.Load())
	}
	if !b.reserve(&h3, 200<<10) {
		t.Fatal("a body larger than the limit was refused with nothing held")
	}
	if got := b.refuse.n.Load(); got != 1 {
		t.Fatalf("%d refused, want 1", got)
	}
}

// A handler's take waits on no other header's reservation unless both fall
// in one of the budget's tables: under load the requests waited on the one
// lock the budget had (a mutex profile of BenchmarkRequestCostCold).
func TestBodyBudgetSharded(t *testing.T) {
	b := newBodyBudget(1<<30, time.Second, func(string, ...any) {})
	a := new(fasthttp.RequestHeader)
	hs := make([]fasthttp.RequestHeader, 16) // kept alive to the end
	h := &hs[0]
	for i := range hs {
		if b.shard(&hs[i]) != b.shard(a) {
			h = &hs[i] // another table's (1 in 64 shares a's)
			break
		}
	}
	if !b.reserve(a, 64<<10) || !b.reserve(h, 64<<10) {
		t.Fatal("refused")
	}
	s := b.shard(a)
	s.mu.Lock()
	done := make(chan int64)
	go func() {
		n := b.take(h)
		done <- n
	}()
	select {
	case n := <-done:
		if n != 64<<10 {
			t.Fatalf("took %d, want %d", n, 64<<10)
		}
	case <-time.After(10 * time.Second):
		s.mu.Unlock()
		t.Fatal("a header's take waited on another header's table")
	}
	s.mu.Unlock()
	b.release(64 << 10)
	b.release(b.take(a))
	if n := b.used.Load(); n != 0 {
		t.Fatalf("%d held, want 0", n)
	}
	runtime.KeepAlive(hs)
}
