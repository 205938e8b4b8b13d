//go:build phases

package proxy

import (
	"bytes"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goodput/goodput/internal/phases"
	"github.com/goodput/goodput/meter"
	"github.com/goodput/goodput/sim"
)

// TestPhasesOfAStreamedRequest: a build with -tags phases times every step
// of a streamed request's way in, and its first event, once each, in an
// order whose sum the whole measures.
//
//	go test -tags phases -run Phases ./proxy ./internal/phases
func TestPhasesOfAStreamedRequest(t *testing.T) {
	_, simURL := startSim(t, sim.Config{TTFT: 20 * time.Millisecond, ITL: time.Millisecond})
	g := startGateway(t, Config{Upstream: simURL})
	phases.Take() // what came before
	status, _, _, err := post(t, "http://"+g.addr+"/v1/chat/completions", simChat, nil)
	if err != nil || status != 200 {
		t.Fatalf("status %d, %v", status, err)
	}
	rec := <-g.records
	d := phases.Take()
	got := map[string]phases.Figure{}
	for _, f := range d.Phases {
		got[f.Name] = f
	}
	var sum float64
	for p := phases.HeadToHandler; p <= phases.FirstWritten; p++ {
		f, ok := got[p.String()]
		if !ok || f.N != 1 {
			t.Errorf("%s: %+v, want one duration", p, f)
		}
		if p < phases.Written {
			sum += f.P50
		}
	}
	whole := got[phases.Written.String()].P50
	// Each phase begins where the one before ended, so they add up to no
	// more than the whole, stamped after the last (a missing step is the
	// count's check above; no upper bound, which a loaded machine could
	// pass between the last mark and the whole's).
	if sum > whole+0.01 {
		t.Errorf("the steps add up to %v µs, the whole is %v", sum, whole)
	}
	if rec.Outcome != meter.OutcomeOK || rec.TTFT < 20*time.Millisecond {
		t.Errorf("record: outcome %s, TTFT %v", rec.Outcome, rec.TTFT)
	}
}

// TestPhasesOfAFirstEventInTwoReads: the first event's steps are timed
// once, from the read that completed it (not the one that brought its
// first half), and a later answer that is no event stream (a JSON body,
// chunked) times none, on a pooled stream that timed one before.
func TestPhasesOfAFirstEventInTwoReads(t *testing.T) {
	const gap = 30 * time.Millisecond
	up := startRawUpstream(t, func(c *scriptConn) {
		if !bytes.Contains(c.Req.Body(), []byte(`"stream":true`)) {
			fmt.Fprintf(c.BW, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n")
			writeChunk(c, `{"id":"c1","object":"chat.completion","choices":[]}`)
			endChunks(c)
			return
		}
		writeSSEHead(c)
		writeChunk(c, vllmEvents[0][:40])
		time.Sleep(gap)
		writeChunk(c, vllmEvents[0][40:])
		for _, e := range vllmEvents[1:] {
			writeChunk(c, e)
		}
		writeChunk(c, done)
		endChunks(c)
	})
	g := startGateway(t, Config{Upstream: up.URL()})
	phases.Take() // what came before
	status, _, body, err := post(t, g.URL()+"/v1/chat/completions", chatBody, nil)
	if err != nil || status != 200 || body != strings.Join(vllmEvents, "")+done {
		t.Fatalf("status %d, %v: %q", status, err, body)
	}
	<-g.records
	got := map[string]phases.Figure{}
	for _, f := range phases.Take().Phases {
		got[f.Name] = f
	}
	for _, p := range []phases.Phase{phases.FirstMetered, phases.FirstWritten} {
		if f := got[p.String()]; f.N != 1 || f.P50 >= float64(gap/time.Microsecond) {
			t.Errorf("%s: %+v, want one duration under %v", p, f, gap)
		}
	}
	for i := range 4 { // the stream above is pooled: one of these takes it
		status, _, _, err := post(t, g.URL()+"/v1/chat/completions", `{"model":"m","messages":[]}`, nil)
		if err != nil || status != 200 {
			t.Fatalf("JSON %d: status %d, %v", i, status, err)
		}
		<-g.records
	}
	for _, f := range phases.Take().Phases {
		if f.Name == phases.FirstMetered.String() || f.Name == phases.FirstWritten.String() {
			t.Errorf("a JSON body timed %+v", f)
		}
	}
}

// TestPhasesOfARetriedRequest: a request sent again (a GET whose reused
// connection the engine closed on it) times its steps once, as its first
// attempt's, not once per attempt.
func TestPhasesOfARetriedRequest(t *testing.T) {
	var mu sync.Mutex
	served := map[net.Conn]int{}
	up := startRawUpstream(t, func(c *scriptConn) {
		mu.Lock()
		served[c.Conn]++
		n := served[c.Conn]
		mu.Unlock()
		if n > 1 {
			c.Conn.Close() // read, never answered: the retry's cue
			return
		}
		fmt.Fprintf(c.BW, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}")
		c.BW.Flush()
	})
	g := startGateway(t, Config{Upstream: up.URL()})
	get := func() {
		t.Helper()
		resp, err := testClient.Get(g.URL() + "/v1/models")
		drainOK(t, resp, err)
		<-g.records
	}
	get() // a connection to reuse
	phases.Take()
	get()
	if up.accepts.Load() != 2 {
		t.Fatalf("%d connections: the request was not sent again", up.accepts.Load())
	}
	for _, f := range phases.Take().Phases {
		if f.N != 1 {
			t.Errorf("%s: %d durations, want one", f.Name, f.N)
		}
	}
}
