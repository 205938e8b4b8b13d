package proxy

import (
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
)

// What the streams of clients that lag hold for them is bounded in all, not
// only per client (found by a memory probe: clients that stopped reading a
// fast stream held about 0.6 MiB each, with MaxClientLag 1 MiB, and
// max_connections allows 16,384). Past MaxLagMemory, a client that lags is
// held to lagFloor queued, its stream waiting for it; the count comes back
// to nothing once the streams end.
func TestLagMemoryBounded(t *testing.T) {
	ev := "data: {\"choices\":[{\"delta\":{\"content\":\"" + strings.Repeat("x", 1000) + "\"}}]}\n\n"
	up := startRawUpstream(t, func(c *scriptConn) {
		writeSSEHead(c)
		for writeChunk(c, ev) == nil {
		}
	})
	const lag, bound, n = 512 << 10, 256 << 10, 8
	g := startGateway(t, Config{Upstream: up.URL(), MaxClientLag: lag, MaxLagMemory: bound})
	var mu sync.Mutex
	waiting := map[*stream]bool{}
	allWait := make(chan struct{})
	testHookLagFull = func(s *stream) {
		mu.Lock()
		defer mu.Unlock()
		if !waiting[s] {
			if waiting[s] = true; len(waiting) == n {
				close(allWait)
			}
		}
	}
	held := 0
	testHookLagBound = func(*stream) {
		mu.Lock()
		held++
		mu.Unlock()
	}
	defer func() { testHookLagFull, testHookLagBound = nil, nil }()
	var conns []net.Conn
	for range n {
		c, err := net.Dial("tcp", g.addr)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
		c.(*net.TCPConn).SetReadBuffer(4096)
		fmt.Fprintf(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(chatBody), chatBody)
		// and never read
	}
	<-allWait // every stream's reader waits for its client
	// The first client to lag may have taken MaxClientLag before the bound
	// was reached; every other one holds about a lagFloor (its queue, and
	// what its writer took). Unbounded, each held half of MaxClientLag
	// queued: 2 MiB.
	t.Logf("%d clients that lag hold %d KiB", n, g.p.LagMemory()>>10)
	if got, most := g.p.LagMemory(), int64(bound+lag+n*lagFloor); got > most {
		t.Errorf("%d clients that lag hold %d KiB, want at most %d KiB (MaxLagMemory %d KiB)", n, got>>10, most>>10, bound>>10)
	}
	mu.Lock()
	if held == 0 {
		t.Error("no stream was held to lagFloor")
	}
	mu.Unlock()
	for _, c := range conns {
		c.Close()
	}
	for range conns {
		g.record(t)
	}
	g.p.Wait()
	if got := g.p.LagMemory(); got != 0 {
		t.Errorf("%d bytes still counted once every stream ended", got)
	}
}
