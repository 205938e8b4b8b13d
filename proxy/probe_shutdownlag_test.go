package proxy

import (
	"strings"
	"testing"
	"time"

	"github.com/goodput/goodput/meter"
)

// README, Shutdown: when shutdown_grace runs out the gateway cuts what is
// still in flight, "and each still ends as one record (outcome timeout,
// "gateway shutting down")" within the 5 s serve waits for those records.
// A stream whose client reads more slowly than the engine sends (here: not
// at all, with idle and total timeouts far off) is not cut: its reader
// waits for the client's lag to drain and the writer for the client, and
// Cut reaches neither. Under `goodput serve` the process then exits after
// "N requests still without a record 5s after the cut" with no record for
// the request (seen with curl --limit-rate 2k against the simulator).
func TestProbeCutEndsAStreamWhoseClientLags(t *testing.T) {
	up, _ := floodUpstream(t)
	g := startGateway(t, Config{Upstream: up.URL(), MaxClientLag: 64 << 10,
		TotalTimeout: time.Hour, IdleTimeout: time.Minute})
	lagging := make(chan struct{})
	var once bool
	testHookLagFull = func(*stream) {
		if !once {
			once = true
			close(lagging)
		}
	}
	defer func() { testHookLagFull = nil }()
	stallingClient(t, g.addr)
	<-lagging // the stream's reader waits for its client
	g.p.Cut()
	select {
	case rec := <-g.records:
		if rec.Outcome != meter.OutcomeTimeout || !strings.Contains(rec.ErrorMessage, "shutting down") {
			t.Fatalf("record %s %q, want timeout (gateway shutting down)", rec.Outcome, rec.ErrorMessage)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no record 5 s after the cut for a stream whose client lags: serve would exit without it")
	}
}
