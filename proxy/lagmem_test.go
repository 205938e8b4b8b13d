//go:build !race

package proxy

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"testing"
)

// A client that stops reading costs at most MaxClientLag of memory for what
// the gateway holds for it (the documented bound), beyond the fixed cost of
// any request. It was about 2.2 MiB with the default 1 MiB: the queue's two
// buffers each grew past the whole lag. The fixed cost is measured with a
// small lag and taken out; the 128 KiB of slack are what else grows with the
// number of events read (the record's gaps) and the buffers still being
// filled while the heap is measured (a writer blocked on a client still
// makes progress into the kernel's socket buffer). Without the race
// detector, which changes what the heap holds.
//
// It runs in a process of its own: its readings are differences of the
// whole process's heap, and in a full run of the package what earlier
// tests' goroutines let go of meanwhile (megabytes) came into them, so
// that the fixed cost came out negative (-799 KiB per request) and the
// test failed.
func TestSlowClientMemoryBound(t *testing.T) {
	if os.Getenv(lagMemChild) == "" {
		cmd := exec.Command(os.Args[0], "-test.run=^TestSlowClientMemoryBound$", "-test.count=1", "-test.v")
		cmd.Env = append(os.Environ(), lagMemChild+"=1")
		out, err := cmd.CombinedOutput()
		t.Logf("in a process of its own:\n%s", out)
		if err != nil {
			t.Fatalf("in a process of its own: %v", err)
		}
		return
	}
	const small, lag = 64 << 10, 1 << 20 // lag: the default
	fixed := slowClientHeap(t, small) - small
	per := slowClientHeap(t, 0)
	t.Logf("%d KiB of heap per slow client with MaxClientLag %d KiB; %d KiB of it is any request's", per>>10, lag>>10, fixed>>10)
	if per-fixed > lag+128<<10 {
		t.Fatalf("a slow client holds %d KiB beyond a request's own %d KiB, over MaxClientLag (%d KiB)", (per-fixed)>>10, fixed>>10, lag>>10)
	}
}

// lagMemChild is set in the environment of the process that
// TestSlowClientMemoryBound runs itself in.
const lagMemChild = "GOODPUT_LAGMEM_CHILD"

// slowClientHeap starts 16 streams whose clients never read, against an
// engine that writes as fast as the gateway reads, waits until every
// stream's reader waits for its client, and returns the heap each holds.
func slowClientHeap(t *testing.T, lag int) int64 {
	ev := "data: {\"choices\":[{\"delta\":{\"content\":\"" + strings.Repeat("x", 1000) + "\"}}]}\n\n"
	up := startRawUpstream(t, func(c *scriptConn) {
		writeSSEHead(c)
		for writeChunk(c, ev) == nil {
		}
	})
	g := startGateway(t, Config{Upstream: up.URL(), MaxClientLag: lag})
	const n = 16
	var mu sync.Mutex
	full := map[*stream]bool{}
	allFull := make(chan struct{})
	testHookLagFull = func(s *stream) {
		mu.Lock()
		defer mu.Unlock()
		if !full[s] {
			if full[s] = true; len(full) == n {
				close(allFull)
			}
		}
	}

	var conns []net.Conn
	defer func() {
		// Let every stream end (each leaves one record) before the hook
		// goes: the readers call it.
		for _, c := range conns {
			c.Close()
		}
		for range conns {
			g.record(t)
		}
		g.p.Wait()
		testHookLagFull = nil
	}()
	// Two collections empty the sync.Pools (their victim caches too), so
	// that what earlier tests left pooled is not freed between the two
	// readings (it made the fixed cost come out negative, by megabytes).
	runtime.GC()
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	for i := 0; i < n; i++ {
		c, err := net.Dial("tcp", g.addr)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
		c.(*net.TCPConn).SetReadBuffer(4096)
		fmt.Fprintf(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(chatBody), chatBody)
		// and never read
	}
	<-allFull // every stream's reader waits for its client
	runtime.GC()
	runtime.GC()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	return (int64(after.HeapInuse) - int64(before.HeapInuse)) / n
}
