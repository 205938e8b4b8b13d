package proxy

import (
	"fmt"
	"testing"
	"time"

	"github.com/goodput/goodput/meter"
)

// A non-streamed answer of known length whose body the engine is slow to
// finish (its head and the start of its body sent): a client that leaves
// meanwhile is the client's leaving, found as a streamed answer's is (its
// first second of silence at most), not an engine timeout at the idle
// timeout with the engine's connection held until then.
func TestFixedLengthBodyClientLeftIsNoticed(t *testing.T) {
	const answer = `{"id":"x","object":"chat.completion","model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}]}`
	hungUp := make(chan time.Duration, 1)
	up := startRawUpstream(t, func(c *scriptConn) {
		fmt.Fprintf(c.BW, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(answer)+100, answer)
		c.BW.Flush()
		start := time.Now()
		if at := hungUpWithin(c, 8*time.Second); !at.IsZero() {
			hungUp <- at.Sub(start)
		} else {
			hungUp <- -1
		}
	})
	g := startGateway(t, Config{Upstream: up.URL(), IdleTimeout: 6 * time.Second})
	conn := rawPost(t, g.addr, `{"model":"m","messages":[{"role":"user","content":"hi"}]}`, "")
	time.Sleep(300 * time.Millisecond) // the engine's head and part of the body are read
	conn.Close()
	d := <-hungUp
	rec := g.record(t)
	if d < 0 || d > 3*time.Second {
		t.Errorf("the engine's connection was held %v after the client left (want within ~1 s)", d)
	}
	if rec.Outcome != meter.OutcomeClientAbort {
		t.Errorf("outcome %s (%s), want client_abort: the client left", rec.Outcome, rec.ErrorMessage)
	}
}
