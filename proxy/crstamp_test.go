package proxy

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/goodput/goodput/meter"
)

// An event whose blank line ends with a "\r" that is the last byte of a read
// was complete with that read (WHATWG: the "\r" ends the line; a "\n" after
// it only belongs to it), so it is stamped then: t_k is when the event was
// read completely (docs/MEASURES.md, Clocks). The framer holds it until the
// next byte (whether a "\n" follows decides its bytes), and it was stamped
// when that byte came: here, when the engine's next write came, one whole
// inter-token gap late. Both line ends: "\r\n" split between its "\r" and
// its "\n" by the engine's writes, and a bare "\r".
func TestEventEndingWithCRStampedWhenRead(t *testing.T) {
	for _, c := range []struct {
		name      string
		end, next string // the token event's line ends, and what the engine's next write starts with
	}{
		{"CRLF split after its CR", "\r\n\r", "\n"},
		{"bare CR", "\r\r", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			release := make(chan struct{})
			sent := make(chan time.Time, 1)
			up := startRawUpstream(t, func(sc *scriptConn) {
				writeSSEHead(sc)
				tok := strings.TrimSuffix(vllmEvents[1], "\n\n") + c.end
				writeChunk(sc, vllmEvents[0]+tok)
				<-release
				sent <- time.Now() // before the next bytes are written
				writeChunk(sc, c.next+vllmEvents[3]+vllmUsage+done)
				endChunks(sc)
			})
			g := startGateway(t, Config{Upstream: up.URL()})
			body := `{"model":"m","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}`
			// The role chunk's first line came: the gateway has read the
			// engine's first write, the token event's "\r" with it.
			s := startStream(t, g.URL()+"/v1/chat/completions", body, nil)
			close(release)
			next := <-sent
			if e := s.end(t); e.err != nil || !strings.Contains(e.body, "[DONE]") {
				t.Fatalf("stream ended with %v, body %q", e.err, e.body)
			}
			rec := g.record(t)
			if rec.Outcome != meter.OutcomeOK || rec.Events != 3 || len(rec.ITL) != 2 || rec.OSL != 2 {
				t.Fatalf("outcome %v, %d events, itl %v, osl %d", rec.Outcome, rec.Events, rec.ITL, rec.OSL)
			}
			// The token event's stamp, from the record.
			at := rec.Start.Add(rec.TTFT + rec.ITL[0])
			if !at.Before(next) {
				t.Fatalf("the token event was stamped %v after the engine's next write began: it was read whole before it", at.Sub(next))
			}
		})
	}
}

// The same at the end of the body: TGI's last event is its last token, and
// one whose blank line ends with a "\r" is stamped at the read that brought
// it, not when the engine closes the stream after it.
func TestLastEventEndingWithCRStampedWhenRead(t *testing.T) {
	release := make(chan struct{})
	sent := make(chan time.Time, 1)
	up := startRawUpstream(t, func(sc *scriptConn) {
		fmt.Fprintf(sc.BW, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
		writeChunk(sc, `data:{"index":1,"token":{"id":3681,"text":" Paris","logprob":-0.1,"special":false},"generated_text":null,"details":null}`+"\n\n"+
			`data:{"index":2,"token":{"id":2,"text":"</s>","logprob":-0.01,"special":true},"generated_text":" Paris","details":{"finish_reason":"eos_token","generated_tokens":2,"seed":null,"input_length":4}}`+"\r\r")
		<-release
		sent <- time.Now() // before the body's end is written
		endChunks(sc)
	})
	g := startGateway(t, Config{Upstream: up.URL()})
	s := startStream(t, g.URL()+"/generate_stream", `{"inputs":"hi","parameters":{"details":true}}`, nil)
	close(release)
	end := <-sent
	if e := s.end(t); e.err != nil {
		t.Fatalf("stream ended with %v, body %q", e.err, e.body)
	}
	rec := g.record(t)
	if rec.Outcome != meter.OutcomeOK || rec.Events != 2 || rec.OSL != 2 || rec.ISL != 4 {
		t.Fatalf("outcome %v (%s), %d events, isl %d, osl %d", rec.Outcome, rec.ErrorMessage, rec.Events, rec.ISL, rec.OSL)
	}
	if at := rec.Start.Add(rec.E2E); !at.Before(end) {
		t.Fatalf("the last token event was stamped %v after the engine began to end the body: it was read whole before it", at.Sub(end))
	}
}
