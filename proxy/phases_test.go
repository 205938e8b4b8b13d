//go:build phases

package proxy

import (
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
	// Each phase begins where the one before ended, so they add up to the
	// whole (the whole is stamped just after the last).
	if sum > whole || whole > sum+1000 {
		t.Errorf("the steps add up to %v µs, the whole is %v", sum, whole)
	}
	if rec.Outcome != meter.OutcomeOK || rec.TTFT < 20*time.Millisecond {
		t.Errorf("record: outcome %s, TTFT %v", rec.Outcome, rec.TTFT)
	}
}
