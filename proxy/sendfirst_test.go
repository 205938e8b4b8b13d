package proxy

import (
	"io"
	"strings"
	"testing"
	"time"

	"github.com/goodput/goodput/meter"
)

// tokenEvent is the first event of vllmEvents with text.
var tokenEvent = vllmEvents[1]

// An event whose bytes nothing the metering finds can change goes to the
// client before it is metered: the client reads the first text while its
// metering is held. The record is the same as when metering came first.
// (chatBody asks no usage: the gateway asks for it, and the event, naming
// none, has nothing to strip.)
func TestEventWrittenBeforeMetered(t *testing.T) {
	// quit ends the engine's and the hook's waits when the test fails
	// midway: a failure then ends the test, not the test binary's timeout.
	next, quit := make(chan struct{}), make(chan struct{})
	up := startRawUpstream(t, func(c *scriptConn) {
		writeSSEHead(c)
		for _, e := range vllmEvents {
			writeChunk(c, e)
			select {
			case <-next:
			case <-quit:
				return
			}
		}
		writeChunk(c, vllmUsage)
		writeChunk(c, done)
		endChunks(c)
	})
	g := startGateway(t, Config{Upstream: up.URL()})
	t.Cleanup(func() { close(quit) }) // before the gateway's and the engine's
	metering, release := make(chan struct{}), make(chan struct{})
	testHookEvent = func(raw []byte) {
		if string(raw) == tokenEvent {
			select {
			case metering <- struct{}{}:
				<-release
			case <-quit:
			}
		}
	}
	defer func() { testHookEvent = nil }()
	conn := rawPost(t, g.addr, chatBody, "")
	defer conn.Close()
	body := streamBodyOf(t, conn)
	if ev, err := readEvent(body); ev != vllmEvents[0] {
		t.Fatalf("first event %q, %v", ev, err)
	}
	next <- struct{}{}
	<-metering // the token's metering has begun, and waits
	// Bounds a failure (the event held until it is metered) only.
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	ev, err := readEvent(body)
	close(release)
	if ev != tokenEvent {
		t.Fatalf("while its metering was held, the client read %q, %v: want the token's event", ev, err)
	}
	conn.SetReadDeadline(time.Time{})
	for range vllmEvents[1:] { // the engine waits after each event
		next <- struct{}{}
	}
	var rest strings.Builder
	for {
		ev, err := readEvent(body)
		rest.WriteString(ev)
		if err != nil {
			break
		}
	}
	if want := strings.Join(vllmEvents[2:], "") + done; rest.String() != want {
		t.Fatalf("rest %q, want %q (the usage chunk the client did not ask for dropped)", rest.String(), want)
	}
	rec := g.record(t)
	testHookEvent = nil
	if rec.Outcome != meter.OutcomeOK || rec.OSL != 2 || rec.Events != len(vllmEvents) || rec.TTFT <= 0 {
		t.Fatalf("record %+v", rec)
	}
}

// The first token written before it was metered has reached the client: a
// client that leaves after it, while the engine is quiet, left
// mid-response, and its record keeps the first token's time. (Were the
// token not noted as written, the client guard would go on watching, and
// say that the client left before its first token.) The first token is the
// role chunk's: an event with a choice.
func TestFirstTokenWrittenFirstHasReachedTheClient(t *testing.T) {
	up := startRawUpstream(t, func(c *scriptConn) {
		writeSSEHead(c)
		writeChunk(c, vllmEvents[0])
		io.Copy(io.Discard, c.Conn) // quiet until the gateway closes it
	})
	g := startGateway(t, Config{Upstream: up.URL()})
	conn := rawPost(t, g.addr, chatBody, "")
	if ev, err := readEvent(streamBodyOf(t, conn)); ev != vllmEvents[0] {
		t.Fatalf("event %q, %v", ev, err)
	}
	conn.Close()
	rec := g.record(t)
	if rec.Outcome != meter.OutcomeClientAbort || rec.ErrorMessage != msgGoneWhileQuiet || rec.TTFT <= 0 {
		t.Fatalf("record: outcome %v, error %q, TTFT %v: want a client that left after its first token", rec.Outcome, rec.ErrorMessage, rec.TTFT)
	}
}

// A usage chunk the client did not ask for is dropped whatever spells its
// name: one that names "usage" through an escape is metered before it is
// written too (mayRewrite), and never reaches the client.
func TestEscapedUsageChunkDropped(t *testing.T) {
	escaped := strings.Replace(vllmUsage, `"usage"`, `"us\u0061ge"`, 1)
	read := make(chan struct{}) // the usage chunk was read alone
	up := startRawUpstream(t, func(c *scriptConn) {
		writeSSEHead(c)
		for _, e := range vllmEvents {
			writeChunk(c, e)
		}
		writeChunk(c, escaped)
		<-read
		writeChunk(c, done)
		endChunks(c)
	})
	g := startGateway(t, Config{Upstream: up.URL()})
	testHookEvent = func(raw []byte) {
		if string(raw) == escaped {
			close(read)
		}
	}
	defer func() { testHookEvent = nil }()
	status, _, body, err := post(t, g.URL()+"/v1/chat/completions", chatBody, nil)
	if want := strings.Join(vllmEvents, "") + done; status != 200 || err != nil || body != want {
		t.Fatalf("%d %v: body %q, want %q", status, err, body, want)
	}
	if rec := g.record(t); rec.Outcome != meter.OutcomeOK || rec.OSL != 2 || rec.ISL != 9 {
		t.Fatalf("record %+v", rec)
	}
}

// An event is not written before it is metered when queueing it would first
// write what the same read queued before it (more than half MaxClientLag):
// the client may lag from that write, and the event would then go to the
// writer goroutine, whose first-token mark the metering must set first.
func TestNotSentFirstBehindALargeQueue(t *testing.T) {
	p, err := New(Config{Upstream: "http://127.0.0.1:1", MaxClientLag: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	s := acquireStream()
	s.p, s.rec, s.api, s.mode, s.metering = p, new(meter.Record), meter.APIChat, modeSSE, true
	s.state.Store(stateInline)
	s.framer.Feed([]byte(tokenEvent))
	if ok, err := s.framer.Next(&s.ev); !ok || err != nil {
		t.Fatalf("framed: %v %v", ok, err)
	}
	half := p.cfg.MaxClientLag / 2
	for _, c := range []struct {
		queued int
		want   bool
	}{{0, true}, {half - len(tokenEvent), true}, {half - len(tokenEvent) + 1, false}} {
		s.pending = make([]byte, c.queued)
		if got := s.sendsFirst(); got != c.want {
			t.Errorf("%d bytes queued before it (half MaxClientLag %d, the event %d): written first %v, want %v",
				c.queued, half, len(tokenEvent), got, c.want)
		}
	}
}
