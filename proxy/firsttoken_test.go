package proxy

import (
	"strings"
	"testing"
	"time"

	"github.com/goodput/goodput/internal/testenv"
	"github.com/goodput/goodput/meter"
)

// Engines such as llama.cpp and vLLM send 200 and the headers at once, then
// queue and prefill: the wait for the first token is bounded by first_token,
// not by idle, which only runs between events once tokens flow. (The issue's
// case is a first token after 40 s with idle 30s; here, on a short scale, a
// first token after 400 ms with idle 300 ms.)
func TestFirstTokenAfterIdle(t *testing.T) {
	up := startRawUpstream(t, func(c *scriptConn) {
		writeSSEHead(c)
		time.Sleep(400 * time.Millisecond) // prefill
		for _, e := range vllmEvents {
			writeChunk(c, e)
		}
		writeChunk(c, vllmUsage)
		writeChunk(c, done)
		endChunks(c)
	})
	g := startGateway(t, Config{Upstream: up.URL(), IdleTimeout: 300 * time.Millisecond})
	status, _, body, err := post(t, g.URL()+"/v1/chat/completions", chatBody, nil)
	if err != nil || status != 200 || body != strings.Join(vllmEvents, "")+done {
		t.Fatalf("status %d err %v body %q", status, err, body)
	}
	rec := g.record(t)
	if rec.Outcome != meter.OutcomeOK || rec.Events != 4 || rec.TTFT < 400*time.Millisecond {
		t.Fatalf("record %+v", rec)
	}
}

// A stream whose first token never comes ends at first_token, with outcome
// timeout and an abnormal end for its client (the 200 already went out).
func TestFirstTokenTimeout(t *testing.T) {
	release := make(chan struct{})
	up := startRawUpstream(t, func(c *scriptConn) {
		writeSSEHead(c)
		<-release
	})
	defer close(release)
	g := startGateway(t, Config{Upstream: up.URL(), FirstTokenTimeout: 200 * time.Millisecond, IdleTimeout: 10 * time.Second})
	start := time.Now()
	status, _, body, err := post(t, g.URL()+"/v1/chat/completions", chatBody, nil)
	took := time.Since(start)
	if err == nil || status != 200 {
		t.Fatalf("status %d err %v body %q: want a 200 cut short", status, err, body)
	}
	if took < 200*time.Millisecond || took > 5*time.Second {
		t.Fatalf("ended after %v", took)
	}
	rec := g.record(t)
	if rec.Outcome != meter.OutcomeTimeout || !strings.Contains(rec.ErrorMessage, "first_token") || rec.TTFT != meter.Unknown {
		t.Fatalf("record %+v", rec)
	}
}

// A client that hangs up once the engine sent its response head, during a 5 s
// prefill (no event yet) is noticed within 100 ms: the engine's connection
// is closed, and the record is client_abort with a null TTFT (it was
// recorded as timeout after 3 s, or with a TTFT the client never saw).
func TestClientLeavesDuringPrefill(t *testing.T) {
	upClosed := make(chan time.Time, 1)
	up := startRawUpstream(t, func(c *scriptConn) {
		writeSSEHead(c)
		// Prefill for 5 s, or until the gateway hangs up.
		if at := hungUpWithin(c, 5*time.Second); !at.IsZero() {
			upClosed <- at
			return
		}
		upClosed <- time.Time{}
		writeChunk(c, vllmEvents[0])
		writeChunk(c, vllmEvents[1])
		writeChunk(c, done)
		endChunks(c)
	})
	// The head is held past the test's steps, however slow the machine.
	g := startTunedGateway(t, Config{Upstream: up.URL(), IdleTimeout: 3 * time.Second}, func(g *gateway) { g.p.headHold = 5 * time.Second })
	// The engine's head reached the gateway, which holds it for the first
	// event (the client sees nothing yet): the client leaves now.
	streaming := make(chan struct{}, 1)
	testHookStreamStart = func() { streaming <- struct{}{} }
	defer func() { testHookStreamStart = nil }()
	conn := rawPost(t, g.addr, chatBody, "")
	select {
	case <-streaming:
	case <-time.After(10 * time.Second):
		t.Fatal("no stream started within 10s")
	}
	closedAt := time.Now()
	conn.Close()
	select {
	case at := <-upClosed:
		if at.IsZero() {
			t.Fatal("the engine prefilled for 5 s for a client that had left")
		}
		// The guard peeks every 50 ms: 100 ms on a quiet machine; a loaded
		// one (-race, other builds) gets 1 s, still far below the prefill.
		bound := time.Second
		if testenv.StrictTiming() {
			bound = 100 * time.Millisecond
		}
		if d := at.Sub(closedAt); d > bound {
			t.Fatalf("the engine's connection was closed %v after the client left", d)
		} else {
			t.Logf("the engine's connection was closed %v after the client left", d)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the engine's connection still open 10 s after the client left")
	}
	// It left while the gateway held the engine's head: it was sent no
	// status (the head is not written to a client found gone).
	rec := g.record(t)
	if rec.Outcome != meter.OutcomeClientAbort || rec.TTFT != meter.Unknown || rec.Status != meter.StatusClientClosed ||
		!strings.Contains(rec.ErrorMessage, "before the first token") {
		t.Fatalf("record %+v", rec)
	}
	g.noMoreRecords(t)
}
