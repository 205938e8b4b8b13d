package proxy

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/goodput/goodput/meter"
)

// The shutdown's cut ends a request whose connect to the engine is still
// in progress (an engine behind a black hole: its SYNs unanswered), with
// the cut's record and answer, at once: the connect is not left to run out
// its timeout, which would keep the request without a record past the
// shutdown's last wait (serve then exits 1, its record lost).
func TestCutEndsAConnectInProgress(t *testing.T) {
	dialing := make(chan struct{}, 1)
	release := make(chan struct{}) // the test's end, so that a failure does not hang it
	testHookDialAddr = func(ctx context.Context, addr string) (net.Conn, error) {
		dialing <- struct{}{}
		select { // a black hole: only the connect's context ends it
		case <-ctx.Done():
		case <-release:
		}
		return nil, &net.OpError{Op: "dial", Net: "tcp", Err: context.DeadlineExceeded}
	}
	t.Cleanup(func() { testHookDialAddr = nil })
	g := startGateway(t, Config{Upstream: "http://127.0.0.1:9", ConnectTimeout: time.Hour})
	t.Cleanup(func() { close(release) }) // before the gateway's own cleanup
	done := postAsync(t, g.URL()+"/v1/chat/completions", `{"model":"m","stream":true,"messages":[]}`, nil)
	<-dialing
	g.p.Cut()
	var r posted
	select {
	case r = <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the cut did not end the connect in progress: the request is still waiting for it")
	}
	if r.err != nil || r.status != 503 || !strings.Contains(r.body, "shutting down") {
		t.Fatalf("cut during the connect: %d %v %s", r.status, r.err, r.body)
	}
	rec := g.record(t)
	if rec.Outcome != meter.OutcomeTimeout || !strings.Contains(rec.ErrorMessage, "shutting down") {
		t.Fatalf("record %+v", rec)
	}
	g.noMoreRecords(t)
}
