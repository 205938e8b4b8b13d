package slo

import (
	"strings"
	"testing"
	"time"

	"github.com/goodput/goodput/internal/cfgtypes"
	"github.com/goodput/goodput/meter"
)

// MEASURES, "The verdict": a failed request also carries the latency
// reasons its partial figures prove. A request that waited 2 s for a first
// token that never came proves a 500 ms TTFT bound broken whatever ended
// it: the judge says so for a client that left (aborted, ttft), but a
// request the gateway ended itself (first_token timeout, or queued and cut
// at shutdown: outcome timeout) after the same wait is a miss for error
// alone, so goodput_slo_misses_total{reason="ttft"} leaves it out.
func TestProbeTimeoutWithoutTokenProvesTTFT(t *testing.T) {
	c := &Class{TTFT: cfgtypes.Duration(500 * time.Millisecond), Objective: 0.99}
	for _, o := range []meter.Outcome{meter.OutcomeClientAbort, meter.OutcomeTimeout} {
		rec := &meter.Record{}
		rec.Reset()
		rec.Tenant, rec.Model, rec.Route, rec.Outcome = "acme", "m", "chat", o
		rec.Status = 200
		rec.E2E = 2 * time.Second // no token event: TTFT unknown
		v := judge(rec, c)
		if !strings.Contains(v.Reasons.String(), "ttft") {
			t.Errorf("outcome %s after a 2 s wait without a token: reasons %q, want ttft among them (500 ms bound)", o, v.Reasons)
		}
	}
}
