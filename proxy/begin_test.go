package proxy

import (
	"bufio"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goodput/goodput/internal/cfgtypes"
	"github.com/goodput/goodput/meter"
	"github.com/goodput/goodput/slo"
	"github.com/valyala/fasthttp"
)

// heldEngine answers each request with a stream head and its first event,
// then holds the stream until release is closed.
func heldEngine(t *testing.T, release <-chan struct{}) *rawUpstream {
	return startRawUpstream(t, func(c *scriptConn) {
		writeSSEHead(c)
		_ = writeChunk(c, vllmEvents[1])
		<-release
		_ = writeChunk(c, "data: [DONE]\n\n")
		endChunks(c)
	})
}

var allClass = map[string]*slo.Class{"all": {E2E: cfgtypes.Duration(5 * time.Second), Objective: 0.9}}

// A request that cannot queue is begun (the sinks' Begin: the in-flight
// gauge, the SLO live view) once it is written upstream, off its way to
// the engine, and before its answer is read: it is in flight while the
// engine streams, once, and no longer after its record.
func TestBegunWhileTheEngineStreams(t *testing.T) {
	release := make(chan struct{})
	up := heldEngine(t, release)
	m := startMetered(t, Config{Upstream: up.URL()}, allClass, "all")
	s := startStream(t, m.URL()+"/v1/chat/completions", chatBody, nil)
	m.wantInFlight(t, 1, "while the engine streams")
	close(release)
	if e := s.end(t); e.err != nil {
		t.Fatal(e.err)
	}
	m.settle(t)
	m.wantInFlight(t, 0, "after the record")
}

// wantInFlight checks the in-flight gauge (every tenant's).
func (m *metered) wantInFlight(t *testing.T, want float64, when string) {
	t.Helper()
	if got := m.sum(t, "goodput_in_flight_requests", nil); got != want {
		t.Errorf("in flight %s: %v, want %v", when, got, want)
	}
}

// A request that may wait in the queue is begun before admission: it is in
// flight while it waits, before the engine has seen it.
func TestBegunWhileQueued(t *testing.T) {
	release := make(chan struct{})
	up := heldEngine(t, release)
	store, gate, key, reg := oneSlotLimits(t, 5*time.Second)
	m := startMetered(t, Config{Upstream: up.URL(), Keys: store, Limits: gate}, allClass, "all")
	holder := startStream(t, m.URL()+"/v1/chat/completions", chatBody, map[string]string{"Authorization": "Bearer " + key})
	conn := rawPost(t, m.addr, chatBody, "Authorization: Bearer "+key+"\r\n")
	defer conn.Close()
	waitQueuedIn(t, reg, 1)
	m.wantInFlight(t, 2, "with one streaming and one queued")
	if n := up.accepts.Load(); n != 1 {
		t.Errorf("the engine accepted %d connections, want 1 (the queued request has not gone upstream)", n)
	}
	conn.Close() // the queued client leaves: its record ends it
	close(release)
	if e := holder.end(t); e.err != nil {
		t.Fatal(e.err)
	}
	m.settle(t)
	m.wantInFlight(t, 0, "after the records")
}

// A client that leaves while the gateway dials the engine is noticed by the
// client guard, armed before the dial: the request never goes upstream,
// and its record says the client left.
func TestClientLeavesDuringDial(t *testing.T) {
	dialing, release, noticed := make(chan struct{}), make(chan struct{}), make(chan struct{})
	var dialOnce, leftOnce sync.Once
	testHookDial = func() { dialOnce.Do(func() { close(dialing); <-release }) }
	testHookGuardLeft = func() { leftOnce.Do(func() { close(noticed) }) }
	defer func() { testHookDial, testHookGuardLeft = nil, nil }()
	held := make(chan struct{})
	up := heldEngine(t, held)
	t.Cleanup(func() { close(held) }) // before the engine's own cleanup
	g := startGateway(t, Config{Upstream: up.URL()})
	conn := rawPost(t, g.addr, chatBody, "")
	<-dialing
	conn.Close()
	select {
	case <-noticed:
	case <-time.After(10 * time.Second):
		close(release)
		t.Fatal("the guard did not notice, within 10s, a client that left during the dial")
	}
	close(release)
	if rec := g.record(t); rec.Outcome != meter.OutcomeClientAbort || rec.Status != meter.StatusClientClosed {
		t.Fatalf("record %+v", rec)
	}
	up.mu.Lock()
	n := len(up.bodies)
	up.mu.Unlock()
	if n != 0 {
		t.Fatalf("the engine got %d requests, want none", n)
	}
}

// A client that leaves while its request's body is still being written to
// an engine that does not read it is noticed by the client guard, armed
// before a write that may wait: the request ends as the client's abort, not
// as the engine's first-byte timeout.
func TestClientLeavesDuringUpstreamWrite(t *testing.T) {
	noticed := make(chan struct{})
	var leftOnce sync.Once
	testHookGuardLeft = func() { leftOnce.Do(func() { close(noticed) }) }
	defer func() { testHookGuardLeft = nil }()
	accepted := make(chan net.Conn, 1)
	ln, err := listenLoopback()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		// The first request is answered, so the connection goes back to
		// the gateway's pool; after it nothing is read: the next request's
		// write fills both sockets' buffers and waits.
		req := fasthttp.AcquireRequest()
		defer fasthttp.ReleaseRequest(req)
		if req.Read(bufio.NewReader(c)) == nil {
			const answer = `{"choices":[{"index":0,"message":{"content":"hi"},"finish_reason":"stop"}]}`
			_, _ = fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(answer), answer)
		}
		accepted <- c
	}()
	t.Cleanup(func() {
		select {
		case c := <-accepted:
			c.Close()
		default:
		}
	})
	const size = 24 << 20 // more than loopback's send and receive buffers take
	g := startGateway(t, Config{Upstream: "http://" + ln.Addr().String(), MaxBodyBytes: size + 1024, FirstByteTimeout: time.Minute})
	if status, _, _, err := post(t, g.URL()+"/v1/chat/completions", `{"model":"m","messages":[]}`, nil); err != nil || status != 200 {
		t.Fatalf("first request: %d %v", status, err)
	}
	if rec := g.record(t); rec.Outcome != meter.OutcomeOK {
		t.Fatalf("first record %+v", rec)
	}
	body := `{"model":"m","stream":true,"messages":[{"role":"user","content":"` + strings.Repeat("x", size) + `"}]}`
	conn := rawPost(t, g.addr, body, "")
	// The engine has its connection (pooled): wait until the write is
	// under way, then leave. The guard's first check comes guardPoll
	// after it was armed.
	c := <-accepted
	accepted <- c // for the cleanup
	conn.Close()
	select {
	case <-noticed:
	case <-time.After(10 * time.Second):
		t.Fatal("the guard did not notice, within 10s, a client that left during the request's write upstream")
	}
	if rec := g.record(t); rec.Outcome != meter.OutcomeClientAbort || rec.Status != meter.StatusClientClosed {
		t.Fatalf("record %+v", rec)
	}
}
